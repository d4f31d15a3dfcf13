"""What a browser brings that API clients do not: a session cookie instead of a Bearer key,
and an ``Accept`` header that prefers HTML.

Shared by the fast URI-M, TimeGate and TimeMap routes (:mod:`api.fastpath`,
:mod:`api.navfast`) and the pages (:mod:`api.ui`): a browser signed in at ``/ui/login``
opens a URI-M by clicking it; one that is not is sent to sign in (``303``) and brought back.
Every other client without credentials still gets the JSON ``401``.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Response
from fastapi.responses import JSONResponse
from starlette import types as asgi

from api.errors import amber_error_response
from archive.exceptions import AmberError, Unauthenticated

SESSION_COOKIE = "amber_session"
LOGIN_PATH = "/ui/login"
HOME_PATH = "/ui/"
_MAX_NEXT = 4096


def cookie_value(cookie_header: str | None, name: str) -> str | None:
    """One cookie's value from a ``Cookie`` header, or None. By hand: the standard library's
    parser gives up on the whole header at the first cookie it dislikes."""
    if not cookie_header:
        return None
    for part in cookie_header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value.strip().strip('"') or None
    return None


def header(scope: asgi.Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            decoded: str = value.decode("latin-1")
            return decoded
    return None


def session_id_of(scope: asgi.Scope) -> str | None:
    """The session id a request's cookie carries, if any."""
    return cookie_value(header(scope, b"cookie"), SESSION_COOKIE)


def prefers_html(accept: str | None) -> bool:
    """Whether ``text/html`` is among the most preferred types of an ``Accept`` header, as a
    browser's navigation asks (``text/html,…,*/*;q=0.8``); ``*/*`` alone is not a browser."""
    if not accept:
        return False
    best = 0.0
    html = 0.0
    for item in accept.split(","):
        media, *params = (piece.strip() for piece in item.split(";"))
        weight = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        best = max(best, weight)
        if media.lower() in ("text/html", "application/xhtml+xml"):
            html = max(html, weight)
    return html > 0 and html >= best


def safe_next(candidate: str | None) -> str:
    """Where to go after signing in: ``candidate`` when it is a path on this server, else
    the home page. Refuses everything a browser could read as another origin: ``//host``,
    ``/\\host``, schemes, and control characters or spaces a browser strips."""
    if not candidate or len(candidate) > _MAX_NEXT:
        return HOME_PATH
    if not candidate.startswith("/") or candidate.startswith(("//", "/\\")):
        return HOME_PATH
    if any(ord(c) <= 0x20 or ord(c) == 0x7F or c == "\\" for c in candidate):
        return HOME_PATH
    return candidate


def requested_path(scope: asgi.Scope) -> str:
    """The path and query a request asked for, as sent (for coming back after sign-in)."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    path = raw.decode("utf-8", "replace")
    query: bytes = scope.get("query_string", b"")
    return path + ("?" + query.decode("utf-8", "replace") if query else "")


def sign_in_location(next_path: str) -> str:
    return f"{LOGIN_PATH}?next={quote(safe_next(next_path), safe='')}"


def error_or_sign_in(error: AmberError, scope: asgi.Scope) -> Response:
    """The answer to a refused request: a browser that sent no key and holds no live
    session is sent to sign in and come back; everyone else gets the JSON error."""
    method: str = scope["method"]
    path: str = scope["path"]
    if (
        isinstance(error, Unauthenticated)
        and header(scope, b"authorization") is None
        and prefers_html(header(scope, b"accept"))
    ):
        return Response(
            status_code=303,
            headers={
                "Location": sign_in_location(requested_path(scope)),
                "Cache-Control": "no-store",
            },
        )
    response: JSONResponse = amber_error_response(error, method, path)
    return response
