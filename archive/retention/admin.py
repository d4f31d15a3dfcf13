"""Admin retention actions: legal holds, retention changes, erasure, and their log.

Each action needs a reason and is recorded in the append-only admin log, in the same
transaction as the change itself.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import Connection, insert, select, update

from archive.blobstore.base import BlobStore
from archive.citations import reached_mementos, resolve_retention
from archive.config import CitationPolicy
from archive.dates import to_rfc3339, utc_now
from archive.exceptions import InvalidInput, NotFound, RetentionConflict, TranscriptNotFound
from archive.index import Index
from archive.index.schema import admin_log, citations, drift_checks, mementos, transcripts
from archive.retention.deletion import Deleter
from archive.retention.erasure import Eraser, Erasure, ForgetText
from archive.retention.evaluation import Evaluator

MAX_REASON = 2000


def _check_reason(reason: str) -> str:
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
        raise InvalidInput(f"a reason (1-{MAX_REASON} characters) is required")
    return reason.strip()


def _drift_captures(connection: Connection, tenant: str, transcript_id: str) -> list[str]:
    """Ids of the mementos drift checks of a transcript's citations archived (the transcript
    reaches them too: see the drift reacher)."""
    cited = select(citations.c.id).where(
        citations.c.tenant == tenant, citations.c.transcript_id == transcript_id
    )
    rows = connection.execute(
        select(
            drift_checks.c.new_passage_memento_id, drift_checks.c.live_document_memento_id
        ).where(drift_checks.c.tenant == tenant, drift_checks.c.citation_id.in_(cited))
    )
    return sorted({i for row in rows for i in row if i})


class RetentionAdmin:
    """Holds, retention changes and erasures, each one in the append-only admin log."""

    def __init__(
        self,
        index: Index,
        store: BlobStore,
        policy: CitationPolicy,
        evaluator: Evaluator,
        deleter: Deleter,
        forget_text: ForgetText | None = None,
    ) -> None:
        self.index = index
        self.store = store
        self.policy = policy
        self.evaluator = evaluator
        self.deleter = deleter
        self.eraser = Eraser(index, store, evaluator, deleter, forget_text)

    def set_transcript_hold(
        self, tenant: str, transcript_id: str, on: bool, reason: str, actor: str
    ) -> None:
        reason = _check_reason(reason)
        with self.index.write() as connection:
            result = connection.execute(
                update(transcripts)
                .where(transcripts.c.tenant == tenant, transcripts.c.id == transcript_id)
                .values(legal_hold=1 if on else 0)
            )
            if not result.rowcount:
                raise TranscriptNotFound("no transcript with this id")
            self._log(
                connection,
                tenant,
                actor,
                "legal_hold." + ("on" if on else "off"),
                "transcript",
                transcript_id,
                reason,
                {},
            )

    def set_memento_hold(
        self, tenant: str, memento_id: str, on: bool, reason: str, actor: str
    ) -> None:
        reason = _check_reason(reason)
        with self.index.write() as connection:
            result = connection.execute(
                update(mementos)
                .where(
                    mementos.c.tenant == tenant,
                    mementos.c.id == memento_id,
                    mementos.c.deleted_at.is_(None),
                )
                .values(legal_hold=1 if on else 0)
            )
            if not result.rowcount:
                raise NotFound("no memento with this id")
            self._log(
                connection,
                tenant,
                actor,
                "legal_hold." + ("on" if on else "off"),
                "memento",
                memento_id,
                reason,
                {},
            )

    def change_retention(
        self,
        tenant: str,
        transcript_id: str,
        retention: str | Mapping[str, str],
        reason: str,
        actor: str,
    ) -> datetime:
        """Set a transcript's retention, shorter included (admin, with a reason)."""
        reason = _check_reason(reason)
        # Exclusive: two changes (or a change and a citation) evaluating side by side on
        # PostgreSQL would each miss the other's uncommitted rows, and the last to write
        # could leave a date later than any transcript's, which no sweep would look at.
        with self.index.write(exclusive=True) as connection:
            row = connection.execute(
                select(transcripts).where(
                    transcripts.c.tenant == tenant, transcripts.c.id == transcript_id
                )
            ).first()
            if row is None:
                raise TranscriptNotFound("no transcript with this id")
            if row.legal_hold:
                raise RetentionConflict("the transcript is under legal hold; release it first")
            label, until = resolve_retention(retention, row.created_at, self.policy)
            connection.execute(
                update(transcripts)
                .where(transcripts.c.tenant == tenant, transcripts.c.id == transcript_id)
                .values(retention=label, retain_until=until, updated_at=utc_now())
            )
            reached = reached_mementos(connection, tenant, transcript_id)
            reached += _drift_captures(connection, tenant, transcript_id)
            if until >= row.retain_until:
                self.index.extend_expiry(connection, tenant, reached, until)
            else:
                # Shortened: recompute from every citing transcript. Held ones too: a sweep
                # only looks at what is due, so a date left too late would outlive the hold.
                for verdict in self.evaluator.evaluate(connection, reached):
                    connection.execute(
                        update(mementos)
                        .where(mementos.c.id == verdict.memento_id)
                        .values(expires_at=verdict.until)
                    )
            self._log(
                connection,
                tenant,
                actor,
                "retention.change",
                "transcript",
                transcript_id,
                reason,
                {"from": to_rfc3339(row.retain_until), "to": to_rfc3339(until), "retention": label},
            )
        return until

    def erase(self, tenant: str, memento_id: str, reason: str, actor: str) -> Erasure:
        """Delete evidence now (takedown, court order, data-protection request), with
        everything derived from its bytes (:mod:`archive.retention.erasure`)."""
        reason = _check_reason(reason)

        def log(
            connection: Connection,
            log_id: str,
            tenant: str,
            actor: str,
            target: str,
            reason: str,
            detail: dict[str, str],
        ) -> None:
            self._log(
                connection, tenant, actor, "erasure", "memento", target, reason, detail, log_id
            )

        return self.eraser.erase(tenant, memento_id, reason, actor, log)

    def admin_log(self, tenant: str, limit: int = 100) -> list[dict[str, object]]:
        with self.index.read() as connection:
            rows = connection.execute(
                select(admin_log)
                .where(admin_log.c.tenant == tenant)
                .order_by(admin_log.c.at, admin_log.c.id)
                .limit(limit)
            )
            return [
                {
                    "id": r.id,
                    "key_id": r.key_id,
                    "action": r.action,
                    "target_kind": r.target_kind,
                    "target_id": r.target_id,
                    "reason": r.reason,
                    "detail": json.loads(r.detail_json),
                    "at": to_rfc3339(r.at),
                }
                for r in rows
            ]

    def _log(
        self,
        connection: Connection,
        tenant: str,
        actor: str,
        action: str,
        kind: str,
        target: str,
        reason: str,
        detail: dict[str, str],
        log_id: str | None = None,
    ) -> None:
        connection.execute(
            insert(admin_log).values(
                id=log_id or uuid.uuid4().hex,
                tenant=tenant,
                key_id=actor,
                action=action,
                target_kind=kind,
                target_id=target,
                reason=reason,
                detail_json=json.dumps(detail, sort_keys=True),
                at=utc_now(),
            )
        )
