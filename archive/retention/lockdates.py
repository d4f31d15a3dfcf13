"""S3 Object Lock dates: the store itself refuses early deletion.

A new blob is locked for the grace period from the start (:func:`first_lock`, which
rounds with :func:`ceil_to_day`); after each sweep, :class:`LockDates` extends each live
blob's lock to its latest expiry and keeps its legal-hold flag on while any hold in Amber
reaches it.

Object Lock can only lengthen, and the first lock is written before anyone knows which
transcripts will cite the bytes. So evidence whose transcripts end before its grace date is
tombstoned on time in the index (no longer served), while its blob stays ``deleting`` until
the lock allows: each sweep counts it ``not_yet``, ``amber retention report`` and ``amber gc``
say how many wait and until when (:func:`archive.retention.report.waiting_on_lock`), and the
first sweep after the lock date deletes it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, func, select, update

from archive.blobstore.base import BlobStore
from archive.index import Index
from archive.index.schema import blobs, mementos, transcripts
from archive.retention.evaluation import REACHERS, reach


def ceil_to_day(moment: datetime) -> datetime:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day if day == moment else day + timedelta(days=1)


def first_lock(store: BlobStore, grace: timedelta, archived_at: datetime) -> datetime | None:
    """The lock date of a blob first stored at ``archived_at``: the end of the grace period,
    rounded up to the day; None when the store sets no lock. Sweeps extend it later when a
    longer-lived citation or a hold reaches the blob; nothing can shorten it, so a blob whose
    evidence expires earlier (a short transcript) is deleted on this date."""
    if store.lock_mode is None:
        return None
    return ceil_to_day(archived_at + grace)


class LockDates:
    """Writes Amber's expiries and holds onto the store's storage-level locks."""

    def __init__(self, index: Index, store: BlobStore) -> None:
        self.index = index
        self.store = store

    def sync_locks(self) -> dict[str, int]:
        """Extend each live blob's Object Lock to its latest expiry (rounded up to the day)
        and keep its legal-hold flag on while any hold in Amber reaches it.

        Retain-until dates only ever grow; rounding to the day turns a burst of citations
        into one PutObjectRetention per blob per day at most.
        """
        store = self.store
        extended = holds_changed = 0
        with self.index.read() as connection:
            wanted = connection.execute(
                select(
                    mementos.c.content_hash,
                    mementos.c.blob_version_id,
                    func.max(mementos.c.expires_at).label("until"),
                    func.max(mementos.c.legal_hold).label("hold"),
                )
                .where(mementos.c.deleted_at.is_(None))
                .group_by(mementos.c.content_hash, mementos.c.blob_version_id)
            ).all()
            # Every path a sweep counts (citations, and what REACHERS adds, e.g. drift
            # checks' archived pages), so the store holds what Amber itself would keep.
            reached = reach(
                select(mementos.c.id).where(mementos.c.deleted_at.is_(None)), tuple(REACHERS)
            )
            held_by_transcripts = set(
                connection.execute(
                    select(mementos.c.content_hash)
                    .join(reached, reached.c.memento_id == mementos.c.id)
                    .join(
                        transcripts,
                        and_(
                            transcripts.c.tenant == reached.c.tenant,
                            transcripts.c.id == reached.c.transcript_id,
                        ),
                    )
                    .where(transcripts.c.legal_hold == 1)
                ).scalars()
            )
            applied = {
                row.address: row
                for row in connection.execute(
                    select(blobs.c.address, blobs.c.lock_until, blobs.c.lock_legal_hold)
                )
            }
        for row in wanted:
            current = applied.get(row.content_hash)
            until = ceil_to_day(row.until) if row.until else None
            hold = bool(row.hold) or row.content_hash in held_by_transcripts
            changes: dict[str, datetime | int] = {}
            if until is not None and (
                current is None or current.lock_until is None or until > current.lock_until
            ):
                changes["lock_until"] = store.set_retention(
                    row.content_hash, row.blob_version_id, until
                )
                extended += 1
            if current is None or bool(current.lock_legal_hold) != hold:
                store.set_legal_hold(row.content_hash, row.blob_version_id, hold)
                changes["lock_legal_hold"] = 1 if hold else 0
                holds_changed += 1
            if changes:
                with self.index.write() as connection:
                    connection.execute(
                        update(blobs).where(blobs.c.address == row.content_hash).values(**changes)
                    )
        return {"extended": extended, "holds_changed": holds_changed}
