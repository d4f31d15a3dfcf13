"""Erasure: evidence deleted now (takedown, court order, data-protection request), with
everything Amber derived from its bytes.

Erasing a memento reaches, in one exclusive write:

- the memento, and every live passage memento cut from it: for a document, the passages
  of the tenant's citations of that capture (cited by memento id, or inline with the same
  bytes, URI-R and capture time) and the drift passages archived from it as a live page.
  Each becomes a tombstone whose reason names the admin-log entry of the erasure (and, for
  a passage, the memento it was cut from);
- the text the index holds of them: selectors, drift diffs and reasons, review flags
  (:meth:`Deleter.forget_text`);
- their blobs, unless another live memento (of any tenant) still uses the same bytes: a
  blob is shared by content address, and those bytes are that memento's evidence.

Then, outside the write: the blobs nobody uses are deleted (bypassing S3 GOVERNANCE
retention), the SQLite WAL is checkpointed and truncated so no frame keeps the text
(``secure_delete`` zeroes it in the database file), and this process's text caches forget
the erased bytes; the ``erasures`` change signal makes every other process forget its own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Row, and_, bindparam, or_, select, update

from archive.blobstore.base import BlobStore
from archive.dates import utc_now
from archive.exceptions import NotFound, RetentionConflict
from archive.index import Index
from archive.index.schema import citations, drift_checks, mementos
from archive.retention.deletion import Deleter
from archive.retention.evaluation import Evaluator, json_ids
from archive.retention.records import SweepReport

# Records the erasure in the admin log, in the erasing transaction:
# (connection, log entry id, tenant, actor, memento id, reason, detail).
LogErasure = Callable[[Connection, str, str, str, str, str, dict[str, str]], None]
# Forgets cached text of these content addresses in this process: (tenant, addresses).
ForgetText = Callable[[str, Collection[str]], None]


@dataclass(frozen=True)
class Erasure:
    """What an erasure did: the mementos tombstoned (the one named first, then what was cut
    from it), the blobs deleted, and whether the index's files were scrubbed at once."""

    memento_id: str
    admin_log_id: str
    erased_ids: list[str]
    blobs_deleted: int
    scrubbed: bool

    def as_json(self) -> dict[str, object]:
        return {
            "memento_id": self.memento_id,
            "erased": True,
            "admin_log_id": self.admin_log_id,
            "erased_ids": self.erased_ids,
            "blobs_deleted": self.blobs_deleted,
            "index_scrubbed": self.scrubbed,
        }


class Eraser:
    def __init__(
        self,
        index: Index,
        store: BlobStore,
        evaluator: Evaluator,
        deleter: Deleter,
        forget_text: ForgetText | None = None,
    ) -> None:
        self.index = index
        self.store = store
        self.evaluator = evaluator
        self.deleter = deleter
        self.forget_text = forget_text

    def erase(
        self, tenant: str, memento_id: str, reason: str, actor: str, log: LogErasure
    ) -> Erasure:
        log_id = uuid.uuid4().hex
        with self.index.changes.erasing(), self.index.write(exclusive=True) as connection:
            row = connection.execute(
                select(mementos).where(
                    mementos.c.tenant == tenant,
                    mementos.c.id == memento_id,
                    mementos.c.deleted_at.is_(None),
                )
            ).first()
            if row is None:
                raise NotFound("no memento with this id")
            derived = [i for i in self._cut_from(connection, tenant, row) if i != memento_id]
            live = self._live(connection, derived)
            self._refuse_if_kept(connection, row, live)
            now = utc_now()
            why: dict[str, object] = {"kind": "erasure", "admin_log_id": log_id}
            connection.execute(
                update(mementos)
                .where(mementos.c.id == bindparam("target"), mementos.c.deleted_at.is_(None))
                .values(deleted_at=now, deletion_reason=bindparam("why")),
                [{"target": memento_id, "why": json.dumps(why)}]
                + [{"target": i, "why": json.dumps({**why, "of": memento_id})} for i in live],
            )
            erased = [memento_id, *live]
            if self.index.log is not None:
                self.index.log.log_tombstones(connection, erased, now)
                # Erased facts leave the log too: the statements go, their leaf hashes stay.
                self.index.log.blank(connection, [memento_id, *derived])
            # Passages tombstoned earlier (by a sweep) have no text left, but a citation of
            # the document may still hold some: everything cut from it is blanked.
            self.deleter.forget_text(connection, [memento_id, *derived])
            self.deleter.mark_orphans_dying(connection, erased)
            addresses = self._addresses(connection, erased)
            log(
                connection,
                log_id,
                tenant,
                actor,
                memento_id,
                reason,
                {"content_hash": row.content_hash, "derived": str(len(live))},
            )
        report = SweepReport(dry_run=False)
        self.deleter.delete_blobs(sorted(addresses), report, erasure=reason)
        scrubbed = self.index.scrub()
        if self.forget_text is not None:
            self.forget_text(tenant, addresses)
        return Erasure(memento_id, log_id, erased, report.blobs_deleted, scrubbed)

    def _cut_from(
        self, connection: Connection, tenant: str, row: Row[tuple[object, ...]]
    ) -> list[str]:
        """The passage mementos cut from this memento's bytes (none for a passage)."""
        if row.scope != "document":
            return []
        passage = mementos.alias("passage")
        same_capture = and_(
            citations.c.document_memento_id.is_(None),
            citations.c.document_hash == row.content_hash,
            citations.c.document_captured_at == row.captured_at,
            passage.c.urir_key == row.urir_key,  # a passage has its document's URI-R
        )
        cited = (
            select(citations.c.passage_memento_id)
            .join(passage, passage.c.id == citations.c.passage_memento_id)
            .where(
                citations.c.tenant == tenant,
                or_(citations.c.document_memento_id == row.id, same_capture),
            )
        )
        archived = select(drift_checks.c.new_passage_memento_id).where(
            drift_checks.c.tenant == tenant,
            drift_checks.c.live_document_memento_id == row.id,
            drift_checks.c.new_passage_memento_id.is_not(None),
        )
        found = set(connection.execute(cited).scalars()) | set(
            connection.execute(archived).scalars()
        )
        return sorted(found)

    def _live(self, connection: Connection, ids: Sequence[str]) -> list[str]:
        if not ids:
            return []
        return sorted(
            connection.execute(
                select(mementos.c.id).where(
                    mementos.c.id.in_(json_ids(self.index.dialect, ids)),
                    mementos.c.deleted_at.is_(None),
                )
            ).scalars()
        )

    def _refuse_if_kept(
        self, connection: Connection, row: Row[tuple[object, ...]], derived: Sequence[str]
    ) -> None:
        """Holds apply to everything the erasure reaches; COMPLIANCE locks to every blob."""
        if row.legal_hold:
            raise RetentionConflict("the memento is under legal hold; release it first")
        verdicts = {v.memento_id: v for v in self.evaluator.evaluate(connection, [row.id])}
        if verdicts[str(row.id)].expiry is None:
            raise RetentionConflict(
                "a transcript citing this memento is under legal hold; release it first"
            )
        if any(v.expiry is None for v in self.evaluator.evaluate(connection, derived)):
            raise RetentionConflict(
                "a passage cut from this memento, or a transcript citing one, is under legal "
                "hold; release it first"
            )
        if self.store.lock_mode == "COMPLIANCE":
            raise RetentionConflict(
                "the store keeps evidence under S3 Object Lock COMPLIANCE mode: nobody can "
                "delete it before its retain-until date, so erasure is impossible until then"
            )

    def _addresses(self, connection: Connection, ids: Sequence[str]) -> set[str]:
        return set(
            connection.execute(
                select(mementos.c.content_hash).where(
                    mementos.c.id.in_(json_ids(self.index.dialect, ids))
                )
            ).scalars()
        )
