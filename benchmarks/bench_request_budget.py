"""Hostile request bodies against a live server: issue #18 finding 1, before and after.

Not a test: it measures, prints a table and exits 0. See benchmarks/README.md.

    python benchmarks/bench_request_budget.py                        # this checkout
    python benchmarks/bench_request_budget.py --checkout /tmp/main   # another source tree
    python benchmarks/bench_request_budget.py --members 500000       # smaller hostile body

Starts ``amber serve`` on the embedded default (a fresh data dir, SQLite and local blobs)
from the given source tree, makes an agent key, then sends each request of the issue one at
a time while another thread polls ``GET /healthz`` every 50 ms:

- ``{"uri_r": …, "headers": {"0": 0, …}}`` with ``--members`` members (2.5 million: 28.9 MB)
  to ``POST /api/v1/mementos`` without a key, the same to ``PUT /api/v1/transcripts/{id}``
  without a key, and the same to ``POST /api/v1/mementos`` with the agent key;
- 300,000 members with the key (the size of the error answer);
- malformed JSON without a key (401 expected, not 400);
- 1,000 citations with a wrong value each, within every bound (a body at the limits);
- a valid write of 25 MB of HTML-like text (27 MB as JSON: large legitimate content).

For each: the status, the time to the answer, the answer's size, and the longest /healthz
wait while it ran, next to the median /healthz wait of the idle server measured in the same
run (the ratio says how much the request stalled everyone else).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
HEALTH_POLL_SECONDS = 0.05


@dataclass
class Case:
    name: str
    method: str
    path: str
    body: bytes
    keyed: bool


@dataclass
class Measured:
    case: Case
    status: int
    seconds: float
    answer_bytes: int
    health_max: float
    health_polls: int


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Hostile bodies vs /healthz (not a test).")
    parser.add_argument(
        "--checkout", type=Path, default=REPO_ROOT, help="source tree to serve (default: this)"
    )
    parser.add_argument(
        "--members", type=int, default=2_500_000, help="members of the hostile body"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    return parser.parse_args(argv)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def amber_server(checkout: Path, data_dir: Path) -> Iterator[tuple[str, str]]:
    """``amber serve`` from ``checkout``; yields its base URL and an agent key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMBER_")}
    env.update({"AMBER_DATA_DIR": str(data_dir), "PYTHONPATH": str(checkout)})
    cli = [sys.executable, "-m", "api.cli"]
    made = subprocess.run(
        [*cli, "keys", "create", "--role", "agent"],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    key = made.stdout.strip().splitlines()[-1]
    port = free_port()
    log = open(data_dir / "serve.log", "wb")
    process = subprocess.Popen(
        [*cli, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=checkout,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise RuntimeError("the server did not start: see " + str(data_dir / "serve.log"))
        yield base, key
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def cases(members: int) -> list[Case]:
    def hostile(count: int) -> bytes:
        headers = {str(i): 0 for i in range(count)}
        document = {"uri_r": "https://ex.org/", "headers": headers}
        return json.dumps(document, separators=(",", ":")).encode()

    big = hostile(members)
    wrong = [{"quote": {"exact": 1, "prefix": "p", "suffix": "s"}} for _ in range(1000)]
    # 25 MB of HTML-like text, about 27 MB as JSON: under the 32 MB body limit.
    content = ('<p class="x">A line, with: "quotes" and \\ escapes.</p>\n' * 450_000)[:25_000_000]
    valid = {"uri_r": "https://ex.org/big", "content_type": "text/html", "content": content}
    return [
        Case(f"{members:,} members, no key", "POST", "/api/v1/mementos", big, keyed=False),
        Case(
            f"{members:,} members, no key (transcript)",
            "PUT",
            "/api/v1/transcripts/t-bench",
            big,
            keyed=False,
        ),
        Case(f"{members:,} members, agent key", "POST", "/api/v1/mementos", big, keyed=True),
        Case("300,000 members, agent key", "POST", "/api/v1/mementos", hostile(300_000), True),
        Case("malformed JSON, no key", "POST", "/api/v1/mementos", b'{"uri_r": ', False),
        Case(
            "1,000 wrong citations, agent key",
            "POST",
            "/api/v1/transcripts/t-bench/citations",
            json.dumps({"citations": wrong}).encode(),
            True,
        ),
        Case(
            "valid 27 MB write, agent key",
            "POST",
            "/api/v1/mementos",
            json.dumps(valid).encode(),
            True,
        ),
    ]


def idle_health(base: str, polls: int = 40) -> float:
    waits = []
    with httpx.Client() as client:
        for _ in range(polls):
            started = time.perf_counter()
            client.get(base + "/healthz", timeout=30)
            waits.append(time.perf_counter() - started)
            time.sleep(0.01)
    return statistics.median(waits)


def measure(base: str, key: str, case: Case, timeout: float) -> Measured:
    done = threading.Event()
    waits: list[float] = []

    def poll() -> None:
        with httpx.Client() as client:
            while not done.is_set():
                started = time.perf_counter()
                try:
                    client.get(base + "/healthz", timeout=timeout)
                except httpx.HTTPError:
                    pass
                waits.append(time.perf_counter() - started)
                time.sleep(HEALTH_POLL_SECONDS)

    headers = {"Content-Type": "application/json"}
    if case.keyed:
        headers["Authorization"] = f"Bearer {key}"
    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.1)
    started = time.perf_counter()
    try:
        answer = httpx.request(
            case.method, base + case.path, content=case.body, headers=headers, timeout=timeout
        )
        status, size = answer.status_code, len(answer.content)
    except httpx.HTTPError:
        status, size = 0, 0
    seconds = time.perf_counter() - started
    done.set()
    poller.join()
    return Measured(case, status, seconds, size, max(waits, default=0.0), len(waits))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    print(f"serving {args.checkout} (embedded default); building bodies…", flush=True)
    planned = cases(args.members)
    with tempfile.TemporaryDirectory(prefix="amber-bench-budget-") as scratch:
        with amber_server(args.checkout.resolve(), Path(scratch)) as (base, key):
            idle = idle_health(base)
            print(f"idle /healthz: median {idle * 1000:.1f} ms\n")
            print(
                f"{'request':<44} {'body':>9} {'status':>6} {'answer in':>10} "
                f"{'answer':>10} {'healthz max':>12} {'× idle':>8}"
            )
            for case in planned:
                result = measure(base, key, case, args.timeout)
                print(
                    f"{case.name:<44} {len(case.body) / 1e6:>7.1f}MB {result.status:>6} "
                    f"{result.seconds:>9.2f}s {_size(result.answer_bytes):>10} "
                    f"{result.health_max:>11.3f}s {result.health_max / idle:>8.0f}",
                    flush=True,
                )
    return 0


def _size(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1e6:.1f} MB"
    if count >= 1000:
        return f"{count / 1e3:.1f} KB"
    return f"{count} B"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
