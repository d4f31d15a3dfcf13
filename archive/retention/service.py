"""Retention: the one object the API, the CLI and the jobs use; it wires the parts.

Every snapshot lives exactly as long as the transcripts that cite it (DESIGN.md "Retention
arithmetic"). The parts, each in its own module:

- :mod:`~archive.retention.evaluation`: each memento's expiry, from the transcripts
  reaching it, and its holds;
- :mod:`~archive.retention.sweep`: deleting what expired, batch by batch;
- :mod:`~archive.retention.deletion`: tombstones, then the blobs nobody uses (two-phase);
- :mod:`~archive.retention.lockdates`: S3 Object Lock dates and holds;
- :mod:`~archive.retention.gc`: orphan blobs and temp files of writes that died;
- :mod:`~archive.retention.admin`: legal holds, retention changes, erasure, the admin log;
- :mod:`~archive.retention.report`: what keeping evidence costs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from archive.blobstore.base import BlobStore
from archive.config import CitationPolicy
from archive.index import Index
from archive.retention.admin import RetentionAdmin
from archive.retention.deletion import Deleter
from archive.retention.erasure import Erasure, ForgetText
from archive.retention.evaluation import Evaluator
from archive.retention.gc import GarbageCollector
from archive.retention.hooks import RetentionHooks
from archive.retention.lockdates import LockDates
from archive.retention.records import SweepReport
from archive.retention.report import retention_report, waiting_on_lock
from archive.retention.sweep import Sweeper


class Retention:
    """Sweeps, lock dates, garbage collection, admin actions and the report, over one index
    and blob store. ``policy`` gives the grace period of uncited evidence and the named
    retention policies; ``hooks`` lets tests act at named moments (see
    :class:`RetentionHooks`), a fresh no-op set when None."""

    def __init__(
        self,
        index: Index,
        blobs: BlobStore,
        policy: CitationPolicy,
        hooks: RetentionHooks | None = None,
        forget_text: ForgetText | None = None,
    ) -> None:
        self.index = index
        self.hooks = hooks if hooks is not None else RetentionHooks()
        self.grace = timedelta(days=policy.retention_days)
        self.evaluator = Evaluator(index.dialect, self.grace, self.hooks)
        self.deleter = Deleter(index, blobs, self.evaluator)
        self.locks = LockDates(index, blobs)
        self.sweeper = Sweeper(index, blobs, self.evaluator, self.deleter, self.locks, self.hooks)
        self.gc = GarbageCollector(index, blobs)
        # forget_text: what this process caches of erased bytes (TextMemory.forget).
        self.admin = RetentionAdmin(index, blobs, policy, self.evaluator, self.deleter, forget_text)

    # -- the sweep and the store's locks --------------------------------------------------

    def sweep(
        self,
        *,
        now: datetime | None = None,
        batch_size: int = 500,
        dry_run: bool = False,
        progress: Callable[[SweepReport], None] | None = None,
    ) -> SweepReport:
        return self.sweeper.sweep(
            now=now, batch_size=batch_size, dry_run=dry_run, progress=progress
        )

    def mapped_index(self) -> AbstractContextManager[None]:
        return self.sweeper.mapped_index()

    def sync_locks(self) -> dict[str, int]:
        return self.locks.sync_locks()

    # -- garbage collection ---------------------------------------------------------------

    def collect_orphans(
        self,
        *,
        safety_age: timedelta = timedelta(hours=1),
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        return self.gc.collect_orphans(safety_age=safety_age, now=now, dry_run=dry_run)

    def collect_temp_files(
        self,
        *,
        safety_age: timedelta = timedelta(hours=1),
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        return self.gc.collect_temp_files(safety_age=safety_age, now=now, dry_run=dry_run)

    def forget_idempotency_answers(
        self, *, now: datetime | None = None, dry_run: bool = False
    ) -> int:
        return self.gc.forget_idempotency_answers(now=now, dry_run=dry_run)

    # -- admin actions --------------------------------------------------------------------

    def set_transcript_hold(
        self, tenant: str, transcript_id: str, on: bool, reason: str, actor: str
    ) -> None:
        self.admin.set_transcript_hold(tenant, transcript_id, on, reason, actor)

    def set_memento_hold(
        self, tenant: str, memento_id: str, on: bool, reason: str, actor: str
    ) -> None:
        self.admin.set_memento_hold(tenant, memento_id, on, reason, actor)

    def change_retention(
        self,
        tenant: str,
        transcript_id: str,
        retention: str | Mapping[str, str],
        reason: str,
        actor: str,
    ) -> datetime:
        return self.admin.change_retention(tenant, transcript_id, retention, reason, actor)

    def erase(self, tenant: str, memento_id: str, reason: str, actor: str) -> Erasure:
        return self.admin.erase(tenant, memento_id, reason, actor)

    def admin_log(self, tenant: str, limit: int = 100) -> list[dict[str, object]]:
        return self.admin.admin_log(tenant, limit)

    # -- the cost of keeping evidence -----------------------------------------------------

    def report(self, *, now: datetime | None = None) -> dict[str, object]:
        return retention_report(self.index, now=now)

    def waiting_on_lock(self, *, now: datetime | None = None) -> dict[str, object]:
        """Expired evidence's blobs the store keeps until their Object Lock date."""
        return waiting_on_lock(self.index, now=now)
