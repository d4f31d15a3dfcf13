"""What matching a quote costs: linear in the text, with results identical to the slow way.

``amber-norm-1`` is frozen, so each speed-up here is checked against the implementation it
replaced, kept below as a reference, on inputs built to hit the corners (runs of spaces,
hyphens and invisible characters; repeated quotes with context), and its cost is measured by
counting operations on the pathological inputs the old code was quadratic on.
"""

from __future__ import annotations

import importlib
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archive.citations import locate
from archive.citations.context import ContextReader
from archive.citations.normalise import _Map, _positions, _replacement
from archive.exceptions import QuoteTooCommon

# The package exports functions named like these modules.
norm = importlib.import_module("archive.citations.normalise")
context_module = importlib.import_module("archive.citations.context")
locate_module = importlib.import_module("archive.citations.locate")

FAST = settings(max_examples=400, deadline=None, database=None)


# -- the rules scan, as it was before it remembered failed positions ------------------------------


def _apply_rules_before(source: str, mode: norm.Mode, offsets: _Map | None) -> str:
    source = norm._one_for_one(source)
    plain = mode == "plain"
    rules = norm._PLAIN_RULES if plain else norm._PDF_RULES
    parts: list[str] = []
    at = 0
    length = 0
    for needle_at in _positions(source, norm._NEEDLES if plain else norm._PDF_NEEDLES):
        if needle_at < at:
            continue
        begin = needle_at
        while begin > at and source[begin - 1] in norm._RUN_CHARS:
            begin -= 1
        for candidate in range(begin, needle_at + 1):
            match = rules.match(source, candidate)
            if match is not None:
                break
        else:
            continue
        begin, finish = match.span()
        if begin > at:
            if offsets is not None:
                offsets.add(length, at, begin, True, begin - at)
            parts.append(source[at:begin])
            length += begin - at
        replacement = _replacement(mode, source, match)
        if replacement:
            if offsets is not None:
                offsets.add(length, begin, finish, False, len(replacement))
            parts.append(replacement)
            length += len(replacement)
        at = finish
    if at < len(source):
        if offsets is not None:
            offsets.add(length, at, len(source), True, len(source) - at)
        parts.append(source[at:])
    return "".join(parts)


def _fields(offsets: _Map) -> tuple[object, ...]:
    return (offsets.starts, offsets.sources, offsets.source_ends, offsets.identity, offsets.length)


RUNS = st.sampled_from(
    ["-", " ", "a", "A", "_", "\u00ad", "\u200b", "\ufeff", "\n", "\u2013", "\u2026", "\ufb01", "é"]
)
MODES = ("plain", "pdf", "pdf-keep-hyphens")


@given(st.lists(st.tuples(RUNS, st.integers(1, 6)), max_size=40))
@FAST
def test_property_rules_scan_identical_to_the_one_it_replaced(
    pieces: list[tuple[str, int]],
) -> None:
    text = unicodedata.normalize("NFC", "".join(char * count for char, count in pieces))
    for mode in MODES:
        new_map, old_map = _Map(), _Map()
        new = norm._apply_rules(text, mode, new_map)  # type: ignore[arg-type]
        old = _apply_rules_before(text, mode, old_map)  # type: ignore[arg-type]
        assert new == old
        assert _fields(new_map) == _fields(old_map)
        assert new == norm._apply_rules_reference(text, mode)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "- " * 500,
        "-\u200b " * 300,
        " -" * 400 + "a- b",
        ("- " * 50 + "x- y") * 20,
        "\u00ad " * 300 + "a\u00ad \u200b",
        "a-" + "\u200b" * 200 + " -" * 100,
    ],
)
def test_pathological_runs_identical_to_the_one_it_replaced(text: str) -> None:
    for mode in MODES:
        new_map, old_map = _Map(), _Map()
        assert norm._apply_rules(text, mode, new_map) == _apply_rules_before(text, mode, old_map)  # type: ignore[arg-type]
        assert _fields(new_map) == _fields(old_map)


class _CountingRules:
    """Stands in for a compiled rules pattern and counts the match attempts."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.calls = 0

    def match(self, text: str, pos: int) -> re.Match[str] | None:
        self.calls += 1
        return self.pattern.match(text, pos)

    def sub(self, *args: object) -> str:
        return self.pattern.sub(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("unit", ["- ", " -", "-\u00a0", "\u2013 "])
def test_failed_hyphen_breaks_cost_linear_match_attempts(
    unit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = _CountingRules(norm._PDF_RULES)
    monkeypatch.setattr(norm, "_PDF_RULES", counting)
    text = unit * 3000  # a hyphen with no word before it, then a space: never a hyphen break
    norm.normalise_as(text, "pdf")
    assert counting.calls <= 2 * len(text)  # was about len(text) ** 2 / 4


# -- context next to an occurrence, as it was: a window normalised per occurrence ---------------


def _window_context_before(text: str, at: int, wanted: int, mode: norm.Mode) -> str:
    window = 4 * abs(wanted) + 64
    while True:
        if wanted < 0:
            lo = max(0, at - window)
            context, complete = norm.normalise_as(text[lo:at], mode), lo == 0
        else:
            hi = min(len(text), at + window)
            context, complete = norm.normalise_as(text[at:hi], mode), hi == len(text)
        if complete or len(context) > abs(wanted):
            return context
        window *= 4


CONTEXT_CHARS = st.sampled_from(
    list("ab Z-.\n\t\u00a0\u00ad\u200b\u2026\ufb01\u2013\u00e9\u0301\u2019\u1100\u1161")
)
CONTEXT_TEXT = st.lists(
    st.tuples(
        st.one_of(CONTEXT_CHARS, st.sampled_from(["a ", "b-\n", "x  ", "- "])), st.integers(1, 30)
    ),
    max_size=12,
).map(lambda pieces: "".join(piece * count for piece, count in pieces))


@given(CONTEXT_TEXT, st.integers(1, 40), st.sampled_from(MODES))
@FAST
def test_property_context_identical_to_the_window_it_replaced(
    text: str, wanted: int, mode: str
) -> None:
    prepared = norm.PreparedText(text, pdf=mode != "plain")
    reader = ContextReader(prepared, mode)  # type: ignore[arg-type]
    for at in range(len(text) + 1):
        old_before = _window_context_before(text, at, -wanted, mode)  # type: ignore[arg-type]
        old_after = _window_context_before(text, at, wanted, mode)  # type: ignore[arg-type]
        assert reader.before(at, wanted) == old_before[-wanted:]
        assert reader.after(at, wanted) == old_after[:wanted]


@pytest.mark.parametrize("mode", MODES)
def test_context_of_a_repeated_quote_costs_linear_normalisation(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    normalised: list[int] = []
    real = norm._apply_rules

    def counting(
        source: str,
        mode: norm.Mode,
        offsets: _Map | None,
        version: norm.Version = "amber-norm-1",
    ) -> str:
        normalised.append(len(source))
        return real(source, mode, offsets, version)

    monkeypatch.setattr(norm, "_apply_rules", counting)
    monkeypatch.setattr(context_module, "_apply_rules", counting)
    text = "a  " * 3000 + "x  a  a"
    match = locate(text, "a a", prefix="x" * 300, suffix="y" * 300, pdf=mode != "plain")
    assert match.occurrences > 2000 and match.start == len(text) - 4
    # The text once per mode tried, context aside: was a window of >1,000 per occurrence.
    assert sum(normalised) <= 4 * len(text)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("exact", ["a a", "a\u00a0a"])  # exactly, or only normalised
def test_a_quote_past_the_occurrence_bound_is_refused_before_any_context_is_read(
    mode: str, exact: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_context(*args: object, **kwargs: object) -> None:
        raise AssertionError("context read for a quote that is refused anyway")

    monkeypatch.setattr(locate_module, "ContextReader", no_context)
    text = "a " * 500_000  # 1,000,000 characters, "a a" at every other one
    with pytest.raises(QuoteTooCommon, match="more than 1000 times"):
        locate(text, exact, prefix="a a a", suffix="a b", pdf=mode != "plain", max_occurrences=1000)


@pytest.mark.parametrize("mode", MODES)
def test_a_quote_at_the_occurrence_bound_is_still_chosen_by_context(mode: str) -> None:
    text = "a  " * 1000 + "x  a  a  y"  # "a a" 1,000 times normalised, the last after x
    match = locate(text, "a a", prefix="x", suffix="y", pdf=mode != "plain", max_occurrences=1000)
    assert match.occurrences == 1000 and match.method == "normalised"
    assert text[match.start - 3] == "x"
    with pytest.raises(QuoteTooCommon):
        locate(text, "a a", prefix="x", suffix="y", pdf=mode != "plain", max_occurrences=999)
