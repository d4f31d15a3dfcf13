"""Garbage collection: bytes no index row knows, left by writes that died.

A write stores its blob first and its rows a moment later (DESIGN.md invariant 2), so a
crash in between leaves an orphan blob; a local write that died before publishing leaves a
temp file. Both hold captured text that nothing acknowledged or refers to, so no retention
rule would ever delete them. Only what is older than a safety age is collected: an
in-flight write must never lose its bytes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from archive.blobstore.base import BlobStore
from archive.dates import utc_now
from archive.index import Index
from archive.index.schema import blobs


class GarbageCollector:
    """Deletes orphan blobs and leftover temp files older than a safety age."""

    def __init__(self, index: Index, store: BlobStore) -> None:
        self.index = index
        self.store = store

    def collect_orphans(
        self,
        *,
        safety_age: timedelta = timedelta(hours=1),
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete blobs no index row knows (a write that crashed before its commit).

        Only blobs older than ``safety_age``: an in-flight write stores its blob first and
        its rows a moment later, and must never lose the blob in between.
        """
        now = now or utc_now()
        collected = []
        for address in self.store.addresses():
            with self.index.read() as connection:
                known = connection.execute(
                    select(blobs.c.state).where(blobs.c.address == address)
                ).first()
            if known is not None and known.state == "live":
                continue
            stored_at = self.store.stored_at(address)
            if stored_at is None or now - stored_at < safety_age:
                continue
            if known is None or known.state != "live":
                if not dry_run:
                    self._delete_orphan(address)
                collected.append(address)
        return collected

    def collect_temp_files(
        self,
        *,
        safety_age: timedelta = timedelta(hours=1),
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete the local store's temp files older than ``safety_age``: bytes a write staged
        and never published because its process died. They hold captured text that nothing
        acknowledged or refers to, so no retention rule would ever delete them otherwise.
        (S3 stages nothing outside the bucket's objects: see :meth:`collect_orphans`.)"""
        cutoff = (now or utc_now()) - safety_age
        stale = [path for path, modified in self.store.temp_files() if modified < cutoff]
        if not dry_run:
            for path in stale:
                self.store.remove_temp_file(path)
        return stale

    def forget_idempotency_answers(
        self, *, now: datetime | None = None, dry_run: bool = False
    ) -> int:
        """Delete the Idempotency-Key answers older than their TTL: no write replays them
        any more (:mod:`archive.index.idempotency`), and the table would only grow."""
        with self.index.write() as connection:
            return self.index.idempotency.forget(connection, now or utc_now(), dry_run=dry_run)

    def _delete_orphan(self, address: str) -> None:
        with self.index.write(exclusive=True) as connection:  # no write commits meanwhile
            # Recorded as deleted first. A write deduplicating onto these bytes right now
            # (its publish found them in place, old, with no row yet) then finds the blob not
            # live when it commits and re-stores it, rather than acknowledging a memento whose
            # bytes we are about to delete.
            self.index.inserts.insert_ignoring(
                connection,
                blobs,
                [
                    {
                        "address": address,
                        "size": 0,
                        "version_id": None,
                        "stored_at": utc_now(),
                        "state": "deleted",
                        "lock_legal_hold": 0,
                    }
                ],
                conflict=["address"],
            )
            row = connection.execute(
                select(blobs.c.state).where(blobs.c.address == address)
            ).first()
            if row is not None and row.state == "live":
                return
            # An orphan has no recorded VersionId: delete every version the store holds.
            for version in self.store.versions_of(address):
                self.store.delete(address, version)
