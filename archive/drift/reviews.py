"""Review flags: ``needs_review`` on a transcript, set by drift checks, cleared by people.

A check whose verdict is listed in ``[drift] review_on`` flags the citing transcript with
its reasons (inside the transaction that stores the check); an auditor or admin clears the
flag with a note, which the admin log keeps.
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

from sqlalchemy import Connection, Row, and_, func, insert, select, update

from archive.citations import Transcript, TranscriptBook
from archive.dates import to_rfc3339, utc_now
from archive.drift.records import CheckRecord, Review
from archive.exceptions import InvalidInput
from archive.index import Index
from archive.index.schema import admin_log, transcript_reviews, transcripts

log = logging.getLogger("amber.drift")

MAX_NOTE = 2000


class ReviewFlags:
    """The ``transcript_reviews`` table of one archive."""

    def __init__(self, index: Index, transcript_book: TranscriptBook) -> None:
        self.index = index
        self.transcript_book = transcript_book  # an unknown transcript is a 404

    def flag(self, connection: Connection, record: CheckRecord) -> None:
        """Add ``record`` to its transcript's review reasons (once), in the caller's
        transaction; the flag's time is that of the first check since the last clearing."""
        reason = {
            "check_id": record.id,
            "citation_id": record.citation_id,
            "verdict": record.verdict,
            "checked_at": to_rfc3339(record.checked_at),
            "uri_r": record.uri_r,
            "reasons": list(record.reasons),
        }
        key = and_(
            transcript_reviews.c.tenant == record.tenant,
            transcript_reviews.c.transcript_id == record.transcript_id,
        )
        row = connection.execute(select(transcript_reviews).where(key)).first()
        if row is None:
            connection.execute(
                insert(transcript_reviews).values(
                    tenant=record.tenant,
                    transcript_id=record.transcript_id,
                    needs_review=1,
                    reasons_json=json.dumps([reason]),
                    flagged_at=record.checked_at,
                )
            )
            return
        reasons = json.loads(row.reasons_json) if row.needs_review else []
        if any(r.get("check_id") == record.id for r in reasons):
            return
        reasons.append(reason)
        connection.execute(
            update(transcript_reviews)
            .where(key)
            .values(
                needs_review=1,
                reasons_json=json.dumps(reasons),
                flagged_at=row.flagged_at if row.needs_review else record.checked_at,
            )
        )

    def get(self, tenant: str, transcript_id: str) -> Review:
        self.transcript_book.get(tenant, transcript_id)  # unknown transcript → 404
        with self.index.read() as connection:
            row = connection.execute(
                select(transcript_reviews).where(
                    transcript_reviews.c.tenant == tenant,
                    transcript_reviews.c.transcript_id == transcript_id,
                )
            ).first()
        return review_from(row) if row else no_review(tenant, transcript_id)

    def transcripts(
        self,
        tenant: str,
        *,
        needs_review: bool | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[tuple[Transcript, Review]]:
        """Transcripts of ``tenant`` with their review state, by id; filtered when asked."""
        flag = func.coalesce(transcript_reviews.c.needs_review, 0)
        t = transcripts.c
        query = (
            select(
                t.id,
                t.created_at,
                t.updated_at,
                t.retention,
                t.retain_until,
                t.labels_json,
                t.legal_hold,
                transcript_reviews.c.transcript_id,
                transcript_reviews.c.tenant,
                transcript_reviews.c.needs_review,
                transcript_reviews.c.reasons_json,
                transcript_reviews.c.flagged_at,
                transcript_reviews.c.cleared_by,
                transcript_reviews.c.cleared_note,
                transcript_reviews.c.cleared_at,
            )
            .outerjoin(
                transcript_reviews,
                and_(
                    transcript_reviews.c.tenant == transcripts.c.tenant,
                    transcript_reviews.c.transcript_id == transcripts.c.id,
                ),
            )
            .where(transcripts.c.tenant == tenant)
            .order_by(transcripts.c.id)
            .limit(limit)
        )
        if needs_review is not None:
            query = query.where(flag == (1 if needs_review else 0))
        if after is not None:
            query = query.where(transcripts.c.id > after)
        with self.index.read() as connection:
            rows = connection.execute(query).all()
        found = []
        for row in rows:
            transcript = Transcript(
                tenant=tenant,
                id=row.id,
                created_at=row.created_at,
                updated_at=row.updated_at,
                retention=row.retention,
                retain_until=row.retain_until,
                labels=json.loads(row.labels_json),
                legal_hold=bool(row.legal_hold),
            )
            review = (
                review_from(row) if row.transcript_id is not None else no_review(tenant, row.id)
            )
            found.append((transcript, review))
        return found

    def clear(self, tenant: str, transcript_id: str, key_id: str, note: str) -> Review:
        """An auditor or admin clears ``needs_review`` with a note (kept in the admin log)."""
        if not isinstance(note, str) or not note.strip() or len(note) > MAX_NOTE:
            raise InvalidInput(f"a note of 1-{MAX_NOTE} characters is required")
        if any(ord(c) < 0x20 and c not in "\n\t" for c in note) or not _encodable(note):
            raise InvalidInput("the note must be text without control characters")
        self.transcript_book.get(tenant, transcript_id)
        now = utc_now()
        key = and_(
            transcript_reviews.c.tenant == tenant,
            transcript_reviews.c.transcript_id == transcript_id,
        )
        with self.index.write() as connection:
            row = connection.execute(select(transcript_reviews).where(key)).first()
            cleared = {
                "needs_review": 0,
                "cleared_by": key_id,
                "cleared_note": note,
                "cleared_at": now,
            }
            if row is None:
                connection.execute(
                    insert(transcript_reviews).values(
                        tenant=tenant, transcript_id=transcript_id, reasons_json="[]", **cleared
                    )
                )
            else:
                connection.execute(update(transcript_reviews).where(key).values(**cleared))
            reasons = json.loads(row.reasons_json) if row is not None and row.needs_review else []
            connection.execute(
                insert(admin_log).values(
                    id=secrets.token_hex(16),
                    tenant=tenant,
                    key_id=key_id,
                    action="review.clear",
                    target_kind="transcript",
                    target_id=transcript_id,
                    reason=note,
                    detail_json=json.dumps(
                        {"cleared_checks": [r.get("check_id") for r in reasons]}
                    ),
                    at=now,
                )
            )
            row = connection.execute(select(transcript_reviews).where(key)).first()
        assert row is not None
        log.info(
            json.dumps(
                {
                    "event": "drift.review_cleared",
                    "tenant": tenant,
                    "transcript_id": transcript_id,
                    "key_id": key_id,
                }
            )
        )
        return review_from(row)


def review_from(row: Row[*tuple[Any, ...]]) -> Review:
    return Review(
        tenant=row.tenant,
        transcript_id=row.transcript_id,
        needs_review=bool(row.needs_review),
        reasons=json.loads(row.reasons_json) if row.needs_review else [],
        flagged_at=row.flagged_at,
        cleared_by=row.cleared_by,
        cleared_note=row.cleared_note,
        cleared_at=row.cleared_at,
    )


def no_review(tenant: str, transcript_id: str) -> Review:
    return Review(tenant, transcript_id, False, [], None, None, None, None)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True
