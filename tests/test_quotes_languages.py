"""``amber-norm-2``: quotes in Spanish, French, Ukrainian, Chinese, German, Arabic and Japanese.

Each case is a page and a quote a reader would call the same text (found) or not (refused),
and what ``amber-norm-1`` said of it: stored citations keep the version they were matched
under (``docs/specs/amber-norm-2.md``).
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archive.citations import NORMALISATION_VERSION, locate, normalise, quote_hash
from archive.citations.context import ContextReader, window_context
from archive.citations.normalise import (
    NORMALISATION_VERSIONS,
    PreparedText,
    _apply_rules,
    _apply_rules_reference,
    check_version,
)
from archive.exceptions import InvalidInput, QuoteNotFound

FAST = settings(max_examples=300, deadline=None, database=None)

# (language, page text, quote, found under norm-2, found under norm-1)
CASES = [
    (
        "es",
        "El ministro dijo: «la ley entra en vigor mañana».",
        '"la ley entra en vigor mañana"',
        True,
        False,
    ),
    (
        "es",
        "El ministro dijo: «la ley entra en vigor mañana».",
        "la ley entra en vigor mañana",
        True,
        True,
    ),
    (
        "es",
        "Según el informe, la inflación bajó al 3,1 %.",
        "la inflación bajó al 3.1 %",
        False,
        False,
    ),
    ("es", "La cafe\u0301 abre a las ocho.", "La café abre a las ocho.", True, True),
    (
        "fr",
        "Le préfet a déclaré\u202f: «\u202fl'accès est interdit\u202f».",
        "Le préfet a déclaré : «",
        True,
        True,
    ),
    ("fr", "Il a répondu «oui» sans attendre.", 'Il a répondu "oui" sans attendre.', True, False),
    ("fr", "Il a répondu ‹oui› sans attendre.", "Il a répondu 'oui' sans attendre.", True, False),
    (
        "fr",
        "Il a répondu « oui » sans attendre.",
        'Il a répondu "oui" sans attendre.',
        False,
        False,
    ),
    ("fr", "L'arrêté est publié.", "L'arrete est publie.", False, False),
    (
        "uk",
        "Міністерство об\u02bcєднало два департаменти.",
        "Міністерство об'єднало два департаменти.",
        True,
        True,
    ),
    ("uk", "Рада ухвалила «закон про мову».", 'Рада ухвалила "закон про мову".', True, False),
    ("uk", "Рада ухвалила закон.", "Рада ухвалила закон", True, True),
    ("uk", "Рада ухвалила закон.", "Рада ухвалила закони.", False, False),
    ("zh", "会议决定，票价为40元。", "会议决定,票价为40元。", True, False),
    ("zh", "会议决定，票价为40元。", "会议决定，票价为４０元。", True, False),
    ("zh", "会议决定\n票价为40元。", "会议决定票价为40元。", True, False),
    ("zh", "会议决定\n  票价为40元。", "会议决定 票价为40元。", True, True),
    ("zh", "他说：「今天不开会。」", '他说:"今天不开会。"', True, False),
    ("zh", "他说：『今天不开会。』", "他说:'今天不开会。'", True, False),
    ("zh", "ＡＢＣ公司的收入增加了。", "ABC公司的收入增加了。", True, False),
    ("zh", "会议决定，票价为40元。", "会议决定，票价为50元。", False, False),
    ("zh", "会议决定。票价为40元。", "会议决定.票价为40元。", False, False),  # 。 is not .
    ("zh", "ABC 公司", "ABC公司", False, False),  # a space next to a Latin letter stays
    ("ja", "東京都は\n新しい規則を発表した。", "東京都は新しい規則を発表した。", True, False),
    ("ja", "ｶﾀｶﾅの看板", "カタカナの看板", False, False),  # half-width kana are not folded
    ("ko", "서울시는 새 규칙을 발표했다.", "서울시는새 규칙을 발표했다.", False, False),
    ("de", "Die Straße ist gesperrt.", "Die Strasse ist gesperrt.", False, False),
    (
        "de",
        "Er sagte: „Die Straße ist gesperrt“.",
        'Er sagte: "Die Straße ist gesperrt".',
        True,
        True,
    ),
    (
        "de",
        "Er sagte: »Die Straße ist gesperrt«.",
        'Er sagte: "Die Straße ist gesperrt".',
        True,
        False,
    ),
    ("ar", "قالت الوزارة: «سيُفتح المعبر غدًا».", 'قالت الوزارة: "سيُفتح المعبر غدًا".', True, False),
    ("ar", "قالت الوزارة إن المعبر سيفتح غدا.", "قالت الوزارة إن المعبر سيُفتح غدًا.", False, False),
]


@pytest.mark.parametrize(("lang", "text", "quote", "found_2", "found_1"), CASES)
def test_quotes_per_language(
    lang: str, text: str, quote: str, found_2: bool, found_1: bool
) -> None:
    for version, expected in (("amber-norm-2", found_2), ("amber-norm-1", found_1)):
        if expected:
            match = locate(text, quote, normalisation=version)  # type: ignore[arg-type]
            assert match.exact == text[match.start : match.end]
            assert normalise(match.exact, version=version) == normalise(quote, version=version)  # type: ignore[arg-type]
        else:
            with pytest.raises(QuoteNotFound):
                locate(text, quote, normalisation=version)  # type: ignore[arg-type]


def test_versions() -> None:
    assert NORMALISATION_VERSION == "amber-norm-2"
    assert NORMALISATION_VERSIONS == ("amber-norm-1", "amber-norm-2")
    assert check_version("amber-norm-1") == "amber-norm-1"
    with pytest.raises(InvalidInput):
        check_version("amber-norm-3")
    # Text the new rules do not touch hashes as before; text they do, differently.
    assert quote_hash("plain words") == quote_hash("plain words", "amber-norm-1")
    assert quote_hash("«oui»") != quote_hash("«oui»", "amber-norm-1")
    assert quote_hash("«oui»") == quote_hash('"oui"')


def test_offsets_cover_whole_source_characters() -> None:
    text = "前文。会议决定，\n  票价为４０元。后文"
    match = locate(text, "会议决定,票价为40元")
    assert match.exact == "会议决定，\n  票价为４０元"
    assert (match.start, match.end) == (3, 3 + len(match.exact))


CJK_ALPHABET = st.sampled_from(
    list(
        "a 1\n\u00a0\u00ad\u200b\u3000会议，。「」«»‹›\uff10\uff21\uff62\uff61\u2026e\u0301\u1100\u1161"
    )
)


@given(st.text(alphabet=CJK_ALPHABET, max_size=60))
@FAST
def test_property_fast_rules_equal_the_reference(text: str) -> None:
    nfc = unicodedata.normalize("NFC", text)
    for mode in ("plain", "pdf", "pdf-keep-hyphens"):
        fast = _apply_rules(nfc, mode, None, "amber-norm-2")  # type: ignore[arg-type]
        assert fast == _apply_rules_reference(nfc, mode, "amber-norm-2")  # type: ignore[arg-type]


@given(
    st.text(alphabet=CJK_ALPHABET, max_size=40),
    st.text(alphabet=CJK_ALPHABET, min_size=1, max_size=8),
)
@FAST
def test_property_found_spans_normalise_to_the_quote(text: str, quote: str) -> None:
    try:
        match = locate(text, quote)
    except (QuoteNotFound, InvalidInput):
        return
    assert match.exact == text[match.start : match.end]
    assert normalise(match.exact) == normalise(quote)


@given(st.text(alphabet=CJK_ALPHABET, max_size=40), st.integers(1, 12))
@FAST
def test_property_context_reader_equals_the_window(text: str, wanted: int) -> None:
    for version in NORMALISATION_VERSIONS:
        reader = ContextReader(PreparedText(text), "plain", version)
        for at in range(len(text) + 1):
            before = window_context(text, at, -wanted, "plain", version)[-wanted:]
            after = window_context(text, at, wanted, "plain", version)[:wanted]
            assert reader.before(at, wanted) == before
            assert reader.after(at, wanted) == after
