"""GET /api/v1/transcripts/{id}/export: a transcript's audit bundle (WACZ), for auditors."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.auth import audit_read, require
from api.budget import BudgetedRoute
from api.deps import get_archive
from api.models import ERROR_RESPONSES
from archive.access.keys import Principal, Role
from archive.archive import Archive
from archive.bundles.export import export_bundle

router = APIRouter(prefix="/api/v1/transcripts", tags=["citations"], route_class=BudgetedRoute)
auditors = require(Role.AUDITOR, Role.ADMIN)


@router.get(
    "/{transcript_id}/export",
    responses={**ERROR_RESPONSES, 200: {"content": {"application/wacz": {}}}},
    response_class=StreamingResponse,
    summary="The transcript's evidence as a signed WACZ audit bundle (verifies offline)",
)
async def export_transcript(
    transcript_id: Annotated[str, Path(max_length=128)],
    request: Request,
    principal: Annotated[Principal, Depends(auditors)],
    archive: Annotated[Archive, Depends(get_archive)],
    consistent_to: Annotated[
        int | None,
        Query(
            ge=1,
            le=2**53,
            description="Also carry the signed checkpoint of this tree size and the "
            "consistency proof to it from the bundle's own (400 if smaller, 404 if unsigned).",
        ),
    ] = None,
) -> StreamingResponse:
    bundle = await run_in_threadpool(
        partial(export_bundle, consistent_to=consistent_to),
        archive,
        principal.tenant,
        transcript_id,
    )
    # Streamed from its spooled file, which the last chunk (or a disconnect) closes.
    audit_read(request, principal, "transcript.export", transcript_id)
    for memento_id in bundle.mementos:  # the bundle hands out every memento's bytes
        audit_read(request, principal, "memento.export", memento_id)
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in transcript_id)
    return StreamingResponse(
        bundle.chunks(),
        media_type="application/wacz",
        headers={
            "Content-Disposition": f'attachment; filename="{name}.wacz"',
            "Content-Length": str(bundle.size),
        },
    )
