"""Retention: every snapshot lives exactly as long as the transcripts that cite it.

Rules (DESIGN.md "Retention arithmetic"):

- A memento expires at the latest ``retain_until`` of the transcripts citing it; one nobody
  cites at ``archived_at`` + grace. A legal hold on a citing transcript, or on the memento,
  suspends expiry while it lasts. ``mementos.expires_at`` caches the answer so a sweep only
  looks at what may have expired; every candidate is re-evaluated before anything is deleted.
- Deletion is in place (the memento row stays as its own tombstone) and two-phase for blobs,
  which are shared across mementos and tenants; every step is idempotent, so a sweep killed
  anywhere is finished by the next.

:class:`Retention` (in :mod:`~archive.retention.service`) is the entry point; the modules
beside it hold one part each.
"""

from archive.retention.evaluation import REACHERS, Reacher
from archive.retention.hooks import RetentionHooks
from archive.retention.lockdates import ceil_to_day, first_lock
from archive.retention.records import SweepReport, Verdict
from archive.retention.service import Retention

__all__ = [
    "REACHERS",
    "Reacher",
    "Retention",
    "RetentionHooks",
    "SweepReport",
    "Verdict",
    "ceil_to_day",
    "first_lock",
]
