"""The load process of the HTTP benchmarks: what bench_http.py and bench_navigation.py share.

Each script re-runs itself as a separate process (``SCRIPT _load SPEC.json OUT.json``:
:func:`run_load_process` starts it, :func:`load_process_main` is its body), so the load
generator never competes with the script's own bookkeeping. There, keep-alive workers
(the script's) issue requests while a :class:`Window` warms up, then counts what completes
for a measured window, with the CPU the server, the load process and the rest of the
machine used meanwhile: when "other" is high, the figures are not trustworthy.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
now = time.perf_counter  # uvloop's loop.time() only has millisecond resolution


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[int(rank) - 1]


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / CLK_TCK


def _cpu_now(server_pid: int) -> tuple[float, float, float]:
    """(server, this load process, whole machine) CPU seconds so far."""
    return process_cpu_seconds(server_pid), time.process_time(), machine_cpu_seconds()


@dataclass
class Window:
    """What the workers of one load process share: whether the window is measuring, whether
    they must stop, and what they counted in it."""

    measuring: bool = False
    stop: bool = False
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    def count(self, elapsed: float, status: int) -> None:
        """Count a request that completed inside the window (0 for a failed connection)."""
        if self.measuring and not self.stop:
            self.latencies.append(elapsed)
            self.statuses[status] = self.statuses.get(status, 0) + 1

    async def measure(
        self,
        workers: list[asyncio.Task[None]],
        *,
        server_pid: int,
        warmup: float,
        duration: float | None,
    ) -> dict[str, Any]:
        """Warm up, then measure for ``duration`` seconds and stop the workers (or, without a
        duration, until they end by themselves); the figures of the window."""
        await asyncio.sleep(warmup)
        before, t0 = _cpu_now(server_pid), now()
        self.measuring = True
        if duration is not None:
            await asyncio.sleep(duration)
            self.stop = True
            after, t1 = _cpu_now(server_pid), now()
            await asyncio.gather(*workers, return_exceptions=True)
        else:
            results = await asyncio.gather(*workers, return_exceptions=True)
            after, t1 = _cpu_now(server_pid), now()
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        return self.figures(t1 - t0, before, after)

    def figures(
        self,
        seconds: float,
        before: tuple[float, float, float],
        after: tuple[float, float, float],
    ) -> dict[str, Any]:
        latencies = sorted(self.latencies)
        count = len(latencies)
        server, load, machine = (b - a for a, b in zip(before, after, strict=True))

        def per_second(value: float) -> float:
            return value / seconds if seconds else 0.0

        return {
            "requests": count,
            "errors": sum(n for status, n in self.statuses.items() if not 200 <= status < 300),
            "seconds": seconds,
            "rps": per_second(count),
            "p50_ms": percentile(latencies, 50) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000,
            "mean_ms": (sum(latencies) / count * 1000) if count else 0.0,
            "max_ms": (latencies[-1] * 1000) if count else 0.0,
            "server_cpu": per_second(server),
            "load_cpu": per_second(load),
            # Everything else on the machine (other processes, kernel work for no one of
            # ours): when it is high the figures are not trustworthy.
            "other_cpu": per_second(max(0.0, machine - server - load)),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
        }


def load_process_main(
    spec_path: str,
    out_path: str,
    drive: Callable[[dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]],
) -> int:
    """The load process: ``drive`` the spec on uvloop (asyncio without it), write its result."""
    spec = json.loads(Path(spec_path).read_text())
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] ships uvloop
        result = asyncio.run(drive(spec))
    else:
        result = uvloop.run(drive(spec))
    Path(out_path).write_text(json.dumps(result))
    return 0


def run_load_process(
    script: str, spec: dict[str, Any], spec_path: Path, out_path: Path, cwd: Path
) -> dict[str, Any]:
    """Run ``script _load`` on ``spec`` in a process of its own; what it measured."""
    spec_path.write_text(json.dumps(spec))
    subprocess.run(
        [sys.executable, str(Path(script).resolve()), "_load", str(spec_path), str(out_path)],
        check=True,
        cwd=cwd,
    )
    result: dict[str, Any] = json.loads(out_path.read_text())
    return result
