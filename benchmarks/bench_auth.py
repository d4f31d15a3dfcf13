"""Cost of authentication over HTTP: Amber with an API key vs without, interleaved.

Not a test: it measures, prints a table and exits 0. See benchmarks/README.md.

    python benchmarks/bench_auth.py                       # 3 rounds, durability full, ~2 minutes
    python benchmarks/bench_auth.py --rounds 5 --duration 4

Two Amber servers run side by side from the same checkout, each on its own fresh data dir:
one as a user runs it (``amber serve``, every request carrying an agent key made with
``amber keys create``) and one with ``--insecure-no-auth``. Each round measures writes
(``POST /api/v1/mementos``, distinct 4 KiB passages) and URI-M resolves on both, one right
after the other, with the order swapped every round (keyed first, then open first), so a
machine that drifts during the run — other tenants of the host, a cooling CPU — weighs on
both alike. The cost of authentication is 1 − keyed/open throughput, per round and as the
median of the rounds; the goal is at most 10%.

The load generator, phases and CPU accounting are those of ``bench_http.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_http import (  # the sibling script, imported as a module
    _HEADER,
    AUTH_GOAL_RATIO,
    REPO_ROOT,
    PhaseResult,
    Server,
    _environment,
    remove_data,
    run_phase,
    start_amber,
)

GOAL_OVERHEAD = 1 - AUTH_GOAL_RATIO


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Cost of authentication, interleaved (not a test)."
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="keyed/open pairs per kind (default: 3)"
    )
    parser.add_argument(
        "--mode",
        choices=("full", "relaxed"),
        default="full",
        help="AMBER_DURABILITY of both servers (default: full)",
    )
    parser.add_argument(
        "--duration", type=float, default=5.0, help="measured seconds per phase (default: 5)"
    )
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="unmeasured seconds before each phase"
    )
    parser.add_argument(
        "--concurrency", type=int, default=32, help="concurrent keep-alive connections"
    )
    parser.add_argument(
        "--uri-space", type=int, default=1000, help="distinct URI-Rs the writes spread over"
    )
    parser.add_argument(
        "--amber-root", type=Path, default=REPO_ROOT, help="checkout of Amber to serve"
    )
    parser.add_argument("--data-root", default=None, help="where the temporary data dirs go")
    parser.add_argument("--json", action="store_true", help="print machine-readable results only")
    args = parser.parse_args(argv)
    args.amber_root = args.amber_root.resolve()
    # What bench_http's run_phase reads from its own arguments.
    args.requests, args.client = None, "raw"
    args.py_spy, args.py_spy_cpu, args.py_spy_dir = None, False, "bench-profiles"
    args.modes, args.auth = [args.mode], "both"
    return args


def measure(args: argparse.Namespace, work_dir: Path) -> list[tuple[int, PhaseResult, PhaseResult]]:
    """(round, keyed, open) for every kind and round."""
    pairs: list[tuple[int, PhaseResult, PhaseResult]] = []
    with ExitStack() as stack:
        servers: dict[str, Server] = {}
        for label, auth in (("keyed", True), ("open", False)):
            servers[label] = start_amber(
                args.mode, work_dir / f"data-{label}", work_dir, auth=auth, root=args.amber_root
            )
            stack.callback(servers[label].stop)
        written: dict[str, list[str]] = {}
        for number in range(args.rounds):
            order = ("keyed", "open") if number % 2 == 0 else ("open", "keyed")
            for kind in ("write", "resolve"):
                measured: dict[str, PhaseResult] = {}
                for label in order:
                    result, uri_ms = run_phase(
                        args,
                        work_dir,
                        servers[label],
                        mode=f"r{number + 1}-{label}",
                        target="amber",
                        kind=kind,
                        path="/api/v1/mementos" if kind == "write" else "",
                        urls=written.get(label) if kind == "resolve" else None,
                    )
                    if kind == "write":
                        if not uri_ms:
                            raise RuntimeError(
                                f"amber ({label}) wrote nothing; see {servers[label].log_path}"
                            )
                        written[label] = uri_ms
                    measured[label] = result
                pairs.append((number + 1, measured["keyed"], measured["open"]))
    return pairs


def summarize(pairs: list[tuple[int, PhaseResult, PhaseResult]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for kind in ("write", "resolve"):
        ratios = [
            keyed.rps / open_.rps
            for _, keyed, open_ in pairs
            if keyed.kind == kind and open_.rps and not keyed.errors and not open_.errors
        ]
        if not ratios:
            continue
        median = statistics.median(ratios)
        summary[kind] = {
            "ratios": ratios,
            "median_ratio": median,
            "overhead": 1 - median,
            "meets_goal": 1 - median <= GOAL_OVERHEAD + 1e-9,
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    work_dir = Path(tempfile.mkdtemp(prefix="amber-bench-auth-", dir=args.data_root))
    env = _environment(args, work_dir)
    if not args.json:
        print(
            "Amber authentication cost  " + "  ".join(f"{k}={v}" for k, v in env.items()),
            flush=True,
        )
        print(_HEADER, flush=True)
    try:
        pairs = measure(args, work_dir)
    finally:
        remove_data(work_dir)
    summary = summarize(pairs)
    if args.json:
        print(
            json.dumps(
                {
                    "environment": env,
                    "summary": summary,
                    "pairs": [
                        {"round": n, "keyed": asdict(k), "open": asdict(o)} for n, k, o in pairs
                    ],
                },
                indent=2,
            )
        )
        return 0
    print()
    for kind, row in summary.items():
        rounds = ", ".join(f"{r:.2f}" for r in row["ratios"])
        verdict = "ok" if row["meets_goal"] else f"above the goal of {GOAL_OVERHEAD:.0%}"
        print(
            f"{kind:<8} keyed/open throughput per round: {rounds}; median {row['median_ratio']:.3f} "
            f"-> authentication costs {row['overhead']:.1%} ({verdict})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
