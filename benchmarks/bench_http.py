"""HTTP benchmark: Amber's write and URI-M resolve throughput next to a trivial FastAPI app.

Not a test: it measures, prints a table and exits 0. See benchmarks/README.md.

    python benchmarks/bench_http.py                  # both durability modes, ~2 minutes
    python benchmarks/bench_http.py --modes full --duration 5 --json

For each durability mode (``AMBER_DURABILITY=full``, then ``relaxed``) it starts Amber as a
user would (``python -m api.cli serve`` with a fresh temporary ``AMBER_DATA_DIR``), next to
the baseline app (``benchmarks/baseline_app.py``) served by uvicorn with the same options,
and drives both from a *separate load process* (this script re-run with ``_load``) with a
bounded number of concurrent keep-alive connections:

* ``write``   POST /api/v1/mementos, distinct random 4 KiB passages;
  baseline: POST /write with the very same kind of body.
* ``resolve`` GET of the ``uri_m`` answers of the writes (each verified against its hash);
  baseline: GET /bytes, 4 KiB.

Ratios are Amber throughput / baseline throughput for the same kind of request.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadloop import (  # the sibling module
    Window,
    load_process_main,
    now,
    run_load_process,
)
from loadloop import percentile as percentile  # imported from here by bench_production.py

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
GOAL_RATIO = 0.8
AUTH_GOAL_RATIO = 0.9  # authentication may cost at most 10% of throughput
NOISY_OTHER_CPU = 0.25  # busy CPU (in cores) of everything but the server and the load
SATURATED_LOAD_CPU = 0.85  # load process CPU (in cores) above which it is the bottleneck
PASSAGE_BYTES = 4096


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    mode: str
    target: str  # "amber" | "baseline"
    kind: str  # "write" | "resolve"
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    server_cpu: float  # server process CPU seconds per wall second (1.0 = one core busy)
    load_cpu: float  # load process CPU seconds per wall second
    other_cpu: float  # the rest of the machine's busy CPU per wall second (noise indicator)
    statuses: dict[str, int] = field(default_factory=dict)
    # From Amber's GET /metrics, over the phase (warm-up included): writes per group commit,
    # or the share of URI-M answers from memory. None: the baseline, or a version without it.
    writes_per_commit: float | None = None
    answers_from_memory: float | None = None


# --------------------------------------------------------------------------------------
# Load process (runs as `bench_http.py _load SPEC.json OUT.json`)
# --------------------------------------------------------------------------------------


def remove_data(path: Path) -> None:
    """Delete a run's data dir, saying what that does to the next run.

    ext4 does not hand out an inode freed in the last 60-300 s again; it scans past each
    one (``recently_deleted`` in the kernel). Right after tens of thousands of blobs were
    deleted, creating files and directories costs measurably more kernel time: measured
    here, library writes went from 390 to 613 to 803 µs of system CPU per write over three
    back-to-back runs.
    """
    shutil.rmtree(path, ignore_errors=True)
    print(
        f"removed {path}; ext4 keeps freed inodes out of reuse for 1-5 minutes, so a run "
        "started sooner pays slower file creation (benchmarks/README.md)",
        file=sys.stderr,
    )


def _passage_body(index: int, salt: str, uri_space: int) -> bytes:
    """A write request: a distinct random 4 KiB text passage of one of uri_space URI-Rs."""
    content = base64.b64encode(os.urandom(PASSAGE_BYTES * 3 // 4)).decode("ascii")
    return json.dumps(
        {
            "uri_r": f"https://bench.example.org/{salt}/doc/{index % uri_space}?v=1",
            "content": content,
            "content_type": "text/plain; charset=utf-8",
            "scope": "passage",
            "tool": "bench_http",
        },
        separators=(",", ":"),
    ).encode("ascii")


class RawClient:
    """A minimal HTTP/1.1 keep-alive client over asyncio streams (one connection per worker).

    It only has to talk to uvicorn on loopback: Content-Length or chunked bodies, no TLS,
    no redirects. It costs the load process far less CPU per request than httpx, which
    matters on a 2-core machine where the load process competes with the server.
    """

    def __init__(self, host: str, port: int, api_key: str | None = None) -> None:
        self.host = host
        self.port = port
        self.fixed_headers = f"Host: {host}:{port}\r\n"
        if api_key:
            self.fixed_headers += f"Authorization: Bearer {api_key}\r\n"
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self._writer is None:
            await self._connect()
        assert self._reader is not None and self._writer is not None
        head = f"{method} {path} HTTP/1.1\r\n{self.fixed_headers}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self._writer.write(head.encode("ascii") + b"\r\n" + (body or b""))
        reader = self._reader
        raw_head = await reader.readuntil(b"\r\n\r\n")
        lines = raw_head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        chunked = close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                close = True
        if chunked:
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers from uvicorn
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            data = b"".join(parts)
        elif length is not None:
            data = await reader.readexactly(length) if length else b""
        else:
            data = await reader.read()
            close = True
        if close:
            await self.aclose()
        return status, data

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with suppress(Exception):
                await self._writer.wait_closed()
        self._reader = self._writer = None


class HttpxClient:
    """The same interface over one shared httpx.AsyncClient (connection pool)."""

    def __init__(self, shared: Any, base: str, api_key: str | None = None) -> None:
        self.shared = shared
        self.base = base
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.post_headers = {**self.headers, "content-type": "application/json"}

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = self.post_headers if body is not None else self.headers
        response = await self.shared.request(
            method, self.base + path, content=body, headers=headers
        )
        return response.status_code, response.content

    async def aclose(self) -> None:
        return None


try:
    import httpx as _httpx

    _HTTPX_ERRORS: tuple[type[Exception], ...] = (_httpx.HTTPError,)
except ImportError:  # pragma: no cover
    _HTTPX_ERRORS = ()
_REQUEST_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
    ValueError,
    *_HTTPX_ERRORS,
)


async def _drive(spec: dict[str, Any]) -> dict[str, Any]:
    base = urlsplit(spec["base_url"])
    host, port = base.hostname or "127.0.0.1", base.port or 80
    kind: str = spec["kind"]
    concurrency: int = spec["concurrency"]
    warmup: float = spec["warmup"]
    duration: float | None = spec.get("duration")
    total: int | None = spec.get("requests")
    salt = f"{spec['mode']}-{os.getpid()}"
    uri_space = spec.get("uri_space", 1000)

    paths: list[str] = []
    if kind == "resolve":
        paths = [urlsplit(u).path for u in spec["urls"]] if spec.get("urls") else [spec["path"]]
        random.shuffle(paths)

    shared = None
    if spec["client"] == "httpx":
        import httpx

        shared = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            timeout=60.0,
        )

    def make_client() -> Any:
        if shared is not None:
            return HttpxClient(shared, f"http://{host}:{port}", spec.get("api_key"))
        return RawClient(host, port, spec.get("api_key"))

    window = Window()
    uri_ms: list[str] = []
    counter = issued = 0

    async def worker() -> None:
        nonlocal counter, issued
        client = make_client()
        try:
            while not window.stop:
                if window.measuring and total is not None:
                    if issued >= total:
                        break
                    issued += 1
                counter += 1
                index = counter
                counted = window.measuring or total is None
                body = _passage_body(index, salt, uri_space) if kind == "write" else None
                start = now()
                try:
                    if body is not None:
                        status, data = await client.request("POST", spec["path"], body)
                    else:
                        status, data = await client.request("GET", paths[index % len(paths)])
                except _REQUEST_ERRORS:
                    status, data = 0, b""  # counted as an error; reconnect
                    await client.aclose()
                    client = make_client()
                elapsed = now() - start
                if kind == "write" and status in (200, 201) and data[:1] == b"{":
                    found = json.loads(data).get("uri_m")
                    if found:
                        uri_ms.append(found)
                if counted:
                    window.count(elapsed, status)
        finally:
            await client.aclose()

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    figures = await window.measure(
        tasks, server_pid=spec["server_pid"], warmup=warmup, duration=duration
    )
    if shared is not None:
        await shared.aclose()
    return {**figures, "uri_ms": uri_ms}


def load_main(spec_path: str, out_path: str) -> int:
    return load_process_main(spec_path, out_path, _drive)


# --------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A server subprocess; stopped with SIGINT (uvicorn's graceful shutdown)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        port: int,
        log_dir: Path,
        cwd: Path = REPO_ROOT,
    ) -> None:
        self.name = name
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.api_key: str | None = None
        self.admin_key: str | None = None  # reads GET /metrics
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, path: str, timeout: float = 60.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with suppress(httpx.HTTPError):
                if httpx.get(self.base_url + path, timeout=2.0).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not start; log:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def _server_env(extra: dict[str, str], root: Path = REPO_ROOT) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMBER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def start_amber(
    mode: str,
    data_dir: Path,
    log_dir: Path,
    *,
    auth: bool,
    root: Path,
    settings: dict[str, str] | None = None,
) -> Server:
    port = _free_port()
    env = _server_env(
        {
            "AMBER_DATA_DIR": str(data_dir),
            "AMBER_DURABILITY": mode,
            # The per-key rate limit is a policy, not a cost: set it far above what one machine
            # can do so the limiter still runs on every request but never refuses one.
            "AMBER_RATE_LIMIT_PER_SECOND": "1000000000",
            "AMBER_RATE_LIMIT_BURST": "1000000000",
            **(settings or {}),
        },
        root,
    )
    cli = [sys.executable, "-m", "api.cli"]
    argv = [*cli, "serve", "--host", "127.0.0.1", "--port", str(port)]
    api_key = admin_key = None
    if auth:
        # As a user would: an agent key made with the CLI, sent as a bearer token.
        api_key = _make_key(cli, "agent", root, env)
        admin_key = _make_key(cli, "admin", root, env)
    else:
        argv.append("--insecure-no-auth")
    server = Server(f"amber-{mode}", argv, env, port, log_dir, cwd=root)
    server.api_key = api_key
    server.admin_key = admin_key
    server.wait_ready("/healthz")
    return server


def _make_key(cli: list[str], role: str, root: Path, env: dict[str, str]) -> str | None:
    made = subprocess.run(
        [*cli, "keys", "create", "--role", role, "--name", f"bench_http_{role}"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    if made.returncode == 0:
        return made.stdout.strip().splitlines()[-1]
    if "No such command" in made.stderr:  # a version without API keys is fine
        return None
    raise RuntimeError(f"amber keys create failed:\n{made.stdout}{made.stderr}")


def scrape_metrics(server: Server) -> dict[str, float] | None:
    """Amber's GET /metrics as {name: value}; None where the version has none."""
    import httpx

    headers = {"Authorization": f"Bearer {server.admin_key}"} if server.admin_key else {}
    try:
        answer = httpx.get(server.base_url + "/metrics", headers=headers, timeout=10.0)
    except httpx.HTTPError:
        return None
    if answer.status_code != 200:
        return None
    samples = (line.split() for line in answer.text.splitlines() if not line.startswith("#"))
    return {sample[0]: float(sample[1]) for sample in samples if len(sample) == 2}


def _server_figures(
    kind: str, before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, float | None]:
    """What the server counted over a phase: writes per commit, or answers from memory."""

    def grew(name: str) -> float:
        return (after or {}).get(name, 0.0) - (before or {}).get(name, 0.0)

    figures: dict[str, float | None] = {"writes_per_commit": None, "answers_from_memory": None}
    if before is None or after is None:
        return figures
    if kind == "write" and grew("amber_write_batches_total"):
        figures["writes_per_commit"] = grew("amber_write_batch_mementos_total") / grew(
            "amber_write_batches_total"
        )
    answers = grew("amber_uri_m_cache_hits_total") + grew("amber_uri_m_cache_misses_total")
    if kind == "resolve" and answers:
        figures["answers_from_memory"] = grew("amber_uri_m_cache_hits_total") / answers
    return figures


def start_baseline(log_dir: Path) -> Server:
    port = _free_port()
    # The same uvicorn options as `amber serve` (api/cli/server.py): one worker, default (auto)
    # loop and HTTP implementation, access log off, same log level and graceful timeout.
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "baseline_app:app",
        "--app-dir",
        str(BENCH_DIR),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--log-level",
        "info",
        "--no-access-log",
        "--timeout-graceful-shutdown",
        "10",
    ]
    server = Server("baseline", argv, _server_env({}), port, log_dir)
    server.wait_ready("/healthz")
    return server


def run_phase(
    args: argparse.Namespace,
    work_dir: Path,
    server: Server,
    *,
    mode: str,
    target: str,
    kind: str,
    path: str,
    urls: list[str] | None = None,
) -> tuple[PhaseResult, list[str]]:
    spec = {
        "base_url": server.base_url,
        "server_pid": server.pid,
        "mode": mode,
        "kind": kind,
        "path": path,
        "urls": urls,
        "concurrency": args.concurrency,
        "warmup": args.warmup,
        "duration": None if args.requests else args.duration,
        "requests": args.requests,
        "client": args.client,
        "uri_space": args.uri_space,
        "api_key": server.api_key,
    }
    spec_path = work_dir / f"spec-{mode}-{target}-{kind}.json"
    out_path = work_dir / f"out-{mode}-{target}-{kind}.json"
    profiler = _start_profiler(args, server, f"{target}-{mode}-{kind}")
    before = scrape_metrics(server) if target == "amber" else None
    try:
        raw = run_load_process(__file__, spec, spec_path, out_path, REPO_ROOT)
    finally:
        _stop_profiler(profiler)
    after = scrape_metrics(server) if before is not None else None
    uri_ms = raw.pop("uri_ms")
    result = PhaseResult(
        mode=mode, target=target, kind=kind, **raw, **_server_figures(kind, before, after)
    )
    if not args.json:
        _print_row(result)
    return result, uri_ms


def _start_profiler(args: argparse.Namespace, server: Server, label: str) -> Any:
    if not args.py_spy or not server.name.startswith(args.py_spy):
        return None
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        print("warning: --py-spy given but py-spy is not installed", file=sys.stderr)
        return None
    out_dir = Path(args.py_spy_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{label}.folded"
    seconds = int(args.warmup + (args.duration or 60) + 2)
    # --gil: only the thread holding the GIL is sampled, i.e. where the server's one core
    # of Python goes (waits in fsync or SQLite that release the GIL do not show).
    # --nonblocking: do not pause the server to sample it.
    # With --py-spy-cpu instead: every thread that is running (not idle), so CPU spent in C
    # without the GIL (SQLite, file I/O, hashing) shows too, under its Python caller.
    what = [] if args.py_spy_cpu else ["--gil"]
    argv = [
        py_spy,
        "record",
        "--pid",
        str(server.pid),
        *what,
        "--nonblocking",
        "--rate",
        "250",
        "--duration",
        str(seconds),
        "--format",
        "raw",
        "-o",
        str(out),
    ]
    with open(out_dir / f"{label}.py-spy.log", "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    return process, out


def _stop_profiler(profiler: Any) -> None:
    if profiler is None:
        return
    process, out = profiler
    process.send_signal(signal.SIGINT)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    with suppress(OSError, ValueError):
        print(summarize_profile(out), file=sys.stderr)


def summarize_profile(path: Path, top: int = 25) -> str:
    """Inclusive share of GIL-holding samples per function, from py-spy's folded output."""
    inclusive: dict[str, float] = {}
    total = 0.0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        weight = float(count)
        total += weight
        seen = set()
        for frame in stack.split(";"):
            name = _frame_name(frame)
            if name not in seen:
                seen.add(name)
                inclusive[name] = inclusive.get(name, 0.0) + weight
    lines = [f"py-spy {path} ({total:.0f} samples), inclusive share:"]
    ranked = sorted(inclusive.items(), key=lambda item: -item[1])
    shown = [(n, w) for n, w in ranked if w < 0.97 * total][:top]
    lines += [f"  {100 * w / total:5.1f}%  {n}" for n, w in shown]
    return "\n".join(lines)


def _frame_name(frame: str) -> str:
    """'func (path/to/file.py:123)' -> 'func (file.py)' with site-packages paths shortened."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", str(REPO_ROOT) + "/", "lib/python3."):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{name} ({where})"


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------

_HEADER = (
    f"{'mode':<12} {'server':<9} {'request':<34} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
    f"{'n':>7} {'err':>4} {'srv cpu':>8} {'load cpu':>8} {'other':>6}"
)
_REQUEST = {
    ("amber", "write"): "POST /api/v1/mementos (4 KiB)",
    ("amber", "resolve"): "GET uri_m (4 KiB, verified)",
    ("baseline", "write"): "POST /write (same body)",
    ("baseline", "resolve"): "GET /bytes (4 KiB)",
}


def _print_row(r: PhaseResult) -> None:
    print(
        f"{r.mode:<12} {r.target:<9} {_REQUEST[(r.target, r.kind)]:<34} {r.rps:>8.0f} "
        f"{r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.requests:>7} {r.errors:>4} "
        f"{r.server_cpu:>8.0%} {r.load_cpu:>8.0%} {r.other_cpu:>6.0%}",
        flush=True,
    )
    if r.errors:
        print(f"{'':<12} {'':<9} ^ statuses: {r.statuses}", flush=True)
    if r.writes_per_commit is not None:
        print(
            f"{'':<12} {'':<9} ^ server: {r.writes_per_commit:.1f} writes per group commit",
            flush=True,
        )
    if r.answers_from_memory is not None:
        print(
            f"{'':<12} {'':<9} ^ server: {r.answers_from_memory:.1%} of URI-M answers from "
            "memory (AMBER_URI_M_CACHE_MB)",
            flush=True,
        )


def ratios_of(results: list[PhaseResult]) -> list[dict[str, Any]]:
    table = {(r.mode, r.target, r.kind): r for r in results}
    rows = []
    for mode in dict.fromkeys(r.mode for r in results):
        for kind in ("write", "resolve"):
            amber, base = table.get((mode, "amber", kind)), table.get((mode, "baseline", kind))
            if amber is None or base is None or not base.rps:
                continue
            ratio = amber.rps / base.rps
            rows.append(
                {
                    "mode": mode,
                    "kind": kind,
                    "ratio": ratio,
                    "amber_rps": amber.rps,
                    "baseline_rps": base.rps,
                    "p50_ms": {"amber": amber.p50_ms, "baseline": base.p50_ms},
                    "p99_ms": {"amber": amber.p99_ms, "baseline": base.p99_ms},
                    "meets_goal": ratio >= GOAL_RATIO,
                }
            )
    return rows


def auth_costs_of(results: list[PhaseResult]) -> list[dict[str, Any]]:
    """amber with a key / amber without, per mode and kind, when --auth both ran."""
    table = {(r.mode, r.kind): r for r in results if r.target == "amber"}
    rows = []
    for (mode, kind), keyed in table.items():
        open_ = table.get((f"{mode}-noauth", kind))
        if open_ is None or not open_.rps:
            continue
        rows.append(
            {
                "mode": mode,
                "kind": kind,
                "ratio": keyed.rps / open_.rps,
                "with_key_rps": keyed.rps,
                "without_key_rps": open_.rps,
            }
        )
    return rows


def _print_summary(results: list[PhaseResult], ratios: list[dict[str, Any]]) -> None:
    print()
    print(
        f"{'mode':<12} {'ratio':<8} {'amber/baseline':>14} {'amber req/s':>12} "
        f"{'base req/s':>11} {'p50 ms amber/base':>18} {'p99 ms amber/base':>18}"
    )
    for row in ratios:
        p50, p99 = row["p50_ms"], row["p99_ms"]
        verdict = "ok" if row["meets_goal"] else f"below {GOAL_RATIO}"
        print(
            f"{row['mode']:<12} {row['kind']:<8} {row['ratio']:>9.2f} {verdict:>5}"
            f"{row['amber_rps']:>11.0f} {row['baseline_rps']:>11.0f} "
            f"{p50['amber']:>8.2f}/{p50['baseline']:<9.2f} {p99['amber']:>8.2f}/{p99['baseline']:<9.2f}"
        )
    by_key = {(r.mode, r.target, r.kind): r for r in results}
    full, relaxed = (
        by_key.get(("full", "amber", "write")),
        by_key.get(("relaxed", "amber", "write")),
    )
    if full and relaxed and relaxed.rps:
        print(
            f"\ncost of durability (writes): full/relaxed throughput = {full.rps / relaxed.rps:.2f}, "
            f"p50 {full.p50_ms:.2f} vs {relaxed.p50_ms:.2f} ms"
        )
    print(f"goal (durability full): both ratios >= {GOAL_RATIO}")
    for row in auth_costs_of(results):
        print(
            f"cost of authentication ({row['mode']} {row['kind']}): with/without key = "
            f"{row['ratio']:.2f} ({row['with_key_rps']:.0f} vs {row['without_key_rps']:.0f} req/s; "
            f"goal >= {AUTH_GOAL_RATIO})"
        )
    saturated = [r for r in results if r.load_cpu > SATURATED_LOAD_CPU]
    if saturated:
        names = ", ".join(f"{r.mode} {r.target} {r.kind}" for r in saturated)
        print(
            f"WARNING: the load process used more than {SATURATED_LOAD_CPU:.0%} of a core in: "
            f"{names}. The load generator, not the server, limited those figures, so the "
            "ratios overstate Amber (see README, 'Why a raw client')."
        )
    noisy = [r for r in results if r.other_cpu > NOISY_OTHER_CPU]
    if noisy:
        worst = max(noisy, key=lambda r: r.other_cpu)
        print(
            f"WARNING: other processes used up to {worst.other_cpu:.0%} CPU during "
            f"{len(noisy)} phase(s) (column 'other'); on a 2-core machine that skews the "
            "figures: rerun when the machine is quiet."
        )


def _environment(args: argparse.Namespace, data_root: Path) -> dict[str, Any]:
    import fastapi
    import uvicorn

    impls = {}
    for module in ("uvloop", "httptools"):
        try:
            impls[module] = __import__(module).__version__
        except ImportError:
            impls[module] = None
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "uvicorn": uvicorn.__version__,
        "fastapi": fastapi.__version__,
        "loop": "uvloop" if impls["uvloop"] else "asyncio",
        "http": "httptools" if impls["httptools"] else "h11",
        "client": args.client,
        "concurrency": args.concurrency,
        "warmup_s": args.warmup,
        "duration_s": None if args.requests else args.duration,
        "requests": args.requests,
        "amber_root": str(args.amber_root),
        "amber_commit": _git_commit(args.amber_root),
        "amber_settings": ",".join(f"{k}={v}" for k, v in _settings(args).items()) or "defaults",
        "data_root": str(data_root),
        "data_fs": _filesystem_of(data_root),
    }


def _git_commit(root: Path) -> str | None:
    try:
        made = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return made.stdout.strip() or None


def _filesystem_of(path: Path) -> str:
    best, fs = "", "?"
    resolved = str(path.resolve())
    with suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            parts = line.split()
            if len(parts) >= 3 and resolved.startswith(parts[1]) and len(parts[1]) > len(best):
                best, fs = parts[1], f"{parts[2]} ({parts[0]} on {parts[1]})"
    return fs


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Amber HTTP throughput next to a trivial FastAPI app (not a test).",
    )
    parser.add_argument(
        "--modes",
        default="full,relaxed",
        help="AMBER_DURABILITY modes to run, comma separated (default: full,relaxed)",
    )
    parser.add_argument(
        "--duration", type=float, default=8.0, help="measured seconds per phase (default: 8)"
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="measure this many requests per phase instead of --duration",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=1.5,
        help="unmeasured seconds of load before each phase (default: 1.5)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=32,
        help="concurrent requests (= keep-alive connections) (default: 32)",
    )
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="load generator HTTP client (default: raw asyncio streams; httpx "
        "costs ~3x more CPU per request, see README)",
    )
    parser.add_argument(
        "--amber-root",
        type=Path,
        default=REPO_ROOT,
        help="checkout of Amber to serve (default: the one holding this script), "
        "e.g. an export of another commit to compare",
    )
    parser.add_argument(
        "--auth",
        choices=("key", "off", "both"),
        default="key",
        help="key: requests carry an agent API key made with `amber keys create` "
        "(default); off: `amber serve --insecure-no-auth`; both: each mode "
        "once with a key and once without (rows '<mode>-noauth'), and the "
        "cost of authentication as amber(key)/amber(off)",
    )
    parser.add_argument(
        "--uri-space",
        type=int,
        default=1000,
        help="distinct URI-Rs the written passages spread over (default: 1000)",
    )
    parser.add_argument(
        "--data-root",
        default=None,
        help="where the temporary AMBER_DATA_DIRs go (default: system temp dir); "
        "durability costs depend on this filesystem",
    )
    parser.add_argument(
        "--uri-m-cache-mb",
        type=int,
        default=None,
        metavar="MB",
        help="AMBER_URI_M_CACHE_MB for Amber (default: Amber's own); 0 makes "
        "every resolve read the index, as when the mementos resolved "
        "do not fit in memory",
    )
    parser.add_argument("--keep", action="store_true", help="keep data dirs and server logs")
    parser.add_argument("--json", action="store_true", help="print machine-readable results only")
    parser.add_argument(
        "--py-spy",
        nargs="?",
        const="amber",
        default=None,
        metavar="SERVER",
        help="record py-spy profiles of the server (default: amber) during "
        "each phase; perturbs the figures (the profiler takes CPU)",
    )
    parser.add_argument(
        "--py-spy-cpu",
        action="store_true",
        help="with --py-spy: sample every running thread instead of only the GIL holder",
    )
    parser.add_argument(
        "--py-spy-dir",
        default="bench-profiles",
        help="where --py-spy writes folded stacks (default: ./bench-profiles)",
    )
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.amber_root = args.amber_root.resolve()
    for mode in args.modes:
        if mode not in ("full", "relaxed"):
            parser.error("--modes takes full and/or relaxed")
    return args


def _settings(args: argparse.Namespace) -> dict[str, str]:
    """Amber settings the command line chose (the server sees no other AMBER_* variable)."""
    megabytes = getattr(args, "uri_m_cache_mb", None)  # bench_auth.py has no such flag
    if megabytes is None:
        return {}
    return {"AMBER_URI_M_CACHE_MB": str(megabytes)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_load"]:
        return load_main(argv[1], argv[2])
    args = parse_args(argv)
    work_dir = Path(tempfile.mkdtemp(prefix="amber-bench-", dir=args.data_root))
    env = _environment(args, work_dir)
    results: list[PhaseResult] = []
    if not args.json:
        print("Amber HTTP benchmark  " + "  ".join(f"{k}={v}" for k, v in env.items()), flush=True)
        print(_HEADER, flush=True)
    try:
        with ExitStack() as stack:
            baseline = start_baseline(work_dir)
            stack.callback(baseline.stop)
            variants = {"key": [True], "off": [False], "both": [True, False]}[args.auth]
            for mode, auth in ((m, a) for m in args.modes for a in variants):
                label = mode if auth or args.auth != "both" else f"{mode}-noauth"
                amber = start_amber(
                    mode,
                    work_dir / f"data-{label}",
                    work_dir,
                    auth=auth,
                    root=args.amber_root,
                    settings=_settings(args),
                )
                try:
                    base_w, _ = run_phase(
                        args,
                        work_dir,
                        baseline,
                        mode=label,
                        target="baseline",
                        kind="write",
                        path="/write",
                    )
                    amber_w, uri_ms = run_phase(
                        args,
                        work_dir,
                        amber,
                        mode=label,
                        target="amber",
                        kind="write",
                        path="/api/v1/mementos",
                    )
                    base_r, _ = run_phase(
                        args,
                        work_dir,
                        baseline,
                        mode=label,
                        target="baseline",
                        kind="resolve",
                        path="/bytes",
                    )
                    if not uri_ms:
                        raise RuntimeError(f"amber ({label}) wrote nothing; see {amber.log_path}")
                    amber_r, _ = run_phase(
                        args,
                        work_dir,
                        amber,
                        mode=label,
                        target="amber",
                        kind="resolve",
                        path="",
                        urls=uri_ms,
                    )
                    results += [base_w, amber_w, base_r, amber_r]
                finally:
                    amber.stop()
    finally:
        if args.keep:
            print(f"kept {work_dir}", file=sys.stderr)
        else:
            remove_data(work_dir)
    ratios = ratios_of(results)
    if args.json:
        print(
            json.dumps(
                {
                    "environment": env,
                    "results": [asdict(r) for r in results],
                    "ratios": ratios,
                    "goal_ratio": GOAL_RATIO,
                    "auth_costs": auth_costs_of(results),
                },
                indent=2,
            )
        )
    else:
        _print_summary(results, ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
