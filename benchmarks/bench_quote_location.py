"""What locating a quote costs at its bound: ``[citations] max_quote_occurrences``.

Not a test: it measures, prints a table and exits 0. See benchmarks/README.md.

    python benchmarks/bench_quote_location.py                     # 8 Mi characters, ~1 minute
    python benchmarks/bench_quote_location.py --chars 1000000 --rounds 3

In the library, no server: a text of ``--chars`` characters of short words, prepared once
(its normalised forms built and kept, as the citation desk keeps them per document), then
``locate`` of a quote found exactly once in it (the baseline: what any citation of this
text pays) next to, in the same run and round after round:

* ``at_bound``      a quote occurring as often as the bound allows, chosen by prefix and
                    suffix (every occurrence compared by context): the worst a citation
                    can cost that is accepted;
* ``at_bound_norm`` the same, found only under the normalisation;
* ``over_bound``    a quote occurring everywhere, with context: refused ``quote_too_common``.

Ratios are median time / the baseline's median time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from archive.citations.locate import locate  # the checkout above, first
from archive.citations.normalise import PreparedText, prepare
from archive.config import CitationPolicy
from archive.exceptions import QuoteTooCommon


def cases(
    chars: int, bound: int, pdf: bool
) -> dict[str, tuple[PreparedText, Callable[[PreparedText], object]]]:
    repeated = "a " * (bound - 1)  # "a a" bound - 2 times here, once more after "x"
    filler = "b " * ((chars - len(repeated) - 40) // 2)
    text = repeated + "x a a y " + filler + "the single place "
    everywhere = "a " * (chars // 2)
    prepared, flooded = prepare(text, pdf=pdf), prepare(everywhere, pdf=pdf)
    for each in (prepared, flooded):
        for mode in each.modes:
            each.variant(mode)  # built once per document, outside the timings

    def refused(p: PreparedText) -> object:
        try:
            return locate(p, "a a", prefix="a a a", suffix="a b", max_occurrences=bound)
        except QuoteTooCommon:
            return None

    return {
        "baseline": (prepared, lambda p: locate(p, "single place", max_occurrences=bound)),
        "at_bound": (
            prepared,
            lambda p: locate(p, "a a", prefix="x", suffix="y", max_occurrences=bound),
        ),
        "at_bound_norm": (
            prepared,
            lambda p: locate(p, "a\u00a0a", prefix="x", suffix="y", max_occurrences=bound),
        ),
        "over_bound": (flooded, refused),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chars", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--bound", type=int, default=CitationPolicy().max_quote_occurrences)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pdf", action="store_true", help="prepare the text as a PDF's")
    args = parser.parse_args(argv)
    measured = cases(args.chars, args.bound, args.pdf)
    times: dict[str, list[float]] = {name: [] for name in measured}
    for _ in range(args.rounds):
        for name, (prepared, run) in measured.items():  # alternating: drift weighs on all
            started = time.perf_counter()
            run(prepared)
            times[name].append(time.perf_counter() - started)
    base = statistics.median(times["baseline"])
    print(f"{args.chars:,} characters, bound {args.bound:,}, {args.rounds} rounds, pdf={args.pdf}")
    print(f"{'case':<14} {'median ms':>10} {'max ms':>10} {'/ baseline':>11}")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:<14} {median * 1000:>10.1f} {max(values) * 1000:>10.1f} "
            f"{median / base if base else 0.0:>11.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
