"""The MCP server: the evidence tools, two resources and a prompt, on the official ``mcp``
SDK (:class:`mcp.server.mcpserver.MCPServer`).

The server does not know where its tools' SDK client points: ``open_tools`` gives the
tools of the caller of one request (over stdio, the one client of ``amber mcp``; over
HTTP, a client carrying the caller's own Bearer key, see :mod:`api.mcp.http`). A refusal
becomes a :class:`ToolError`: the model reads why and what to do next, and the
connection carries on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from api.agents.tools import (
    DESCRIPTIONS,
    Citation,
    Cited,
    Evidence,
    EvidenceTools,
    Memento,
    Resolved,
    explain,
)
from archive import __version__

OpenTools = Callable[[Context], AbstractAsyncContextManager[EvidenceTools]]
T = TypeVar("T")

INSTRUCTIONS = (
    "Amber keeps what you cite. Read pages with fetch_evidence (or store what another "
    "evidence tool returned with store_evidence), then cite exact quotes with cite. A "
    "search result is never evidence. A refused citation stores nothing: fix the quote or "
    "say 'I cannot cite this reliably.'"
)

PROMPT = """Answer with provable citations, using Amber's tools.

1. Read every page you may cite with fetch_evidence(url). Keep its memento_id. A search
   result is a pointer, not evidence: fetch the page it points to.
2. Quote exactly: copy the words from the text fetch_evidence returned, unchanged. Add a
   few words before (prefix) or after (suffix) only when the quote occurs more than once.
3. Cite once, with every quote of the answer: cite(transcript_id, citations=[{{"memento_id":
   ..., "quote": {{"exact": ...}}}}]). Put each returned uri_m (or robust_link) next to the
   claim it supports.
4. On a refusal nothing was stored. Read each refusal's reason: quote_not_found means
   the words are not in the page as captured (quote them exactly, or drop the claim);
   disallowed_tool means you cited a search result. If you cannot fix it, answer
   "I cannot cite this reliably." instead of the claim.

Question: {question}
"""


async def _run(
    open_tools: OpenTools, ctx: Context, call: Callable[[EvidenceTools], Awaitable[T]]
) -> T:
    async with open_tools(ctx) as tools:
        try:
            return await call(tools)
        except Exception as error:
            message = explain(error)
            if message is None:
                raise
            raise ToolError(message) from None


def build_server(open_tools: OpenTools) -> MCPServer:
    """The MCP server whose tools are those ``open_tools`` opens for each request."""
    # The SDK configures the root logger when a server is built (logging.basicConfig): put
    # it back, so that building one changes nothing in the process around it. And its
    # loggers say nothing under WARNING: each refused call's message is logged at INFO.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    server = MCPServer("amber", instructions=INSTRUCTIONS, version=__version__)
    root.handlers[:], root.level = handlers, level
    logging.getLogger("mcp").setLevel(logging.WARNING)

    @server.tool(description=DESCRIPTIONS["fetch_evidence"])
    async def fetch_evidence(url: str, ctx: Context) -> Evidence:
        return await _run(open_tools, ctx, lambda t: t.fetch_evidence(url))

    @server.tool(description=DESCRIPTIONS["store_evidence"])
    async def store_evidence(
        uri_r: str,
        content: str,
        content_type: str,
        tool: str,
        ctx: Context,
        captured_at: str | None = None,
    ) -> Memento:
        return await _run(
            open_tools,
            ctx,
            lambda t: t.store_evidence(uri_r, content, content_type, tool, captured_at),
        )

    @server.tool(description=DESCRIPTIONS["cite"])
    async def cite(
        transcript_id: str,
        citations: list[Citation],
        ctx: Context,
        run_id: str | None = None,
        retention: str | None = None,
    ) -> Cited:
        return await _run(
            open_tools, ctx, lambda t: t.cite(transcript_id, citations, run_id, retention)
        )

    @server.tool(description=DESCRIPTIONS["resolve"])
    async def resolve(
        ctx: Context, memento_id: str | None = None, uri_m: str | None = None
    ) -> Resolved:
        return await _run(open_tools, ctx, lambda t: t.resolve(memento_id, uri_m))

    @server.tool(description=DESCRIPTIONS["timemap"])
    async def timemap(url: str, ctx: Context) -> dict[str, Any]:
        return await _run(open_tools, ctx, lambda t: t.timemap(url))

    @server.tool(description=DESCRIPTIONS["timegate"])
    async def timegate(url: str, datetime: str, ctx: Context) -> Memento:
        return await _run(open_tools, ctx, lambda t: t.timegate(url, datetime))

    @server.tool(description=DESCRIPTIONS["drift"])
    async def drift(citation_id: str, ctx: Context) -> dict[str, Any]:
        return await _run(open_tools, ctx, lambda t: t.drift(citation_id))

    @server.resource(
        "amber://mementos/{memento_id}",
        description="A memento: its text, capture facts and hash check (as resolve).",
        mime_type="application/json",
    )
    async def memento_resource(memento_id: str, ctx: Context) -> str:
        return json.dumps(await _resource(open_tools, ctx, lambda t: t.resolve(memento_id)))

    @server.resource(
        "amber://transcripts/{transcript_id}",
        description="A transcript: its retention, labels and every citation stored under it.",
        mime_type="application/json",
    )
    async def transcript_resource(transcript_id: str, ctx: Context) -> str:
        return json.dumps(
            await _resource(open_tools, ctx, lambda t: t.read_transcript(transcript_id))
        )

    @server.prompt(
        name="cite-with-evidence",
        description="How to fetch, quote exactly and cite, and what to do on a refusal.",
    )
    def cite_with_evidence(question: str) -> str:
        return PROMPT.format(question=question)

    return server


async def _resource(
    open_tools: OpenTools, ctx: Context, call: Callable[[EvidenceTools], Awaitable[T]]
) -> T:
    try:
        return await _run(open_tools, ctx, call)
    except ToolError as error:
        raise ResourceError(str(error)) from None
