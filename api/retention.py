"""Admin retention actions: legal holds, retention changes, erasure, and their log."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from api.auth import require
from api.budget import BudgetedRoute
from api.deps import get_archive
from api.models import ERROR_RESPONSES
from api.transcripts import RetainUntil
from archive.access.keys import Principal, Role
from archive.archive import Archive
from archive.citations import check_transcript_id
from archive.dates import to_rfc3339
from archive.mementos import check_memento_id

router = APIRouter(prefix="/api/v1", tags=["retention"], route_class=BudgetedRoute)
admin_only = require(Role.ADMIN)
RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {"description": "Refused: legal hold, or the store's Object Lock mode."},
    **ERROR_RESPONSES,
}


class HoldIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    on: bool
    reason: str = Field(min_length=1, max_length=2000)


class RetentionChangeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    retention: str | RetainUntil
    reason: str = Field(min_length=1, max_length=2000)


class ReasonIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000)


class AdminLogOut(BaseModel):
    id: str
    key_id: str
    action: str
    target_kind: str
    target_id: str
    reason: str
    detail: dict[str, Any]
    at: str


@router.put(
    "/transcripts/{transcript_id}/legal-hold",
    responses=RESPONSES,
    summary="Place or release a legal hold on a transcript (suspends expiry)",
)
def transcript_hold(
    transcript_id: Annotated[str, Path(max_length=128)],
    body: HoldIn,
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, Any]:
    check_transcript_id(transcript_id)
    archive.retention.set_transcript_hold(
        principal.tenant, transcript_id, body.on, body.reason, principal.key_id
    )
    return {"transcript_id": transcript_id, "legal_hold": body.on}


@router.put(
    "/mementos/{memento_id}/legal-hold",
    responses=RESPONSES,
    summary="Place or release a legal hold on one memento",
)
def memento_hold(
    memento_id: Annotated[str, Path(max_length=64)],
    body: HoldIn,
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, Any]:
    check_memento_id(memento_id)
    archive.retention.set_memento_hold(
        principal.tenant, memento_id, body.on, body.reason, principal.key_id
    )
    return {"memento_id": memento_id, "legal_hold": body.on}


@router.put(
    "/transcripts/{transcript_id}/retention",
    responses=RESPONSES,
    summary="Change a transcript's retention, shortening included (admin, with a reason)",
)
def change_retention(
    transcript_id: Annotated[str, Path(max_length=128)],
    body: RetentionChangeIn,
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, Any]:
    check_transcript_id(transcript_id)
    retention = (
        body.retention.model_dump() if isinstance(body.retention, RetainUntil) else body.retention
    )
    until = archive.retention.change_retention(
        principal.tenant, transcript_id, retention, body.reason, principal.key_id
    )
    return {"transcript_id": transcript_id, "retain_until": to_rfc3339(until)}


@router.post(
    "/mementos/{memento_id}/erase",
    responses=RESPONSES,
    summary="Erase evidence now (takedown, court order, data-protection request)",
)
async def erase(
    memento_id: Annotated[str, Path(max_length=64)],
    body: ReasonIn,
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, Any]:
    check_memento_id(memento_id)
    erasure = await run_in_threadpool(
        archive.retention.erase, principal.tenant, memento_id, body.reason, principal.key_id
    )
    return erasure.as_json()


@router.get(
    "/admin/log",
    response_model=list[AdminLogOut],
    responses=ERROR_RESPONSES,
    summary="The append-only admin log: holds, retention changes, erasures",
)
def get_admin_log(
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    return archive.retention.admin_log(principal.tenant, limit)
