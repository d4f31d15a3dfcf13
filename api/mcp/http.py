"""``/mcp`` on ``amber serve``: the MCP server over Streamable HTTP, with Amber's own keys.

A request to ``/mcp`` must carry a valid Bearer key (401 otherwise, as every route). Each
tool call then runs through the SDK against this very app, in process, with the caller's
key: the API's routes check roles and tenants exactly as for a direct call.

Stateless mode with JSON answers: each POST is a whole exchange, so any server process
(``serve --workers N``) can answer any request and no MCP session state outlives one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from api.agents.tools import EvidenceTools
from api.auth import Gatekeeper, bearer_token
from api.client import AsyncAmberClient
from api.errors import amber_error_response
from api.mcp.server import build_server
from archive.access.keys import Role
from archive.config import Settings
from archive.exceptions import AmberError

MCP_PATH = "/mcp"
ANY_ROLE = frozenset(Role)


def is_mcp(scope: Scope) -> bool:
    if scope["type"] != "http":
        return False
    path: str = scope["path"]
    return path.rstrip("/") == MCP_PATH


class McpRoute:
    """The MCP endpoint of one app. :meth:`running` spans the app's lifespan. The MCP
    server is built on the first ``/mcp`` request, not at start: building one costs a tenth
    of a second or more, which every app (and every test's app) that never serves MCP
    would pay. A session manager runs once, so each lifespan gets its own."""

    def __init__(self, app: ASGIApp, gatekeeper: Gatekeeper, settings: Settings) -> None:
        self._app = app
        self._gatekeeper = gatekeeper
        self._settings = settings
        self._base_url = "http://amber.internal"
        self._manager: StreamableHTTPSessionManager | None = None
        self._tasks: TaskGroup | None = None
        self._stop = anyio.Event()
        self._starting = anyio.Lock()

    @asynccontextmanager
    async def running(self, base_url: str) -> AsyncIterator[None]:
        self._base_url = base_url
        self._stop, self._starting = anyio.Event(), anyio.Lock()
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._stop.set()
                self._tasks = self._manager = None

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        presented = bearer_token(headers.get(b"authorization", b"").decode("latin-1"))
        try:
            await self._gatekeeper.authorize(presented, ANY_ROLE)
        except AmberError as error:
            response = amber_error_response(error, scope["method"], scope["path"])
            await response(scope, receive, send)
            return
        manager = self._manager or await self._start()
        await manager.handle_request(scope, receive, send)

    async def _start(self) -> StreamableHTTPSessionManager:
        async with self._starting:
            if self._manager is None:
                assert self._tasks is not None, "the app has not started"
                server = build_server(self._open_tools)
                # Bearer keys, not cookies, authenticate here: a rebound DNS name gains a
                # browser nothing, and Amber is served under names the SDK cannot list.
                server.streamable_http_app(
                    stateless_http=True,
                    json_response=True,
                    transport_security=TransportSecuritySettings(
                        enable_dns_rebinding_protection=False
                    ),
                )
                await self._tasks.start(self._run, server.session_manager)
                self._manager = server.session_manager
            return self._manager

    async def _run(
        self,
        manager: StreamableHTTPSessionManager,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with manager.run():
            task_status.started()
            await self._stop.wait()

    @asynccontextmanager
    async def _open_tools(self, ctx: Context) -> AsyncIterator[EvidenceTools]:
        headers: Any = ctx.headers or {}
        key = bearer_token(headers.get("authorization"))
        transport = httpx.ASGITransport(app=self._app)
        async with AsyncAmberClient(self._base_url, key, transport=transport) as amber:
            yield EvidenceTools(amber, self._settings, self._settings.mcp_text_limit)
