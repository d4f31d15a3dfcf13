"""Transcripts and citations: the path agents take at citation time, and auditors later."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.concurrency import run_in_threadpool

from api.auth import READERS, audit_read, require
from api.budget import BudgetedRoute
from api.deps import get_archive, get_urls, idempotency_key
from api.drift import DriftSummaryOut, SourceDriftOut, latest_by_citation, source_drift_by_citation
from api.models import ERROR_RESPONSES, TextMap, decode_content
from api.urls import Urls
from archive.access.keys import Principal, Role
from archive.archive import Archive
from archive.citations import (
    Citation,
    CitationRequest,
    CiteResult,
    QuoteRequest,
    SourceRequest,
    Transcript,
)
from archive.dates import parse_rfc3339, to_rfc3339
from archive.exceptions import InvalidInput
from archive.hashing import content_address
from archive.links import robust_link, text_fragment_url
from archive.retention.records import shown_deletion_reason
from archive.uri import WEB_SCHEMES

router = APIRouter(prefix="/api/v1/transcripts", tags=["citations"], route_class=BudgetedRoute)
writers = require(Role.AGENT)
readers = require(*READERS)
TranscriptId = Annotated[str, Path(max_length=128, description="Your id for the conversation.")]


class RetainUntil(BaseModel):
    model_config = ConfigDict(extra="forbid")
    retain_until: str = Field(max_length=40, description="RFC 3339")


class TranscriptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    retention: str | RetainUntil | None = Field(
        default=None,
        description="A policy name ('regulated', 'default'), an ISO 8601 duration "
        "('P7Y', counted from creation) or {retain_until}. Extending only.",
    )
    labels: TextMap = Field(default_factory=dict, description="Free-form: run id, agent, customer.")


class QuoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exact: str = Field(max_length=200_000)
    prefix: str | None = Field(default=None, max_length=1000)
    suffix: str | None = Field(default=None, max_length=1000)
    position: int | None = Field(default=None, ge=0, le=2**31)


class SourceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri_r: str = Field(max_length=8192)
    content: str | None = None
    content_base64: str | None = None
    content_type: str = Field(max_length=255)
    captured_at: str | None = Field(default=None, max_length=40)
    tool: str | None = Field(default=None, max_length=200)
    final_url: str | None = Field(default=None, max_length=8192)
    http_status: int | None = Field(default=None, ge=100, le=599)
    headers: TextMap = Field(default_factory=dict, max_length=100)

    @model_validator(mode="after")
    def _one_content(self) -> SourceIn:
        if (self.content is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of 'content' and 'content_base64'")
        return self


class CitationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    memento_id: str | None = Field(default=None, max_length=64)
    source: SourceIn | None = None
    source_ref: str | None = Field(
        default=None,
        max_length=200,
        description="Key into the request's `sources`: send a document once, cite it many times.",
    )
    source_id: str | None = Field(
        default=None, max_length=200, description="The agent's evidence id."
    )
    quote: QuoteIn


class CitationsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    citations: list[CitationIn] = Field(max_length=1000)
    sources: dict[str, SourceIn] = Field(
        default_factory=dict,
        max_length=100,
        description="Captured documents named once and cited by `source_ref`.",
    )
    fail_closed: bool | None = Field(default=None, description="Default from configuration (true).")
    run_id: str | None = Field(default=None, max_length=200)


class PassageDeletedOut(BaseModel):
    deleted_at: str
    reason: dict[str, Any] | str
    position: dict[str, int] = Field(description="TextPositionSelector start and end.")


class CitationOut(BaseModel):
    id: str
    uri_m: str = Field(description="The passage memento.")
    uri_r: str
    memento_datetime: str
    passage_hash: str
    document_hash: str
    document_uri_m: str | None = Field(description="Null unless the document was kept.")
    quote_hash: str
    selector: list[dict[str, Any]] | None = Field(
        description="Null once the passage was deleted (expired or erased): see passage_deleted."
    )
    passage_deleted: PassageDeletedOut | None = Field(
        default=None,
        description="Set when the passage memento is a tombstone: when, why (an erasure names "
        "its admin-log entry), and where the quote was (its text is gone).",
    )
    robust_link: str
    text_fragment_url: str | None
    extractor: str
    extractor_version: str
    normalisation: str
    match_method: Literal["exact", "normalised"] | str
    run_id: str | None
    source_ids: list[str]
    created_at: str
    drift: DriftSummaryOut | None = Field(
        default=None, description="The latest drift check of the live URI-R (transcript reads)."
    )
    source_drift: SourceDriftOut | None = Field(
        default=None, description="The cited host's drift rate, when known (new citations)."
    )


class CitationErrorOut(BaseModel):
    index: int
    reason: str
    detail: str


class CitationsOut(BaseModel):
    citations: list[CitationOut]
    errors: list[CitationErrorOut] = Field(default_factory=list)


class TranscriptOut(BaseModel):
    id: str
    created_at: str
    updated_at: str
    retention: str
    retain_until: str
    labels: dict[str, str]
    legal_hold: bool
    citations: list[CitationOut]


def _deleted(citation: Citation) -> dict[str, Any] | None:
    passage = citation.passage
    if passage.deleted_at is None:
        return None
    shown = shown_deletion_reason(passage.deletion_reason)
    try:
        reason: dict[str, Any] | str = json.loads(shown)
    except ValueError:
        reason = shown
    start, end = citation.position
    return {
        "deleted_at": to_rfc3339(passage.deleted_at),
        "reason": reason,
        "position": {"start": start, "end": end},
    }


def render_citation(citation: Citation, urls: Urls, attach_hashes: bool) -> dict[str, Any]:
    uri_m = urls.memento(citation.passage.id)
    selector = citation.selector
    extra = (
        {
            "data-amber-passage-hash": citation.passage.content_hash,
            "data-amber-quote-hash": citation.quote_hash,
        }
        if attach_hashes
        else None
    )
    return {
        "id": citation.id,
        "uri_m": uri_m,
        "uri_r": citation.document_uri_r,
        "memento_datetime": to_rfc3339(citation.passage.captured_at),
        "passage_hash": citation.passage.content_hash,
        "document_hash": citation.document_hash,
        "document_uri_m": urls.memento(citation.document_memento_id)
        if citation.document_memento_id
        else None,
        "quote_hash": citation.quote_hash,
        "selector": selector.as_web_annotation() if selector else None,
        "passage_deleted": _deleted(citation),
        "robust_link": robust_link(
            citation.document_uri_r, uri_m, citation.passage.captured_at, extra=extra
        ),
        "text_fragment_url": (
            text_fragment_url(
                citation.document_uri_r, selector.exact, selector.prefix, selector.suffix
            )
            if selector and citation.passage.uri_r.partition(":")[0].lower() in WEB_SCHEMES
            else None
        ),
        "extractor": citation.extractor,
        "extractor_version": citation.extractor_version,
        "normalisation": citation.normalisation,
        "match_method": citation.match_method,
        "run_id": citation.run_id,
        "source_ids": list(citation.source_ids),
        "created_at": to_rfc3339(citation.created_at),
    }


def _render_transcript(
    transcript: Transcript,
    cited: list[Citation],
    urls: Urls,
    attach: bool,
    drift: dict[str, Any] | None = None,
) -> dict[str, Any]:
    drift = drift or {}
    return {
        "id": transcript.id,
        "created_at": to_rfc3339(transcript.created_at),
        "updated_at": to_rfc3339(transcript.updated_at),
        "retention": transcript.retention,
        "retain_until": to_rfc3339(transcript.retain_until),
        "labels": dict(transcript.labels),
        "legal_hold": transcript.legal_hold,
        "citations": [
            {**render_citation(c, urls, attach), "drift": drift.get(c.id)} for c in cited
        ],
    }


@router.put(
    "/{transcript_id}",
    response_model=TranscriptOut,
    status_code=201,
    responses={
        200: {"model": TranscriptOut, "description": "Updated."},
        409: {"description": "Retention would be shortened."},
        **ERROR_RESPONSES,
    },
    summary="Create or update a transcript (retention only ever extends here)",
)
def put_transcript(
    transcript_id: TranscriptId,
    body: TranscriptIn,
    principal: Annotated[Principal, Depends(writers)],
    archive: Annotated[Archive, Depends(get_archive)],
    urls: Annotated[Urls, Depends(get_urls)],
) -> JSONResponse:
    retention = (
        body.retention.model_dump() if isinstance(body.retention, RetainUntil) else body.retention
    )
    written = archive.transcripts.put(principal.tenant, transcript_id, retention, body.labels)
    cited = archive.citations.for_transcript(principal.tenant, transcript_id)
    rendered = _render_transcript(
        written.transcript,
        cited,
        urls,
        archive.settings.citations.attach_snapshot_hash,
        latest_by_citation(archive, principal.tenant, cited, urls),
    )
    return JSONResponse(rendered, status_code=201 if written.created else 200)


@router.get(
    "/{transcript_id}",
    response_model=TranscriptOut,
    responses=ERROR_RESPONSES,
    summary="A transcript with everything it cites",
)
def get_transcript(
    transcript_id: TranscriptId,
    request: Request,
    principal: Annotated[Principal, Depends(readers)],
    archive: Annotated[Archive, Depends(get_archive)],
    urls: Annotated[Urls, Depends(get_urls)],
) -> dict[str, Any]:
    transcript = archive.transcripts.get(principal.tenant, transcript_id)
    audit_read(request, principal, "transcript.read", transcript.id)
    cited = archive.citations.for_transcript(principal.tenant, transcript_id)
    return _render_transcript(
        transcript,
        cited,
        urls,
        archive.settings.citations.attach_snapshot_hash,
        latest_by_citation(archive, principal.tenant, cited, urls),
    )


def _source_request(s: SourceIn) -> SourceRequest:
    return SourceRequest(
        uri_r=s.uri_r,
        content=decode_content(s.content, s.content_base64, "source.content"),
        content_type=s.content_type,
        captured_at=parse_rfc3339(s.captured_at) if s.captured_at is not None else None,
        tool=s.tool,
        final_url=s.final_url,
        http_status=s.http_status,
        headers=s.headers,
    )


def _citation_requests(body: CitationsIn) -> list[CitationRequest]:
    """The library's requests; evidence that cannot be read (bad base64, a malformed date,
    an unknown ``source_ref``) is marked on its citation, which is then refused by index."""
    shared: dict[str, SourceRequest | tuple[str, str]] = {}
    for ref, shared_source in body.sources.items():
        shared[ref] = _readable(shared_source, f"sources[{ref!r}]")
    requests = []
    for index, item in enumerate(body.citations):
        source: SourceRequest | tuple[str, str] | None = None
        if item.source_ref is not None:
            if item.source is not None or item.source_ref not in shared:
                source = (
                    "unknown_evidence",
                    f"citation {index}: source_ref must name one of "
                    "`sources` (and not be given with `source`)",
                )
            else:
                source = shared[item.source_ref]
        elif item.source is not None:
            source = _readable(item.source, "source")
        quote = QuoteRequest(
            item.quote.exact, item.quote.prefix, item.quote.suffix, item.quote.position
        )
        requests.append(
            CitationRequest(
                quote=quote,
                memento_id=item.memento_id,
                source_id=item.source_id,
                source=source if isinstance(source, SourceRequest) else None,
                unreadable=source if isinstance(source, tuple) else None,
            )
        )
    return requests


def _readable(source: SourceIn, where: str) -> SourceRequest | tuple[str, str]:
    try:
        return _source_request(source)
    except InvalidInput as error:
        return ("invalid_source", f"{where}: {error.message}")


@router.post(
    "/{transcript_id}/citations",
    response_model=CitationsOut,
    status_code=201,
    responses={
        409: {"description": "Idempotency-Key reused for another request."},
        **ERROR_RESPONSES,
    },
    summary="Cite passages of captured evidence (fail-closed by default)",
)
async def post_citations(
    transcript_id: TranscriptId,
    body: CitationsIn,
    request: Request,
    principal: Annotated[Principal, Depends(writers)],
    idempotency_key: Annotated[str | None, Depends(idempotency_key)],
) -> JSONResponse:
    """Each citation names its evidence (``memento_id`` of a stored document, the captured
    ``source`` inline, or ``source_ref`` into the request's ``sources``) and a ``quote``. 201 with one entry per citation in
    request order; 422 ``{"errors": [{index, reason, detail}]}`` when rejected, or 422
    ``extraction_limit`` (``detail.limit``: ``time``, ``memory``, ``pages`` or ``text``) when
    reading a document's text broke an extraction limit (nothing is stored)."""
    # The agents' hot route: archive and urls straight from app state, as the memento write
    # does (FastAPI re-inspects every dependency on every request).
    archive: Archive = request.app.state.archive
    urls: Urls = request.app.state.urls
    requests = _citation_requests(body)
    request_hash = content_address(await request.body()) if idempotency_key else None

    def cite() -> tuple[CiteResult, dict[str, Any]]:  # one trip to the thread pool, not two
        result = archive.citations.cite(
            principal.tenant,
            transcript_id,
            requests,
            fail_closed=body.fail_closed,
            run_id=body.run_id,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
        )
        return result, source_drift_by_citation(archive, principal.tenant, result.citations)

    result, rates = await run_in_threadpool(cite)
    attach = archive.settings.citations.attach_snapshot_hash
    return JSONResponse(
        {
            "citations": [
                {**render_citation(c, urls, attach), "source_drift": rates.get(c.id)}
                for c in result.citations
            ],
            "errors": [vars(e) for e in result.errors],
        },
        status_code=201 if result.created else 200,
    )
