"""Drift routes: check history per citation, drift rates per source host, review flags."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from api.auth import READERS, audit_read, require
from api.budget import BudgetedRoute
from api.deps import get_archive, get_urls
from api.models import ERROR_RESPONSES
from api.urls import Urls
from archive.access.keys import Principal, Role
from archive.archive import Archive
from archive.citations import Citation
from archive.dates import to_rfc3339
from archive.drift import CheckRecord, Review, SourceRate, host_of

router = APIRouter(tags=["drift"], route_class=BudgetedRoute)
readers = require(*READERS)
reviewers = require(Role.AUDITOR, Role.ADMIN)

VerdictName = Literal[
    "identical", "cosmetic", "material", "reversal", "gone", "soft_404", "unreachable"
]
TranscriptId = Annotated[str, Path(max_length=128, description="Your id for the conversation.")]


class FoundOut(BaseModel):
    start: int = Field(description="Code points into the live extracted text.")
    end: int
    method: str = Field(description="exact, normalised or fuzzy")
    score: float | None


class TimingsOut(BaseModel):
    fetch: int | None
    extract: int | None
    classify: int | None


class DriftCheckOut(BaseModel):
    id: str
    citation_id: str
    transcript_id: str
    memento_id: str = Field(description="The cited passage memento.")
    uri_r: str
    host: str
    verdict: VerdictName
    redirected_to: str | None = Field(description="Final URL when it differs from the URI-R.")
    http_status: int | None
    checked_at: str
    error: str | None = Field(description="Why the fetch failed (unreachable only).")
    timings_ms: TimingsOut
    extractor: str | None
    extractor_version: str | None
    rules_version: str
    live_hash: str | None
    found: FoundOut | None = Field(description="Where the passage (or its closest match) is now.")
    reasons: list[str]
    diff: Any = Field(default=None, description="Old vs new wording of the cited passage.")
    new_passage_memento_id: str | None
    new_passage_uri_m: str | None = Field(description="What the page now says in its place.")
    live_document_memento_id: str | None
    flagged_for_review: bool


class CitationDriftOut(BaseModel):
    citation_id: str
    transcript_id: str
    memento_id: str
    uri_r: str
    latest: DriftCheckOut | None
    checks: list[DriftCheckOut] = Field(description="Newest first.")


class DriftSummaryOut(BaseModel):
    """A citation's latest drift check, in transcript and citation renderings."""

    verdict: VerdictName
    checked_at: str
    redirected_to: str | None
    http_status: int | None
    new_passage_uri_m: str | None


class SourceDriftOut(BaseModel):
    host: str
    window_days: int
    citations_checked: int = Field(description="Citations with a conclusive check in the window.")
    eroded: int = Field(
        description="… whose latest verdict is material, reversal, gone or soft_404."
    )
    rate: float = Field(ge=0, le=1)
    verdicts: dict[str, int]


class DriftSourcesOut(BaseModel):
    window_days: int
    sources: list[SourceDriftOut]


class ReviewOut(BaseModel):
    transcript_id: str
    needs_review: bool
    reasons: list[dict[str, Any]] = Field(description="The checks that asked for review.")
    flagged_at: str | None
    cleared_by: str | None = Field(description="Key id of who cleared it.")
    cleared_note: str | None
    cleared_at: str | None


class TranscriptListItemOut(BaseModel):
    id: str
    created_at: str
    retain_until: str
    legal_hold: bool
    labels: dict[str, str]
    review: ReviewOut


class ReviewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str = Field(min_length=1, max_length=2000, description="What the reviewer concluded.")


# -- rendering ----------------------------------------------------------------------------


def _optional_time(value: datetime | None) -> str | None:
    return to_rfc3339(value) if value is not None else None


def render_check(check: CheckRecord, urls: Urls) -> dict[str, Any]:
    body = check.as_json()
    body["diff"] = check.diff
    body["new_passage_uri_m"] = (
        urls.memento(check.new_passage_memento_id) if check.new_passage_memento_id else None
    )
    return body


def render_summary(check: CheckRecord | None, urls: Urls) -> dict[str, Any] | None:
    if check is None:
        return None
    return {
        "verdict": check.verdict,
        "checked_at": to_rfc3339(check.checked_at),
        "redirected_to": check.redirected_to,
        "http_status": check.http_status,
        "new_passage_uri_m": (
            urls.memento(check.new_passage_memento_id) if check.new_passage_memento_id else None
        ),
    }


def render_rate(rate: SourceRate | None, window_days: int) -> dict[str, Any] | None:
    if rate is None:
        return None
    return {
        "host": rate.host,
        "window_days": window_days,
        "citations_checked": rate.checked,
        "eroded": rate.eroded,
        "rate": round(rate.rate, 4),
        "verdicts": rate.verdicts,
    }


def render_review(review: Review) -> dict[str, Any]:
    return {
        "transcript_id": review.transcript_id,
        "needs_review": review.needs_review,
        "reasons": review.reasons,
        "flagged_at": _optional_time(review.flagged_at),
        "cleared_by": review.cleared_by,
        "cleared_note": review.cleared_note,
        "cleared_at": _optional_time(review.cleared_at),
    }


# -- routes -------------------------------------------------------------------------------


@router.get(
    "/api/v1/citations/{citation_id}/drift",
    response_model=CitationDriftOut,
    responses=ERROR_RESPONSES,
    summary="A citation's drift checks and latest verdict",
)
def citation_drift(
    citation_id: Annotated[str, Path(pattern="^[0-9a-f]{32}$", description="A citation's id.")],
    request: Request,
    principal: Annotated[Principal, Depends(readers)],
    archive: Annotated[Archive, Depends(get_archive)],
    urls: Annotated[Urls, Depends(get_urls)],
    limit: Annotated[int, Query(ge=1, le=1000, description="Most recent checks to list.")] = 100,
) -> dict[str, Any]:
    found = archive.drift.history(principal.tenant, citation_id, limit=limit)
    audit_read(request, principal, "citation.drift", citation_id)
    checks = [render_check(c, urls) for c in found.checks]
    return {
        "citation_id": found.citation_id,
        "transcript_id": found.transcript_id,
        "memento_id": found.memento_id,
        "uri_r": found.uri_r,
        "latest": checks[0] if checks else None,
        "checks": checks,
    }


@router.get(
    "/api/v1/drift/sources",
    response_model=DriftSourcesOut,
    responses=ERROR_RESPONSES,
    summary="Drift rates per source host over a window",
)
def drift_sources(
    request: Request,
    principal: Annotated[Principal, Depends(readers)],
    archive: Annotated[Archive, Depends(get_archive)],
    window_days: Annotated[
        int | None, Query(ge=1, le=3650, description="Default from [drift] window_days.")
    ] = None,
) -> dict[str, Any]:
    window = window_days or archive.settings.drift.window_days
    rates = archive.drift.source_rates(principal.tenant, window_days=window)
    audit_read(request, principal, "drift.sources", f"window_days={window}")
    return {"window_days": window, "sources": [render_rate(r, window) for r in rates]}


@router.get(
    "/api/v1/transcripts",
    response_model=list[TranscriptListItemOut],
    responses=ERROR_RESPONSES,
    summary="List transcripts, e.g. those that need review",
)
def list_transcripts(
    request: Request,
    principal: Annotated[Principal, Depends(readers)],
    archive: Annotated[Archive, Depends(get_archive)],
    needs_review: Annotated[
        bool | None, Query(description="Only flagged (true) or unflagged (false).")
    ] = None,
    after: Annotated[
        str | None,
        Query(
            max_length=128,
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$",
            description="Paging: ids after this one.",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    found = archive.drift.transcripts(
        principal.tenant, needs_review=needs_review, after=after, limit=limit
    )
    query = {"needs_review": needs_review, "after": after, "limit": limit}
    audit_read(
        request,
        principal,
        "transcripts.list",
        urlencode({name: value for name, value in query.items() if value is not None}),
    )
    return [
        {
            "id": t.id,
            "created_at": to_rfc3339(t.created_at),
            "retain_until": to_rfc3339(t.retain_until),
            "legal_hold": t.legal_hold,
            "labels": dict(t.labels),
            "review": render_review(review),
        }
        for t, review in found
    ]


@router.post(
    "/api/v1/transcripts/{transcript_id}/review",
    response_model=ReviewOut,
    responses=ERROR_RESPONSES,
    summary="Clear a transcript's needs_review flag with a note (auditor or admin)",
)
def clear_review(
    transcript_id: TranscriptId,
    body: ReviewIn,
    principal: Annotated[Principal, Depends(reviewers)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, Any]:
    review = archive.drift.clear_review(
        principal.tenant, transcript_id, principal.key_id, body.note
    )
    return render_review(review)


# -- used by the transcript routes ---------------------------------------------------------


def latest_by_citation(
    archive: Archive, tenant: str, cited: Sequence[Citation], urls: Urls
) -> dict[str, Any]:
    """``{citation id: DriftSummaryOut}`` for the citations that have been checked."""
    latest = archive.drift.latest(tenant, [c.id for c in cited])
    return {cid: render_summary(check, urls) for cid, check in latest.items()}


def source_drift_by_citation(
    archive: Archive, tenant: str, cited: Sequence[Citation]
) -> dict[str, Any]:
    """``{citation id: SourceDriftOut}`` for citations of web hosts with a known drift rate."""
    window = archive.settings.drift.window_days
    rates: dict[str, dict[str, Any] | None] = {}
    found: dict[str, dict[str, Any]] = {}
    for citation in cited:
        key = citation.passage.urir_key
        if not key.startswith(("http://", "https://")):
            continue
        host = host_of(key)
        if host not in rates:
            rates[host] = render_rate(archive.drift.host_rate(tenant, host), window)
        rate = rates[host]
        if rate is not None:
            found[citation.id] = rate
    return found
