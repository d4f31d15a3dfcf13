"""An agent loop whose citations are provable — the whole Amber path in one command.

    python examples/agent_loop.py

What it does, with nothing to install beyond this repository and no internet:

1. starts Amber on the embedded default in a temporary directory (``amber keys create
   --role agent``, then ``amber serve`` on a free port);
2. starts a tiny local web server with one sample page (the "web" the agent browses);
3. runs an agent loop whose tools are wrapped by an ``EvidenceLocker``: ``http.get``
   (evidence: the raw bytes are kept) and ``search.web`` (results kept, flagged as
   non-evidence);
4. cites three answers: one with a real quote (rendered with URI-Ms and Robust Links), one
   with a hallucinated quote (fail-closed exception, then the degrade-mode rewrite) and one
   that cites a search snippet (refused by the server: search results are not evidence).

THE MODEL IS SCRIPTED: there is no LLM here. ``scripted_model`` below returns fixed tool
calls and answers, so the run is deterministic; swap it for a real model call and keep the
rest.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # works from a plain checkout too
from api.client import AmberClient, Answer, CitationRejected, EvidenceLocker, SearchHit, ToolResult

PAGE = b"""<!doctype html><html><head><title>Parental leave policy</title></head><body>
<h1>Parental leave</h1>
<p>Employees are entitled to <b>sixteen weeks</b> of paid parental leave.</p>
<p>Requests must be made four weeks in advance.</p>
</body></html>"""


# -- the world the agent lives in ------------------------------------------------------


@contextmanager
def sample_website() -> Iterator[str]:
    """A local web server with one page, so the example needs no internet."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/policies/leave.html"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Last-Modified", "Mon, 03 Mar 2025 09:00:00 GMT")
            self.end_headers()
            self.wfile.write(PAGE if found else b"not found")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def amber_server(data_dir: Path) -> Iterator[tuple[str, str]]:
    """``amber serve`` on the embedded default in ``data_dir``; yields (base URL, agent key)."""
    amber = Path(sys.executable).with_name("amber")
    command = [str(amber)] if amber.is_file() else [sys.executable, "-m", "api.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMBER_")}
    env["AMBER_DATA_DIR"] = str(data_dir)
    key = (
        subprocess.run(
            [*command, "keys", "create", "--role", "agent"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log_path = data_dir.parent / "amber-serve.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*command, "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while not _healthy(base_url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("amber serve did not start:\n" + log_path.read_text())
            time.sleep(0.1)
        yield base_url, key
    finally:
        process.terminate()
        process.wait(timeout=15)


def _healthy(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


# -- the agent ---------------------------------------------------------------------------


def make_tools(locker: EvidenceLocker, web: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    @locker.tool("http.get")
    def http_get(url: str) -> ToolResult:
        return ToolResult.from_httpx(httpx.get(url))  # raw bytes, status, headers, final URL

    @locker.tool("search.web")
    def search_web(query: str) -> list[SearchHit]:
        # A search engine's snippet: a stale summary, never evidence of what the page says.
        return [
            SearchHit(
                f"{web}/policies/leave.html",
                "Parental leave policy",
                "Parental leave is twenty weeks, fully paid.",
            )
        ]

    return http_get, search_web


def scripted_model(page_id: str, snippet_id: str) -> list[tuple[str, Answer]]:
    """SCRIPTED model output (no LLM): three answers, each with its citations."""
    return [
        (
            "a faithful answer",
            Answer(
                "Employees get sixteen weeks of paid parental leave [1].",
                [{"source_id": page_id, "quote": "sixteen weeks of paid parental leave"}],
            ),
        ),
        (
            "a hallucinated quote",
            Answer(
                "Employees get twenty weeks of paid parental leave [1].",
                [{"source_id": page_id, "quote": "twenty weeks of paid parental leave"}],
            ),
        ),
        (
            "a search snippet cited as evidence",
            Answer(
                "Parental leave is twenty weeks [1].",
                [{"source_id": snippet_id, "quote": "Parental leave is twenty weeks"}],
            ),
        ),
    ]


def main() -> None:
    print("NOTE: the model in this example is SCRIPTED (fixed output, no LLM).\n")
    with (
        tempfile.TemporaryDirectory() as tmp,
        sample_website() as web,
        amber_server(Path(tmp) / "amber-data") as (base_url, key),
        AmberClient(base_url, key) as amber,
    ):
        locker = EvidenceLocker()
        http_get, search_web = make_tools(locker, web)
        transcript, run_id = "conversation-1", "run-2025-001"
        amber.put_transcript(transcript, retention="regulated", labels={"run_id": run_id})

        page = http_get(f"{web}/policies/leave.html")
        [hit] = search_web("parental leave weeks")
        print(f"tool http.get  -> {page.source_id} {page.title!r} {page.content_hash[:20]}…")
        print(f"tool search.web -> {hit.source_id} (is_evidence={hit.is_evidence})\n")

        for label, answer in scripted_model(page.source_id, hit.source_id):
            print(f"=== model turn: {label} ===")
            try:
                cited = amber.cite_answer(transcript, answer, locker, run_id=run_id)
            except CitationRejected as rejected:
                print(f"fail-closed: CitationRejected: {rejected}")
                degraded = amber.cite_answer(
                    transcript, answer, locker, run_id=run_id, mode="degrade"
                )
                print(f"degrade mode shows instead:\n{degraded.text}\n")
                continue
            print(cited.render_markdown())
            for citation in cited.citations:
                print(f"URI-M:       {citation.uri_m}")
                print(f"Robust Link: {citation.robust_link}")
                passage = amber.fetch_memento(citation.uri_m)  # re-hashed on the way in
                print(
                    f"the URI-M resolves to {len(passage.content)} verified bytes containing "
                    f"the quote: {citation.exact is not None and citation.exact in passage.text}\n"
                )

        stored = amber.get_transcript(transcript)
        print(
            f"transcript {stored.id}: {len(stored.citations)} citation(s) stored, "
            f"retained until {stored.retain_until:%Y-%m-%d}, run_id {stored.citations[0].run_id}"
        )


if __name__ == "__main__":
    main()
