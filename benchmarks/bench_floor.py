"""Amber's durable write next to its floor: the least work its design allows.

Not a test: it measures, prints a table and exits 0. See benchmarks/README.md.

    python benchmarks/bench_floor.py                   # 4 rounds, about 3 minutes
    python benchmarks/bench_floor.py --rounds 3 --duration 6 --json

Each round runs four write phases back to back, their order turned every round, with
``bench_http.py``'s load process (32 keep-alive connections, distinct random 4 KiB
passages):

* ``baseline``: the trivial FastAPI endpoint of ``bench_http.py`` (``baseline_app.py``);
* ``floor``: ``floor_app.py``, the durable work the design specifies for the embedded default
  (a file per blob, temp and rename, synced per batch; rows in Amber's own SQLite schema,
  ``synchronous=FULL``, one group commit per batch) and nothing else: no checks at all;
* ``packed``: the same floor with every batch's blobs appended to one pack file (one
  ``fdatasync`` per batch, no file per blob): what that alternative design would allow;
* ``amber``: ``amber serve`` with an agent key, durability full, exactly as in
  ``bench_http.py``.

It prints each phase, then per round amber/baseline, floor/baseline, packed/baseline and
amber/floor, and the CPU each design spends per write (the server process and the kernel
threads that write back for it) next to the CPU per write the machine has at the goal rate
(every core, minus what the load process needs at that rate). The write goal is
amber/baseline >= 0.8 with durability full. A floor whose work costs more CPU than that
budget cannot meet it here, however it arranges the work (pipelines, threads); amber/floor
says how much of the floor Amber keeps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_http  # the sibling script, not a package
from bench_http import (
    BENCH_DIR,
    GOAL_RATIO,
    PhaseResult,
    Server,
    _free_port,
    _server_env,
    remove_data,
    run_phase,
    start_amber,
    start_baseline,
)

bench_http._REQUEST.update(
    {
        ("floor", "write"): "POST /write (files: the floor)",
        ("packed", "write"): "POST /write (packed blobs)",
    }
)
TARGETS = ("baseline", "floor", "packed", "amber")


def start_floor(name: str, data_dir: Path, log_dir: Path, root: Path, *, packed: bool) -> Server:
    port = _free_port()
    # The baseline's uvicorn options (bench_http.start_baseline), which are amber serve's.
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "floor_app:app",
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
    env = _server_env(
        {"FLOOR_DATA_DIR": str(data_dir), "FLOOR_BLOBS": "packed" if packed else "files"}, root
    )
    server = Server(name, argv, env, port, log_dir)
    server.wait_ready("/healthz")
    return server


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Amber's durable write next to the floor of its design (not a test)."
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="rounds of the four write phases, each in another order (default: 4)",
    )
    parser.add_argument(
        "--duration", type=float, default=6.0, help="measured seconds per phase (default: 6)"
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
        "--uri-space",
        type=int,
        default=1000,
        help="distinct URI-Rs the written passages spread over (default: 1000)",
    )
    parser.add_argument(
        "--data-root",
        default=None,
        help="where the temporary data dirs go (default: system temp dir)",
    )
    parser.add_argument("--keep", action="store_true", help="keep data dirs and server logs")
    parser.add_argument("--json", action="store_true", help="print machine-readable results only")
    args = parser.parse_args(argv)
    # What bench_http.run_phase reads besides the above.
    args.requests = None
    args.client = "raw"
    args.py_spy = None
    args.amber_root = bench_http.REPO_ROOT
    return args


def cpu_per_write_us(phase: PhaseResult) -> float:
    """Machine CPU per write for this server, in µs: its own process plus everything else
    but the load process (the kernel's writeback threads do part of a sync's work)."""
    return (phase.server_cpu + phase.other_cpu) / phase.rps * 1e6 if phase.rps else 0.0


def budget_at_goal_us(baseline: PhaseResult, cpus: int) -> float:
    """CPU per write the machine has left for the server at the goal rate, in µs: all its
    cores minus what the load process needs to send that many requests (its cost per
    request measured against the baseline), spread perfectly over every core. A design
    whose work costs more than this cannot meet the goal here, however it is arranged."""
    goal_rate = GOAL_RATIO * baseline.rps
    load_per_request = baseline.load_cpu / baseline.rps
    return (cpus - load_per_request * goal_rate) / goal_rate * 1e6


def ratios_of(rounds: list[dict[str, PhaseResult]], cpus: int) -> list[dict[str, float]]:
    rows = []
    for phases in rounds:
        rps = {target: phases[target].rps for target in TARGETS}
        rows.append(
            {
                "amber/baseline": rps["amber"] / rps["baseline"],
                "floor/baseline": rps["floor"] / rps["baseline"],
                "packed/baseline": rps["packed"] / rps["baseline"],
                "amber/floor": rps["amber"] / rps["floor"],
                "floor us/write": cpu_per_write_us(phases["floor"]),
                "packed us/write": cpu_per_write_us(phases["packed"]),
                "amber us/write": cpu_per_write_us(phases["amber"]),
                "budget us/write": budget_at_goal_us(phases["baseline"], cpus),
            }
        )
    return rows


def _print_summary(rounds: list[dict[str, PhaseResult]], ratios: list[dict[str, float]]) -> None:
    names = list(ratios[0])
    print()
    failed = [f"{r.mode} {r.target}" for phases in rounds for r in phases.values() if r.errors]
    if failed:
        print(f"WARNING: phases with errors, not valid measurements: {', '.join(failed)}")
    print(f"{'round':<8}" + "".join(f"{name:>16}" for name in names))
    for number, row in enumerate(ratios, 1):
        print(f"{number:<8}" + "".join(f"{row[name]:>16.2f}" for name in names))
    median = {name: statistics.median(r[name] for r in ratios) for name in names}
    if len(ratios) > 1:
        print(f"{'median':<8}" + "".join(f"{median[name]:>16.2f}" for name in names))
    print(
        f"goal: amber/baseline >= {GOAL_RATIO}. The floor of the specified design reaches "
        f"{median['floor/baseline']:.2f} of the baseline; its work costs "
        f"{median['floor us/write']:.0f} µs of CPU per write, against "
        f"{median['budget us/write']:.0f} µs that the machine has per write at the goal rate."
    )
    if median["floor us/write"] > median["budget us/write"]:
        print(
            "So no implementation of that design meets the goal on this machine, however "
            "well it spreads its work over the cores."
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    work_dir = Path(tempfile.mkdtemp(prefix="amber-floor-", dir=args.data_root))
    rounds: list[dict[str, PhaseResult]] = []
    if not args.json:
        print(bench_http._HEADER, flush=True)
    try:
        with ExitStack() as stack:
            servers = {
                "baseline": start_baseline(work_dir),
                "floor": start_floor(
                    "floor", work_dir / "data-floor", work_dir, args.amber_root, packed=False
                ),
                "packed": start_floor(
                    "packed", work_dir / "data-packed", work_dir, args.amber_root, packed=True
                ),
                "amber": start_amber(
                    "full", work_dir / "data-amber", work_dir, auth=True, root=args.amber_root
                ),
            }
            for server in servers.values():
                stack.callback(server.stop)
            paths = {"amber": "/api/v1/mementos"}
            for number in range(1, args.rounds + 1):
                phases = {}
                # The order turns every round: a phase that creates files right after many
                # were deleted pays ext4's slower inode allocation (benchmarks/README.md).
                turn = (number - 1) % len(TARGETS)
                for target in TARGETS[turn:] + TARGETS[:turn]:
                    phases[target], _ = run_phase(
                        args,
                        work_dir,
                        servers[target],
                        mode=f"round-{number}",
                        target=target,
                        kind="write",
                        path=paths.get(target, "/write"),
                    )
                rounds.append(phases)
    finally:
        if args.keep:
            print(f"kept {work_dir}", file=sys.stderr)
        else:
            remove_data(work_dir)
    ratios = ratios_of(rounds, os.cpu_count() or 1)
    if args.json:
        document: dict[str, Any] = {
            "results": [asdict(r) for phases in rounds for r in phases.values()],
            "ratios": ratios,
            "goal_ratio": GOAL_RATIO,
        }
        print(json.dumps(document, indent=2))
    else:
        _print_summary(rounds, ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
