"""Rendering the auditors' pages: Jinja2 with autoescape on, and the headers every page
carries (a strict Content-Security-Policy: only Amber's own style and script, frames only
from Amber, no inline anything; no framing of the pages; no caching of what a session saw).

Errors on a page are pages too (:class:`PageRoute`): a missing or ended session is sent to
sign in and brought back, anything else refused is an HTML page with the same status the
API would answer, and never a 500 for bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from api.browser import requested_path, sign_in_location
from api.errors import status_for
from archive.exceptions import AmberError, RateLimited, Unauthenticated

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
    "frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def utc_iso(moment: datetime | None) -> str:
    """A date as people read it here: UTC, ISO 8601, to the second."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(["html"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_environment.filters["utc"] = utc_iso
# Only http(s) URLs become links: a captured URI-R of any other scheme stays text.
_environment.tests["web"] = lambda value: (
    isinstance(value, str) and value.lower().startswith(("http://", "https://"))
)


def page(
    request: Request,
    template: str,
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> HTMLResponse:
    """The named template rendered as a page, with the page headers."""
    context.setdefault("signed_in", getattr(request.state, "ui_session", None))
    body = _environment.get_template(template).render(request_path=request.url.path, **context)
    return HTMLResponse(body, status_code=status, headers={**PAGE_HEADERS, **(headers or {})})


def error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
    headers = {}
    if status == 429:
        headers["Retry-After"] = "60"
    return page(request, "error.html", status=status, headers=headers, title=title, message=message)


class PageRoute(APIRoute):
    """A page's route: what the API would answer as JSON becomes a page (or, for a missing
    or ended session, a ``303`` to sign in and come back)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except Unauthenticated:
                # Back to what was asked for; a form's POST cannot be replayed, so home.
                back = requested_path(request.scope) if request.method == "GET" else "/ui/"
                return Response(
                    status_code=303,
                    headers={
                        "Location": sign_in_location(back),
                        "Cache-Control": "no-store",
                    },
                )
            except RateLimited as error:
                response = error_page(request, 429, "Too many requests", error.message)
                response.headers["Retry-After"] = str(max(1, int(error.retry_after + 0.999)))
                return response
            except AmberError as error:
                status = status_for(error)
                return error_page(request, status, _TITLES.get(status, "Refused"), error.message)
            except RequestValidationError as error:
                fields = sorted({".".join(str(p) for p in e["loc"][1:]) for e in error.errors()})
                return error_page(
                    request, 422, "Not understood", "check these fields: " + ", ".join(fields)
                )

        return route


_TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    410: "Gone",
    413: "Too large",
    422: "Not understood",
}
