"""Drift: re-fetch what transcripts cite and say whether the live source still says it.

- :mod:`.service` — :class:`DriftService`: which citations are due, storing checks,
  history, drift rates per source host, review flags (with :mod:`.reviews`);
- :mod:`.job` — :class:`~archive.drift.job.DriftJob`, one run: fetching
  (:mod:`.fetching`), analysing (:mod:`.analysis`), storing; imported with the rules when a
  run starts, so reading checks needs neither;
- :mod:`.records` — the records (checks, due citations, rates, reviews) and their rows;
- :mod:`.rules` — the verdict rules ``amber-drift-1`` (``docs/specs/amber-drift-1.md``).
"""

from __future__ import annotations

from archive.drift.records import (
    VERDICTS,
    CheckRecord,
    CitationDrift,
    DueCitation,
    Location,
    Review,
    RunSummary,
    SourceRate,
    host_of,
)
from archive.drift.service import DriftService

__all__ = [
    "VERDICTS",
    "CheckRecord",
    "CitationDrift",
    "DriftService",
    "DueCitation",
    "Location",
    "Review",
    "RunSummary",
    "SourceRate",
    "host_of",
]
