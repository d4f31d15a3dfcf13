"""Reproduce the hostile-input findings against a live embedded-default server.

Starts ``amber serve`` (SQLite and the local blob store in a temporary directory, full
durability) from a source tree (this one, or ``--root`` for an older checkout extracted
with ``git archive``), makes agent keys for two tenants, and measures, per finding, the
wall time, the server's CPU time and peak RSS (``/proc/<pid>``), and the outcome:

- 3  quadratic normalisation: a PDF line of ``"- "`` x 8,000, quote ``"zzz"``;
- 4  context per occurrence: ``"a  "`` x 100,000 as text/plain, quote ``"a a"`` with a
     1,000-character prefix that is nowhere;
- 6  cross-tenant cache timing: tenant A cites a 2.6 MB HTML page, tenant B cites the
     same bytes (hit) or fresh bytes of the same shape (miss), interleaved; medians, AUC
     (chance a hit is the faster; 0.5 = cannot be told apart) and how many rounds a
     "hit is faster" guess gets right;
- 7  blob deduplication timing: tenant B writing an 8 MB blob tenant A stored vs new bytes;
- 9  control characters and Unicode spaces in ``content_type`` (refused now; before,
     stored, and reading the memento back failed);
- 10 an Idempotency-Key race: two concurrent writes, same key, different content
     (now one 201 and one 409, one memento in the TimeMap);
- 12 the SQLite index files' modes (owner-only now).

    python benchmarks/bench_hostile.py
    python benchmarks/bench_hostile.py --root /tmp/hostile-old --rounds 8

Nothing here is asserted: the tests hold the behaviour; this prints the figures.
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import socket
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

import hostile_payloads as payloads  # noqa: E402  (tests/ was put on the path just above)

CLK_TCK = os.sysconf("SC_CLK_TCK")
HOST = "127.0.0.1"


# -- the server --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0])
    return found


class Server:
    """``amber serve`` from ``root``, with an agent key for each of two tenants."""

    def __init__(self, root: Path, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = _free_port()
        self.base = f"http://{HOST}:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AMBER_")}
        self.env.update(
            PYTHONPATH=str(root),
            AMBER_DATA_DIR=str(data_dir),
            AMBER_RATE_LIMIT_PER_SECOND="0",
            PYTHONUNBUFFERED="1",
        )
        self.cli = [sys.executable, "-m", "api.cli"]
        self.keys = {t: self._key(root, t) for t in ("tenant-a", "tenant-b")}
        self._log = (data_dir.parent / "server.log").open("wb")
        self.process = subprocess.Popen(
            [*self.cli, "serve", "--host", HOST, "--port", str(self.port)],
            cwd=root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _key(self, root: Path, tenant: str) -> str:
        made = subprocess.run(
            [*self.cli, "keys", "create", "--tenant", tenant, "--role", "agent"],
            cwd=root,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return made.stdout.strip().splitlines()[-1]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"amber serve exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit("amber serve did not become healthy")

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def measured(server: Server, name: str) -> Iterator[dict[str, Any]]:
    """Time a block: wall, server CPU and server RSS before/after; print one line."""
    outcome: dict[str, Any] = {}
    pid = server.process.pid
    cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
    try:
        yield outcome
    except httpx.TimeoutException:
        outcome["outcome"] = "no answer within --timeout"
    wall, cpu = time.perf_counter() - wall0, cpu_seconds(pid) - cpu0
    memory = memory_kib(pid)
    shown = "; ".join(f"{k}: {v}" for k, v in outcome.items())
    print(
        f"{name:<32} wall {wall:8.2f} s  server CPU {cpu:8.2f} s  "
        f"RSS {memory['VmRSS'] / 1024:6.0f} MiB (peak {memory['VmHWM'] / 1024:6.0f})  {shown}",
        flush=True,
    )


# -- requests ----------------------------------------------------------------------------


def cite(
    client: httpx.Client, server: Server, tenant: str, content: bytes, media: str, quote: Any
) -> httpx.Response:
    client.put("/api/v1/transcripts/bench", json={}, headers=server.headers(tenant))
    source = {
        "uri_r": "https://hostile.example/doc",
        "content_base64": base64.b64encode(content).decode(),
        "content_type": media,
        "tool": "http.get",
    }
    return client.post(
        "/api/v1/transcripts/bench/citations",
        json={"citations": [{"source": source, "quote": quote}]},
        headers=server.headers(tenant),
    )


def write(
    client: httpx.Client,
    server: Server,
    tenant: str,
    content: bytes,
    uri_r: str,
    headers: dict[str, str] | None = None,
    content_type: str = "application/octet-stream",
) -> httpx.Response:
    body = {
        "uri_r": uri_r,
        "content_base64": base64.b64encode(content).decode(),
        "content_type": content_type,
    }
    return client.post(
        "/api/v1/mementos", json=body, headers={**server.headers(tenant), **(headers or {})}
    )


def outcome(response: httpx.Response) -> str:
    """The status, and for a refusal its error code or the first citation's reason."""
    if response.status_code < 400:
        return str(response.status_code)
    try:
        body = response.json()
    except ValueError:
        return str(response.status_code)
    reasons = [e.get("reason") for e in body.get("errors", []) if isinstance(e, dict)]
    code = reasons[0] if reasons else body.get("error", {}).get("code")
    return f"{response.status_code} {code}"


def timed(call: Callable[[], httpx.Response]) -> tuple[float, httpx.Response]:
    start = time.perf_counter()
    response = call()
    return time.perf_counter() - start, response


def auc_faster(hits: list[float], misses: list[float]) -> float:
    wins = sum((h < m) + 0.5 * (h == m) for h in hits for m in misses)
    return wins / (len(hits) * len(misses))


def big_html(seed: int, size: int = 2_600_000) -> bytes:
    rng = random.Random(seed)
    words = ["ledger", "harbour", "quarterly", "figure", "policy", "river", "signal", "audit"]
    row = f"<tr><td>{seed}</td><td>{' '.join(rng.choice(words) for _ in range(8))}</td></tr>\n"
    head = f"<html><body><p>Opening {seed} says the harbour closed.</p><table>"
    return (head + row * (size // len(row)) + "</table></body></html>").encode()


# -- the findings ------------------------------------------------------------------------


def finding_3(client: httpx.Client, server: Server) -> None:
    with measured(server, "3 quadratic normalisation") as out:
        document = payloads.pdf_hyphen_line(8_000)
        response = cite(client, server, "tenant-a", document, "application/pdf", {"exact": "zzz"})
        out["outcome"] = outcome(response)


def finding_4(client: httpx.Client, server: Server) -> None:
    with measured(server, "4 context per occurrence") as out:
        quote = {"exact": "a a", "prefix": "x" * 1000}
        response = cite(client, server, "tenant-a", payloads.spaced_text(), "text/plain", quote)
        out["outcome"] = outcome(response)


def finding_6(client: httpx.Client, server: Server, rounds: int) -> None:
    with measured(server, "6 cross-tenant cache timing") as out:
        hits: list[float] = []
        misses: list[float] = []
        told = 0
        rng = random.Random(6)
        quote = {"exact": "says the harbour closed"}
        for n in range(rounds):
            seen, fresh = big_html(2 * n), big_html(2 * n + 1)
            cite(client, server, "tenant-a", seen, "text/html", quote)
            order = [True, False]
            rng.shuffle(order)
            times = {}
            for is_hit in order:
                body = seen if is_hit else fresh
                times[is_hit], _ = timed(
                    lambda body=body: cite(client, server, "tenant-b", body, "text/html", quote)
                )
            hits.append(times[True])
            misses.append(times[False])
            told += times[True] < times[False]
        out["median hit"] = f"{statistics.median(hits) * 1e3:.1f} ms"
        out["median miss"] = f"{statistics.median(misses) * 1e3:.1f} ms"
        out["AUC"] = f"{auc_faster(hits, misses):.2f}"
        out["rounds a 'hit is faster' guess is right"] = f"{told}/{rounds}"


def finding_7(client: httpx.Client, server: Server, rounds: int) -> None:
    with measured(server, "7 blob dedup timing") as out:
        dup: list[float] = []
        new: list[float] = []
        rng = random.Random(7)
        for n in range(rounds):
            stored, fresh = os.urandom(8_000_000), os.urandom(8_000_000)
            write(client, server, "tenant-a", stored, f"https://dedup.example/a/{n}")
            order = [True, False]
            rng.shuffle(order)
            for is_dup in order:
                body = stored if is_dup else fresh
                spent, _ = timed(
                    lambda body=body: write(
                        client, server, "tenant-b", body, f"https://dedup.example/b/{n}/{is_dup}"
                    )
                )
                (dup if is_dup else new).append(spent)
        out["median duplicate"] = f"{statistics.median(dup) * 1e3:.1f} ms"
        out["median new"] = f"{statistics.median(new) * 1e3:.1f} ms"
        out["AUC"] = f"{auc_faster(dup, new):.2f}"


CONTROLLED_MEDIA_TYPES = {
    "CR LF": "text/plain\r\n;x=y",
    "U+2028": "text/plain;\u2028x=y",
    "U+0085": "text/plain;\x85x=y",
}


def finding_9(client: httpx.Client, server: Server) -> None:
    with measured(server, "9 controls in content_type") as out:
        for number, (name, media) in enumerate(CONTROLLED_MEDIA_TYPES.items()):
            uri_r = f"https://ct.example/{number}"
            written = write(client, server, "tenant-a", b"x", uri_r, content_type=media)
            seen = outcome(written)
            if written.is_success:  # stored: what does reading it back give?
                try:
                    read = client.get(written.json()["uri_m"], headers=server.headers("tenant-a"))
                    seen += f", read {read.status_code}"
                except httpx.HTTPError as error:
                    seen += f", read failed ({type(error).__name__})"
            out[name] = seen


def finding_10(client: httpx.Client, server: Server, rounds: int) -> None:
    with measured(server, "10 Idempotency-Key race") as out:
        outcomes: dict[str, int] = {}
        for n in range(rounds):
            uri_r = f"https://race.example/{n}"
            statuses: list[int] = []
            barrier = threading.Barrier(2)

            def racer(body: bytes, uri_r: str = uri_r, n: int = n) -> None:
                with httpx.Client(base_url=server.base, timeout=60) as own:
                    barrier.wait()
                    key = {"Idempotency-Key": f"race-{n}"}
                    statuses.append(write(own, server, "tenant-a", body, uri_r, key).status_code)

            threads = [threading.Thread(target=racer, args=(b"first %d" % n,))]
            threads.append(threading.Thread(target=racer, args=(b"second %d" % n,)))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            timemap = client.get(f"/timemap/json/{uri_r}", headers=server.headers("tenant-a"))
            listed = len(timemap.json()["mementos"]["list"]) if timemap.status_code == 200 else 0
            seen = f"{'+'.join(map(str, sorted(statuses)))}, {listed} in TimeMap"
            outcomes[seen] = outcomes.get(seen, 0) + 1
        for seen, count in sorted(outcomes.items()):
            out[seen] = f"{count}/{rounds}"


def finding_12(server: Server) -> None:
    with measured(server, "12 SQLite index file modes") as out:
        for path in sorted(server.data_dir.glob("*.sqlite3*")):
            out[path.name] = oct(stat.S_IMODE(path.stat().st_mode))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="source tree to serve")
    parser.add_argument("--rounds", type=int, default=12, help="pairs for the timing findings")
    parser.add_argument("--skip", nargs="*", default=[], help="finding numbers to skip")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per request")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as scratch:
        server = Server(args.root.resolve(), Path(scratch) / "amber-data")
        print(f"amber serve from {args.root} at {server.base} (pid {server.process.pid})")
        try:
            with httpx.Client(base_url=server.base, timeout=args.timeout) as client:
                steps: dict[str, Callable[[], None]] = {
                    "3": lambda: finding_3(client, server),
                    "4": lambda: finding_4(client, server),
                    "6": lambda: finding_6(client, server, args.rounds),
                    "7": lambda: finding_7(client, server, args.rounds),
                    "9": lambda: finding_9(client, server),
                    "10": lambda: finding_10(client, server, args.rounds),
                    "12": lambda: finding_12(server),
                }
                for number, step in steps.items():
                    if number not in args.skip:
                        step()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
