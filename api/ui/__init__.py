"""The auditors' pages (``/ui``): sign in, look up, transcripts, mementos, TimeMaps, drift.

Server-rendered HTML (Jinja2, autoescaped), no single-page app and no CDN: every asset is
served here, and every page works without JavaScript. Sessions live in
:mod:`archive.access.sessions`; signing in and CSRF in :mod:`api.ui.signin`; the pages in
:mod:`api.ui.pages`; the admins' pages in :mod:`api.ui.admin`; rendering and the page headers in :mod:`api.ui.render`.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from api.ui import admin, pages, signin
from api.ui.render import STATIC
from archive.access.ratelimit import RateLimiter
from archive.config import Settings


def install(app: FastAPI, settings: Settings) -> None:
    """Add the pages, their assets and the sign-in rate limit to ``app``."""
    per_minute = settings.login_attempts_per_minute
    app.state.login_limiter = RateLimiter(per_minute / 60.0, per_minute)
    app.include_router(signin.router)
    app.include_router(pages.router)
    app.include_router(admin.router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=308)
