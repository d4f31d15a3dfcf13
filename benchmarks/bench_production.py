"""The production shape: Amber on PostgreSQL + SeaweedFS next to the S3 server's own speed.

Not a test: it measures, prints a table and exits 0. See benchmarks/README.md.

    python benchmarks/bench_production.py                        # 1 and 2 workers, ~2 minutes
    python benchmarks/bench_production.py --workers 1 --rounds 1 --duration 4

It starts SeaweedFS (``weed mini``, infra/seaweedfs.py) with a fresh bucket, a private
PostgreSQL schema (dropped at the end), and Amber as a user would (``python -m api.cli
serve --workers N`` with ``AMBER_DATABASE_URL`` and an ``s3://`` ``AMBER_BLOB_STORE``,
durability ``full``, an agent key). A separate load process (bench_http.py's keep-alive
client) then drives, round after round and alternated so a drifting machine weighs on all
alike, the same concurrency on:

* ``write``   Amber: POST /api/v1/mementos, distinct random 4 KiB passages;
              S3:    presigned PUT of distinct 4 KiB objects, straight to the S3 server;
* ``resolve`` Amber: GET of random URI-Ms out of 1,000 written (the bytes, re-hashed);
              S3:    presigned GET of random objects out of 1,000 of the same size.

Ratios are Amber / S3 throughput of the same round (goals, issue #20: resolve >= 0.8,
write >= 0.5). Each phase also reports CPU per request of Amber (all its worker
processes), of PostgreSQL (every ``postgres`` process of the machine: other users of the
database are noise, shown by ``other``) and of the S3 server.

``--s3-client lean|botocore`` sets Amber's ``AMBER_S3_CLIENT`` (before and after from one
tree); ``--boto3`` and ``--lean`` add the S3 server driven from 16 threads of this process
by boto3, or by Amber's lean client (archive/blobstore/s3_lean.py) with Amber's key layout:
the floor of a Python caller using that client.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_http import (  # the sibling script, imported as a module
    _REQUEST_ERRORS,
    NOISY_OTHER_CPU,
    PASSAGE_BYTES,
    REPO_ROOT,
    RawClient,
    Server,
    _free_port,
    _git_commit,
    _make_key,
    _passage_body,
    _server_env,
    scrape_metrics,
    summarize_profile,
)
from bench_navigation import DEFAULT_POSTGRES, PostgresSchema
from loadloop import (
    load_process_main,
    machine_cpu_seconds,
    percentile,
    process_cpu_seconds,
    run_load_process,
)

sys.path.insert(0, str(REPO_ROOT))

from infra import seaweedfs as seaweedfs_infra

GOALS = {"resolve": 0.8, "write": 0.5}
OBJECTS = 1000  # resolve picks among this many URI-Ms (and S3 objects)


@dataclass
class Phase:
    workers: int
    round: int
    target: str  # "amber" | "s3"
    kind: str  # "write" | "resolve"
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    amber_cpu_ms: float  # CPU milliseconds per request, all Amber processes
    postgres_cpu_ms: float
    s3_cpu_ms: float
    load_cpu: float  # load process, cores
    other_cpu: float  # the rest of the machine, cores (noise)
    statuses: dict[str, int]
    # From Amber's GET /metrics over an Amber write phase (warm-up included); else None.
    writes_per_commit: float | None = None


# --------------------------------------------------------------------------------------
# CPU accounting
# --------------------------------------------------------------------------------------


def tree_pids(pid: int) -> list[int]:
    """A process and all its descendants (uvicorn's supervisor and its workers)."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    stack.extend(int(child) for child in handle.read().split())
            except OSError:
                continue
    return found


def postgres_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as handle:
                if handle.read().strip() == "postgres":
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def cpu_of(pids: list[int]) -> float:
    return sum(process_cpu_seconds(pid) for pid in pids)


def postgres_cpu() -> dict[int, float]:
    return {pid: process_cpu_seconds(pid) for pid in postgres_pids()}


def grown(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two readings by the processes alive at the second: a backend that
    started meanwhile counts whole; one that exited meanwhile is lost (a lower bound)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


# --------------------------------------------------------------------------------------
# Load (a separate process: this script re-run with ``_load``)
# --------------------------------------------------------------------------------------


async def _drive(spec: dict[str, Any]) -> dict[str, Any]:
    base = urlsplit(spec["base_url"])
    host, port = base.hostname or "127.0.0.1", base.port or 80
    method: str = spec["method"]
    targets: list[str] = spec["targets"]  # paths (with query), one per request for PUTs
    distinct = spec["distinct"]  # each target used once (S3 PUTs)
    amber_write = spec["amber_write"]
    salt = f"prod-{os.getpid()}"
    state = {"measuring": False, "stop": False, "next": 0}
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    written: list[str] = []
    body_4k = os.urandom(PASSAGE_BYTES)
    now = time.perf_counter

    async def worker() -> None:
        client = RawClient(host, port, spec.get("api_key"))
        try:
            while not state["stop"]:
                index = state["next"]
                state["next"] += 1
                if distinct and index >= len(targets):
                    break
                if spec.get("until_kept") and index >= spec["keep"]:
                    break
                body = None
                if amber_write:
                    body = _passage_body(index, salt, OBJECTS)
                    path = targets[0]
                elif method == "PUT":
                    body = body_4k
                    path = targets[index]
                elif distinct:
                    path = targets[index]
                else:
                    path = targets[random.randrange(len(targets))]
                start = now()
                try:
                    status, data = await client.request(method, path, body)
                except _REQUEST_ERRORS:
                    status, data = 0, b""
                    await client.aclose()
                    client = RawClient(host, port, spec.get("api_key"))
                elapsed = now() - start
                if amber_write and status in (200, 201) and len(written) < spec["keep"]:
                    written.append(json.loads(data)["uri_m"])
                if state["measuring"] and not state["stop"]:
                    latencies.append(elapsed)
                    statuses[status] = statuses.get(status, 0) + 1
        finally:
            await client.aclose()

    def cpu_now() -> tuple[float, dict[int, float], float, float, float]:
        return (
            cpu_of(tree_pids(spec["amber_pid"])) if spec["amber_pid"] else 0.0,
            postgres_cpu(),
            process_cpu_seconds(spec["s3_pid"]),
            time.process_time(),
            machine_cpu_seconds(),
        )

    tasks = [asyncio.create_task(worker()) for _ in range(spec["concurrency"])]
    if spec.get("until_kept"):  # seeding: every request once, nothing measured
        await asyncio.gather(*tasks)
        return {"written": written, "statuses": {}}
    await asyncio.sleep(spec["warmup"])
    before, t0 = cpu_now(), now()
    state["measuring"] = True
    await asyncio.sleep(spec["duration"])
    state["stop"] = True
    after, t1 = cpu_now(), now()
    await asyncio.gather(*tasks, return_exceptions=True)
    seconds = t1 - t0
    count = len(latencies)
    latencies.sort()
    used = [after[0] - before[0], grown(before[1], after[1])]
    used += [b - a for a, b in zip(before[2:], after[2:], strict=True)]
    return {
        "requests": count,
        "errors": sum(n for status, n in statuses.items() if not 200 <= status < 300),
        "seconds": seconds,
        "rps": count / seconds if seconds else 0.0,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "amber_cpu_ms": used[0] / count * 1000 if count else 0.0,
        "postgres_cpu_ms": used[1] / count * 1000 if count else 0.0,
        "s3_cpu_ms": used[2] / count * 1000 if count else 0.0,
        "load_cpu": used[3] / seconds if seconds else 0.0,
        "other_cpu": max(0.0, used[4] - used[0] - used[1] - used[2] - used[3]) / seconds
        if seconds
        else 0.0,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "written": written,
    }


def run_load(work: Path, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return run_load_process(
        __file__, spec, work / f"spec-{name}.json", work / f"out-{name}.json", REPO_ROOT
    )


# --------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------


class S3Side:
    """The S3 server and a bucket; presigned URLs for its own PUTs and GETs."""

    def __init__(self, server: seaweedfs_infra.SeaweedFS) -> None:
        import boto3
        from botocore.config import Config

        self.server = server
        self.bucket = f"bench-{uuid.uuid4().hex[:10]}"
        self.client = boto3.client(
            "s3",
            endpoint_url=server.endpoint_url,
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
        )
        self.client.create_bucket(Bucket=self.bucket)
        self.written = 0

    def presigned(self, method: str, key: str) -> str:
        url = self.client.generate_presigned_url(
            "put_object" if method == "PUT" else "get_object",
            Params={"Bucket": self.bucket, "Key": key},
            ExpiresIn=3600,
        )
        parts = urlsplit(url)
        return f"{parts.path}?{parts.query}"

    def fresh_puts(self, count: int) -> list[str]:
        start, self.written = self.written, self.written + count
        return [self.presigned("PUT", f"objects/{n:08d}") for n in range(start, start + count)]

    def gets(self) -> list[str]:
        return [self.presigned("GET", f"objects/{n:08d}") for n in range(OBJECTS)]


def boto3_phase(
    args: argparse.Namespace, s3: S3Side, kind: str, start: int, client: str = "boto3"
) -> dict[str, Any]:
    """The S3 server driven by a Python client from threads of this process, as Amber drives
    it (conditional create with a SHA-256 checksum, or a GET): the floor of any Python caller
    using that client, in CPU per request of the caller. ``client``: "boto3", or "lean"
    (archive/blobstore/s3_lean.py, Amber's default data path; its writes use Amber's key
    layout, so their S3 CPU per request is what Amber's PUTs cost the server)."""
    import threading

    body = os.urandom(PASSAGE_BYTES)
    digest = hashlib.sha256(body).digest()
    checksum = base64.b64encode(digest).decode("ascii")
    lean = _lean_client(args, s3) if client == "lean" else None
    state = {"measuring": False, "stop": False}
    counts: list[int] = []
    lock = threading.Lock()
    sequence = iter(range(start, 10**9))

    def work() -> None:
        done = 0
        while not state["stop"]:
            if lean is not None and kind == "write":
                with lock:
                    n = next(sequence)
                lean.put_object(_amber_layout(n), body, digest, {})
            elif lean is not None:
                lean.get_object(f"objects/{random.randrange(OBJECTS):08d}", None)
            elif kind == "write":
                with lock:
                    n = next(sequence)
                s3.client.put_object(
                    Bucket=s3.bucket,
                    Key=f"objects/{n:08d}",
                    Body=body,
                    IfNoneMatch="*",
                    ChecksumAlgorithm="SHA256",
                    ChecksumSHA256=checksum,
                )
            else:
                s3.client.get_object(
                    Bucket=s3.bucket, Key=f"objects/{random.randrange(OBJECTS):08d}"
                )["Body"].read()
            if state["measuring"]:
                done += 1
        with lock:
            counts.append(done)

    threads = [threading.Thread(target=work) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    time.sleep(args.warmup)
    cpu0 = (time.process_time(), process_cpu_seconds(s3.server.process.pid), machine_cpu_seconds())
    t0 = time.perf_counter()
    state["measuring"] = True
    time.sleep(args.duration)
    state["stop"] = True
    seconds = time.perf_counter() - t0
    cpu1 = (time.process_time(), process_cpu_seconds(s3.server.process.pid), machine_cpu_seconds())
    for thread in threads:
        thread.join()
    if lean is not None:
        lean.close()
    count = sum(counts)
    used = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {
        "requests": count,
        "errors": 0,
        "seconds": seconds,
        "rps": count / seconds,
        "p50_ms": 0.0,
        "p99_ms": 0.0,
        "amber_cpu_ms": 0.0,
        "postgres_cpu_ms": 0.0,
        "s3_cpu_ms": used[1] / count * 1000 if count else 0.0,
        "load_cpu": used[0] / seconds,  # the boto3 caller: CPU per request is client_cpu_ms
        "other_cpu": max(0.0, used[2] - used[0] - used[1]) / seconds,
        "statuses": {},
    }


def _amber_layout(n: int) -> str:
    """A key shaped as Amber's blob keys (``blobs/<2 hex>/<2 hex>/<64 hex>``, spread as
    hashes spread), so the lean floor's writes cost the S3 server what Amber's cost it."""
    digest = hashlib.sha256(n.to_bytes(8, "big")).hexdigest()
    return f"lean/blobs/{digest[:2]}/{digest[2:4]}/{digest}"


def _lean_client(args: argparse.Namespace, s3: S3Side) -> Any:
    from botocore.credentials import Credentials

    sys.path.insert(0, str(args.amber_root))
    from archive.blobstore.s3_lean import LeanS3

    server = s3.server
    return LeanS3(
        server.endpoint_url,
        "us-east-1",
        s3.bucket,
        Credentials(server.access_key, server.secret_key),
        pool_size=args.concurrency,
        connect_timeout=5.0,
        read_timeout=30.0,
    )


def start_amber(
    workers: int, database_url: str, s3: S3Side, work: Path, args: argparse.Namespace
) -> Server:
    port = _free_port()
    env = _server_env(
        {
            "AMBER_DATA_DIR": str(work / f"data-{workers}"),
            "AMBER_DATABASE_URL": database_url,
            "AMBER_BLOB_STORE": f"s3://{s3.bucket}/amber-{workers}",
            "AMBER_DURABILITY": "full",
            "AMBER_KEY_SECRET": "bench-production-" + "x" * 32,
            "AMBER_RATE_LIMIT_PER_SECOND": "1000000000",
            "AMBER_RATE_LIMIT_BURST": "1000000000",
            "AMBER_S3_CLIENT": args.s3_client,
            **s3.server.env(),
        },
        args.amber_root,
    )
    cli = [sys.executable, "-m", "api.cli"]
    api_key = _make_key(cli, "agent", args.amber_root, env)
    admin_key = _make_key(cli, "admin", args.amber_root, env)
    argv = [*cli, "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    server = Server(f"amber-{workers}w", argv, env, port, work, cwd=args.amber_root)
    server.api_key = api_key
    server.admin_key = admin_key
    server.wait_ready("/healthz")
    return server


def start_floor(
    workers: int, database_url: str, s3: S3Side, work: Path, args: argparse.Namespace
) -> Server:
    """benchmarks/floor_s3_app.py under uvicorn with ``workers`` processes, on its own schema
    and key prefix: the least work a durable write on PostgreSQL + S3 can be."""
    port = _free_port()
    env = _server_env(
        {
            "FLOOR_DATABASE_URL": database_url,
            "FLOOR_S3_ENDPOINT": s3.server.endpoint_url,
            "FLOOR_S3_BUCKET": s3.bucket,
            "FLOOR_S3_PREFIX": f"floor-{workers}/",
            **s3.server.env(),
        },
        args.amber_root,
    )
    argv = [
        *(sys.executable, "-m", "uvicorn", "floor_s3_app:app"),
        *("--app-dir", str(Path(__file__).resolve().parent), "--host", "127.0.0.1"),
        *("--port", str(port), "--workers", str(workers), "--no-access-log"),
        *("--log-level", "warning"),
    ]
    server = Server(f"floor-{workers}w", argv, env, port, work, cwd=args.amber_root)
    server.wait_ready("/healthz")
    return server


def start_profiler(args: argparse.Namespace, amber: Server, label: str) -> Any:
    """py-spy (every running thread, all Amber processes) over one phase, if asked."""
    if not args.py_spy:
        return None
    out = Path(args.py_spy) / f"{label}.folded"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = ["py-spy", "record", "--pid", str(amber.pid), "--subprocesses", "--nonblocking"]
    argv += ["--rate", "200", "--format", "raw", "-o", str(out)]
    log = open(out.with_suffix(".log"), "wb")  # closed by stop_profiler
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), out, log


def stop_profiler(profiler: Any) -> None:
    if profiler is None:
        return
    process, out, log = profiler
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    finally:
        log.close()
    if out.exists():
        print(summarize_profile(out, top=40), file=sys.stderr)


def phase_spec(
    args: argparse.Namespace, base_url: str, amber_pid: int, s3_pid: int, **extra: Any
) -> dict[str, Any]:
    return {
        "base_url": base_url,
        "amber_pid": amber_pid,
        "s3_pid": s3_pid,
        "concurrency": args.concurrency,
        "warmup": args.warmup,
        "duration": args.duration,
        "keep": 0,
        "distinct": False,
        "amber_write": False,
        **extra,
    }


def run_workers(
    args: argparse.Namespace, work: Path, s3: S3Side, workers: int, gets: list[str]
) -> list[Phase]:
    phases: list[Phase] = []
    with ExitStack() as stack:
        schema = PostgresSchema(args.postgres_url)
        stack.callback(schema.drop)
        amber = start_amber(workers, schema.url, s3, work, args)
        stack.callback(amber.stop)
        floor = None
        if args.floor:
            floor_schema = PostgresSchema(args.postgres_url)
            stack.callback(floor_schema.drop)
            floor = start_floor(workers, floor_schema.url, s3, work, args)
            stack.callback(floor.stop)
        s3_pid = s3.server.process.pid
        common = {"api_key": amber.api_key}
        # The 1,000 URI-Ms resolved: written first, not measured.
        seeded = run_load(
            work,
            f"seed-{workers}",
            {
                **phase_spec(args, amber.base_url, amber.pid, s3_pid, **common),
                "method": "POST",
                "targets": ["/api/v1/mementos"],
                "amber_write": True,
                "keep": OBJECTS,
                "warmup": 0.0,
                "until_kept": True,
            },
        )
        uri_ms = [urlsplit(u).path for u in seeded["written"]]
        if len(uri_ms) < OBJECTS:
            raise RuntimeError(f"seeding wrote only {len(uri_ms)} mementos: {seeded['statuses']}")
        # Each URI-M read once, not measured: resolve measures a replica in its steady state
        # (what it remembers is warm), as the S3 server's GETs read objects just written.
        run_load(
            work,
            f"warm-{workers}",
            {
                **phase_spec(args, amber.base_url, amber.pid, s3_pid, **common),
                "method": "GET",
                "targets": uri_ms,
                "distinct": True,
                "until_kept": True,
                "keep": OBJECTS,
            },
        )
        s3_base = s3.server.endpoint_url
        # Presigned PUTs to spend: more than the S3 server answers in a phase (~1,700/s here).
        budget = int(4000 * (args.warmup + args.duration))
        for n in range(1, args.rounds + 1):
            order = ["write", "resolve"] if n % 2 else ["resolve", "write"]
            for kind in order:
                floors = [*(["boto3"] if args.boto3 else []), *(["lean"] if args.lean else [])]
                targets = ["amber", "s3", *floors]
                if floor is not None and kind == "write":
                    targets.insert(1, "floor")
                for target in targets if n % 2 else targets[::-1]:
                    if target in ("boto3", "lean"):
                        result = boto3_phase(args, s3, kind, s3.written, target)
                        s3.written += int(result["requests"] * 1.5) + 100000
                        phase = Phase(workers=workers, round=n, target=target, kind=kind, **result)
                        phases.append(phase)
                        print_phase(phase, args)
                        continue
                    if target == "floor":
                        assert floor is not None
                        extra = {"method": "POST", "targets": ["/api/v1/mementos"]}
                        spec = phase_spec(args, floor.base_url, floor.pid, s3_pid, amber_write=True)
                    elif target == "amber" and kind == "write":
                        extra = {"method": "POST", "targets": ["/api/v1/mementos"]}
                        spec = phase_spec(
                            args, amber.base_url, amber.pid, s3_pid, amber_write=True, **common
                        )
                    elif target == "amber":
                        extra = {"method": "GET", "targets": uri_ms}
                        spec = phase_spec(args, amber.base_url, amber.pid, s3_pid, **common)
                    elif kind == "write":
                        extra = {"method": "PUT", "targets": s3.fresh_puts(budget)}
                        spec = phase_spec(args, s3_base, amber.pid, s3_pid, distinct=True)
                    else:
                        extra = {"method": "GET", "targets": gets}
                        spec = phase_spec(args, s3_base, amber.pid, s3_pid)
                    label = f"{workers}-{n}-{target}-{kind}"
                    profiler = start_profiler(args, amber, label) if target == "amber" else None
                    measured = target == "amber" and kind == "write"
                    before = scrape_metrics(amber) if measured else None
                    try:
                        result = run_load(work, label, {**spec, **extra})
                    finally:
                        stop_profiler(profiler)
                    result.pop("written")
                    if before is not None:
                        result["writes_per_commit"] = writes_per_commit(before, amber)
                    phase = Phase(workers=workers, round=n, target=target, kind=kind, **result)
                    phases.append(phase)
                    print_phase(phase, args)
    return phases


def writes_per_commit(before: dict[str, float], amber: Server) -> float | None:
    """Memento writes per group commit since ``before`` (all workers), from /metrics."""
    after = scrape_metrics(amber)
    if after is None:
        return None
    batches = after.get("amber_write_batches_total", 0.0) - before.get(
        "amber_write_batches_total", 0.0
    )
    items = after.get("amber_write_batch_mementos_total", 0.0) - before.get(
        "amber_write_batch_mementos_total", 0.0
    )
    return items / batches if batches else None


def print_phase(p: Phase, args: argparse.Namespace) -> None:
    if args.json:
        return
    print(
        f"{p.workers:>2}w r{p.round} {p.target:<6}{p.kind:<8}{p.rps:>9.0f} req/s  "
        f"p50 {p.p50_ms:6.2f} ms  p99 {p.p99_ms:7.2f} ms  CPU ms/req: amber "
        f"{p.amber_cpu_ms:5.2f} pg {p.postgres_cpu_ms:5.2f} s3 {p.s3_cpu_ms:5.2f}  "
        f"load {p.load_cpu:4.2f} other {p.other_cpu:4.2f}"
        + (f"  writes/commit {p.writes_per_commit:.1f}" if p.writes_per_commit else "")
        + (f"  statuses {p.statuses}" if p.errors else ""),
        flush=True,
    )


def summary_of(phases: list[Phase]) -> list[dict[str, Any]]:
    rows = []
    for workers in sorted({p.workers for p in phases}):
        for kind in ("write", "resolve"):
            mine = [p for p in phases if p.workers == workers and p.kind == kind]
            boto3 = [p for p in mine if p.target == "boto3" and p.rps]
            lean = [p for p in mine if p.target == "lean" and p.rps]
            ratios, floor_ratios, of_floor = [], [], []
            for n in sorted({p.round for p in mine}):
                amber = [p for p in mine if p.round == n and p.target == "amber"]
                s3 = [p for p in mine if p.round == n and p.target == "s3"]
                floor = [p for p in mine if p.round == n and p.target == "floor" and p.rps]
                if amber and s3 and s3[0].rps:
                    ratios.append(amber[0].rps / s3[0].rps)
                if floor and s3 and s3[0].rps:
                    floor_ratios.append(floor[0].rps / s3[0].rps)
                    of_floor.append(amber[0].rps / floor[0].rps if amber else 0.0)

            def median(target: str, field: str, of: list[Phase] = mine) -> float:
                return statistics.median(getattr(p, field) for p in of if p.target == target)

            rows.append(
                {
                    "workers": workers,
                    "kind": kind,
                    "amber_rps": median("amber", "rps"),
                    "s3_rps": median("s3", "rps"),
                    "ratio": statistics.median(ratios) if ratios else 0.0,
                    "ratio_min": min(ratios, default=0.0),
                    "ratio_max": max(ratios, default=0.0),
                    "goal": GOALS[kind],
                    "amber_cpu_ms": median("amber", "amber_cpu_ms"),
                    "amber_pg_cpu_ms": median("amber", "postgres_cpu_ms"),
                    "amber_s3_cpu_ms": median("amber", "s3_cpu_ms"),
                    "s3_cpu_ms": median("s3", "s3_cpu_ms"),
                    "boto3_rps": median("boto3", "rps") if boto3 else None,
                    "boto3_cpu_ms": statistics.median(p.load_cpu / p.rps * 1000 for p in boto3)
                    if boto3
                    else None,
                    "lean_rps": median("lean", "rps") if lean else None,
                    "lean_cpu_ms": statistics.median(p.load_cpu / p.rps * 1000 for p in lean)
                    if lean
                    else None,
                    "floor_rps": median("floor", "rps") if floor_ratios else None,
                    "floor_ratio": statistics.median(floor_ratios) if floor_ratios else None,
                    "floor_cpu_ms": median("floor", "amber_cpu_ms") if floor_ratios else None,
                    "amber_of_floor": statistics.median(of_floor) if of_floor else None,
                    "noisy": any(p.other_cpu > NOISY_OTHER_CPU for p in mine),
                }
            )
    return rows


def print_summary(rows: list[dict[str, Any]]) -> None:
    print()
    print(
        f"{'workers':>7} {'phase':<8}{'Amber req/s':>12}{'S3 req/s':>10}{'ratio':>7} "
        f"{'(range)':>13} {'goal':>5}   CPU ms/req under Amber: amber / pg / s3; S3 alone: s3"
    )
    for r in rows:
        print(
            f"{r['workers']:>7} {r['kind']:<8}{r['amber_rps']:>12.0f}{r['s3_rps']:>10.0f}"
            f"{r['ratio']:>7.2f} {r['ratio_min']:>6.2f}-{r['ratio_max']:<6.2f}"
            f"{r['goal']:>5.1f}   {r['amber_cpu_ms']:.2f} / {r['amber_pg_cpu_ms']:.2f} / "
            f"{r['amber_s3_cpu_ms']:.2f};  {r['s3_cpu_ms']:.2f}"
            + ("  (noisy machine)" if r["noisy"] else "")
            + (
                f"\n{'':>16}boto3 from threads: {r['boto3_rps']:.0f} req/s, "
                f"{r['boto3_cpu_ms']:.2f} ms CPU per request in the caller"
                if r["boto3_rps"]
                else ""
            )
            + (
                f"\n{'':>16}floor (floor_s3_app.py): {r['floor_rps']:.0f} req/s = "
                f"{r['floor_ratio']:.2f} of S3's own, {r['floor_cpu_ms']:.2f} ms CPU per "
                f"request; Amber = {r['amber_of_floor']:.2f} of the floor"
                if r.get("floor_rps")
                else ""
            )
            + (
                f"\n{'':>16}lean client from threads: {r['lean_rps']:.0f} req/s, "
                f"{r['lean_cpu_ms']:.2f} ms CPU per request in the caller"
                if r["lean_rps"]
                else ""
            )
        )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per phase")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES)
    parser.add_argument("--amber-root", type=Path, default=REPO_ROOT, help="code to measure")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--s3-client",
        choices=["lean", "botocore"],
        default="lean",
        help="Amber's AMBER_S3_CLIENT (lean: archive/blobstore/s3_lean.py; botocore: boto3)",
    )
    parser.add_argument(
        "--lean",
        action="store_true",
        help="also drive the S3 server with Amber's lean client from threads of this process",
    )
    parser.add_argument(
        "--boto3",
        action="store_true",
        help="also drive the S3 server with boto3 from threads of this process (the floor of "
        "a Python caller using botocore; its CPU per request is 'load' / req/s)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also drive benchmarks/floor_s3_app.py, the least work a durable write on "
        "PostgreSQL + S3 can be (its CPU is shown in the amber column)",
    )
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="record py-spy profiles of Amber in each of its phases into DIR (perturbs them)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_load"]:
        return load_process_main(argv[1], argv[2], _drive)
    args = parse_args(argv)
    args.amber_root = args.amber_root.resolve()
    phases: list[Phase] = []
    with tempfile.TemporaryDirectory(prefix="amber-bench-prod-") as temp:
        work = Path(temp)
        with seaweedfs_infra.seaweedfs(work / "seaweedfs") as server:
            s3 = S3Side(server)
            # The 1,000 objects the S3 server's own GETs read, 4 KiB each.
            body = os.urandom(PASSAGE_BYTES)
            for n in range(OBJECTS):
                s3.client.put_object(Bucket=s3.bucket, Key=f"objects/{n:08d}", Body=body)
            s3.written = OBJECTS
            gets = s3.gets()
            for workers in args.workers:
                phases.extend(run_workers(args, work, s3, workers, gets))
    rows = summary_of(phases)
    if args.json:
        print(
            json.dumps(
                {
                    "commit": _git_commit(args.amber_root),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "summary": rows,
                    "phases": [asdict(p) for p in phases],
                },
                indent=2,
            )
        )
    else:
        print_summary(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
