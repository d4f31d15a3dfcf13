"""archive.citations.locate: exact, then normalised, never fuzzy; offsets in the original text."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from archive.citations import (
    NORMALISATION_VERSION,
    PreparedText,
    QuoteMatch,
    locate,
    normalise,
    prepare,
    quote_hash,
)
from archive.citations.normalise import _apply_rules, _apply_rules_reference
from archive.exceptions import EmptyQuote, InvalidInput, QuoteNotFound

FAST = settings(max_examples=300, deadline=None, database=None)


def found(text: str, quote: str, **kwargs: object) -> str:
    """The source span ``locate`` reports, checked for consistency."""
    match = locate(text, quote, **kwargs)  # type: ignore[arg-type]
    assert match.exact == text[match.start : match.end]
    assert 0 <= match.start < match.end <= len(text)
    return match.exact


def test_version_and_errors() -> None:
    assert NORMALISATION_VERSION == "amber-norm-2"  # amber-norm-1: tests/test_quotes_languages.py
    assert issubclass(QuoteNotFound, InvalidInput) and QuoteNotFound.code == "quote_not_found"
    assert issubclass(EmptyQuote, InvalidInput) and EmptyQuote.code == "empty_quote"


# -- exact ----------------------------------------------------------------------------------------


def test_exact_match_and_context() -> None:
    text = "0123456789" * 5 + "NEEDLE" + "abcdefghij" * 5
    match = locate(text, "NEEDLE")
    assert match == QuoteMatch(
        start=50,
        end=56,
        exact="NEEDLE",
        prefix=text[18:50],
        suffix=text[56:88],
        method="exact",
        occurrences=1,
    )
    short = locate("a NEEDLE b", "NEEDLE", context=2)
    assert (short.prefix, short.suffix) == ("a ", " b")
    edge = locate("NEEDLE", "NEEDLE")
    assert (edge.prefix, edge.suffix) == ("", "")


def test_positions_count_code_points() -> None:
    text = "\U0001f600 emoji then caf\u00e9 quote"
    match = locate(text, "quote")
    assert match.start == len(
        "\U0001f600 emoji then caf\u00e9 "
    )  # code points, not UTF-16 or bytes
    assert text[match.start : match.end] == "quote"


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("quote", ["", " ", "\n\t ", "\u00a0", "\u3000"])
def test_empty_quote_refused(quote: str) -> None:
    with pytest.raises(EmptyQuote):
        locate("some text", quote)


def test_quote_of_invisible_characters_only_is_empty() -> None:
    with pytest.raises(EmptyQuote):
        locate("some\u00ad\u200b text", "\u00ad\u200b")


@pytest.mark.parametrize(
    "quote",
    [
        "not in there",
        "The quick brown cat",  # one word differs: no fuzzy acceptance
        "the quick brown fox",  # case matters
        "quick  brown fox jumped",
        "quick brown … dog",  # elision is not the text
        "quick--brown",
    ],
)
def test_absent_quote_refused(quote: str) -> None:
    with pytest.raises(QuoteNotFound) as caught:
        locate("The quick brown fox jumps over the lazy dog.", quote)
    assert quote not in caught.value.message  # the quote never goes into messages or logs


def test_bad_arguments() -> None:
    with pytest.raises(InvalidInput):
        locate("text", 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        locate("text", "text", position="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        locate("text", "text", prefix=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        locate("text", "te\ud800xt")


# -- normalisation, one rule at a time -------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "quote", "span"),
    [
        # typographic quotes
        ("He said \u201cstop\u201d and left", 'said "stop" and', "said \u201cstop\u201d and"),
        ("it\u2019s fine", "it's fine", "it\u2019s fine"),
        ("it's fine", "it\u2019s fine", "it's fine"),
        ("\u201elow\u201c", '"low"', "\u201elow\u201c"),
        # dashes
        ("pages 10\u201320 only", "pages 10-20 only", "pages 10\u201320 only"),
        ("yes \u2014 no", "yes - no", "yes \u2014 no"),
        ("yes - no", "yes \u2013 no", "yes - no"),
        ("\u22125 degrees", "-5 degrees", "\u22125 degrees"),
        # whitespace: NBSP, line breaks, tabs, runs
        ("100\u00a0km away", "100 km away", "100\u00a0km away"),
        ("100 km away", "100\u00a0km away", "100 km away"),
        ("line one\nline two", "one line two", "one\nline two"),
        ("one\r\n\r\n  two", "one two", "one\r\n\r\n  two"),
        ("cell\tcell", "cell cell", "cell\tcell"),
        ("narrow\u202fspace", "narrow space", "narrow\u202fspace"),
        # soft hyphen and zero-width characters
        ("extra\u00adordinary claim", "extraordinary claim", "extra\u00adordinary claim"),
        ("extraordinary claim", "extra\u00adordinary claim", "extraordinary claim"),
        ("zero\u200bwidth", "zerowidth", "zero\u200bwidth"),
        # NFC
        ("caf\u00e9 au lait", "cafe\u0301 au lait", "caf\u00e9 au lait"),
        ("cafe\u0301 au lait", "caf\u00e9 au lait", "cafe\u0301 au lait"),
        ("\u00c5ngstr\u00f6m", "\u212bngstro\u0308m", "\u00c5ngstr\u00f6m"),
        # ellipsis
        ("wait\u2026 what", "wait... what", "wait\u2026 what"),
        # a quote with stray outer whitespace
        ("alpha beta gamma", "  beta\n", "beta"),
    ],
)
def test_normalised_match_covers_the_source_span(source: str, quote: str, span: str) -> None:
    match = locate(source, quote)
    assert match.exact == span == source[match.start : match.end]
    assert normalise(match.exact) == normalise(quote)


def test_method_reports_how_it_matched() -> None:
    assert locate("it\u2019s here", "it\u2019s").method == "exact"
    assert locate("it\u2019s here", "it's").method == "normalised"


def test_offsets_are_in_the_original_text() -> None:
    source = "A\u00a0\u00a0long\u00a0\u00a0prefix \u201cwith\u201d cafe\u0301\u00ad\u2026 and the target phrase here."
    match = locate(source, "and the target phrase")
    assert match.method == "exact"
    match = locate(source, 'long prefix "with" caf\u00e9... and the target')
    assert match.method == "normalised"
    assert match.start == 3
    assert source[match.start : match.end] == (
        "long\u00a0\u00a0prefix \u201cwith\u201d cafe\u0301\u00ad\u2026 and the target"
    )
    assert match.prefix == "A\u00a0\u00a0"
    assert match.suffix == " phrase here."


def test_inline_markup_quote_matches_html_text() -> None:
    from archive.citations import extract_text

    text = extract_text(
        b"<p>The <b>big</b> <a href=x>red</a>&nbsp;dog\n  barked.</p><p>Next&#8217;s</p>",
        "text/html",
    ).text
    assert (
        found(text, "The big red dog barked. Next's") == "The big red\u00a0dog barked.\nNext\u2019s"
    )


# -- PDF-only rules --------------------------------------------------------------------------------


def test_ligatures_only_for_pdf() -> None:
    source = "the \ufb01nal e\ufb00ect"
    assert found(source, "final effect", pdf=True) == "\ufb01nal e\ufb00ect"
    with pytest.raises(QuoteNotFound):
        locate(source, "final effect")
    assert found("a \ufb01nal b", "\ufb01nal", pdf=True) == "\ufb01nal"
    assert found("a final b", "\ufb01nal", pdf=True) == "final"


def test_line_break_hyphenation_for_pdf() -> None:
    source = (
        "The evi-\ndence is in the state-\nof-the-art Anti-\nAmerican 1990-\n1995 re\u00ad\nport."
    )
    assert found(source, "evidence is", pdf=True) == "evi-\ndence is"
    assert found(source, "evi-dence", pdf=True) == "evi-\ndence"
    assert found(source, "state-of-the-art", pdf=True) == "state-\nof-the-art"
    assert found(source, "Anti-American", pdf=True) == "Anti-\nAmerican"
    assert found(source, "1990-1995", pdf=True) == "1990-\n1995"
    assert found(source, "report.", pdf=True) == "re\u00ad\nport."
    assert found(source, "evi-\ndence", pdf=True) == "evi-\ndence"  # exact
    with pytest.raises(QuoteNotFound):
        locate(source, "evidence")  # not a PDF: line breaks are spaces, hyphens are hyphens
    assert found(source, "evi- dence") == "evi-\ndence"


def test_pdf_prepared_text_uses_its_flag() -> None:
    prepared = prepare("the evi-\ndence", pdf=True)
    assert found(prepared.text, "evidence", pdf=True) == "evi-\ndence"
    assert locate(prepared, "evidence").exact == "evi-\ndence"


# -- several occurrences ------------------------------------------------------------------------


TRIPLE = "alpha: the claim. beta: the claim. gamma: the claim."


def starts(text: str, quote: str) -> list[int]:
    return [i for i in range(len(text)) if text.startswith(quote, i)]


def test_first_occurrence_by_default() -> None:
    match = locate(TRIPLE, "the claim")
    assert (match.start, match.occurrences) == (starts(TRIPLE, "the claim")[0], 3)


def test_prefix_chooses() -> None:
    assert locate(TRIPLE, "the claim", prefix="beta: ").start == starts(TRIPLE, "the claim")[1]
    assert locate(TRIPLE, "the claim", prefix="gamma:").start == starts(TRIPLE, "the claim")[2]
    # compared after normalisation
    assert (
        locate(TRIPLE, "the claim", prefix="beta:\u00a0\n").start == starts(TRIPLE, "the claim")[1]
    )


def test_suffix_chooses() -> None:
    text = "the claim one, the claim two, the claim three"
    assert locate(text, "the claim", suffix=" two").start == starts(text, "the claim")[1]
    assert locate(text, "the claim", suffix="three").start == starts(text, "the claim")[2]


def test_position_chooses() -> None:
    positions = starts(TRIPLE, "the claim")
    assert locate(TRIPLE, "the claim", position=positions[2]).start == positions[2]
    assert locate(TRIPLE, "the claim", position=positions[1] + 3).start == positions[1]
    assert locate(TRIPLE, "the claim", position=10_000).start == positions[2]


def test_context_beats_position_and_longer_agreement_wins() -> None:
    positions = starts(TRIPLE, "the claim")
    assert locate(TRIPLE, "the claim", prefix="beta: ", position=positions[2]).start == positions[1]
    text = "xa: Q. ya: Q."
    assert locate(text, "Q", prefix="ya: ").start == text.rindex("Q")


def test_disagreeing_context_still_found() -> None:
    match = locate(TRIPLE, "the claim", prefix="nowhere ", suffix=" nothing")
    assert match.start == starts(TRIPLE, "the claim")[0]


def test_normalised_occurrences_are_disambiguated_too() -> None:
    text = "one\u00a0two A; one\ntwo B; one  two C"
    assert locate(text, "one two").occurrences == 3
    match = locate(text, "one two", suffix=" B")
    assert match.exact == "one\ntwo"
    assert locate(text, "one two", position=len(text)).exact == "one  two"


def test_overlapping_occurrences() -> None:
    match = locate("aaaa", "aa", position=1)
    assert (match.start, match.occurrences) == (1, 3)


# -- normalise and quote_hash ----------------------------------------------------------------------


def test_normalise() -> None:
    assert (
        normalise("  \u201cHello,\u00a0\n world\u201d \u2014 it\u2019s\u2026 ")
        == '"Hello, world" - it\'s...'
    )
    assert normalise("cafe\u0301") == "caf\u00e9"
    assert normalise("e\ufb00ect evi-\ndence") == "e\ufb00ect evi- dence"
    assert normalise("e\ufb00ect evi-\ndence", pdf=True) == "effect evidence"


def test_quote_hash() -> None:
    h = quote_hash("it\u2019s a \u201cquote\u201d")
    assert h.startswith("blake3:") and len(h) == len("blake3:") + 64
    assert h == quote_hash(' it\'s  a\n"quote" ') == quote_hash('it\'s a "quote"')
    assert h != quote_hash("it's a quote")
    with pytest.raises(EmptyQuote):
        quote_hash("  ")


# -- prepared texts -------------------------------------------------------------------------------


def test_prepare_is_reused_for_the_same_text_object() -> None:
    text = "some \u201ctext\u201d " * 10
    prepared = prepare(text)
    assert prepare(text) is prepared
    assert prepare(text, pdf=True) is not prepared
    assert isinstance(prepared, PreparedText)
    assert locate(prepared, '"text"').exact == "\u201ctext\u201d"


def test_hundred_kib_text_ten_quotes() -> None:
    sentence = (
        "The archive keeps \u201cevidence\u201d\u00a0of what agents read \u2014 sentence {n}.\n"
    )
    text = "".join(sentence.format(n=n) for n in range(1600))
    assert len(text) >= 100 * 1024
    prepared = PreparedText(text)
    for n in range(0, 1600, 160):
        match = locate(prepared, f'keeps "evidence" of what agents read - sentence {n}.')
        assert match.method == "normalised"
        assert match.exact == sentence.format(n=n)[len("The archive ") : -1]


# -- properties ------------------------------------------------------------------------------------

# Text as "clusters", so that substrings never split a base letter from its accent.
CLUSTERS = st.sampled_from(
    [
        "a",
        "b",
        "c",
        "x",
        "y",
        "-",
        ".",
        ",",
        "'",
        '"',
        " ",
        " ",
        " ",
        "\n",
        "\t",
        "\u00a0",
        "\u2019",
        "\u201c",
        "\u201d",
        "\u2013",
        "\u2014",
        "\u00ad",
        "\u2026",
        "\u00e9",
        "e\u0301",
        "\u00c5",
        "A\u030a",
    ]
)
EQUIVALENTS = {
    " ": [" ", "\u00a0", "\n", "  ", "\t"],
    "\n": [" ", "\n"],
    "\t": [" ", "\t"],
    "\u00a0": [" ", "\u00a0"],
    "'": ["'", "\u2019", "\u2018"],
    "\u2019": ["'", "\u2019"],
    '"': ['"', "\u201c", "\u201d"],
    "\u201c": ['"', "\u201c"],
    "\u201d": ['"', "\u201d"],
    "-": ["-", "\u2013"],
    "\u2013": ["-", "\u2013"],
    "\u2014": ["-", "\u2014"],
    "\u00ad": ["", "\u00ad"],
    "\u2026": ["...", "\u2026"],
    "\u00e9": ["\u00e9", "e\u0301"],
    "e\u0301": ["\u00e9", "e\u0301"],
    "\u00c5": ["\u00c5", "A\u030a"],
    "A\u030a": ["\u00c5", "A\u030a"],
}


@st.composite
def text_and_quote(draw: st.DrawFn) -> tuple[str, str, str]:
    clusters = draw(st.lists(CLUSTERS, min_size=1, max_size=80))
    i = draw(st.integers(0, len(clusters) - 1))
    j = draw(st.integers(i + 1, len(clusters)))
    quoted = clusters[i:j]
    variant = [draw(st.sampled_from(EQUIVALENTS.get(c, [c]))) for c in quoted]
    return "".join(clusters), "".join(quoted), "".join(variant)


@given(text_and_quote())
@FAST
def test_property_substring_found(case: tuple[str, str, str]) -> None:
    text, substring, _ = case
    assume(normalise(substring))
    match = locate(text, substring)
    assert 0 <= match.start < match.end <= len(text)
    assert match.exact == text[match.start : match.end]
    assert match.method == "exact"


@given(text_and_quote())
@FAST
def test_property_equivalent_spelling_found(case: tuple[str, str, str]) -> None:
    text, substring, variant = case
    assume(normalise(variant))
    match = locate(text, variant)
    assert 0 <= match.start < match.end <= len(text)
    assert match.exact == text[match.start : match.end]
    assert normalise(match.exact) == normalise(variant) == normalise(substring)


@given(
    st.text(
        alphabet=st.sampled_from(list("ab- .\n\u00a0\u00ad\u200b\u2026\ufb01\u2010\u00e9\u0301")),
        max_size=60,
    )
)
@FAST
def test_property_fast_rules_equal_the_reference(text: str) -> None:
    nfc = unicodedata.normalize("NFC", text)
    for mode in ("plain", "pdf", "pdf-keep-hyphens"):
        assert _apply_rules(nfc, mode, None) == _apply_rules_reference(nfc, mode)  # type: ignore[arg-type]


TRICKY = st.sampled_from(
    list(
        "ab -.\n\u00a0\u00ad\u200b\u2026\ufb01\u2010\u00e9\u0301e\u030a\u2019'\"\u201c"
        "\u1100\u1161\u11a8\uac00\u0b47\u0b3e\uf900"  # Hangul jamo, Oriya two-part vowel, CJK compatibility
    )
)


@given(st.text(alphabet=TRICKY, max_size=40), st.text(alphabet=TRICKY, min_size=1, max_size=8))
@FAST
def test_property_found_spans_normalise_to_the_quote(text: str, quote: str) -> None:
    """A match covers whole source characters: it normalises to exactly the quote."""
    try:
        match = locate(text, quote)
    except (QuoteNotFound, EmptyQuote):
        return
    assert match.exact == text[match.start : match.end]
    assert normalise(match.exact) == normalise(quote)


def test_partial_replaced_characters_do_not_match() -> None:
    with pytest.raises(QuoteNotFound):
        locate("wait\u2026 what", "wait.")  # one dot of an ellipsis
    with pytest.raises(QuoteNotFound):
        locate("a \ufb01nal b", "inal", pdf=True)  # half a ligature


@given(st.text(max_size=80), st.text(min_size=1, max_size=12))
@FAST
def test_property_any_text_any_quote(text: str, quote: str) -> None:
    """Arbitrary Unicode: found or refused cleanly, never a crash; found spans are consistent."""
    for pdf in (False, True):
        try:
            match = locate(text, quote, pdf=pdf)
        except (QuoteNotFound, EmptyQuote):
            continue
        except InvalidInput:
            assert any(0xD800 <= ord(c) <= 0xDFFF for c in quote)
            continue
        assert 0 <= match.start < match.end <= len(text)
        assert match.exact == text[match.start : match.end]
        if match.method == "exact":
            assert match.exact == quote


@given(st.text(max_size=60))
@FAST
def test_property_substrings_of_arbitrary_text(text: str) -> None:
    """Every substring of any text is found (exactly), with valid offsets."""
    for i in range(0, len(text), 7):
        for j in range(i + 1, min(len(text), i + 20) + 1, 5):
            quote = text[i:j]
            if any(0xD800 <= ord(c) <= 0xDFFF for c in quote) or not normalise(quote):
                continue
            match = locate(text, quote)
            assert match.method == "exact" and match.exact == quote


@pytest.mark.parametrize(
    ("text", "quote"),
    [
        ("the cafe\u0301 opens at nine", "the cafe"),  # ends before a combining accent
        ("the cafe\u0301 opens at nine", "\u0301 opens"),  # starts with it
        ("\u1100\u1161\u11a8 is one syllable", "\u1100\u1161"),  # Hangul jamo NFC composes
    ],
)
def test_an_exact_match_never_cuts_a_character_nfc_makes_one(text: str, quote: str) -> None:
    """The visible text shows "café"; "cafe" is not in it, exactly as for the composed spelling."""
    with pytest.raises(QuoteNotFound):
        locate(text, quote)
    assert locate(text, text[: text.index(" ", 5)]).start == 0  # the whole word is found


def test_prefix_and_suffix_choose_across_long_runs_of_whitespace() -> None:
    """Normalisation shrinks a run of spaces to one: the context compared next to each
    occurrence must be long enough after normalising, not merely as raw text."""
    gap = "\n" + " " * 120
    text = f"Section 1:{gap}The fee is 5%.{gap}Section 2:{gap}The fee is 5%.{gap}End."
    second = text.rindex("The fee is 5%.")
    assert locate(text, "The fee is 5%.", prefix="Section 2:\n").start == second
    assert locate(text, "The fee is 5%.", suffix="\nEnd.").start == second
    assert locate(text, "The fee is 5%.", suffix="\nSection 2:").start == text.index("The fee")
