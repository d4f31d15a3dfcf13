"""``amber mcp``: the MCP server over stdio, for desktop MCP clients and coding agents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import click

from api.cli.shared import load_settings
from archive.config import Settings

if TYPE_CHECKING:
    from api.client import AsyncAmberClient


@click.command("mcp")
def mcp() -> None:
    """Serve Amber's evidence tools over MCP on stdin/stdout.

    With AMBER_URL set, every tool calls that Amber server with AMBER_API_KEY. Without it,
    the embedded archive (AMBER_DATA_DIR, ./amber-data) is opened in this process: with
    AMBER_API_KEY the key's role and tenant apply, without one the calls act as the local
    user (all roles, default tenant), as the other local commands do.

    \b
    Example (a desktop MCP client's config names this command; see examples/mcp/):
      AMBER_URL=http://127.0.0.1:8000 AMBER_API_KEY=amber_... amber mcp
    """
    settings = load_settings()
    anyio.run(_serve, settings)


async def _serve(settings: Settings) -> None:
    # Imported here: the MCP SDK takes longer to import than most commands take to run.
    from api.agents.tools import EvidenceTools
    from api.mcp.server import build_server

    async with _client(settings) as amber:
        tools = EvidenceTools(amber, settings, settings.mcp_text_limit)

        @asynccontextmanager
        async def open_tools(_ctx: object) -> AsyncIterator[EvidenceTools]:
            yield tools

        await build_server(open_tools).run_stdio_async()


@asynccontextmanager
async def _client(settings: Settings) -> AsyncIterator[AsyncAmberClient]:
    import httpx

    from api.client import AsyncAmberClient

    if settings.url:
        async with AsyncAmberClient(settings.url, settings.api_key) as amber:
            yield amber
        return
    from api.app import create_app

    app = create_app(settings, auth=settings.api_key is not None)
    async with app.router.lifespan_context(app):
        base_url = app.state.urls.base
        transport = httpx.ASGITransport(app=app)
        async with AsyncAmberClient(base_url, settings.api_key, transport=transport) as amber:
            yield amber
