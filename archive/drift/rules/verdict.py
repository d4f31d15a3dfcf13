"""The verdict for one cited passage: :func:`classify`, first matching rule wins.

``unreachable`` (fetch error, no status, 5xx, 401/403/407, 408/425/429, other non-2xx),
``gone`` (404/410/451), ``identical`` (304 or the same bytes), ``cosmetic`` (the passage is
intact), ``soft_404`` (the passage is absent and the page is a not-found page), then
``reversal`` or ``material`` from the edit rules. Specified in
``docs/specs/amber-drift-1.md`` ("Verdicts").
"""

from __future__ import annotations

from typing import Protocol

from archive.citations import PreparedText, normalise
from archive.drift.rules.edits import DEFAULT_CLASSIFIER
from archive.drift.rules.locate import find_passage
from archive.drift.rules.outcomes import (
    CheckOutcome,
    Classifier,
    PassageLocation,
    Soft404Signals,
    Verdict,
)

_TEMPORARY = frozenset({408, 425, 429})
_ACCESS = frozenset({401, 403, 407})
_GONE = frozenset({404, 410, 451})


class Classify(Protocol):
    """What the drift job calls for each citation: :func:`classify`, or a stand-in for it
    (``DriftService(classify=...)``) with the same keyword arguments."""

    def __call__(
        self,
        *,
        status: int | None,
        error: str | None,
        live_hash: str | None,
        recorded_hash: str,
        not_modified: bool,
        live_text: PreparedText | None,
        old_exact: str,
        prefix: str,
        suffix: str,
        position: int | None,
        soft404: Soft404Signals | None,
    ) -> CheckOutcome: ...


def classify(
    *,
    status: int | None,
    error: str | None,
    live_hash: str | None,
    recorded_hash: str,
    not_modified: bool,
    live_text: PreparedText | None,
    old_exact: str,
    prefix: str,
    suffix: str,
    position: int | None,
    soft404: Soft404Signals | None,
    classifier: Classifier | None = None,
) -> CheckOutcome:
    """One drift verdict for one cited passage: the first rule that matches, in the order of
    the module docstring. ``classifier`` decides ``reversal`` vs ``material`` (default: the
    :class:`~archive.drift.rules.edits.RuleClassifier`)."""
    if error:
        return CheckOutcome(Verdict.UNREACHABLE, (f"error:{error}",), None, None)
    if status is None:
        return CheckOutcome(Verdict.UNREACHABLE, ("no_response",), None, None)
    if status >= 500 or status in _TEMPORARY or status in _ACCESS:
        return CheckOutcome(Verdict.UNREACHABLE, (f"status:{status}",), None, None)
    if status in _GONE:
        return CheckOutcome(Verdict.GONE, (f"status:{status}",), None, None)
    if not_modified or status == 304:
        return CheckOutcome(Verdict.IDENTICAL, ("not_modified",), None, None)
    if live_hash is not None and live_hash == recorded_hash:
        return CheckOutcome(Verdict.IDENTICAL, ("hash_equal",), None, None)
    if not 200 <= status < 300:
        return CheckOutcome(Verdict.UNREACHABLE, (f"status:{status}",), None, None)

    location = None
    if live_text is not None:
        location = find_passage(
            live_text, old_exact, prefix=prefix, suffix=suffix, position=position
        )
    if location is not None and _intact(location, old_exact, live_text):
        return CheckOutcome(Verdict.COSMETIC, (f"passage_{location.method}",), location, None)
    if location is None and soft404 is not None and soft404.is_soft_404:
        return CheckOutcome(Verdict.SOFT_404, soft404.reasons, None, None)
    judge = classifier or DEFAULT_CLASSIFIER
    assessment = judge.assess(old_exact, location.found_text if location is not None else "")
    reasons = assessment.reasons
    if live_text is None and location is None:
        reasons = (*reasons, "no_text")
    return CheckOutcome(assessment.verdict, reasons, location, assessment.diff)


def _intact(location: PassageLocation, old_exact: str, live: PreparedText | None) -> bool:
    if location.method != "fuzzy":
        return True
    pdf = live.pdf if live is not None else False
    return normalise(location.found_text, pdf=pdf) == normalise(old_exact, pdf=pdf)
