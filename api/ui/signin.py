"""Signing in and out of the pages, and who a page is shown to.

``POST /ui/login`` exchanges an API key for a session (:mod:`archive.access.sessions`): the
browser gets only the session's random id, in a cookie that is ``HttpOnly; SameSite=Lax;
Path=/`` (and ``Secure`` when the public base URL is https). The key is never echoed back,
logged or put in a URL; a refused key is not told apart from a malformed one.

Every state-changing form carries a CSRF token and is refused without it: the sign-in form a
double-submit token (a random cookie and the same value in the form), forms behind a session
its synchronizer token. Any POST whose ``Origin`` or ``Sec-Fetch-Site`` says it came from
another site is refused too, so signing in cannot be forced cross-site (login CSRF).
Sign-in attempts are rate-limited per client address.
"""

from __future__ import annotations

import hmac
import secrets
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import parse_qs, urlsplit

import anyio
from fastapi import APIRouter, Depends, Request, Response

from api.auth import NO_AUTH_PRINCIPAL, READERS, Gatekeeper
from api.browser import SESSION_COOKIE, cookie_value, safe_next
from api.ui.render import PageRoute, page
from archive.access.ratelimit import RateLimiter
from archive.access.sessions import Session, csrf_token_for
from archive.archive import Archive
from archive.exceptions import AmberError, Forbidden, InvalidInput, Unauthenticated

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)
LOGIN_CSRF_COOKIE = "amber_login_csrf"
MAX_FORM_BYTES = 16 * 1024
_READERS = frozenset(READERS)
# Without authentication (amber serve --insecure-no-auth, loopback only) there is no session;
# forms still carry a token, this process's own.
_NO_AUTH_CSRF = csrf_token_for(secrets.token_urlsafe(32))


async def signed_in(request: Request) -> Session:
    """The session a page is shown to (raises Unauthenticated: the page route then sends
    the browser to sign in and come back)."""
    gatekeeper: Gatekeeper = request.app.state.gatekeeper
    if not gatekeeper.enabled:
        session = Session(NO_AUTH_PRINCIPAL, datetime.max.replace(tzinfo=UTC), _NO_AUTH_CSRF)
    else:
        session_id = cookie_value(request.headers.get("cookie"), SESSION_COOKIE)
        session = await gatekeeper.authorize_session(session_id, _READERS)
    request.state.ui_session = session
    return session


SignedIn = Annotated[Session, Depends(signed_in)]


def _secure(request: Request) -> bool:
    base: str = request.app.state.urls.base
    return base.startswith("https://")


def refuse_cross_site(request: Request) -> None:
    """Refuse a form sent from another site: its ``Origin`` is not this server's, or the
    browser says the request is cross-site."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        raise Forbidden("this form must be sent from Amber's own pages")
    origin = request.headers.get("origin")
    if origin is None:
        return
    own = {_origin_of(request.app.state.urls.base)}
    host = request.headers.get("host")
    if host:
        own.add(f"{request.url.scheme}://{host}".lower())
    if origin.lower() not in own:
        raise Forbidden("this form must be sent from Amber's own pages")


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


async def read_form(request: Request) -> dict[str, str]:
    """A small url-encoded form: each field's first value (413 past MAX_FORM_BYTES)."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        raise InvalidInput("send the form as application/x-www-form-urlencoded")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InvalidInput("the form is too large")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise InvalidInput("the form could not be read") from None
    return {name: values[0] for name, values in fields.items()}


def check_csrf(session: Session, form: dict[str, str]) -> None:
    if not hmac.compare_digest(form.get("csrf", "").encode(), session.csrf_token.encode()):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page and retry")


@router.get("/login")
async def login_form(request: Request, next: str | None = None) -> Response:
    gatekeeper: Gatekeeper = request.app.state.gatekeeper
    target = safe_next(next)
    session_id = cookie_value(request.headers.get("cookie"), SESSION_COOKIE)
    if session_id is not None or not gatekeeper.enabled:
        try:
            await signed_in(request)
        except AmberError:
            request.state.ui_session = None
        else:
            return Response(status_code=303, headers={"Location": target})
    return _login_page(request, target)


def _login_page(request: Request, target: str, *, status: int = 200, error: str = "") -> Response:
    token = secrets.token_urlsafe(32)
    response = page(
        request, "login.html", status=status, csrf=token, next=target, error=error, signed_in=None
    )
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        token,
        path="/ui/login",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    refuse_cross_site(request)
    limiter: RateLimiter = request.app.state.login_limiter
    limiter.take(request.client.host if request.client else "unknown")
    form = await read_form(request)
    target = safe_next(form.get("next"))
    expected = cookie_value(request.headers.get("cookie"), LOGIN_CSRF_COOKIE) or ""
    presented = form.get("csrf", "")
    if not expected or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise Forbidden("the sign-in form's CSRF token is missing or wrong: reload the page")
    archive: Archive = request.app.state.archive
    try:
        principal = await archive.keys.verify_async(form.get("key", "").strip())
    except Unauthenticated:
        return _login_page(request, target, status=401, error="That key was not accepted.")
    session_id, session = await anyio.to_thread.run_sync(archive.sessions.start, principal)
    response = Response(status_code=303, headers={"Location": target, "Cache-Control": "no-store"})
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=int((session.expires_at - datetime.now(UTC)).total_seconds()),
        path="/",
        httponly=True,
        samesite="lax",
        secure=_secure(request),
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/ui/login")
    return response


@router.post("/logout")
async def logout(request: Request, session: SignedIn) -> Response:
    refuse_cross_site(request)
    check_csrf(session, await read_form(request))
    archive: Archive = request.app.state.archive
    session_id = cookie_value(request.headers.get("cookie"), SESSION_COOKIE)
    await anyio.to_thread.run_sync(archive.sessions.end, session_id)
    response = Response(
        status_code=303, headers={"Location": "/ui/login", "Cache-Control": "no-store"}
    )
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
    return response
