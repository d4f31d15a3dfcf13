"""MCP round trips, and the size of the client-only install next to the full one.

    python benchmarks/bench_mcp.py [--rounds 100] [--no-sizes]

Starts ``amber serve`` (embedded default, durability full, a fresh data directory) and a
local origin web server on loopback, then times rounds of the agent's three calls —
``fetch_evidence`` of a new page, ``cite`` of a quote from it, ``resolve`` of the memento —
three ways against the same server:

* ``sdk``: the same work done directly through the Python SDK (fetch through the guard,
  write, cite, read back and extract): the baseline, in the same run;
* ``stdio``: through ``amber mcp`` over stdio, pointed at the server by ``AMBER_URL``;
* ``http``: through ``/mcp`` on the server, over Streamable HTTP.

It prints p50 and p99 of each call and of the round, in ms, and each way's round p50 over
the baseline's. Then (unless ``--no-sizes``) it installs the client-only distribution
(``./sdk``) and the full one (``.``) into fresh virtual environments and prints the size
of each one's site-packages, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench_http import REPO_ROOT, _server_env, percentile, remove_data, start_amber

CALLS = ("fetch_evidence", "cite", "resolve")


class Pages(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = f"<p>Page {self.path}: parental leave is sixteen weeks.</p>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def run_rounds(call: Call, origin: str, label: str, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in (*CALLS, "round")}
    for i in range(rounds + 3):  # three warm-up rounds, not counted
        started = time.perf_counter()
        marks = []
        page = await call("fetch_evidence", {"url": f"{origin}/{label}/{i}"})
        marks.append(time.perf_counter())
        quote = {"memento_id": page["memento_id"], "quote": {"exact": "sixteen weeks"}}
        await call("cite", {"transcript_id": f"bench-{label}", "citations": [quote]})
        marks.append(time.perf_counter())
        await call("resolve", {"memento_id": page["memento_id"]})
        marks.append(time.perf_counter())
        if i < 3:
            continue
        previous = started
        for name, mark in zip(CALLS, marks, strict=True):
            times[name].append((mark - previous) * 1000)
            previous = mark
        times["round"].append((marks[-1] - started) * 1000)
    return times


@asynccontextmanager
async def via_sdk(base_url: str, key: str, origin_host: str) -> AsyncIterator[Call]:
    from api.agents.tools import EvidenceTools
    from api.client import AsyncAmberClient
    from archive.config import Settings

    settings = Settings(fetch_allow=(origin_host,))
    async with AsyncAmberClient(base_url, key) as amber:
        tools = EvidenceTools(amber, settings, settings.mcp_text_limit)

        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result: dict[str, Any] = await getattr(tools, name)(**arguments)
            return result

        yield call


@asynccontextmanager
async def via_mcp(client: Any) -> AsyncIterator[Call]:
    async with client as session:

        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await session.call_tool(name, arguments)
            if result.is_error:
                raise RuntimeError(f"{name} refused: {result.content}")
            return dict(result.structured_content)

        yield call


def stdio_client(base_url: str, key: str, origin_host: str) -> Any:
    from mcp import Client, StdioServerParameters

    env = _server_env(
        {"AMBER_URL": base_url, "AMBER_API_KEY": key, "AMBER_FETCH_ALLOW": origin_host}
    )
    return Client(
        StdioServerParameters(command=sys.executable, args=["-m", "api.cli", "mcp"], env=env)
    )


@asynccontextmanager
async def http_client(base_url: str, key: str) -> AsyncIterator[Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as h:
        yield Client(streamable_http_client(base_url + "/mcp", http_client=h))


def summary(times: dict[str, list[float]]) -> str:
    parts = []
    for name, values in times.items():
        ordered = sorted(values)
        parts.append(f"{name} p50 {percentile(ordered, 50):.1f} p99 {percentile(ordered, 99):.1f}")
    return " | ".join(parts)


async def latency(rounds: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    origin = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    origin_host = f"127.0.0.1:{origin.server_address[1]}"
    origin_url = f"http://{origin_host}"
    server = start_amber(
        "full",
        workdir / "data",
        workdir,
        auth=True,
        root=REPO_ROOT,
        settings={"AMBER_FETCH_ALLOW": origin_host},
    )
    try:
        assert server.api_key is not None
        key = server.api_key
        results: dict[str, dict[str, list[float]]] = {}
        async with via_sdk(server.base_url, key, origin_host) as call:
            results["sdk"] = await run_rounds(call, origin_url, "sdk", rounds)
        async with via_mcp(stdio_client(server.base_url, key, origin_host)) as call:
            results["stdio"] = await run_rounds(call, origin_url, "stdio", rounds)
        async with http_client(server.base_url, key) as client, via_mcp(client) as call:
            results["http"] = await run_rounds(call, origin_url, "http", rounds)
    finally:
        server.stop()
        origin.shutdown()
        remove_data(workdir)
    print(f"MCP round trips (ms), {rounds} rounds of fetch_evidence + cite + resolve:")
    base = percentile(sorted(results["sdk"]["round"]), 50)
    for way, times in results.items():
        ratio = percentile(sorted(times["round"]), 50) / base
        print(f"  {way:5}  {summary(times)} | round p50 / sdk {ratio:.2f}")


def site_packages_bytes(venv: Path) -> int:
    [site] = list((venv / "lib").glob("python3*/site-packages"))
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file())


def install_size(target: str, workdir: Path, name: str) -> int:
    venv = workdir / name
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    empty = site_packages_bytes(venv)  # pip and setuptools themselves
    # Without PYTHONPATH: the checkout on it would look installed to pip.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([python, "-m", "pip", "install", "-q", target], check=True, env=env)
    return site_packages_bytes(venv) - empty


def sizes() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-mcp-sizes-"))
    try:
        client = install_size(str(REPO_ROOT / "sdk"), workdir, "client")
        full = install_size(str(REPO_ROOT), workdir, "full")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    mib = 1024 * 1024
    print("Install size (site-packages, without pip itself):")
    print(f"  amber-client (./sdk)  {client / mib:7.1f} MiB")
    print(f"  amber-archive (.)     {full / mib:7.1f} MiB   client / full {client / full:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--no-sizes", action="store_true", help="skip the install sizes")
    args = parser.parse_args()
    asyncio.run(latency(args.rounds))
    if not args.no_sizes:
        sizes()


if __name__ == "__main__":
    main()
