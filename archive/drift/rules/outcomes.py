"""What the drift rules decide with: the verdicts and the records of one decision.

:data:`RULES_VERSION` names the rules (``docs/specs/amber-drift-1.md``) and is recorded with
every check, like the extractor version: any change to what the rules decide for some input
must bump it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Protocol

RULES_VERSION = "amber-drift-2"


class Verdict(StrEnum):
    IDENTICAL = "identical"
    COSMETIC = "cosmetic"
    MATERIAL = "material"
    REVERSAL = "reversal"
    GONE = "gone"
    SOFT_404 = "soft_404"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class PassageLocation:
    start: int  # code points into the live extracted text (before normalisation)
    end: int
    found_text: str  # live.text[start:end]
    method: Literal["exact", "normalised", "fuzzy"]
    score: float  # 100 for exact/normalised; rapidfuzz ratio of old vs found for fuzzy


@dataclass(frozen=True)
class EditAssessment:
    verdict: Verdict  # REVERSAL or MATERIAL
    reasons: tuple[str, ...]
    diff: str


@dataclass(frozen=True)
class Soft404Signals:
    is_soft_404: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class CheckOutcome:
    verdict: Verdict
    reasons: tuple[str, ...]
    location: PassageLocation | None
    diff: str | None


class Classifier(Protocol):
    """Decides ``reversal`` vs ``material`` for an edited (or deleted: ``new == ""``) passage."""

    def assess(self, old: str, new: str) -> EditAssessment: ...
