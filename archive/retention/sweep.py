"""The sweep: find the mementos whose cached expiry has passed, re-evaluate, delete.

``mementos.expires_at`` caches each memento's expiry so a sweep only looks at what may have
expired (its cost grows with what expired, not with the archive); every candidate is
re-evaluated from the citations before anything is deleted, in the same exclusive write.
Expired ones become tombstones and their unused blobs ``deleting``; those blobs are
deleted at the end (see :mod:`archive.retention.deletion`), then, with S3 Object Lock, the
store's lock dates are extended (:mod:`archive.retention.lockdates`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import and_, bindparam, func, select, tuple_, update

from archive.blobstore.base import BlobStore
from archive.dates import utc_now
from archive.index import Index
from archive.index.schema import mementos
from archive.retention.deletion import Deleter
from archive.retention.evaluation import Evaluator
from archive.retention.hooks import RetentionHooks
from archive.retention.lockdates import LockDates
from archive.retention.records import SweepReport

# SQLite reads the index through mmap while a sweep runs (SQLite caps it at its build's
# maximum, 2 GiB by default; a larger file is read normally past that).
SWEEP_MMAP_BYTES = 1 << 31


class Sweeper:
    """Deletes what expired, batch by batch; safe to kill anywhere and run again."""

    def __init__(
        self,
        index: Index,
        store: BlobStore,
        evaluator: Evaluator,
        deleter: Deleter,
        locks: LockDates,
        hooks: RetentionHooks,
    ) -> None:
        self.index = index
        self.store = store
        self.evaluator = evaluator
        self.deleter = deleter
        self.locks = locks
        self.hooks = hooks

    def sweep(
        self,
        *,
        now: datetime | None = None,
        batch_size: int = 500,
        dry_run: bool = False,
        progress: Callable[[SweepReport], None] | None = None,
    ) -> SweepReport:
        now = now or utc_now()
        report = SweepReport(dry_run=dry_run)
        cursor: tuple[datetime, str] | None = None
        with self.mapped_index():
            while True:
                candidates = self._candidates(now, cursor, batch_size)
                if not candidates:
                    break
                cursor = candidates[-1]
                self.settle([c[1] for c in candidates], now, dry_run, report)
                if progress:
                    progress(report)
            if not dry_run:
                self.deleter.delete_dying_blobs(report)
        if not dry_run and self.store.lock_mode:
            self.locks.sync_locks()
        report.next_expiry = self._next_expiry(now)
        return report

    @contextmanager
    def mapped_index(self) -> Iterator[None]:
        """On SQLite, the writer connection (where candidates are evaluated) reads the index
        through mmap inside the block; its previous setting is restored after.

        Candidates are scattered over the whole index (ids are hashes): with SQLite's own
        page cache (2 MiB) nearly every probe misses and costs a read() of a page from the OS
        cache; mapped, it is a memory access. Reads only — writes and durability are as before.
        """
        if self.index.dialect != "sqlite":
            yield
            return
        with self.index.write() as connection:
            before = int(connection.exec_driver_sql("PRAGMA mmap_size").scalar() or 0)
            connection.exec_driver_sql(f"PRAGMA mmap_size={SWEEP_MMAP_BYTES}")
        try:
            yield
        finally:
            with self.index.write() as connection:
                connection.exec_driver_sql(f"PRAGMA mmap_size={before}")

    def _candidates(
        self, now: datetime, cursor: tuple[datetime, str] | None, limit: int
    ) -> list[tuple[datetime, str]]:
        # Keyset pagination over mementos_due (expires_at, id): tombstoned rows leave that
        # partial index, so the cursor only steps over held and re-extended candidates.
        due = and_(mementos.c.deleted_at.is_(None), mementos.c.expires_at <= now)
        if cursor is not None:
            due = and_(due, tuple_(mementos.c.expires_at, mementos.c.id) > cursor)
        query = (
            select(mementos.c.expires_at, mementos.c.id)
            .where(due)
            .order_by(mementos.c.expires_at, mementos.c.id)
            .limit(limit)
        )
        with self.index.read() as connection:
            return [(row.expires_at, row.id) for row in connection.execute(query)]

    def settle(self, ids: list[str], now: datetime, dry_run: bool, report: SweepReport) -> None:
        """One batch of candidates, in one exclusive write: evaluated, the ones not yet due
        re-dated, the expired ones tombstoned (their unused blobs marked ``deleting``)."""
        with self.index.write(exclusive=True) as connection:
            verdicts = self.evaluator.evaluate(connection, ids)
            report.evaluated += len(verdicts)
            expired, fresh = [], []
            for verdict in verdicts:
                if verdict.expiry is None:
                    report.held += 1
                elif verdict.expiry > now:
                    fresh.append(verdict)
                else:
                    expired.append(verdict)
            report.extended += len(fresh)
            report.mementos_deleted += len(expired)
            report.deleted_ids.extend(v.memento_id for v in expired)
            if dry_run:
                connection.rollback()
                return
            if fresh:
                connection.execute(
                    update(mementos)
                    .where(mementos.c.id == bindparam("target"))
                    .values(expires_at=bindparam("until")),
                    [{"target": v.memento_id, "until": v.expiry} for v in fresh],
                )
            self.hooks.batch_decided(expired)
            self.deleter.tombstone(connection, expired, now)

    def _next_expiry(self, now: datetime) -> datetime | None:
        with self.index.read() as connection:
            value = connection.execute(
                select(func.min(mementos.c.expires_at)).where(
                    mementos.c.deleted_at.is_(None), mementos.c.expires_at > now
                )
            ).scalar()
        return value if value is None or value.tzinfo else value.replace(tzinfo=now.tzinfo)
