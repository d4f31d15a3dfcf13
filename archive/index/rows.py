"""Rows of the mementos and idempotency tables, and the records read from them."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row

from archive.mementos import CaptureFacts, Memento, Scope


@dataclass(frozen=True)
class StoredResponse:
    """The first answer to an ``Idempotency-Key``, replayed for retries."""

    request_hash: str
    status_code: int
    body: dict[str, Any]


@dataclass(frozen=True)
class WriteOutcome:
    memento: Memento  # the row as stored (the existing one when created is False)
    created: bool


def stored_response_from(row: Any) -> StoredResponse:
    return StoredResponse(
        request_hash=row.request_hash,
        status_code=row.status_code,
        body=json.loads(row.response_json),
    )


def with_version(m: Memento, versions: dict[str, str | None]) -> Memento:
    current = versions[m.content_hash]
    return m if current == m.blob_version_id else replace(m, blob_version_id=current)


def memento_row(m: Memento) -> dict[str, Any]:
    return {
        "id": m.id,
        "tenant": m.tenant,
        "uri_r": m.uri_r,
        "urir_key": m.urir_key,
        "captured_at": m.captured_at,
        "archived_at": m.archived_at,
        "content_hash": m.content_hash,
        "blob_version_id": m.blob_version_id,
        "media_type": m.media_type,
        "size": m.size,
        "scope": m.scope.value,
        "tool": m.facts.tool,
        "final_url": m.facts.final_url,
        "http_status": m.facts.http_status,
        "headers_json": m.facts.headers_json(),
    }


def as_inserted(m: Memento, expires_at: datetime) -> Memento:
    """The memento as ``memento_from`` reads back the row just inserted for it (UTC
    datetimes, the headers in their stored order, no deletion, no hold), without reading
    the row: a write answers with it, and rebuilding it from the row dict cost more than
    the insert's own Python."""
    facts = m.facts
    if facts.headers:
        facts = replace(facts, headers=dict(sorted(facts.headers.items())))
    # Built field by field: dataclasses.replace inspects the fields on every call.
    return Memento(
        id=m.id,
        tenant=m.tenant,
        uri_r=m.uri_r,
        urir_key=m.urir_key,
        captured_at=m.captured_at.astimezone(UTC),
        archived_at=m.archived_at.astimezone(UTC),
        content_hash=m.content_hash,
        blob_version_id=m.blob_version_id,
        media_type=m.media_type,
        size=m.size,
        scope=m.scope,
        facts=facts,
        expires_at=expires_at.astimezone(UTC),
        deleted_at=None,
        deletion_reason=None,
        legal_hold=False,
    )


class RowView:
    """A row dict as written, read like a fetched row (attributes, UTC datetimes)."""

    def __getattr__(self, name: str) -> Any:  # for type checkers: columns are attributes
        raise AttributeError(name)

    def __init__(self, row: dict[str, Any]) -> None:
        self.__dict__.update(
            (name, value.astimezone(UTC) if isinstance(value, datetime) else value)
            for name, value in row.items()
        )


def headers_from(text: str) -> dict[str, str]:
    # Most captures record no response headers (every passage): skip the JSON decoder.
    return {} if text == "{}" else dict(json.loads(text))


def memento_from(row: Row[Any] | RowView) -> Memento:
    return Memento(
        id=row.id,
        tenant=row.tenant,
        uri_r=row.uri_r,
        urir_key=row.urir_key,
        captured_at=row.captured_at,
        archived_at=row.archived_at,
        content_hash=row.content_hash,
        blob_version_id=row.blob_version_id,
        media_type=row.media_type,
        size=row.size,
        scope=Scope(row.scope),
        facts=CaptureFacts(
            tool=row.tool,
            final_url=row.final_url,
            http_status=row.http_status,
            headers=headers_from(row.headers_json),
        ),
        expires_at=row.expires_at,
        deleted_at=row.deleted_at,
        deletion_reason=row.deletion_reason,
        legal_hold=bool(row.legal_hold),
    )
