"""Deleting expired or erased evidence: tombstones first, then the blobs nobody uses.

- Deletion is in place: the memento row stays as its own tombstone (hashes, dates, policy,
  ``deleted_at``, ``deletion_reason``) and leaves TimeMaps; citations lose their selector
  text.
- A blob is shared by every memento with the same bytes and is deleted only when no live
  memento in any tenant references it. Deletion is two-phase: the transaction that
  tombstones the last memento marks the blob ``deleting``; then, a few blobs per
  transaction, under the write lock (SQLite's single writer, PostgreSQL ``FOR UPDATE``), the
  state is checked again, the bytes deleted and the blobs marked ``deleted`` — only once the
  store has made the deletions durable (the local store syncs each touched directory once
  per batch). A write landing on a ``deleting``/``deleted`` blob stores the bytes again under
  the same lock (``Index.insert_mementos(revive=…)``), so dedup can never acknowledge bytes
  a sweep removes.
- Every step is idempotent: a sweep killed anywhere leaves tombstones and ``deleting`` blobs
  that the next sweep finishes (deleting a blob already gone is a success).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, Select, and_, bindparam, exists, or_, select, update

from archive.blobstore.base import BlobStore
from archive.exceptions import StorageError
from archive.index import Index
from archive.index.schema import blobs, citations, drift_checks, mementos, transcript_reviews
from archive.retention.evaluation import Evaluator, json_ids
from archive.retention.records import SweepReport, Verdict

# Blobs deleted per write transaction: enough to share one commit and one directory sync
# pass, few enough that the write lock is held for tens of milliseconds (writers wait on it).
BLOBS_PER_TRANSACTION = 100
# A store without batched deletes (S3: a round trip per delete) holds the lock longer per blob.
REMOTE_BLOBS_PER_TRANSACTION = 50


def reason_kinds(reasons: Sequence[object]) -> list[object]:
    """Drift reasons without the words they quote: ``antonym:fair->unfair`` → ``antonym``
    (the rules' reason names never contain a colon; what follows one is detail)."""
    return [r.split(":", 1)[0] if isinstance(r, str) else r for r in reasons]


class Deleter:
    """Tombstones mementos and deletes the blobs they leave unused, in that order."""

    def __init__(self, index: Index, store: BlobStore, evaluator: Evaluator) -> None:
        self.index = index
        self.store = store
        self.evaluator = evaluator

    def _ids(self, items: Iterable[str]) -> Select[str]:
        """``items`` as one JSON array parameter (see :func:`json_ids`)."""
        return json_ids(self.index.dialect, items)

    def tombstone(self, connection: Connection, expired: Sequence[Verdict], now: datetime) -> None:
        if not expired:
            return
        policies = self.evaluator.policies(connection, [v.memento_id for v in expired if v.cited])
        grace = self.evaluator.grace
        connection.execute(
            update(mementos)
            .where(mementos.c.id == bindparam("target"), mementos.c.deleted_at.is_(None))
            .values(deleted_at=now, deletion_reason=bindparam("why")),
            [
                {
                    "target": v.memento_id,
                    "why": json.dumps(v.reason(grace, policies.get(v.memento_id, ()))),
                }
                for v in expired
            ],
        )
        ids = [v.memento_id for v in expired]
        if self.index.log is not None:
            self.index.log.log_tombstones(connection, ids, now)
        self.forget_text(connection, ids)
        self.mark_orphans_dying(connection, ids)

    def forget_text(self, connection: Connection, memento_ids: Sequence[str]) -> None:
        """Blank the text the index holds of these (tombstoned) mementos' bytes.

        Tombstones keep hashes, dates, offsets and policy — never text: the selectors of the
        citations whose passage or document they are lose exact, prefix and suffix; the
        drift checks of those passages, and those that archived one of them (new wording, a
        live page), lose their diff (old and new wording) and the words their reasons quote
        (``antonym:fair->unfair`` keeps ``antonym``), and so do the review flags that copied
        those reasons."""
        if not memento_ids:
            return
        batch = self._ids(memento_ids)
        connection.execute(
            update(citations)
            .where(
                or_(
                    citations.c.passage_memento_id.in_(batch),
                    citations.c.document_memento_id.in_(batch),
                ),
                citations.c.selector_json.is_not(None),
            )
            .values(selector_json=None)
        )
        checks = connection.execute(
            select(
                drift_checks.c.id,
                drift_checks.c.tenant,
                drift_checks.c.transcript_id,
                drift_checks.c.reasons_json,
                drift_checks.c.diff_json.is_not(None).label("has_diff"),
            ).where(
                or_(
                    drift_checks.c.memento_id.in_(self._ids(memento_ids)),
                    drift_checks.c.new_passage_memento_id.in_(self._ids(memento_ids)),
                    drift_checks.c.live_document_memento_id.in_(self._ids(memento_ids)),
                )
            )
        ).all()
        changed = []
        for row in checks:
            reasons = json.loads(row.reasons_json)
            kinds = reason_kinds(reasons)
            if row.has_diff or kinds != reasons:
                changed.append({"check": row.id, "reasons": json.dumps(kinds)})
        if changed:
            connection.execute(
                update(drift_checks)
                .where(drift_checks.c.id == bindparam("check"))
                .values(diff_json=None, reasons_json=bindparam("reasons")),
                changed,
            )
        self._forget_review_reasons(connection, checks)

    def _forget_review_reasons(self, connection: Connection, checks: Sequence[Row[Any]]) -> None:
        """The review flags of these checks' transcripts copied each check's reasons."""
        ids = {row.id for row in checks}
        for tenant, transcript_id in sorted({(row.tenant, row.transcript_id) for row in checks}):
            key = and_(
                transcript_reviews.c.tenant == tenant,
                transcript_reviews.c.transcript_id == transcript_id,
            )
            stored = connection.execute(select(transcript_reviews.c.reasons_json).where(key))
            found = stored.scalar_one_or_none()
            if found is None:
                continue
            flags = json.loads(found)
            blanked = [
                {**flag, "reasons": reason_kinds(flag.get("reasons", []))}
                if flag.get("check_id") in ids
                else flag
                for flag in flags
            ]
            if blanked != flags:
                connection.execute(
                    update(transcript_reviews).where(key).values(reasons_json=json.dumps(blanked))
                )

    def mark_orphans_dying(self, connection: Connection, memento_ids: Sequence[str]) -> None:
        """Mark ``deleting`` the live blobs of these mementos that no live memento uses."""
        used = exists().where(
            mementos.c.content_hash == blobs.c.address, mementos.c.deleted_at.is_(None)
        )
        connection.execute(
            update(blobs)
            .where(
                blobs.c.address.in_(
                    select(mementos.c.content_hash).where(mementos.c.id.in_(self._ids(memento_ids)))
                ),
                blobs.c.state == "live",
                ~used,
            )
            .values(state="deleting")
        )

    def delete_dying_blobs(self, report: SweepReport) -> None:
        with self.index.read() as connection:
            dying = (
                connection.execute(
                    select(blobs.c.address)
                    .where(blobs.c.state == "deleting")
                    .order_by(blobs.c.address)
                )
                .scalars()
                .all()
            )
        step = (
            BLOBS_PER_TRANSACTION
            if self.store.capabilities.local_deletes
            else REMOTE_BLOBS_PER_TRANSACTION
        )
        for start in range(0, len(dying), step):
            with self.index.write(exclusive=True) as connection:
                self._delete_blobs_locked(connection, dying[start : start + step], report)

    def delete_blobs(
        self, addresses: Sequence[str], report: SweepReport, erasure: str | None = None
    ) -> None:
        """Delete these blobs now if they are ``deleting`` (one exclusive write)."""
        with self.index.write(exclusive=True) as connection:
            self._delete_blobs_locked(connection, addresses, report, erasure)

    def _delete_blobs_locked(
        self,
        connection: Connection,
        addresses: Sequence[str],
        report: SweepReport,
        erasure: str | None = None,
    ) -> None:
        """Delete these ``deleting`` blobs' bytes, then mark them ``deleted`` (inside the write
        transaction, so no write can land on them meanwhile). With an ``erasure`` reason the
        store erases (an admin's takedown bypasses GOVERNANCE retention; a sweep never does)."""
        query = select(blobs.c.address, blobs.c.version_id, blobs.c.size).where(
            blobs.c.address.in_(self._ids(addresses)), blobs.c.state == "deleting"
        )
        if self.index.dialect == "postgresql":
            query = query.with_for_update(skip_locked=True)  # another sweep has the others
        dying = {row.address: row for row in connection.execute(query)}
        if not dying:
            return  # revived by a write, or another sweep has them
        # Re-checked under the lock: a memento written since the blob was marked keeps it.
        # Every version any memento recorded is deleted (one statement for both answers).
        used: set[str] = set()
        versions: dict[str, set[str | None]] = {
            address: {row.version_id} for address, row in dying.items()
        }
        for address, version, live in connection.execute(
            select(
                mementos.c.content_hash, mementos.c.blob_version_id, mementos.c.deleted_at.is_(None)
            )
            .distinct()
            .where(mementos.c.content_hash.in_(self._ids(dying)))
        ):
            versions[address].add(version)
            if live:
                used.add(address)
        if used:
            connection.execute(
                update(blobs).where(blobs.c.address.in_(self._ids(used))).values(state="live")
            )
            versions = {
                address: known for address, known in versions.items() if address not in used
            }
        if not versions:
            return
        deleted: list[str] = []
        locked: dict[str, datetime] = {}
        # The store makes the whole batch's deletions durable when the block ends (raise or
        # not); the blobs are marked deleted only after that, so a crash before leaves them
        # ``deleting`` and the next sweep deletes them again.
        with self.store.batched_deletes():
            for address in sorted(versions):
                known: list[str | None] = [*sorted(v for v in versions[address] if v is not None)]
                try:
                    for version in known or [None]:
                        if erasure is None:
                            self.store.delete(address, version)
                        else:
                            self.store.erase(address, version, erasure)
                except StorageError as error:
                    if getattr(error, "code", "") == "retention_locked":
                        report.not_yet += 1
                        until = error.detail.get("retain_until")
                        if isinstance(until, str):
                            locked[address] = datetime.fromisoformat(until)
                        continue
                    raise
                deleted.append(address)
        for address, until in locked.items():
            # The store's own date, for the report: the first lock was never recorded, and
            # an expired blob waits for it (a lock cannot be shortened).
            connection.execute(
                update(blobs).where(blobs.c.address == address).values(lock_until=until)
            )
        if not deleted:
            return
        connection.execute(
            update(blobs).where(blobs.c.address.in_(self._ids(deleted))).values(state="deleted")
        )
        report.blobs_deleted += len(deleted)
        report.bytes_deleted += sum(int(dying[address].size) for address in deleted)
