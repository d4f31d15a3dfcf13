"""The FastAPI application: thin routes over :class:`archive.archive.Archive`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from api import (
    admin,
    bundles,
    drift,
    errors,
    fastpath,
    log,
    mementos,
    metrics,
    navfast,
    retention,
    timetravel,
    transcripts,
    ui,
)
from api.auth import Gatekeeper
from api.budget import RequestBudget
from api.mcp.http import McpRoute, is_mcp
from api.middleware import BodySizeLimit
from api.urls import Urls
from archive import __version__
from archive.access.ratelimit import RateLimiter
from archive.archive import Archive
from archive.base_url import DEFAULT_PUBLIC_BASE_URL
from archive.budget import JsonBudget
from archive.config import Settings
from archive.workermetrics import WorkerBoard

DESCRIPTION = """
Amber keeps what AI agents cite: content-addressed (BLAKE3), immutable mementos served with
the Memento protocol (RFC 7089). URI-Rs travel raw at the end of TimeGate and TimeMap paths,
query string included; TimeMap paging lives in the path (`/timemap/json/page/2/<URI-R>`).
"""


class AmberApp(FastAPI):
    """FastAPI, with the URI-M, write, TimeGate and TimeMap routes served before the
    framework's stack (see :class:`api.fastpath.MementoRoute`, :class:`api.fastpath.WriteRoute`
    and :class:`api.navfast.NavigationRoute`; the FastAPI routes in :mod:`api.mementos` and
    :mod:`api.timetravel` document them)."""

    memento_route: fastpath.MementoRoute
    write_route: fastpath.WriteRoute
    navigation_route: navfast.NavigationRoute
    mcp_route: McpRoute

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if fastpath.is_memento_content(scope):
            await self.memento_route.serve(scope, receive, send)
            return
        if navfast.navigation_prefix(scope) is not None:
            await self.navigation_route.serve(scope, receive, send)
            return
        if is_mcp(scope):
            await self.mcp_route.serve(scope, receive, send)
            return
        if fastpath.is_memento_write(scope):
            await self.write_route.serve(scope, receive, send, super().__call__)
            return
        await super().__call__(scope, receive, send)


def create_app(
    settings: Settings | None = None, archive: Archive | None = None, *, auth: bool = True
) -> FastAPI:
    """Build the app. ``archive`` may be given (tests); otherwise it is opened at startup.

    ``auth=False`` is for ``amber serve --insecure-no-auth`` (loopback only) and tests of
    archive behaviour; every request then acts with all roles in the default tenant.
    """
    settings = settings or Settings.from_env()
    # The recorded base wins once the archive is open (archive/base_url.py); until then
    # the configured one, or the default address.
    urls = Urls(settings.public_base_url or DEFAULT_PUBLIC_BASE_URL)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = archive is None
        app.state.archive = archive or Archive.open(settings)
        if owned:
            try:
                urls.rebase(app.state.archive.settle_base_url(urls.base).url)
            except BaseException:
                app.state.archive.close()
                raise
        assert isinstance(app, AmberApp)
        app.state.gatekeeper.keys = app.state.archive.keys
        app.state.gatekeeper.sessions = app.state.archive.sessions
        app.memento_route.start(app.state.archive)
        app.write_route.start(app.state.archive)
        app.navigation_route.start(app.state.archive)
        log.start_evidence_log(app.state.archive)
        board = _metrics_board(app, settings)
        try:
            async with app.mcp_route.running(urls.base):
                yield
        finally:
            if board is not None:
                board.close()
            app.memento_route.close()
            app.navigation_route.close()
            if owned:
                app.state.archive.close()

    app = AmberApp(
        title="Amber",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.gatekeeper = Gatekeeper(
        auth,
        RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst),
        archive.keys if archive is not None else None,
        archive.sessions if archive is not None else None,
    )
    app.state.urls = urls
    budget = RequestBudget(
        app.state.gatekeeper,
        settings.max_body_bytes,
        JsonBudget.of(settings),
        settings.max_error_items,
    )
    app.state.budget = budget  # for the routes that take a body (api.budget.BudgetedRoute)
    app.memento_route = fastpath.MementoRoute(app.state.gatekeeper, app.state.urls)
    app.write_route = fastpath.WriteRoute(budget, app.state.urls)
    app.navigation_route = navfast.NavigationRoute(app.state.gatekeeper, app.state.urls)
    app.mcp_route = McpRoute(app, app.state.gatekeeper, settings)  # /mcp (api/mcp/http.py)
    if archive is not None:
        urls.rebase(archive.settle_base_url(urls.base).url)
        app.state.archive = archive
        app.memento_route.start(archive)
        app.write_route.start(archive)
        app.navigation_route.start(archive)
    errors.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.include_router(mementos.router)
    app.include_router(timetravel.router)
    app.include_router(transcripts.router)
    app.include_router(drift.router)
    app.include_router(admin.router)
    app.include_router(retention.router)
    app.include_router(metrics.router)
    app.include_router(log.router)
    app.include_router(bundles.router)
    ui.install(app, settings)  # the auditors' pages (/ui)

    @app.get("/healthz", summary="Liveness and readiness", tags=["ops"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    logging.getLogger("amber").setLevel(logging.INFO)
    return app


def _metrics_board(app: AmberApp, settings: Settings) -> WorkerBoard | None:
    """With several workers (AMBER_METRICS_DIR), this one's slot, publishing for /metrics."""
    if settings.metrics_dir is None:
        return None
    archive = app.state.archive
    route = app.memento_route
    board = WorkerBoard(
        Path(settings.metrics_dir),
        lambda: metrics.collect(archive, route),
        settings.metrics_publish_seconds,
    )
    board.start()
    app.state.metrics_board = board
    return board
