"""The records the SDK returns: stored citations, transcripts, mementos, and why a citation
was refused. Frozen, built from the server's JSON (``from_json``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from api.client.wire import decode_text


@dataclass(frozen=True)
class CitationError:
    """Why one citation (``index``) — or the whole answer (``index=None``) — was refused.

    ``reason`` is the server's (``unknown_evidence``, ``disallowed_tool``,
    ``quote_not_found``, ``quote_too_common``, ``quote_too_long``, ``empty_quote``,
    ``unreadable_document``, ``invalid_source``, …) or the SDK's own ``unknown_evidence`` / ``no_citations``.
    """

    index: int | None
    reason: str
    detail: str
    source_id: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CitationError:
        index = data.get("index")
        return cls(
            index if isinstance(index, int) else None,
            str(data.get("reason", "rejected")),
            str(data.get("detail", "")),
        )

    def describe(self) -> str:
        where = "answer" if self.index is None else f"citation {self.index + 1}"
        source = f" (source {self.source_id})" if self.source_id else ""
        return f"{where}{source}: {self.reason}" + (f" — {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class CitationRecord:
    """One stored citation, as the server rendered it: ready to show and to audit."""

    id: str
    uri_m: str  # the passage memento: resolve it for the exact captured words
    uri_r: str
    memento_datetime: datetime
    passage_hash: str
    document_hash: str  # BLAKE3 of the bytes the tool fetched
    document_uri_m: str | None
    quote_hash: str
    robust_link: str  # <a href=URI-R data-versionurl=URI-M data-versiondate=…>
    text_fragment_url: str | None
    selector: tuple[Mapping[str, Any], ...] = field(hash=False)
    extractor: str
    extractor_version: str
    normalisation: str
    match_method: str
    run_id: str | None
    source_ids: tuple[str, ...]
    created_at: datetime
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CitationRecord:
        return cls(
            id=data["id"],
            uri_m=data["uri_m"],
            uri_r=data["uri_r"],
            memento_datetime=datetime.fromisoformat(data["memento_datetime"]),
            passage_hash=data["passage_hash"],
            document_hash=data["document_hash"],
            document_uri_m=data.get("document_uri_m"),
            quote_hash=data["quote_hash"],
            robust_link=data["robust_link"],
            text_fragment_url=data.get("text_fragment_url"),
            selector=tuple(data.get("selector") or ()),
            extractor=data["extractor"],
            extractor_version=data["extractor_version"],
            normalisation=data["normalisation"],
            match_method=data["match_method"],
            run_id=data.get("run_id"),
            source_ids=tuple(data.get("source_ids") or ()),
            created_at=datetime.fromisoformat(data["created_at"]),
            raw=dict(data),
        )

    @property
    def exact(self) -> str | None:
        """The quoted words as matched in the document (None once retention tombstoned them)."""
        for selector in self.selector:
            if selector.get("type") == "TextQuoteSelector":
                return str(selector.get("exact"))
        return None


@dataclass(frozen=True)
class CiteResult:
    citations: tuple[CitationRecord, ...]
    errors: tuple[CitationError, ...]  # non-empty only with fail_closed=False
    created: bool  # the server answered 201 (a replayed Idempotency-Key answers as the first)


@dataclass(frozen=True)
class Transcript:
    id: str
    created_at: datetime
    updated_at: datetime
    retention: str
    retain_until: datetime
    labels: Mapping[str, str] = field(hash=False)
    legal_hold: bool
    citations: tuple[CitationRecord, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Transcript:
        return cls(
            id=data["id"],
            created_at=datetime.fromisoformat(data["created_at"]),
            updated_at=datetime.fromisoformat(data["updated_at"]),
            retention=data["retention"],
            retain_until=datetime.fromisoformat(data["retain_until"]),
            labels=dict(data.get("labels") or {}),
            legal_hold=bool(data.get("legal_hold")),
            citations=tuple(CitationRecord.from_json(c) for c in data.get("citations") or ()),
        )


@dataclass(frozen=True)
class MementoInfo:
    id: str
    uri_r: str
    uri_m: str
    memento_datetime: datetime
    archived_at: datetime
    content_hash: str
    content_type: str
    size: int
    scope: str
    tool: str | None
    final_url: str | None
    http_status: int | None
    headers: Mapping[str, str] = field(hash=False)
    timegate: str
    timemap: str
    timemap_json: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MementoInfo:
        capture = data.get("capture") or {}
        return cls(
            id=data["id"],
            uri_r=data["uri_r"],
            uri_m=data["uri_m"],
            memento_datetime=datetime.fromisoformat(data["memento_datetime"]),
            archived_at=datetime.fromisoformat(data["archived_at"]),
            content_hash=data["content_hash"],
            content_type=data["content_type"],
            size=int(data["size"]),
            scope=data["scope"],
            tool=capture.get("tool"),
            final_url=capture.get("final_url"),
            http_status=capture.get("http_status"),
            headers=dict(capture.get("headers") or {}),
            timegate=data["timegate"],
            timemap=data["timemap"],
            timemap_json=data["timemap_json"],
        )


@dataclass(frozen=True)
class MementoContent:
    """A URI-M's bytes. ``content_hash`` comes from the ETag and was checked against the
    bytes when ``verified``."""

    memento_id: str
    uri_m: str
    content: bytes = field(repr=False)
    content_type: str
    memento_datetime: datetime | None
    content_hash: str | None
    verified: bool
    link: str

    @property
    def text(self) -> str:
        return decode_text(self.content, self.content_type)


@dataclass(frozen=True)
class TimeGateResult:
    uri_r: str
    uri_m: str  # the memento the TimeGate chose
    memento_id: str
    link: str  # the TimeGate's Link header (original, timemaps, neighbouring mementos)
