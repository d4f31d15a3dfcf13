"""Citation benchmark (not a test; prints figures).

Starts ``amber serve`` on the embedded default (local blobs + SQLite, durability on, a fresh
temporary data dir, an agent key made with the CLI) and measures over HTTP:

1. latency of citing 10 distinct passages of a 100 KiB HTML page in ONE batch call (the page
   sent inline, as text: the SDK sends UTF-8 bytes as text, others base64), next to a plain
   100 KiB memento write;
2. distinct citations per second through the batch endpoint from concurrent clients (each
   request: 10 passages not cited before), inline source and by memento id.

With ``--library`` it measures the library alone instead: batches by memento id, every
passage new as over HTTP, ``CitationDesk.cite`` called from concurrent threads in this
process, no HTTP.

Usage: python benchmarks/bench_citations.py [--seconds 10] [--clients 8] [--library]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import remove_data
from loadloop import process_cpu_seconds  # the sibling module

REPO = Path(__file__).resolve().parents[1]
SENTENCES = 1200


def page(edition: int = 0) -> tuple[bytes, list[str]]:
    """A ~100 KiB policy page; each edition words every sentence differently."""
    sentences = [
        f"Clause {n}.{edition}: the provider shall retain record {n * 7919 % 100003} for audit purposes."
        for n in range(SENTENCES)
    ]
    body = "".join(f"<p>{s} <b>Note</b> {n}.</p>\n" for n, s in enumerate(sentences))
    html = f"<html><head><title>Policy</title></head><body><article>{body}</article></body></html>"
    return html.encode(), sentences


class Editions:
    """Batches of 10 quotes in which every citation of the run is a new passage.

    A page has SENTENCES sentences; once they have all been cited, the next batches cite a
    new edition of the page (every sentence worded differently), so the server stores new
    passage bytes for each citation rather than deduplicating onto earlier ones.
    """

    def __init__(self, client: httpx.Client) -> None:
        self._client = client
        self._batches = itertools.count()
        self._lock = threading.Lock()
        self._sources: dict[int, tuple[dict[str, Any], list[str]]] = {}
        self._documents: dict[int, str] = {}

    def batch(self, evidence: str) -> dict[str, Any]:
        """A request body of 10 citations; ``evidence``: inline, sources-ref or memento_id."""
        with self._lock:
            start = next(self._batches) * 10
            edition, first = divmod(start, SENTENCES)
            source, sentences = self._source(edition)
            document = self._document(edition, source) if evidence == "memento_id" else None
        picks = sentences[first : first + 10]
        if evidence == "inline":
            return {"citations": [{"source": source, "quote": {"exact": q}} for q in picks]}
        if evidence == "sources-ref":
            return {
                "citations": [{"source_ref": "page", "quote": {"exact": q}} for q in picks],
                "sources": {"page": source},
            }
        return {"citations": [{"memento_id": document, "quote": {"exact": q}} for q in picks]}

    def _source(self, edition: int) -> tuple[dict[str, Any], list[str]]:
        if edition not in self._sources:
            html, sentences = page(edition)
            self._sources[edition] = (
                {
                    "uri_r": f"https://policy.example/terms/{edition}",
                    "content": html.decode(),  # a UTF-8 page goes as text, as the SDK sends it
                    "content_type": "text/html; charset=utf-8",
                    "tool": "http.get",
                    "http_status": 200,
                },
                sentences,
            )
        return self._sources[edition]

    def _document(self, edition: int, source: dict[str, Any]) -> str:
        if edition not in self._documents:
            made = self._client.post("/api/v1/mementos", json=source)
            made.raise_for_status()
            self._documents[edition] = made.json()["id"]
        return self._documents[edition]


@contextlib.contextmanager
def fresh_data_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="amber-bench-citations-")
    try:
        yield path
    finally:
        remove_data(Path(path))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(data_dir: str, amber_root: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    # PYTHONPATH rather than cwd alone: the installed (editable) package must not win.
    env = {
        **os.environ,
        "AMBER_DATA_DIR": data_dir,
        "AMBER_RATE_LIMIT_PER_SECOND": "0",
        "PYTHONPATH": str(amber_root),
    }
    cli = [sys.executable, "-m", "api.cli"]
    key = (
        subprocess.run(
            [*cli, "keys", "create", "--role", "agent"],
            env=env,
            cwd=amber_root,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    port = free_port()
    server = subprocess.Popen(
        [*cli, "serve", "--port", str(port)],
        env=env,
        cwd=amber_root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return server, base, key
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--library",
        action="store_true",
        help="call the library in-process (no HTTP) instead of a server",
    )
    parser.add_argument(
        "--amber-root",
        type=Path,
        default=REPO,
        help="the Amber source tree to serve (e.g. an older commit, checked out)",
    )
    args = parser.parse_args()
    print(
        f"machine: a 3,000,000-step pure-Python loop takes {machine_speed():.0f} ms here "
        "(compare figures across days only with this in mind)"
    )
    if args.library:
        library(args.seconds, args.clients)
        return
    html, _ = page()
    source = {
        "uri_r": "https://policy.example/terms",
        "content": html.decode(),
        "content_type": "text/html; charset=utf-8",
        "tool": "http.get",
        "http_status": 200,
    }
    with fresh_data_dir() as data_dir:
        server, base, key = start(data_dir, args.amber_root.resolve())
        try:
            headers = {"Authorization": f"Bearer {key}"}
            client = httpx.Client(base_url=base, headers=headers, timeout=60)
            client.put("/api/v1/transcripts/bench", json={"retention": "P7Y"}).raise_for_status()
            editions = Editions(client)
            plain, cited = [], []
            for number in range(20):
                started = time.perf_counter()
                client.post(
                    "/api/v1/mementos",
                    json={**source, "uri_r": f"https://policy.example/plain/{number}"},
                ).raise_for_status()
                plain.append(time.perf_counter() - started)
                started = time.perf_counter()
                client.post(
                    "/api/v1/transcripts/bench/citations", json=editions.batch("sources-ref")
                ).raise_for_status()
                cited.append(time.perf_counter() - started)
            print(
                f"100 KiB page: plain memento write p50 {statistics.median(plain) * 1000:.1f} ms; "
                f"10 citations in one batch p50 {statistics.median(cited) * 1000:.1f} ms "
                f"(ratio {statistics.median(cited) / statistics.median(plain):.2f})"
            )
            for label, evidence in [
                ("inline each", "inline"),
                ("sources-ref", "sources-ref"),
                ("memento_id", "memento_id"),
            ]:
                done = [0]
                lock = threading.Lock()
                stop = time.monotonic() + args.seconds

                def worker(evidence: str = evidence, label: str = label) -> None:
                    with httpx.Client(base_url=base, headers=headers, timeout=60) as own:
                        transcript = f"bench-{threading.get_ident()}-{label.replace(' ', '-')}"
                        own.put(f"/api/v1/transcripts/{transcript}", json={})
                        while time.monotonic() < stop:
                            response = own.post(
                                f"/api/v1/transcripts/{transcript}/citations",
                                json=editions.batch(evidence),
                            )
                            response.raise_for_status()
                            with lock:
                                done[0] += len(response.json()["citations"])

                cpu_before = process_cpu_seconds(server.pid)
                elapsed = run_threads(worker, args.clients)
                cpu_after = process_cpu_seconds(server.pid)
                per_citation = (
                    ""
                    if not cpu_after or not done[0]
                    # 0.0: no /proc here
                    else f"; server CPU {(cpu_after - cpu_before) / done[0] * 1e6:,.0f} µs per citation, "
                    f"{(cpu_after - cpu_before) / elapsed:.0%} of a core"
                )
                print(
                    f"{label:>14}: {done[0] / elapsed:,.0f} citations/s "
                    f"({args.clients} clients, batches of 10, every passage new, durability on{per_citation})"
                )
        finally:
            server.terminate()
            server.wait(timeout=30)


def machine_speed() -> float:
    """Milliseconds this machine takes for a fixed pure-Python loop (best of three): absolute
    figures from different days are comparable only after scaling by it."""

    def loop() -> float:
        started, total = time.perf_counter(), 0
        for number in range(3_000_000):
            total += number
        return (time.perf_counter() - started) * 1000

    return min(loop() for _ in range(3))


def run_threads(worker: Any, count: int) -> float:
    """Run ``count`` threads of ``worker`` to completion; the seconds it took."""
    threads = [threading.Thread(target=worker) for _ in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def library(seconds: float, clients: int) -> None:
    """Citations/s through ``CitationDesk.cite`` from ``clients`` threads, no HTTP."""
    from archive.archive import Archive
    from archive.citations import CitationRequest, QuoteRequest
    from archive.config import Settings
    from archive.mementos import CaptureFacts
    from archive.writes import MementoRequest

    with fresh_data_dir() as data_dir:
        archive = Archive.open(Settings(data_dir=Path(data_dir)))
        try:
            batches, lock, done = itertools.count(), threading.Lock(), [0]
            documents: dict[int, tuple[str, list[str]]] = {}

            def next_batch() -> tuple[str, list[str]]:
                """A document memento id and 10 of its sentences not cited before."""
                with lock:
                    edition, first = divmod(next(batches) * 10, SENTENCES)
                    if edition not in documents:
                        html, sentences = page(edition)
                        documents[edition] = (
                            archive.write_memento(
                                MementoRequest(
                                    uri_r=f"https://policy.example/terms/{edition}",
                                    content=html,
                                    content_type="text/html; charset=utf-8",
                                    facts=CaptureFacts(tool="http.get", http_status=200),
                                )
                            ).memento.id,
                            sentences,
                        )
                    document, sentences = documents[edition]
                return document, sentences[first : first + 10]

            stop = time.monotonic() + seconds

            def worker() -> None:
                transcript = f"bench-{threading.get_ident()}"
                archive.transcripts.put("default", transcript, "P7Y", {})
                while time.monotonic() < stop:
                    document, picks = next_batch()
                    cited = archive.citations.cite(
                        "default",
                        transcript,
                        [
                            CitationRequest(quote=QuoteRequest(q), memento_id=document)
                            for q in picks
                        ],
                    )
                    with lock:
                        done[0] += len(cited.citations)

            cpu = time.process_time()
            elapsed = run_threads(worker, clients)
            print(
                f"library, memento_id: {done[0] / elapsed:,.0f} citations/s "
                f"({clients} threads, batches of 10, every passage new, durability on; "
                f"{(time.process_time() - cpu) / max(1, done[0]) * 1e6:,.0f} µs CPU per citation)"
            )
        finally:
            archive.close()


if __name__ == "__main__":
    main()
