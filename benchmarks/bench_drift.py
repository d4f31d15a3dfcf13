"""Drift job benchmark: checks per second against a local web server.

Not a test: it prints figures and exits 0 whatever they are.

    python benchmarks/bench_drift.py                      # 1000 pages, ~1 minute
    python benchmarks/bench_drift.py --pages 300 --json
    python benchmarks/bench_drift.py --durability relaxed

Set-up (not timed): a fresh temporary archive (local blobs + SQLite, ``AMBER_DURABILITY`` as
given), ``--pages`` distinct ~100 KiB HTML pages of realistic regulatory prose, each cited
once through the library's citation path (inline source, tool ``http.get``), and a web
server in a *separate process* (a threading ``http.server`` on 127.0.0.1, so it does not
compete with the job for the GIL) serving the live versions:

* ``--identical`` (10 %) the same bytes — ``identical`` by hash, no extraction;
* most pages re-rendered (markup, boilerplate and other paragraphs changed, passage intact)
  — extraction plus an exact/normalised find: ``cosmetic``;
* ``--edited`` (20 %) the cited sentence edited (a number changed) — extraction, fuzzy
  location, edit rules and a new passage memento: ``reversal``.

Timed: one ``DriftJob.run`` over all of them — choosing what is due, fetching each page
through the fetch guard (one host: host concurrency = ``--concurrency``, no delay), text
extraction, classification, storing every check (and the new passages), group-committed.
The figure is checks per second of wall-clock time. The goal is ≥ 100 distinct 100 KiB
pages per second on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from statistics import mean, median
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

PAGE_BYTES = 100 * 1024
GOAL = 100.0

WORDS = (
    "agency applicant authority assessment budget claim committee compliance contract council "
    "decision department document employer entitlement evidence framework guidance inspection "
    "licence measure notice obligation operator payment period policy procedure provision "
    "regulation report requirement review scheme service standard statement tribunal"
).split()
VERBS = "applies covers requires describes sets governs explains limits extends records".split()


def sentence(rng: random.Random, page: int, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
    return (
        f"The {words[0]} {rng.choice(VERBS)} the {' '.join(words[1:])} under section "
        f"{page}.{n} of the {rng.randint(1990, 2025)} act."
    )


def make_page(page: int, *, variant: str) -> tuple[bytes, str]:
    """One ~100 KiB page and its cited sentence. ``variant``: original, cosmetic, edited."""
    rng = random.Random(page)
    cited = (
        f"Applicants under scheme {page} are entitled to {10 + page % 80} weeks of "
        f"paid leave from 1 April {2020 + page % 6}."
    )
    nav = (
        "Home | Guidance | Forms | Contact"
        if variant == "original"
        else "Home | Services | News | Sign in"
    )
    paragraphs: list[str] = []
    size = 0
    n = 0
    middle_at = PAGE_BYTES // 2
    placed = False
    while size < PAGE_BYTES - 600:
        if not placed and size >= middle_at:
            text = cited
            if variant == "edited":
                text = text.replace(f"{10 + page % 80} weeks", f"{11 + page % 80} weeks")
            paragraphs.append(f"<p class='cited'>{text}</p>")
            placed = True
        n += 1
        body = " ".join(sentence(rng, page, n * 10 + k) for k in range(4))
        if variant != "original" and n % 17 == 0:
            body = body.replace("the", "<em>the</em>", 2)  # markup-only edits
        if variant != "original" and n % 23 == 0:
            body = "Updated: " + body  # another paragraph edited
        markup = f"<p>{body}</p>\n"
        paragraphs.append(markup)
        size += len(markup)
    footer = "© 2024 Example Agency" if variant == "original" else "© 2025 Example Agency · Cookies"
    html = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Scheme {page}</title>"
        f"<style>p{{margin:0}}</style></head><body><nav>{nav}</nav><main><h1>Scheme {page}"
        f"</h1>{''.join(paragraphs)}</main><footer>{footer}</footer></body></html>"
    )
    return html.encode(), cited


# -- the web server process ---------------------------------------------------------------


def serve(directory: str, port_file: str) -> None:
    pages = {f"/p/{p.stem}": p.read_bytes() for p in Path(directory).glob("*.html")}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = pages.get(self.path)
            status = 200 if body is not None else 404
            body = body if body is not None else b"<html><body>not found</body></html>"
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


# -- the benchmark -------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    from archive.archive import Archive
    from archive.citations import CitationRequest, QuoteRequest, SourceRequest
    from archive.config import Settings

    root = Path(tempfile.mkdtemp(prefix="amber-bench-drift-"))
    live_dir = root / "live"
    live_dir.mkdir()
    rng = random.Random(7)
    kinds: dict[int, str] = {}
    originals: dict[int, tuple[bytes, str]] = {}
    for page in range(args.pages):
        roll = rng.random()
        kind = (
            "identical"
            if roll < args.identical
            else "edited"
            if roll < args.identical + args.edited
            else "cosmetic"
        )
        kinds[page] = kind
        originals[page] = make_page(page, variant="original")
        live = originals[page][0] if kind == "identical" else make_page(page, variant=kind)[0]
        (live_dir / f"{page}.html").write_bytes(live)
    port_file = root / "port"
    server = subprocess.Popen([sys.executable, __file__, "_serve", str(live_dir), str(port_file)])
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the web server did not start")
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port_file.read_text()}"
        settings = Settings(
            data_dir=root / "amber-data",
            fetch_allow=("127.0.0.1:*",),
            durability=args.durability,
            extra={
                "drift": {
                    "concurrency": args.concurrency,
                    "host_concurrency": args.concurrency,
                    "host_delay_seconds": 0.0,
                    "timeout_seconds": 30.0,
                }
            },
        )
        archive = Archive.open(settings)
        try:
            archive.transcripts.put("default", "bench", "P1Y", {})
            setup = time.monotonic()
            batch: list[CitationRequest] = []
            for page, (content, cited) in originals.items():
                batch.append(
                    CitationRequest(
                        quote=QuoteRequest(cited),
                        source=SourceRequest(
                            uri_r=f"{base}/p/{page}",
                            content=content,
                            content_type="text/html; charset=utf-8",
                            tool="http.get",
                            http_status=200,
                        ),
                    )
                )
                if len(batch) == 50:
                    archive.citations.cite("default", "bench", batch)
                    batch = []
            if batch:
                archive.citations.cite("default", "bench", batch)
            setup_seconds = time.monotonic() - setup
            started = time.monotonic()
            summary = archive.drift.job().run_summary(concurrency=args.concurrency)
            seconds = time.monotonic() - started
        finally:
            archive.close()
    finally:
        server.terminate()
        server.wait(10)
    checks = summary.checks
    verdicts = Counter(c.verdict for c in checks)
    expected = Counter(
        {"identical": "identical", "cosmetic": "cosmetic", "edited": "reversal"}[k]
        for k in kinds.values()
    )

    def stats(values: list[int | None]) -> dict[str, float]:
        known = [v for v in values if v is not None]
        return {"mean": round(mean(known), 2), "median": round(median(known), 2)} if known else {}

    return {
        "pages": args.pages,
        "page_bytes": PAGE_BYTES,
        "concurrency": args.concurrency,
        "durability": args.durability,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "setup_seconds": round(setup_seconds, 2),
        "seconds": round(seconds, 3),
        "checks": len(checks),
        "checks_per_second": round(len(checks) / seconds, 1) if seconds else None,
        "goal_checks_per_second": GOAL,
        "verdicts": dict(verdicts),
        "expected": dict(expected),
        "timings_ms": {
            "fetch": stats([c.fetch_ms for c in checks]),
            "extract": stats([c.extract_ms for c in checks]),
            "classify": stats([c.classify_ms for c in checks]),
        },
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--identical", type=float, default=0.1, help="share served unchanged")
    parser.add_argument("--edited", type=float, default=0.2, help="share with the passage edited")
    parser.add_argument("--durability", choices=["full", "relaxed"], default="full")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"drift job: {result['checks']} checks of {result['pages']} distinct "
        f"{PAGE_BYTES // 1024} KiB HTML pages in {result['seconds']} s "
        f"({result['cpus']} CPUs, concurrency {result['concurrency']}, durability {result['durability']})"
    )
    print(
        f"  {result['checks_per_second']} checks/s (goal >= {GOAL:g}/s: "
        f"{'met' if (result['checks_per_second'] or 0) >= GOAL else 'NOT met'})"
    )
    print(f"  verdicts {result['verdicts']} (expected {result['expected']})")
    for step, figures in result["timings_ms"].items():
        print(f"  {step:>8} ms per check: {figures}")


if __name__ == "__main__":
    main()
