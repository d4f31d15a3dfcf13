"""TimeGate and TimeMap throughput next to the URI-M's, on SQLite and on PostgreSQL.

Not a test: it measures, prints a table and exits 0. See benchmarks/README.md.

    python benchmarks/bench_navigation.py                     # both backends, ~3 minutes
    python benchmarks/bench_navigation.py --backends sqlite --rounds 2 --duration 3

For each backend it starts Amber as a user would (``python -m api.cli serve``, a fresh
temporary ``AMBER_DATA_DIR``, an agent key made with ``amber keys create``; on PostgreSQL
``AMBER_DATABASE_URL`` points at a private schema, dropped at the end), writes
``--uris`` URI-Rs with ``--entries`` mementos each (distinct capture times, 1 KiB
passages), then measures, round after round, the same load on each route in turn:

* ``uri_m``        GET of the URI-Ms written (the bytes, re-hashed);
* ``timegate``     GET /timegate/<URI-R>, half without and half with an Accept-Datetime
                   (302 expected);
* ``timemap_link`` GET /timemap/link/<URI-R>, every entry (200 expected);
* ``timemap_json`` GET /timemap/json/<URI-R>, every entry (200 expected).

The phases alternate within each round (the order rotates every round), so a machine that
drifts — the other sessions on a shared 2-core host — weighs on all of them alike. Ratios
are route / URI-M throughput per round; the summary gives their median and range. The goal
(issue #19): TimeGate and TimeMap each at least 0.5 of the URI-M.

The load generator (a minimal keep-alive HTTP/1.1 client in a separate process) and the CPU
accounting are those of ``bench_http.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_http import (  # the sibling script, imported as a module
    _REQUEST_ERRORS,
    NOISY_OTHER_CPU,
    REPO_ROOT,
    RawClient,
    Server,
    _git_commit,
    remove_data,
    start_amber,
)
from loadloop import Window, load_process_main, now, run_load_process

GOAL_RATIO = 0.5
KINDS = ("uri_m", "timegate", "timemap_link", "timemap_json")
EXPECTED = {"uri_m": 200, "timegate": 302, "timemap_link": 200, "timemap_json": 200}
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass
class Phase:
    backend: str
    round: int
    kind: str
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    server_cpu: float
    load_cpu: float
    other_cpu: float
    statuses: dict[str, int] = field(default_factory=dict)
    mean_ms: float = 0.0
    max_ms: float = 0.0

    @property
    def cpu_us(self) -> float:
        """Server CPU per request (µs): what a request costs, whoever else wants the CPU."""
        return self.server_cpu * self.seconds / self.requests * 1e6 if self.requests else 0.0


# --------------------------------------------------------------------------------------
# Load process (runs as `bench_navigation.py _load SPEC.json OUT.json`)
# --------------------------------------------------------------------------------------


async def _drive(spec: dict[str, Any]) -> dict[str, Any]:
    base = urlsplit(spec["base_url"])
    host, port = base.hostname or "127.0.0.1", base.port or 80
    targets: list[list[str | None]] = spec["targets"]  # [path, accept-datetime or None]
    random.shuffle(targets)
    expected: int = spec["expected"]
    window = Window()
    issued = 0
    plain = f"Host: {host}:{port}\r\nAuthorization: Bearer {spec['api_key']}\r\n"

    async def worker() -> None:
        nonlocal issued
        client = RawClient(host, port, spec["api_key"])
        try:
            while not window.stop:
                issued += 1
                path, accept = targets[issued % len(targets)]
                assert path is not None
                client.fixed_headers = (
                    plain if accept is None else f"{plain}Accept-Datetime: {accept}\r\n"
                )
                start = now()
                try:
                    status, _ = await client.request("GET", path)
                except _REQUEST_ERRORS:
                    status = 0
                    await client.aclose()
                    client = RawClient(host, port, spec["api_key"])
                window.count(now() - start, status)
        finally:
            await client.aclose()

    tasks = [asyncio.create_task(worker()) for _ in range(spec["concurrency"])]
    figures = await window.measure(
        tasks, server_pid=spec["server_pid"], warmup=spec["warmup"], duration=spec["duration"]
    )
    # Not the expected status is an error here: a TimeGate answers 302.
    return {**figures, "errors": figures["requests"] - window.statuses.get(expected, 0)}


def load_main(spec_path: str, out_path: str) -> int:
    return load_process_main(spec_path, out_path, _drive)


# --------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------


def seed(server: Server, uris: int, entries: int) -> tuple[list[str], list[str]]:
    """Write ``uris`` URI-Rs with ``entries`` mementos each, a few URI-Rs at a time; (their
    URI-Rs, the URI-Ms)."""
    import httpx

    salt = uuid.uuid4().hex[:8]
    uri_rs = [f"https://bench.example.org/{salt}/doc/{i}?v=1" for i in range(uris)]
    headers = {"Authorization": f"Bearer {server.api_key}"}

    def write_all(uri_r: str) -> list[str]:
        written = []
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=60.0) as client:
            for n in range(entries):
                captured = (EPOCH + timedelta(hours=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
                answer = client.post(
                    "/api/v1/mementos",
                    json={
                        "uri_r": uri_r,
                        "content": os.urandom(512).hex(),
                        "content_type": "text/plain; charset=utf-8",
                        "scope": "passage",
                        "captured_at": captured,
                        "tool": "bench_navigation",
                    },
                )
                answer.raise_for_status()
                written.append(answer.json()["uri_m"])
        return written

    with ThreadPoolExecutor(max_workers=8) as pool:
        uri_ms = [uri_m for written in pool.map(write_all, uri_rs) for uri_m in written]
    return uri_rs, uri_ms


def targets_of(kind: str, uri_rs: list[str], uri_ms: list[str], entries: int) -> list[Any]:
    if kind == "uri_m":
        return [[urlsplit(u).path, None] for u in uri_ms]
    if kind == "timegate":
        span = timedelta(hours=entries)
        dates = [EPOCH + span * random.random() for _ in range(len(uri_rs))]
        return [[f"/timegate/{u}", None] for u in uri_rs] + [
            [f"/timegate/{u}", format_datetime(d, usegmt=True)]
            for u, d in zip(uri_rs, dates, strict=True)
        ]
    prefix = "/timemap/link/" if kind == "timemap_link" else "/timemap/json/"
    return [[prefix + u, None] for u in uri_rs]


def run_phase(
    args: argparse.Namespace,
    work: Path,
    server: Server,
    backend: str,
    n: int,
    kind: str,
    targets: list[Any],
) -> Phase:
    spec = {
        "base_url": server.base_url,
        "server_pid": server.pid,
        "api_key": server.api_key,
        "targets": targets,
        "expected": EXPECTED[kind],
        "concurrency": args.concurrency,
        "warmup": args.warmup,
        "duration": args.duration,
    }
    spec_path, out_path = work / f"spec-{backend}-{kind}.json", work / f"out-{backend}-{kind}.json"
    measured = run_load_process(__file__, spec, spec_path, out_path, REPO_ROOT)
    phase = Phase(backend=backend, round=n, kind=kind, **measured)
    if not args.json:
        print(
            f"{backend:<10} {n:>5} {kind:<13} {phase.rps:>8.0f} {phase.p50_ms:>8.2f} "
            f"{phase.p99_ms:>8.2f} {phase.requests:>7} {phase.errors:>5} "
            f"{phase.server_cpu:>7.0%} {phase.cpu_us:>7.0f} {phase.load_cpu:>7.0%} "
            f"{phase.other_cpu:>6.0%}",
            flush=True,
        )
        if phase.errors:
            print(f"{'':<10} {'':>5} ^ statuses: {phase.statuses}", flush=True)
    return phase


class PostgresSchema:
    """A private schema for one run, dropped at the end (others' tests share the database)."""

    def __init__(self, url: str) -> None:
        from sqlalchemy import create_engine, text

        self.name = f"amber_bench_nav_{uuid.uuid4().hex[:10]}"
        self._engine = create_engine("postgresql+psycopg://" + url.split("://", 1)[1])
        self._text = text
        with self._engine.begin() as connection:
            connection.execute(text(f"CREATE SCHEMA {self.name}"))
        separator = "&" if "?" in url else "?"
        self.url = f"{url}{separator}options=-csearch_path%3D{self.name}"

    def drop(self) -> None:
        with self._engine.begin() as connection:
            connection.execute(self._text(f"DROP SCHEMA {self.name} CASCADE"))
        self._engine.dispose()


def run_backend(args: argparse.Namespace, work: Path, backend: str) -> list[Phase]:
    with ExitStack() as stack:
        settings = {"AMBER_DURABILITY": "relaxed"}  # reads do not depend on it; seeding does
        if backend == "postgresql":
            schema = PostgresSchema(args.postgres_url)
            stack.callback(schema.drop)
            settings["AMBER_DATABASE_URL"] = schema.url
        server = start_amber(
            "relaxed",
            work / f"data-{backend}",
            work,
            auth=True,
            root=args.amber_root,
            settings=settings,
        )
        stack.callback(server.stop)
        started = time.monotonic()
        uri_rs, uri_ms = seed(server, args.uris, args.entries)
        if not args.json:
            print(
                f"{backend:<10} seeded {len(uri_rs)} URI-Rs x {args.entries} mementos "
                f"in {time.monotonic() - started:.1f} s",
                flush=True,
            )
        targets = {kind: targets_of(kind, uri_rs, uri_ms, args.entries) for kind in args.kinds}
        phases = []
        for n in range(1, args.rounds + 1):
            shift = (n - 1) % len(args.kinds)
            for kind in args.kinds[shift:] + args.kinds[:shift]:
                phases.append(run_phase(args, work, server, backend, n, kind, targets[kind]))
        return phases


def ratios_of(phases: list[Phase]) -> dict[str, dict[str, dict[str, float]]]:
    """backend -> kind -> median, min and max of (kind / uri_m) over the rounds."""
    table = {(p.backend, p.round, p.kind): p for p in phases}
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for backend in dict.fromkeys(p.backend for p in phases):
        rounds = sorted({p.round for p in phases if p.backend == backend})
        for kind in dict.fromkeys(p.kind for p in phases if p.kind != "uri_m"):
            ratios = [
                table[(backend, n, kind)].rps / table[(backend, n, "uri_m")].rps
                for n in rounds
                if (backend, n, kind) in table and table[(backend, n, "uri_m")].rps
            ]
            rps = [table[(backend, n, kind)].rps for n in rounds if (backend, n, kind) in table]
            # The same comparison by server CPU per request (URI-M's / this route's): what
            # the server could answer with the CPU to itself, less swayed by other processes.
            cpu = [
                table[(backend, n, "uri_m")].cpu_us / table[(backend, n, kind)].cpu_us
                for n in rounds
                if (backend, n, kind) in table and table[(backend, n, kind)].cpu_us
            ]
            summary.setdefault(backend, {})[kind] = {
                "median_ratio": statistics.median(ratios),
                "min_ratio": min(ratios),
                "max_ratio": max(ratios),
                "median_rps": statistics.median(rps),
                "median_cpu_us": statistics.median(
                    table[(backend, n, kind)].cpu_us for n in rounds if (backend, n, kind) in table
                ),
                "median_cpu_ratio": statistics.median(cpu),
            }
        uri_m = [table[(backend, n, "uri_m")] for n in rounds]
        summary[backend]["uri_m"] = {
            "median_rps": statistics.median(p.rps for p in uri_m),
            "median_cpu_us": statistics.median(p.cpu_us for p in uri_m),
        }
    return summary


def print_summary(phases: list[Phase], summary: dict[str, dict[str, dict[str, float]]]) -> None:
    print()
    print(
        f"{'backend':<10} {'route':<13} {'median req/s':>12} {'/ URI-M':>8} {'range':>13} "
        f"{'':<10} {'cpu µs/req':>10} {'URI-M/route':>11}"
    )
    for backend, kinds in summary.items():
        uri_m = kinds["uri_m"]
        print(
            f"{backend:<10} {'uri_m':<13} {uri_m['median_rps']:>12.0f} {1:>8.2f} {'':>13} "
            f"{'':<10} {uri_m['median_cpu_us']:>10.0f} {1:>11.2f}"
        )
        for kind, row in kinds.items():
            if kind == "uri_m":
                continue
            verdict = "ok" if row["median_ratio"] >= GOAL_RATIO else f"below {GOAL_RATIO}"
            print(
                f"{backend:<10} {kind:<13} {row['median_rps']:>12.0f} {row['median_ratio']:>8.2f} "
                f"{row['min_ratio']:>6.2f}-{row['max_ratio']:<6.2f} {verdict:<10} "
                f"{row['median_cpu_us']:>10.0f} {row['median_cpu_ratio']:>11.2f}"
            )
    print(
        f"goal: every TimeGate and TimeMap ratio >= {GOAL_RATIO} (median of the rounds); "
        "the last column compares server CPU per request, URI-M's / the route's"
    )
    noisy = [p for p in phases if p.other_cpu > NOISY_OTHER_CPU]
    if noisy:
        worst = max(p.other_cpu for p in noisy)
        print(
            f"NOTE: other processes used up to {worst:.0%} CPU in {len(noisy)} of "
            f"{len(phases)} phases (column 'other'): absolute figures are noisy; the ratios "
            "compare phases that alternate within each round."
        )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="TimeGate/TimeMap vs URI-M (not a test).")
    parser.add_argument("--backends", default="sqlite,postgresql", help="sqlite and/or postgresql")
    parser.add_argument(
        "--postgres-url", default=os.environ.get("AMBER_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help="routes to measure (uri_m always)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of alternating phases")
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per phase")
    parser.add_argument("--concurrency", type=int, default=32, help="keep-alive connections")
    parser.add_argument("--uris", type=int, default=20, help="URI-Rs written")
    parser.add_argument("--entries", type=int, default=100, help="mementos per URI-R")
    parser.add_argument("--amber-root", type=Path, default=REPO_ROOT, help="checkout to serve")
    parser.add_argument("--data-root", default=None, help="where the temporary data dirs go")
    parser.add_argument("--json", action="store_true", help="print machine-readable results only")
    args = parser.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    args.kinds = ["uri_m", *[k for k in kinds if k != "uri_m"]]
    args.amber_root = args.amber_root.resolve()
    for backend in args.backends:
        if backend not in ("sqlite", "postgresql"):
            parser.error("--backends takes sqlite and/or postgresql")
    for kind in args.kinds:
        if kind not in KINDS:
            parser.error(f"--kinds takes {', '.join(KINDS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_load"]:
        return load_main(argv[1], argv[2])
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="amber-bench-nav-", dir=args.data_root))
    if not args.json:
        print(
            f"Amber navigation benchmark  commit={_git_commit(args.amber_root)} "
            f"cpus={os.cpu_count()} concurrency={args.concurrency} duration={args.duration}s "
            f"rounds={args.rounds} uris={args.uris} entries={args.entries}",
            flush=True,
        )
        print(
            f"{'backend':<10} {'round':>5} {'route':<13} {'req/s':>8} {'p50 ms':>8} "
            f"{'p99 ms':>8} {'n':>7} {'err':>5} {'srv cpu':>7} {'µs/req':>7} {'load':>7} "
            f"{'other':>6}",
            flush=True,
        )
    phases: list[Phase] = []
    try:
        for backend in args.backends:
            phases += run_backend(args, work, backend)
    finally:
        remove_data(work)
    summary = ratios_of(phases)
    if args.json:
        print(json.dumps({"phases": [asdict(p) for p in phases], "summary": summary}, indent=2))
    else:
        print_summary(phases, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
