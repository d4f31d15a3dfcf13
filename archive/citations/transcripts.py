"""Transcripts: the conversation records that cite, and how long they must stay auditable.

A transcript's retention is given as a named policy (``regulated``), an ISO 8601 duration
(``P7Y``, counted from the transcript's creation) or an absolute ``retain_until``. It is
resolved to an absolute date when applied, so editing the configuration later never
shortens existing retention. Here retention can only be extended; shortening is an admin
action of the retention feature.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, bindparam, insert, select, update

from archive.config import CitationPolicy
from archive.dates import add_iso8601_duration, parse_rfc3339, utc_now
from archive.exceptions import InvalidInput, RetentionShortened, TranscriptNotFound
from archive.index import Index
from archive.index.schema import citations, transcripts

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}")
MAX_LABELS = 50
MAX_LABEL_TEXT = 256


@dataclass(frozen=True)
class Transcript:
    """A conversation record that cites: how long it stays auditable and whether it is
    under legal hold."""

    tenant: str
    id: str
    created_at: datetime
    updated_at: datetime
    retention: str  # what was asked: a policy name, a duration, or "until"
    retain_until: datetime
    labels: Mapping[str, str]
    legal_hold: bool


@dataclass(frozen=True)
class TranscriptWrite:
    """A transcript as stored by a put, and whether the put created it."""

    transcript: Transcript
    created: bool


def check_transcript_id(value: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidInput("transcript ids are 1-128 of A-Z a-z 0-9 . _ : -, starting alphanumeric")
    return value


def _check_labels(labels: Mapping[str, object]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"at most {MAX_LABELS} labels")
    checked = {}
    for key, value in labels.items():
        if not isinstance(value, str) or len(key) > MAX_LABEL_TEXT or len(value) > MAX_LABEL_TEXT:
            raise InvalidInput(f"labels are short strings (at most {MAX_LABEL_TEXT} characters)")
        checked[key] = value
    return checked


def resolve_retention(
    retention: str | Mapping[str, str], created_at: datetime, policy: CitationPolicy
) -> tuple[str, datetime]:
    """(label, absolute retain_until) for a retention request."""
    if isinstance(retention, Mapping):
        if set(retention) != {"retain_until"}:
            raise InvalidInput('retention object must be {"retain_until": "<RFC 3339>"}')
        return "until", parse_rfc3339(retention["retain_until"])
    if not isinstance(retention, str) or not retention:
        raise InvalidInput(
            "retention must be a policy name, an ISO 8601 duration or {retain_until}"
        )
    if retention == "default":
        return retention, created_at + timedelta(days=policy.retention_days)
    if retention in policy.policies:
        return retention, add_iso8601_duration(created_at, policy.policies[retention])
    if retention.startswith("P"):
        return retention, add_iso8601_duration(created_at, retention)
    raise InvalidInput(f"unknown retention policy {retention!r}")


def reached_mementos(connection: Connection, tenant: str, transcript_id: str) -> list[str]:
    """Ids of every memento a transcript's citations reach (passages and kept documents)."""
    rows = connection.execute(
        select(citations.c.passage_memento_id, citations.c.document_memento_id).where(
            citations.c.tenant == tenant, citations.c.transcript_id == transcript_id
        )
    )
    reached: set[str] = set()
    for passage, document in rows:
        reached.add(passage)
        if document is not None:
            reached.add(document)
    return sorted(reached)


class TranscriptBook:
    """Create, extend and read transcripts of one index."""

    def __init__(self, index: Index, policy: CitationPolicy) -> None:
        self.index = index
        self.policy = policy
        # Every citation request reads its transcript: a prepared point lookup.
        self._by_id = index.lookups.prepare(
            select(transcripts).where(
                transcripts.c.tenant == bindparam("tenant"), transcripts.c.id == bindparam("id")
            )
        )

    def put(
        self,
        tenant: str,
        transcript_id: str,
        retention: str | Mapping[str, str] | None,
        labels: Mapping[str, object] | None,
    ) -> TranscriptWrite:
        check_transcript_id(transcript_id)
        new_labels = _check_labels(labels or {})
        now = utc_now()
        with self.index.write() as connection:
            existing = self._get(connection, tenant, transcript_id)
            if existing is None:
                label, until = resolve_retention(retention or "default", now, self.policy)
                self.index.inserts.ensure_tenants(connection, {tenant})
                connection.execute(
                    insert(transcripts).values(
                        tenant=tenant,
                        id=transcript_id,
                        created_at=now,
                        updated_at=now,
                        retention=label,
                        retain_until=until,
                        labels_json=json.dumps(new_labels, sort_keys=True),
                        legal_hold=0,
                    )
                )
                created = True
            else:
                label, until = existing.retention, existing.retain_until
                if retention is not None:
                    label, until = resolve_retention(retention, existing.created_at, self.policy)
                    if until < existing.retain_until:
                        raise RetentionShortened(
                            "retention can only be extended here; shortening is an admin action",
                            retain_until=existing.retain_until.isoformat(),
                        )
                if until > existing.retain_until:
                    # Extending reaches everything the transcript cites, at once.
                    self.index.extend_expiry(
                        connection,
                        tenant,
                        reached_mementos(connection, tenant, transcript_id),
                        until,
                    )
                merged = {**existing.labels, **new_labels}
                connection.execute(
                    update(transcripts)
                    .where(transcripts.c.tenant == tenant, transcripts.c.id == transcript_id)
                    .values(
                        updated_at=now,
                        retention=label,
                        retain_until=until,
                        labels_json=json.dumps(merged, sort_keys=True),
                    )
                )
                created = False
            stored = self._get(connection, tenant, transcript_id)
        assert stored is not None
        return TranscriptWrite(stored, created)

    def get(self, tenant: str, transcript_id: str) -> Transcript:
        check_transcript_id(transcript_id)
        row = self.index.lookups.first(self._by_id, tenant=tenant, id=transcript_id)
        if row is None:
            raise TranscriptNotFound("no transcript with this id")
        return _transcript_from(row)

    def recent(self, tenant: str, limit: int = 20) -> list[Transcript]:
        """The tenant's most recently updated transcripts, newest first."""
        query = (
            select(transcripts)
            .where(transcripts.c.tenant == tenant)
            .order_by(transcripts.c.updated_at.desc(), transcripts.c.id)
            .limit(limit)
        )
        with self.index.read() as connection:
            return [_transcript_from(row) for row in connection.execute(query)]

    def _get(self, connection: Connection, tenant: str, transcript_id: str) -> Transcript | None:
        row = connection.execute(
            select(transcripts).where(
                transcripts.c.tenant == tenant, transcripts.c.id == transcript_id
            )
        ).first()
        return None if row is None else _transcript_from(row)


def _transcript_from(row: Row[Any]) -> Transcript:
    return Transcript(
        tenant=row.tenant,
        id=row.id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        retention=row.retention,
        retain_until=row.retain_until,
        labels=json.loads(row.labels_json),
        legal_hold=bool(row.legal_hold),
    )
