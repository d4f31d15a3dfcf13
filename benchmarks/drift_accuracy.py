"""Drift classification accuracy on the labelled corpus, and its cost per page.

Not a test: it prints a confusion table, per-verdict precision/recall and timings, and exits
0 whatever they are (``tests/test_drift_rules.py`` holds the thresholds).

    python benchmarks/drift_accuracy.py            # table, misses, timings
    python benchmarks/drift_accuracy.py --json     # machine-readable
    python benchmarks/drift_accuracy.py --no-timing
    python benchmarks/drift_accuracy.py --languages --no-timing   # es fr de uk zh ar

The corpus lives in ``tests/drift_corpus/``:

``documents.json``
    ``{doc_id: {url, media_type, file, probe}}``: a captured page (``pages/<file>``) and the
    page its site answers for a random sibling URL (``probe``, what the drift job's soft-404
    probe would extract).
``cases.json``
    A list of cases. ``kind: "page"``: ``doc``, the cited ``quote`` (its prefix, suffix and
    position are taken from the old page as the citation path records them, context 32;
    ``occurrence_prefix`` picks a repeated quote's occurrence), optional ``old_edits``
    applied to the document first, and what the live fetch gives: ``new`` — ``{"same":
    true}`` (the same bytes), ``{"edits": [[old, new], …]}`` (string replacements on the old
    page's source, each of which must match), or ``{"page": file}`` (another page) —
    ``status`` (default 200), ``error``, ``not_modified``, ``final_url`` (default the
    document's URL). ``kind: "edit"``: an ``old`` and a ``new`` passage, set between the same
    two neutral paragraphs. Every case has ``expected`` (a verdict), a ``category`` and maybe
    a ``note``.

This module is also the corpus runner the tests use (:func:`load_cases`, :func:`run_case`).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from archive.citations import PreparedText, extract_text, locate, prepare  # noqa: E402
from archive.drift.rules import (  # noqa: E402
    RULES_VERSION,
    CheckOutcome,
    Soft404Signals,
    Verdict,
    assess_edit,
    classify,
    find_passage,
    html_title,
    soft_404_signals,
)
from archive.hashing import content_address  # noqa: E402

CORPUS = ROOT / "tests" / "drift_corpus"
EDIT_BEFORE = "Background\nThe paragraph below was quoted in several reports published this year.\n"
EDIT_AFTER = "\nFurther details are available from the press office on request."
EDIT_URL = "https://example.org/statements/latest"
VERDICTS = [v.value for v in Verdict]


def _media_type(file: str) -> str:
    return "text/plain; charset=utf-8" if file.endswith(".txt") else "text/html; charset=utf-8"


LANGUAGES = (
    CORPUS / "languages"
)  # the corpus in Spanish, French, German, Ukrainian, Chinese, Arabic


def load_documents(corpus: Path = CORPUS) -> dict[str, dict[str, str]]:
    """The corpus's documents, each with ``root``: the corpus directory its pages are in."""
    documents: dict[str, dict[str, str]] = json.loads(
        (corpus / "documents.json").read_text("utf-8")
    )
    for document in documents.values():
        document["root"] = str(corpus)
    return documents


def load_cases(corpus: Path = CORPUS) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((corpus / "cases.json").read_text("utf-8"))
    return cases


def _page(file: str, root: str | Path = CORPUS) -> bytes:
    return (Path(root) / "pages" / file).read_bytes()


def _apply(source: str, edits: list[list[str]], case_id: str) -> str:
    for old, new in edits:
        if old not in source:
            raise ValueError(f"{case_id}: edit does not match: {old[:60]!r}")
        source = source.replace(old, new)
    return source


@dataclass
class Inputs:
    """Everything the drift job would hand to :func:`classify` for one case."""

    kwargs: dict[str, Any]
    live_bytes: bytes | None
    media_type: str


def build_inputs(case: dict[str, Any], documents: dict[str, dict[str, str]]) -> Inputs:
    if case["kind"] == "edit":
        old_text = EDIT_BEFORE + case["old"] + EDIT_AFTER
        new_text = EDIT_BEFORE + case["new"] + EDIT_AFTER
        match = locate(old_text, case["old"])
        kwargs = dict(
            status=200,
            error=None,
            live_hash=content_address(new_text.encode()),
            recorded_hash=content_address(old_text.encode()),
            not_modified=False,
            live_text=prepare(new_text),
            old_exact=case["old"],
            prefix=match.prefix,
            suffix=match.suffix,
            position=match.start,
            soft404=soft_404_signals(
                requested_url=EDIT_URL,
                final_url=EDIT_URL,
                status=200,
                title=None,
                text=new_text,
                probe_text=None,
            ),
        )
        return Inputs(kwargs, new_text.encode(), "text/plain; charset=utf-8")

    document = documents[case["doc"]]
    media_type = document["media_type"]
    root = document.get("root", CORPUS)
    old_source = _page(document["file"], root).decode("utf-8")
    if case.get("old_edits"):
        old_source = _apply(old_source, case["old_edits"], case["id"])
    old_bytes = old_source.encode("utf-8")
    old_text = extract_text(old_bytes, media_type).text
    match = locate(old_text, case["quote"], prefix=case.get("occurrence_prefix"))

    new = case.get("new")
    live_bytes: bytes | None
    live_type = media_type
    if new is None:
        live_bytes = None
    elif new.get("same"):
        live_bytes = old_bytes
    elif "edits" in new:
        live_bytes = _apply(old_source, new["edits"], case["id"]).encode("utf-8")
    else:
        live_bytes = _page(new["page"], root)
        live_type = _media_type(new["page"])
    status = case.get("status", 200)
    final_url = case.get("final_url", document["url"])

    live: PreparedText | None = None
    signals: Soft404Signals | None = None
    if live_bytes is not None and status is not None and 200 <= status < 300:
        live_text = extract_text(live_bytes, live_type).text
        live = prepare(live_text)
        probe = _page(document["probe"], root)
        probe_text = extract_text(probe, _media_type(document["probe"])).text
        signals = soft_404_signals(
            requested_url=document["url"],
            final_url=final_url,
            status=status,
            title=html_title(live_bytes, live_type),
            text=live_text,
            probe_text=probe_text,
        )
    kwargs = dict(
        status=status,
        error=case.get("error"),
        live_hash=content_address(live_bytes) if live_bytes is not None else None,
        recorded_hash=content_address(old_bytes),
        not_modified=bool(case.get("not_modified")),
        live_text=live,
        old_exact=case["quote"],
        prefix=match.prefix,
        suffix=match.suffix,
        position=match.start,
        soft404=signals,
    )
    return Inputs(kwargs, live_bytes, live_type)


def run_case(
    case: dict[str, Any], documents: dict[str, dict[str, str]] | None = None
) -> CheckOutcome:
    inputs = build_inputs(case, documents if documents is not None else load_documents())
    return classify(**inputs.kwargs)


# -- report ---------------------------------------------------------------------------------


def evaluate(
    cases: list[dict[str, Any]], corpus: Path = CORPUS
) -> tuple[list[tuple[dict[str, Any], CheckOutcome]], dict[str, Any]]:
    documents = load_documents(corpus)
    results = [(case, run_case(case, documents)) for case in cases]
    confusion: dict[str, Counter[str]] = defaultdict(Counter)
    for case, outcome in results:
        confusion[case["expected"]][outcome.verdict.value] += 1
    per_verdict = {}
    for verdict in VERDICTS:
        expected = sum(confusion[verdict].values())
        predicted = sum(confusion[e][verdict] for e in VERDICTS)
        correct = confusion[verdict][verdict]
        per_verdict[verdict] = {
            "cases": expected,
            "predicted": predicted,
            "correct": correct,
            "precision": correct / predicted if predicted else None,
            "recall": correct / expected if expected else None,
        }
    correct = sum(1 for case, outcome in results if outcome.verdict.value == case["expected"])
    batches: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case, outcome in results:
        batch = batches[case.get("batch", "dev")]
        batch[0] += outcome.verdict.value == case["expected"]
        batch[1] += 1
    summary = {
        "rules_version": RULES_VERSION,
        "per_language": per_language(results),
        "cases": len(results),
        "correct": correct,
        "accuracy": correct / len(results),
        "per_batch": {
            name: {"correct": c, "cases": n, "accuracy": c / n}
            for name, (c, n) in sorted(batches.items())
        },
        "per_verdict": per_verdict,
        "confusion": {e: dict(confusion[e]) for e in VERDICTS if confusion[e]},
        "misses": [
            {
                "id": case["id"],
                "batch": case.get("batch", "dev"),
                "expected": case["expected"],
                "got": outcome.verdict.value,
                "reasons": list(outcome.reasons),
            }
            for case, outcome in results
            if outcome.verdict.value != case["expected"]
        ],
    }
    return results, summary


def per_language(results: list[tuple[dict[str, Any], CheckOutcome]]) -> dict[str, Any]:
    """Per ``lang`` of the cases (``en`` when absent): accuracy, reversal recall, soft-404
    precision (``None`` when there is nothing to divide by)."""
    tallies: dict[str, Counter[str]] = defaultdict(Counter)
    for case, outcome in results:
        tally = tallies[case.get("lang", "en")]
        got, expected = outcome.verdict.value, case["expected"]
        tally["cases"] += 1
        tally["correct"] += got == expected
        tally["reversals"] += expected == "reversal"
        tally["reversals_caught"] += expected == got == "reversal"
        tally["soft_404_said"] += got == "soft_404"
        tally["soft_404_right"] += expected == got == "soft_404"
    return {
        lang: {
            "cases": t["cases"],
            "correct": t["correct"],
            "accuracy": t["correct"] / t["cases"],
            "reversals": t["reversals"],
            "reversals_caught": t["reversals_caught"],
            "reversal_recall": t["reversals_caught"] / t["reversals"] if t["reversals"] else None,
            "soft_404_precision": (
                t["soft_404_right"] / t["soft_404_said"] if t["soft_404_said"] else None
            ),
        }
        for lang, t in sorted(tallies.items())
    }


def _fmt(value: float | None) -> str:
    return "   -  " if value is None else f"{value:6.1%}"


def print_report(summary: dict[str, Any]) -> None:
    print(
        f"drift rules {summary['rules_version']}: {summary['cases']} cases, "
        f"accuracy {summary['accuracy']:.1%} ({summary['correct']}/{summary['cases']})"
    )
    for name, batch in summary["per_batch"].items():
        print(f"  {name}: {batch['accuracy']:.1%} ({batch['correct']}/{batch['cases']})")
    for lang, row in summary["per_language"].items():
        print(
            f"  [{lang}] verdicts {row['correct']}/{row['cases']}, reversals "
            f"{row['reversals_caught']}/{row['reversals']}, soft-404 precision "
            f"{_fmt(row['soft_404_precision']).strip()}"
        )
    print()
    short = {
        "identical": "ident",
        "cosmetic": "cosm",
        "material": "mater",
        "reversal": "rever",
        "gone": "gone",
        "soft_404": "soft4",
        "unreachable": "unrch",
    }
    header = "expected \\ got".ljust(15) + "".join(short[v].rjust(7) for v in VERDICTS)
    header += "  cases  precision  recall"
    print(header)
    print("-" * len(header))
    for verdict in VERDICTS:
        row = summary["confusion"].get(verdict, {})
        stats = summary["per_verdict"][verdict]
        line = verdict.ljust(15) + "".join(str(row.get(v, 0) or ".").rjust(7) for v in VERDICTS)
        line += f"  {stats['cases']:5d}  {_fmt(stats['precision']):>9}  {_fmt(stats['recall']):>6}"
        print(line)
    if summary["misses"]:
        print("\nmisses:")
        for miss in summary["misses"]:
            print(
                f"  [{miss['batch']}] {miss['id']}: expected {miss['expected']}, got {miss['got']} "
                f"{tuple(miss['reasons'])}"
            )


# -- timing ---------------------------------------------------------------------------------


def _big_page(seed: int, size: int = 100 * 1024) -> tuple[str, str, str]:
    """A ~``size`` character text of sentence-like prose and a sentence in its middle."""
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 10)))
        for _ in range(3000)
    ]
    sentences = []
    length = 0
    while length < size:
        words = [rng.choice(vocabulary) for _ in range(rng.randint(8, 25))]
        sentence = " ".join(words).capitalize() + "."
        sentences.append(sentence)
        length += len(sentence) + 1
    middle = len(sentences) // 2
    quote = sentences[middle]
    return "\n".join(sentences), quote, sentences[middle - 1]


def _time(function: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def timings(repeat: int = 50) -> dict[str, float]:
    """Median milliseconds per call on ~100 KiB texts."""
    text, quote, _ = _big_page(1)
    words = quote.split()
    at = text.index(quote)
    position = at
    prefix, suffix = text[max(0, at - 32) : at], text[at + len(quote) : at + len(quote) + 32]
    edited_quote_text = text.replace(quote, " ".join([*words[:3], "not", *words[3:]]))
    moved = text.replace(quote + "\n", "") + "\n" + quote.replace(words[2], words[2] + "s")
    deleted = text.replace(quote, "")
    figures: dict[str, float] = {}

    def locate(source: str) -> Any:
        # A fresh PreparedText each call: the page's normalisation is part of the cost (the job
        # prepares each fetched page once, then checks every passage cited from it).
        return lambda: find_passage(
            PreparedText(source), quote, prefix=prefix, suffix=suffix, position=position
        )

    figures["find_passage exact (100 KiB)"] = _time(locate(text), repeat)
    figures["find_passage fuzzy, edited in place (100 KiB)"] = _time(
        locate(edited_quote_text), repeat
    )
    figures["find_passage fuzzy, moved + edited (100 KiB)"] = _time(locate(moved), repeat)
    figures["find_passage deleted -> None (100 KiB)"] = _time(locate(deleted), repeat)
    figures["  of which: normalising the page"] = _time(
        lambda: PreparedText(moved).normalised, repeat
    )
    edited = " ".join([*words[:3], "not", *words[3:]])
    figures["assess_edit (one sentence)"] = _time(lambda: assess_edit(quote, edited), repeat * 20)
    long_old = " ".join(text[:2000].split())
    long_new = long_old.replace(" a", " the", 3)
    figures["assess_edit (2000-char passage)"] = _time(
        lambda: assess_edit(long_old, long_new), repeat
    )
    probe = text.replace(quote, "Something else entirely.")
    figures["soft_404_signals with probe (100 KiB)"] = _time(
        lambda: soft_404_signals(
            requested_url="https://a.example/x/y",
            final_url="https://a.example/x/y",
            status=200,
            title="A title",
            text=text,
            probe_text=probe,
        ),
        repeat,
    )
    html = (
        "<html><head><title>A page</title></head><body><p>"
        + text.replace("\n", "</p><p>")
        + "</p></body></html>"
    ).encode()
    figures["html_title (100 KiB HTML)"] = _time(lambda: html_title(html, "text/html"), repeat)
    documents = load_documents()
    cases = load_cases()
    started = time.perf_counter()
    rounds = 5
    for _ in range(rounds):
        for case in cases:
            run_case(case, documents)
    figures["corpus case end to end incl. extraction (mean)"] = (
        (time.perf_counter() - started) * 1000 / (rounds * len(cases))
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-timing", action="store_true", help="skip the timing section")
    parser.add_argument(
        "--repeat", type=int, default=50, help="timing repetitions (median reported)"
    )
    parser.add_argument(
        "--languages",
        action="store_true",
        help="the corpus in other languages (tests/drift_corpus/languages) instead of English",
    )
    args = parser.parse_args(argv)
    corpus = LANGUAGES if args.languages else CORPUS
    _, summary = evaluate(load_cases(corpus), corpus)
    if not args.no_timing:
        summary["timings_ms"] = timings(args.repeat)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print_report(summary)
    if "timings_ms" in summary:
        print("\nmedian milliseconds per call:")
        for name, value in summary["timings_ms"].items():
            print(f"  {name:55s} {value:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
