"""The admins' pages: keys (list, create, revoke), legal holds with a reason, the admin log
and the read audit. Every form is a POST with the session's CSRF token, refused cross-site,
and acts through the same library calls as the admin API (holds are written to the admin
log there). Only a session of an admin key sees or uses these pages (else ``403``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Annotated

import anyio
from fastapi import APIRouter, Path, Query, Request, Response

from api.ui.render import PageRoute, page
from api.ui.signin import SignedIn, check_csrf, read_form, refuse_cross_site
from archive.access.keys import Role
from archive.access.sessions import Session
from archive.archive import Archive
from archive.citations.transcripts import check_transcript_id
from archive.dates import parse_rfc3339, utc_now
from archive.exceptions import Forbidden, InvalidInput
from archive.mementos import check_memento_id

router = APIRouter(prefix="/ui/admin", route_class=PageRoute, include_in_schema=False)
_ROLES = tuple(role.value for role in Role)


def _admin(session: Session) -> str:
    """The admin's tenant; refuses any other role."""
    if Role.ADMIN not in session.principal.roles:
        raise Forbidden("these pages are for admins")
    return session.principal.tenant


async def _form(request: Request, session: Session) -> dict[str, str]:
    refuse_cross_site(request)
    _admin(session)
    form = await read_form(request)
    check_csrf(session, form)
    return form


def _archive(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


@router.get("/")
def admin_home(
    request: Request,
    session: SignedIn,
    since: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    tenant = _admin(session)
    archive = _archive(request)
    start = parse_rfc3339(since) if since else utc_now() - timedelta(days=1)
    return page(
        request,
        "admin.html",
        keys=archive.keys.list(tenant),
        roles=_ROLES,
        log=archive.retention.admin_log(tenant, 100),
        reads=archive.read_audit.query(tenant, since=start, limit=200),
        since=start,
    )


@router.post("/keys")
async def create_key(request: Request, session: SignedIn) -> Response:
    form = await _form(request, session)
    role = form.get("role", "")
    if role not in _ROLES:
        raise InvalidInput(f"role is one of {', '.join(_ROLES)}")
    archive = _archive(request)
    issued = await anyio.to_thread.run_sync(
        archive.keys.create, session.principal.tenant, role, form.get("name") or None
    )
    # Shown once, as the API does; the page is not cached (Cache-Control: no-store).
    return page(request, "admin_key.html", issued=issued)


@router.post("/keys/{key_id}/revoke")
async def revoke_key(
    request: Request,
    session: SignedIn,
    key_id: Annotated[str, Path(pattern="^[0-9a-f]{12}$")],
) -> Response:
    await _form(request, session)
    archive = _archive(request)
    await anyio.to_thread.run_sync(
        lambda: archive.keys.revoke(key_id, tenant=session.principal.tenant)
    )
    return Response(status_code=303, headers={"Location": "/ui/admin/"})


@router.post("/holds")
async def legal_hold(request: Request, session: SignedIn) -> Response:
    form = await _form(request, session)
    kind, target = form.get("kind", ""), form.get("target", "").strip()
    reason = form.get("reason", "").strip()
    on = form.get("on") == "true"
    if not reason or len(reason) > 2000:
        raise InvalidInput("a legal hold needs a reason (at most 2000 characters)")
    archive = _archive(request)
    tenant, actor = session.principal.tenant, session.principal.key_id
    set_hold: Callable[[str, str, bool, str, str], None]
    if kind == "transcript":
        check_transcript_id(target)
        set_hold = archive.retention.set_transcript_hold
    elif kind == "memento":
        check_memento_id(target)
        set_hold = archive.retention.set_memento_hold
    else:
        raise InvalidInput("kind is 'transcript' or 'memento'")
    await anyio.to_thread.run_sync(lambda: set_hold(tenant, target, on, reason, actor))
    return Response(status_code=303, headers={"Location": "/ui/admin/"})
