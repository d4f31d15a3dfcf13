"""Admin routes: API keys of the admin's own tenant, and the read audit."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from api.auth import require
from api.budget import BudgetedRoute
from api.deps import get_archive
from api.models import ERROR_RESPONSES
from archive.access.keys import KeyInfo, Principal, Role
from archive.archive import Archive
from archive.dates import parse_rfc3339, to_rfc3339

router = APIRouter(prefix="/api/v1", tags=["admin"], route_class=BudgetedRoute)
admin_only = require(Role.ADMIN)


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["agent", "auditor", "admin"]
    name: str | None = Field(default=None, max_length=200)


class KeyOut(BaseModel):
    key_id: str
    tenant: str
    role: str
    name: str | None
    created_at: str
    revoked_at: str | None


class IssuedKeyOut(KeyOut):
    key: str = Field(description="The secret key. Shown once; store it now.")


class ReadRecordOut(BaseModel):
    id: str
    key_id: str
    role: str
    action: str
    target: str
    at: str


def _key_out(info: KeyInfo) -> dict[str, object]:
    return {
        "key_id": info.key_id,
        "tenant": info.tenant,
        "role": info.role.value,
        "name": info.name,
        "created_at": to_rfc3339(info.created_at),
        "revoked_at": to_rfc3339(info.revoked_at) if info.revoked_at else None,
    }


@router.post(
    "/keys",
    status_code=201,
    response_model=IssuedKeyOut,
    responses=ERROR_RESPONSES,
    summary="Create an API key in the admin's tenant",
)
def create_key(
    body: KeyIn,
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> JSONResponse:
    issued = archive.keys.create(principal.tenant, body.role, body.name)
    return JSONResponse(
        {**_key_out(issued.info), "key": issued.key},
        status_code=201,
        headers={"Cache-Control": "no-store"},
    )


@router.get(
    "/keys",
    response_model=list[KeyOut],
    responses=ERROR_RESPONSES,
    summary="List the tenant's API keys (never the secrets)",
)
def list_keys(
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> list[dict[str, object]]:
    return [_key_out(k) for k in archive.keys.list(principal.tenant)]


@router.delete(
    "/keys/{key_id}",
    response_model=KeyOut,
    responses=ERROR_RESPONSES,
    summary="Revoke an API key (effective immediately)",
)
def revoke_key(
    key_id: Annotated[str, Path(max_length=64)],
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
) -> dict[str, object]:
    return _key_out(archive.keys.revoke(key_id, tenant=principal.tenant))


@router.get(
    "/audit/reads",
    response_model=list[ReadRecordOut],
    responses=ERROR_RESPONSES,
    summary="Who resolved what, when (auditors and admins are recorded)",
)
def read_audit(
    principal: Annotated[Principal, Depends(admin_only)],
    archive: Annotated[Archive, Depends(get_archive)],
    since: Annotated[str | None, Query(max_length=40, description="RFC 3339")] = None,
    key_id: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, str]]:
    start: datetime | None = parse_rfc3339(since) if since is not None else None
    records = archive.read_audit.query(principal.tenant, since=start, limit=limit, key_id=key_id)
    return [
        {
            "id": r.id,
            "key_id": r.key_id,
            "role": r.role,
            "action": r.action,
            "target": r.target,
            "at": to_rfc3339(r.at),
        }
        for r in records
    ]
