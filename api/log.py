"""The evidence log over HTTP: checkpoints, tlog-tiles hash tiles and consistency proofs
(public: they hold hashes only), and proof documents (same roles and tenant as reading the
record they prove)."""

from __future__ import annotations

import base64
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from api.auth import READERS, audit_read, require
from api.deps import get_archive
from api.models import ERROR_RESPONSES
from archive.access.keys import Principal
from archive.archive import Archive
from archive.exceptions import InvalidInput, NotFound
from archive.log.statements import CITATION, MEMENTO

router = APIRouter(tags=["evidence log"])
readers = require(*READERS)
Id = Annotated[str, Path(pattern="^[0-9a-f]{32}$", description="A memento's or citation's id.")]
# tlog-tiles: N as 3-digit path elements, all but the last prefixed "x"; ".p/W" when partial.
_TILE = re.compile(
    r"(?P<level>[0-9]{1,2})/(?P<n>(?:x[0-9]{3}/)*[0-9]{3})(?:\.p/(?P<w>[0-9]{1,3}))?"
)
NOTE_TYPE = "text/plain; charset=utf-8"
# Tiles and checkpoints change: a checkpoint at once, a partial tile when it fills.
FULL_TILE_CACHE = "public, max-age=31536000, immutable"


def start_evidence_log(archive: Archive) -> None:
    """Run the log's integration and signing in this process (every server process does)."""
    if archive.index.log is not None:
        archive.evidence_log().start()


# Public, hashes only; documented with their real media types and the 404s they give before
# the first checkpoint or for a tile outside the tree (schemathesis holds them to it).
@router.get(
    "/log/checkpoint",
    response_class=Response,
    responses={
        200: {"description": "The signed note.", "content": {"text/plain": {}}},
        404: ERROR_RESPONSES[404],
    },
    summary="The latest signed checkpoint (C2SP tlog-checkpoint)",
)
def checkpoint(archive: Annotated[Archive, Depends(get_archive)]) -> Response:
    latest = archive.evidence_log().latest()
    if latest is None:
        raise NotFound("no checkpoint has been signed yet")
    return Response(latest.note, media_type=NOTE_TYPE, headers={"Cache-Control": "no-store"})


@router.get(
    "/log/tile/{tile:path}",
    response_class=Response,
    responses={
        200: {"description": "The tile's hashes.", "content": {"application/octet-stream": {}}},
        404: ERROR_RESPONSES[404],
    },
    summary="A hash tile (C2SP tlog-tiles)",
)
def tile(tile: str, archive: Annotated[Archive, Depends(get_archive)]) -> Response:
    match = _TILE.fullmatch(tile)
    if match is None:
        raise NotFound("no such tile (entry tiles are not published: statements are tenant data)")
    width = int(match["w"]) if match["w"] else 256
    if (match["w"] is not None and not 1 <= width <= 255) or str(width) != (match["w"] or "256"):
        raise NotFound("a partial tile's width is 1 to 255, without leading zeros")
    index = int("".join(part.lstrip("x") for part in match["n"].split("/")))
    data = archive.evidence_log().tile(int(match["level"]), index, width)
    cache = FULL_TILE_CACHE if width == 256 else "no-cache"
    return Response(data, media_type="application/octet-stream", headers={"Cache-Control": cache})


@router.get(
    "/log/consistency/{old}/{new}",
    summary="An RFC 9162 §2.1.4 consistency proof between two tree sizes",
    responses=ERROR_RESPONSES,
)
def consistency(
    old: Annotated[int, Path(ge=0, le=2**53)],
    new: Annotated[int, Path(ge=0, le=2**53)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, Any]:
    if old > new:
        raise InvalidInput("old must not be larger than new")
    proof = archive.evidence_log().consistency(old, new)
    return {
        "old_size": old,
        "new_size": new,
        "proof": [base64.b64encode(h).decode() for h in proof],
    }


async def _proof_document(
    kind: str, subject: str, request: Request, principal: Principal, archive: Archive
) -> dict[str, Any]:
    """The proof document of a memento or citation in the caller's tenant, read-audited."""
    found = await run_in_threadpool(archive.evidence_log().proof, kind, subject, principal.tenant)
    audit_read(request, principal, f"{kind}.proof", subject)
    return found


@router.get(
    "/api/v1/mementos/{memento_id}/proof",
    responses=ERROR_RESPONSES,
    summary="Offline-verifiable proof that this memento was logged",
)
async def memento_proof(
    memento_id: Id,
    request: Request,
    principal: Annotated[Principal, Depends(readers)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, Any]:
    return await _proof_document(MEMENTO, memento_id, request, principal, archive)


@router.get(
    "/api/v1/citations/{citation_id}/proof",
    responses=ERROR_RESPONSES,
    summary="Offline-verifiable proof that this citation was logged",
)
async def citation_proof(
    citation_id: Id,
    request: Request,
    principal: Annotated[Principal, Depends(readers)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, Any]:
    return await _proof_document(CITATION, citation_id, request, principal, archive)
