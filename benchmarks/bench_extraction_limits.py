"""Extraction limits benchmark (issue #18, findings 2 and 5; not a test; prints figures).

Starts ``amber serve`` from a source tree (this checkout, or ``--amber-root`` for another
commit: ``git archive <commit> | tar -x -C /tmp/other``) on a fresh embedded data dir and,
over HTTP, cites inline sources:

1. **Small documents** (``--small`` requests each, every one a new document so no cache
   helps): a 2 KB HTML page, a 100 KiB HTML page and a one-page PDF; next to a 2 KB plain
   text source, which every version reads in process: the ratios to it are what travels
   between machines.
2. **Hostile documents**, the issue's: a 0.97 MB PDF whose one Flate stream inflates to
   10⁹ spaces, a PDF of 6 million text operators, and ``<div>`` × 80,000 around the quote
   (400 KB). For each: the answer, its time, and the peak resident memory of the server
   process alone and of the server with its children (extraction workers), sampled every
   20 ms.

With ``--extract`` it times ``extract_text`` alone on the same small documents (cache cleared
before each call), in a process importing ``--amber-root``'s library: the per-call cost of
the worker round trip without HTTP and durable writes around it.

With ``--worker-cpu`` (this checkout only) it measures the CPU time one extraction costs in
process and through a worker (the server's share and the worker's): on a busy machine the
wall-clock figures mostly measure waiting for a core.

With ``--inline-worst`` it measures, in this process, the worst HTML found for the in-process
path (at most 256 ``<`` and 64 KiB; ``archive.citations.extract.INLINE_HTML_TAGS``).

Usage: python benchmarks/bench_extraction_limits.py [--amber-root DIR] [--small 30]
       [--skip-hostile] [--hostile bomb,ops,deep] [--levels 80000] [--extract]
       [--worker-cpu] [--inline-worst]
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_citations import fresh_data_dir, start  # noqa: E402
from hostile_documents import (  # noqa: E402
    deep_html,
    flate_bomb_pdf,
    pages_pdf,
    text_operators_pdf,
)

REPO = HERE.parent


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = path.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(path.parent.name))
    return found


class PeakMemory:
    """Samples the server's resident memory (and its children's) until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.server = 0
        self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            own = _rss_kib(self.pid)
            self.server = max(self.server, own)
            self.total = max(self.total, own + sum(_rss_kib(c) for c in _children(self.pid)))
            self._stop.wait(0.02)


def cite(client: httpx.Client, content: bytes, media_type: str, quote: str) -> httpx.Response:
    return client.post(
        "/api/v1/transcripts/bench/citations",
        json={
            "citations": [
                {
                    "quote": {"exact": quote},
                    "source": {
                        "uri_r": "https://bench.example/doc",
                        "content_base64": base64.b64encode(content).decode(),
                        "content_type": media_type,
                        "captured_at": "2025-03-01T10:00:00Z",
                        "tool": "http.get",
                    },
                }
            ]
        },
    )


def small_documents(n: int) -> dict[str, tuple[bytes, str, str]]:
    words = f"Clause {n}: the provider shall retain record {n * 7919} for audit purposes."
    page = "".join(f"<p>{words} <b>Note</b> {i}.</p>\n" for i in range(1200))
    return {
        "plain 2 KB (in process everywhere)": (
            (words + " filler text. " * 150).encode(),
            "text/plain",
            words,
        ),
        "HTML 2 KB": (
            (f"<html><body><p>{words}</p>" + "<p>filler text.</p>" * 100).encode(),
            "text/html",
            words,
        ),
        "HTML 100 KiB": (f"<html><body>{page}</body></html>".encode(), "text/html", words),
        "PDF 1 page": (
            pages_pdf(1, line=words.encode()),
            "application/pdf",
            words,
        ),
    }


def measure_small(client: httpx.Client, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    for n in range(-3, rounds):  # three unmeasured rounds start workers and warm caches
        for label, (content, media_type, quote) in small_documents(n + 10_000).items():
            started = time.perf_counter()
            answer = cite(client, content, media_type, quote)
            elapsed = time.perf_counter() - started
            if answer.status_code != 201:
                raise RuntimeError(f"{label}: {answer.status_code} {answer.text[:200]}")
            if n >= 0:
                times.setdefault(label, []).append(elapsed * 1000)
    return times


def measure_hostile(client: httpx.Client, pid: int, which: list[str], levels: int) -> None:
    documents = {
        "bomb": ("Flate bomb (10^9 spaces)", lambda: flate_bomb_pdf(954), "application/pdf"),
        "ops": ("6M text operators", lambda: text_operators_pdf(6_000_000), "application/pdf"),
        "deep": (f"<div> x {levels:,}", lambda: deep_html(levels), "text/html"),
    }
    print(
        f"\n{'hostile document':28} {'size':>9} {'answer':>28} {'s':>7} "
        f"{'server MB':>10} {'+workers MB':>12}"
    )
    for name in which:
        label, build, media_type = documents[name]
        content = build()
        with PeakMemory(pid) as peak:
            started = time.perf_counter()
            try:
                answer: httpx.Response | None = cite(client, content, media_type, "needle text")
            except httpx.TimeoutException:
                answer = None  # the server is still at it
            elapsed = time.perf_counter() - started
        print(
            f"{label:28} {len(content) / 1e6:7.2f}MB {_outcome(answer):>28} "
            f"{elapsed:7.1f} {peak.server / 1024:10.0f} {peak.total / 1024:12.0f}"
        )


def _outcome(answer: httpx.Response | None) -> str:
    if answer is None:
        return "no answer (client timeout)"
    if answer.status_code == 201:
        return "201 stored"
    body = answer.json()
    error = body.get("error", {})
    if error.get("code") == "extraction_limit":
        return f"{answer.status_code} extraction_limit:{error['detail']['limit']}"
    reason = (body.get("errors") or [{}])[0].get("reason", error.get("code", ""))
    return f"{answer.status_code} {reason}"[:28]


def inline_worst() -> None:
    sys.path.insert(0, str(REPO))
    from archive.citations.extract import INLINE_HTML_BYTES, INLINE_HTML_TAGS
    from archive.citations.html_extractor import html_text

    tags = INLINE_HTML_TAGS
    cases = {
        "nested <div>": "<div>" * tags + "x",
        "formatting re-opened in each <p>": "".join(f"<b id={i}><p>x" for i in range(tags // 2)),
        "distinct formatting elements": "".join(f"<b id={i}>" for i in range(tags)) + "x",
        "<select> of options": "<select>" + "<option>x" * (tags - 1),
        "nested tables": "<table><tr><td>" * (tags // 3) + "x",
    }
    print(f"\nin-process HTML at the bound ({tags} '<', padded to {INLINE_HTML_BYTES} bytes)")
    for label, markup in cases.items():
        content = markup.encode()
        content += b"y" * (INLINE_HTML_BYTES - len(content))
        assert content.count(b"<") <= tags and len(content) <= INLINE_HTML_BYTES
        best = min(_timed(html_text, content) for _ in range(5))
        print(f"  {label:36} {best * 1000:7.1f} ms")


def extract_latency(amber_root: Path, rounds: int) -> None:
    """Re-run this script as ``_extract`` with ``amber_root``'s library first on the path."""
    env = {**os.environ, "PYTHONPATH": str(amber_root.resolve())}
    subprocess.run(
        [sys.executable, __file__, "_extract", str(rounds)], env=env, check=True, cwd=amber_root
    )


def _extract_main(rounds: int) -> None:
    from archive.citations import extract as extract_module

    print(f"extract_text from {Path(extract_module.__file__).resolve().parents[2]}")
    times: dict[str, list[float]] = {}
    for n in range(-3, rounds):
        for label, (content, media_type, _) in small_documents(n + 20_000).items():
            extract_module.clear_cache()
            started = time.perf_counter()
            extract_module.extract_text(content, media_type)
            if n >= 0:
                times.setdefault(label, []).append((time.perf_counter() - started) * 1000)
    print(f"{'extract_text':36} {'median ms':>10} {'p90 ms':>8}")
    for label, values in times.items():
        values.sort()
        p90 = values[int(0.9 * (len(values) - 1))]
        print(f"{label:36} {statistics.median(values):10.2f} {p90:8.2f}")


def worker_cpu() -> None:
    sys.path.insert(0, str(REPO))
    from archive.citations.html_extractor import html_text
    from archive.citations.pdf_extractor import pdf_text
    from archive.citations.sandbox import worker_pool
    from archive.config import ExtractionLimits

    limits = ExtractionLimits(workers=1)
    pool = worker_pool(limits)
    tick = os.sysconf("SC_CLK_TCK")

    def worker_seconds(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    cases: list[tuple[str, str, Any, list[bytes]]] = [
        ("PDF 1 page", "pdf", pdf_text, [pages_pdf(1, b"Quick %d." % n) for n in range(200)]),
        (
            "HTML 100 KiB",
            "html",
            lambda content: html_text(content, None),
            [small_documents(n)["HTML 100 KiB"][0] for n in range(40)],
        ),
    ]
    print(f"{'CPU per extraction':20} {'in process':>11} {'server':>8} {'worker':>8}  (ms)")
    for label, kind, extract, documents in cases:
        pool.extract(kind, documents[0], None, limits, 60.0)
        [pid] = pool.worker_pids()
        started = time.process_time()
        for content in documents:
            extract(content)
        in_process = (time.process_time() - started) / len(documents)
        started, worker_started = time.process_time(), worker_seconds(pid)
        for content in documents:
            pool.extract(kind, content, None, limits, 60.0)
        server = (time.process_time() - started) / len(documents)
        worker = (worker_seconds(pid) - worker_started) / len(documents)
        print(f"{label:20} {in_process * 1e3:11.2f} {server * 1e3:8.2f} {worker * 1e3:8.2f}")


def _timed(function: Any, content: bytes) -> float:
    started = time.perf_counter()
    function(content, None)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--amber-root", type=Path, default=REPO)
    parser.add_argument("--small", type=int, default=30, help="requests per small document")
    parser.add_argument("--skip-hostile", action="store_true")
    parser.add_argument(
        "--hostile", default="bomb,ops,deep", help="which hostile documents (bomb,ops,deep)"
    )
    parser.add_argument("--levels", type=int, default=80_000, help="nesting of the deep HTML")
    parser.add_argument("--timeout", type=float, default=900.0, help="client timeout, seconds")
    parser.add_argument("--inline-worst", action="store_true")
    parser.add_argument("--extract", action="store_true", help="time extract_text alone")
    parser.add_argument("--worker-cpu", action="store_true", help="CPU per extraction")
    if sys.argv[1:2] == ["_extract"]:
        _extract_main(int(sys.argv[2]))
        return
    args = parser.parse_args()
    if args.extract:
        extract_latency(args.amber_root, args.small)
        return
    if args.inline_worst:
        inline_worst()
        return
    if args.worker_cpu:
        worker_cpu()
        return
    print(f"serving {args.amber_root.resolve()}")
    with fresh_data_dir() as data_dir:
        server, base, key = start(data_dir, args.amber_root.resolve())
        try:
            with httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=args.timeout
            ) as client:
                client.put("/api/v1/transcripts/bench", json={}).raise_for_status()
                if args.small:
                    times = measure_small(client, args.small)
                    baseline = statistics.median(times["plain 2 KB (in process everywhere)"])
                    print(f"\n{'small citation':36} {'median ms':>10} {'p90 ms':>8} {'÷ plain':>8}")
                    for label, values in times.items():
                        values.sort()
                        median = statistics.median(values)
                        p90 = values[int(0.9 * (len(values) - 1))]
                        print(f"{label:36} {median:10.1f} {p90:8.1f} {median / baseline:8.2f}")
                if not args.skip_hostile:
                    measure_hostile(client, server.pid, args.hostile.split(","), args.levels)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
