"""The MCP server (api/mcp), driven by the official ``mcp`` client SDK: ``amber mcp`` over
stdio (embedded, and pointed at a server by AMBER_URL) and ``/mcp`` on ``amber serve`` over
Streamable HTTP, on both backends.

A scripted agent loop fetches a page from a local origin server, cites a real quote
(accepted), a hallucinated one (refused, nothing stored) and a search result (refused).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from live_server import clean_environ, create_key, env_for, origin_server, running_server
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from api.agents.tools import TOOL_NAMES
from api.client import AmberClient
from archive.config import Settings

pytestmark = pytest.mark.slow  # spawns amber processes

ROOT = Path(__file__).resolve().parents[1]
PAGE = (
    b"<html><body><h1>Leave</h1><p>Parental leave is sixteen weeks, fully paid.</p></body></html>"
)


class Page(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)


def stdio(env: dict[str, str]) -> Client:
    """``amber mcp`` from this checkout, with only ``env`` (and what it needs to run)."""
    full = {**clean_environ(env), "PYTHONPATH": str(ROOT)}
    return Client(
        StdioServerParameters(command=sys.executable, args=["-m", "api.cli", "mcp"], env=full)
    )


@asynccontextmanager
async def over_http(base_url: str, key: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(base_url + "/mcp", http_client=http)) as client:
            yield client


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(client: Client, name: str, /, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


async def refused(client: Client, name: str, /, **arguments: Any) -> str:
    result = await client.call_tool(name, arguments)
    assert result.is_error, result.structured_content
    return text_of(result)


async def lists_everything(client: Client) -> None:
    tools = (await client.list_tools()).tools
    assert sorted(t.name for t in tools) == sorted(TOOL_NAMES)
    for tool in tools:
        assert tool.description and tool.input_schema["type"] == "object"
    cite = next(t for t in tools if t.name == "cite")
    assert cite.input_schema["required"] == ["transcript_id", "citations"]
    assert cite.output_schema is not None and "citations" in cite.output_schema["required"]
    fetch = next(t for t in tools if t.name == "fetch_evidence")
    assert fetch.output_schema is not None
    assert {"memento_id", "uri_m", "content_hash", "text", "text_length", "truncated"} <= set(
        fetch.output_schema["required"]
    )
    templates = (await client.list_resource_templates()).resource_templates
    assert sorted(t.uri_template for t in templates) == [
        "amber://mementos/{memento_id}",
        "amber://transcripts/{transcript_id}",
    ]
    prompts = (await client.list_prompts()).prompts
    assert [p.name for p in prompts] == ["cite-with-evidence"]
    prompt = await client.get_prompt("cite-with-evidence", {"question": "How long is leave?"})
    shown = json.dumps(prompt.model_dump(mode="json"))
    assert "I cannot cite this reliably" in shown and "How long is leave?" in shown


async def agent_loop(client: Client, page_url: str, transcript_id: str) -> dict[str, Any]:
    """Fetch, cite a real quote, then a hallucinated one; returns the fetched memento."""
    page = await call(client, "fetch_evidence", url=page_url)
    assert page["text"] == "Leave\nParental leave is sixteen weeks, fully paid."
    assert page["text_length"] == len(page["text"]) and not page["truncated"]
    assert page["tool"] == "http.get" and page["content_hash"].startswith("blake3:")
    quote = {"memento_id": page["memento_id"], "quote": {"exact": "sixteen weeks"}}
    cited = await call(client, "cite", transcript_id=transcript_id, citations=[quote])
    [record] = cited["citations"]
    assert record["document_uri_m"] == page["uri_m"] and record["uri_r"] == page_url
    assert record["text_fragment_url"].startswith(page_url + "#:~:text=")
    assert record["quote_hash"].startswith("blake3:") and "data-versionurl" in record["robust_link"]

    made_up = {"memento_id": page["memento_id"], "quote": {"exact": "twenty weeks"}}
    message = await refused(
        client, "cite", transcript_id=transcript_id, citations=[quote, made_up], run_id="r2"
    )
    assert "citation 1: quote_not_found" in message and "nothing was stored" in message
    assert "I cannot cite this reliably" in message

    held = await client.read_resource(f"amber://transcripts/{transcript_id}")
    stored = json.loads(held.contents[0].text)  # type: ignore[union-attr]
    assert [c["citation_id"] for c in stored["citations"]] == [record["citation_id"]]

    resolved = await call(client, "resolve", uri_m=page["uri_m"])
    assert resolved["hash_verified"] is True and resolved["text"] == page["text"]
    assert resolved["content_hash"] == page["content_hash"]
    via_resource = await client.read_resource(f"amber://mementos/{page['memento_id']}")
    assert json.loads(via_resource.contents[0].text)["memento_id"] == page["memento_id"]  # type: ignore[union-attr]
    timemap = await call(client, "timemap", url=page_url)
    assert page["uri_m"] in json.dumps(timemap)
    nearest = await call(client, "timegate", url=page_url, datetime="2999-01-01T00:00:00Z")
    assert nearest["memento_id"] == page["memento_id"]
    drift = await call(client, "drift", citation_id=record["citation_id"])
    assert drift["citation_id"] == record["citation_id"]
    message = await refused(
        client,
        "store_evidence",
        uri_r=page_url,
        content="leave",
        content_type="text/plain",
        tool="search.web",
    )
    assert "disallowed_tool" in message and "fetch_evidence" in message
    kb = await call(
        client,
        "store_evidence",
        uri_r="kb://policies/leave",
        content="Leave is sixteen weeks.",
        content_type="text/plain",
        tool="kb.read",
        captured_at="2024-05-01T12:00:00Z",
    )
    assert kb["memento_datetime"] == "2024-05-01T12:00:00+00:00" and kb["tool"] == "kb.read"
    return page


def test_amber_mcp_over_stdio_on_the_embedded_archive(settings: Settings) -> None:
    async def run(origin: str, env: dict[str, str]) -> None:
        async with stdio(env) as client:
            await lists_everything(client)
            await agent_loop(client, origin + "/leave", "conv-stdio")

    with origin_server(Page) as origin:
        env = env_for(settings)
        env["AMBER_FETCH_ALLOW"] = origin.removeprefix("http://")
        env["AMBER_API_KEY"] = create_key(env)
        anyio.run(run, origin, env)


def tenant_key(env: dict[str, str], tenant: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "keys", "create", "--tenant", tenant, "--role", "agent"],
        env={**clean_environ(env), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip().splitlines()[-1]


def test_mcp_over_http_and_over_stdio_through_amber_url(settings: Settings) -> None:
    async def run(origin: str, base_url: str, keys: dict[str, str]) -> None:
        async with over_http(base_url, keys["agent"]) as client:
            await lists_everything(client)
            page = await agent_loop(client, origin + "/leave", "conv-http")
            # A search result written through the API is stored, but is never evidence.
            with AmberClient(base_url, keys["agent"]) as amber:
                hit = amber.write_memento(
                    "https://search.example/?q=leave", PAGE, "text/html", tool="search.web"
                )
            quote = {"memento_id": hit.id, "quote": {"exact": "sixteen weeks"}}
            message = await refused(client, "cite", transcript_id="conv-http", citations=[quote])
            assert "citation 0: disallowed_tool" in message and "fetch_evidence" in message

        async with over_http(base_url, keys["other"]) as other:
            message = await refused(other, "resolve", memento_id=page["memento_id"])
            assert message.startswith("Error executing tool resolve: Not found")
            timemap = await other.call_tool("timemap", {"url": origin + "/leave"})
            assert page["memento_id"] not in text_of(timemap)

        # The MCP process fetches through its own guard: this one was not told to allow
        # the origin, so loopback is refused there even though the server allows it.
        through_url = {"AMBER_URL": base_url, "AMBER_API_KEY": keys["agent"]}
        async with stdio(through_url) as client:
            message = await refused(client, "fetch_evidence", url=origin + "/leave")
            assert "fetch_refused" in message and "loopback" in message
            assert "AMBER_FETCH_ALLOW" in message
            resolved = await call(client, "resolve", memento_id=page["memento_id"])
            assert resolved["hash_verified"] is True

    with origin_server(Page) as origin:
        env = env_for(settings)
        env["AMBER_FETCH_ALLOW"] = origin.removeprefix("http://")
        other = tenant_key(env, "other-tenant")
        with running_server(env) as server:
            assert server.agent_key is not None
            for key in (None, "amber_not_a_key"):
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                answer = httpx.post(server.base_url + "/mcp", json={}, headers=headers)
                assert answer.status_code == 401, answer.text
            keys = {"agent": server.agent_key, "other": other}
            anyio.run(run, origin, server.base_url, keys)
