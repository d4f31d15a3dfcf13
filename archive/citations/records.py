"""What a caller asks to cite, what the desk decided about it, and what is stored.

Requests (:class:`CitationRequest` with its :class:`QuoteRequest` and, for a document handed
over inline, its :class:`SourceRequest`) come from the API; records (:class:`Citation` with
its :class:`Selector`, :class:`CiteResult`, :class:`CitationError`) go back to it. Between
the two, :class:`Evidence` and :class:`PlannedCitation` carry a checked citation from the
desk (:mod:`archive.citations.desk`) to the ledger (:mod:`archive.citations.ledger`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Row

from archive.citations.extract import ExtractedText
from archive.citations.locate import QuoteMatch
from archive.index import RowView
from archive.mementos import CaptureFacts, Memento
from archive.uri import URIR


@dataclass(frozen=True)
class QuoteRequest:
    """The quoted text, with optional context (prefix, suffix) and code-point position
    to choose among several occurrences."""

    exact: str
    prefix: str | None = None
    suffix: str | None = None
    position: int | None = None


@dataclass(frozen=True)
class SourceRequest:
    """A captured document handed over inline: what the tool really fetched."""

    uri_r: str
    content: bytes
    content_type: str
    captured_at: datetime | None = None
    tool: str | None = None
    final_url: str | None = None
    http_status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CitationRequest:
    """One citation an agent asks for: a quote, and the evidence it rests on (a stored
    memento, a document handed over inline, or an earlier source of the same request)."""

    quote: QuoteRequest
    memento_id: str | None = None
    source: SourceRequest | None = None
    source_id: str | None = None  # the agent's own evidence id, for the audit trail
    # (reason, detail) when the caller could not even read this citation's evidence (bad
    # base64, a malformed date, an unknown source_ref): refused like any invalid citation,
    # by index, so fail_closed=false still stores its valid neighbours.
    unreadable: tuple[str, str] | None = None


@dataclass(frozen=True)
class CitationError:
    """Why one citation of a request was refused, by its position in the request."""

    index: int
    reason: str  # unknown_evidence, disallowed_tool, quote_not_found, quote_too_long, …
    detail: str


@dataclass(frozen=True)
class Selector:
    """Where the quote is in the document's extracted text: a W3C Web Annotation
    TextQuoteSelector and TextPositionSelector in one."""

    exact: str
    prefix: str
    suffix: str
    start: int
    end: int

    def as_web_annotation(self) -> list[dict[str, str | int]]:
        return [
            {
                "type": "TextQuoteSelector",
                "exact": self.exact,
                "prefix": self.prefix,
                "suffix": self.suffix,
            },
            {"type": "TextPositionSelector", "start": self.start, "end": self.end},
        ]


@dataclass(frozen=True)
class Citation:
    """A stored citation: the passage memento that proves it, the cited document by hash
    (and memento, when kept), the quote's hash and selector, and how it was matched."""

    id: str
    tenant: str
    transcript_id: str
    passage: Memento
    document_memento_id: str | None
    document_hash: str
    document_size: int
    document_media_type: str
    document_uri_r: str
    document_captured_at: datetime
    document_facts: CaptureFacts
    quote_hash: str
    selector: Selector | None  # None once retention has tombstoned the text
    position: tuple[int, int]  # TextPositionSelector start and end: kept when the text is not
    extractor: str
    extractor_version: str
    normalisation: str
    match_method: str
    run_id: str | None
    source_ids: tuple[str, ...]
    created_at: datetime


@dataclass(frozen=True)
class CiteResult:
    """The citations stored for a request and those refused; ``created`` is False when
    the request was a replay of one already answered."""

    citations: list[Citation]
    errors: list[CitationError]
    created: bool


@dataclass(frozen=True)
class Evidence:
    """The document a citation rests on, read and checked."""

    uri: URIR
    content: bytes
    media_type: str
    captured_at: datetime
    facts: CaptureFacts
    document_hash: str
    memento: Memento | None  # the stored document memento, when cited by id


@dataclass(frozen=True)
class PlannedCitation:
    """A citation the desk accepted, with everything the ledger needs to store it."""

    index: int
    request: CitationRequest
    evidence: Evidence
    extracted: ExtractedText
    match: QuoteMatch
    passage_bytes: bytes


def citation_from_row(row: Row[Any] | RowView, passage: Memento) -> Citation:
    """A stored citation (a fetched row, or a row as just written) with its passage."""
    selector = None
    if row.selector_json is not None:
        quoted = json.loads(row.selector_json)
        selector = Selector(
            quoted["exact"],
            quoted["prefix"],
            quoted["suffix"],
            row.position_start,
            row.position_end,
        )
    return Citation(
        id=row.id,
        tenant=row.tenant,
        transcript_id=row.transcript_id,
        passage=passage,
        document_memento_id=row.document_memento_id,
        document_hash=row.document_hash,
        document_size=row.document_size,
        document_media_type=row.document_media_type,
        document_uri_r=row.document_uri_r,
        document_captured_at=row.document_captured_at,
        document_facts=CaptureFacts(
            tool=row.document_tool,
            final_url=row.document_final_url,
            http_status=row.document_http_status,
            headers=json.loads(row.document_headers_json),
        ),
        quote_hash=row.quote_hash,
        selector=selector,
        position=(row.position_start, row.position_end),
        extractor=row.extractor,
        extractor_version=row.extractor_version,
        normalisation=row.normalisation,
        match_method=row.match_method,
        run_id=row.run_id,
        source_ids=tuple(json.loads(row.source_ids_json)),
        created_at=row.created_at,
    )
