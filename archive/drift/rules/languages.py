"""The languages the drift rules judge besides English, and which one a passage is in.

Each language's words are data, not code: ``lexicon/languages/<code>.json`` in the format
``amber-drift-lexicon`` version 1 (``docs/specs/amber-drift-2.md``, "Language data"):
negators, antonym and direction groups, modal classes, currency words, percent words,
number words, month names, not-found phrases and the stopwords detection counts. An entry is a word, or words
separated by spaces, matched against a passage's lower-cased tokens; a word ending in ``*``
matches any token it begins. In a ``characters`` language (Chinese) every ideograph is a
token, so an entry's characters are its words.

:func:`detect` names the language by script first (Han, Cyrillic, Arabic, Latin…), then, in
Latin and Cyrillic, by counting each language's stopwords. A passage in a script or language
without data gets a code the rules do not judge (``ru``, ``ja``, ``und-Latn``…): Amber says
so rather than guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from archive.exceptions import ConfigurationError

DATA_FORMAT = "amber-drift-lexicon"
DATA_FORMAT_VERSION = 1
JUDGED = ("ar", "de", "es", "fr", "uk", "zh")  # besides English, which has its own rules
ENGLISH_STOPWORDS = frozenset(
    "the a an of to and in is are was were for on with by that it be will has have this "
    "from at as or not its their which after before said under over per all each no if than "
    "then more most less can may must should would could only also into about up out who "
    "what when where there here we you they he she his her our your these those such been "
    "being do does did so but because while during between against without within any some "
    "other new free".split()
)

Pattern = tuple[tuple[str, bool], ...]  # the words of an entry, each (text, is_prefix)


def _pattern(entry: str, characters: bool) -> Pattern:
    words = list(entry) if characters and " " not in entry else entry.split()
    return tuple((w[:-1], True) if w.endswith("*") else (w, False) for w in words)


@dataclass(frozen=True)
class PhraseSet:
    """Entries grouped by their first word's first character, longest first."""

    by_first: dict[str, tuple[tuple[Pattern, str], ...]]
    clitics: tuple[str, ...]

    @classmethod
    def build(
        cls, entries: list[tuple[str, str]], characters: bool, clitics: tuple[str, ...] = ()
    ) -> PhraseSet:
        grouped: dict[str, list[tuple[Pattern, str]]] = {}
        for entry, label in entries:
            pattern = _pattern(entry.lower(), characters)
            grouped.setdefault(pattern[0][0][:1], []).append((pattern, label))
        return cls(
            {
                first: tuple(sorted(items, key=lambda item: (-len(item[0]), -len(item[0][0][0]))))
                for first, items in grouped.items()
            },
            clitics,
        )

    def _word(self, token: str, word: str, prefix: bool) -> bool:
        if token == word or (prefix and token.startswith(word)):
            return True
        for clitic in self.clitics:  # Arabic: و, ال… written on the word
            if len(token) > len(clitic) + 1 and token.startswith(clitic):
                rest = token[len(clitic) :]
                if rest == word or (prefix and rest.startswith(word)):
                    return True
        return False

    def match_at(self, tokens: list[str], i: int) -> tuple[str, int] | None:
        """``(label, length)`` of the longest entry starting at token ``i``."""
        token = tokens[i]
        candidates: list[tuple[Pattern, str]] = list(self.by_first.get(token[:1], ()))
        for clitic in self.clitics:
            if token.startswith(clitic) and len(token) > len(clitic) + 1:
                candidates.extend(self.by_first.get(token[len(clitic)], ()))
        best: tuple[str, int] | None = None
        best_key = (0, 0)
        for pattern, label in candidates:
            n = len(pattern)
            if i + n > len(tokens):
                continue
            if all(self._word(tokens[i + k], w, p) for k, (w, p) in enumerate(pattern)):
                key = (n, len(pattern[0][0]))
                if best is None or key > best_key:
                    best, best_key = (label, n), key
        return best

    def find(self, tokens: list[str], skip: PhraseSet | None = None) -> list[tuple[str, str, int]]:
        """``(label, words, index)`` for each entry in ``tokens``, left to right, none
        overlapping; spans an entry of ``skip`` matches longer are passed over."""
        found: list[tuple[str, str, int]] = []
        i = 0
        while i < len(tokens):
            hit = self.match_at(tokens, i)
            unless = skip.match_at(tokens, i) if skip is not None else None
            if unless is not None and (hit is None or unless[1] > hit[1]):
                i += unless[1]
                continue
            if hit is None:
                i += 1
                continue
            label, n = hit
            found.append((label, " ".join(tokens[i : i + n]), i))
            i += n
        return found


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    characters: bool  # every ideograph is a token (no spaces between words)
    decimal_comma: bool
    elisions: tuple[str, ...]
    stopwords: frozenset[str]
    negators: PhraseSet
    not_negators: PhraseSet
    polar: PhraseSet  # label "group:pole", pole +1 or -1
    modals: PhraseSet  # label: the modal class
    currencies: PhraseSet  # label: ISO code
    percent: PhraseSet
    number_words: dict[str, int]
    months: dict[str, int]
    page_gone: tuple[str, ...]  # not-found phrases that count anywhere in a page
    gone: tuple[str, ...]  # that count in a title or a short page


def _load(code: str) -> Language:
    raw = json.loads(
        resources.files("archive.drift.rules.lexicon")
        .joinpath("languages", f"{code}.json")
        .read_text("utf-8")
    )
    if raw.get("format") != DATA_FORMAT or raw.get("format_version") != DATA_FORMAT_VERSION:
        raise ConfigurationError(f"{code}.json is not {DATA_FORMAT} version {DATA_FORMAT_VERSION}")
    characters = raw["segmentation"] == "characters"
    clitics = tuple(raw.get("clitics", ()))

    def phrases(entries: list[tuple[str, str]]) -> PhraseSet:
        return PhraseSet.build(entries, characters, clitics)

    polar = [
        (word, f"{group}:{pole}")
        for group, (positive, negative) in raw["groups"].items()
        for pole, words in ((1, positive), (-1, negative))
        for word in words
    ]
    return Language(
        code=code,
        name=raw["name"],
        characters=characters,
        decimal_comma=bool(raw.get("decimal_comma")),
        elisions=tuple(raw.get("elisions", ())),
        stopwords=frozenset(raw["stopwords"]),
        negators=phrases([(w, "not") for w in raw["negators"]]),
        not_negators=phrases([(w, "-") for w in raw["not_negators"]]),
        polar=phrases(polar),
        modals=phrases([(w, klass) for klass, words in raw["modals"].items() for w in words]),
        currencies=phrases(list(raw["currencies"].items())),
        percent=phrases([(w, "%") for w in raw["percent"]]),
        number_words={w.lower(): int(v) for w, v in raw.get("number_words", {}).items()},
        months={w.lower(): int(v) for w, v in raw.get("months", {}).items()},
        page_gone=tuple(p.lower() for p in raw["not_found"]["page"]),
        gone=tuple(p.lower() for p in raw["not_found"]["gone"]),
    )


@cache
def language(code: str) -> Language:
    """The data of a judged language (:data:`JUDGED`), loaded once."""
    if code not in JUDGED:
        raise KeyError(code)
    return _load(code)


def all_languages() -> tuple[Language, ...]:
    return tuple(language(code) for code in JUDGED)


_SCRIPTS = (
    ("Hani", re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")),
    ("Kana", re.compile(r"[\u3040-\u30ff]")),
    ("Hang", re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")),
    ("Cyrl", re.compile(r"[\u0400-\u04ff]")),
    ("Arab", re.compile(r"[\u0600-\u06ff\u0750-\u077f]")),
    ("Latn", re.compile(r"[A-Za-z\u00c0-\u024f]")),
)
_LETTER = re.compile(r"[^\W\d_]")
_WORD = re.compile(r"[^\W\d_]+'?")  # French elisions (l', qu') count as words
_UKRAINIAN_ONLY = re.compile(r"[іїєґІЇЄҐ]")
_RUSSIAN_ONLY = re.compile(r"[ыэъёЫЭЪЁ]")
_PORTUGUESE_ONLY = re.compile(r"[ãõÃÕ]")
_PERSIAN_ONLY = re.compile(r"[پچژگ]")
# Russian words Ukrainian does not have: without one (and without ы э ъ ё), Cyrillic is read
# as Ukrainian.
_RUSSIAN_WORDS = frozenset(
    "и что это как он она они будет был была были его её или также только когда если от".split()
)
_MIN_UNKNOWN_WORDS = 8  # a Latin passage this long with no known stopword is no known language


def detect(text: str) -> str:
    """The language code of ``text``: ``en`` or one of :data:`JUDGED`, or a code Amber does
    not judge (``ja``, ``ko``, ``ru``, ``fa``, ``und-<script>``, ``und`` for no letters)."""
    letters = len(_LETTER.findall(text))
    if not letters:
        return "und"
    counts = {name: len(pattern.findall(text)) for name, pattern in _SCRIPTS}
    script = max(counts, key=lambda name: counts[name])
    if counts[script] * 2 < letters:
        return "und-other"
    if script == "Kana" or (script == "Hani" and counts["Kana"]):
        return "ja"
    if script == "Hani":
        return "zh"
    if script == "Hang":
        return "ko"
    if script == "Arab":
        return "fa" if _PERSIAN_ONLY.search(text) else "ar"
    words = [w.lower() for w in _WORD.findall(text)]
    if script == "Cyrl":
        if _RUSSIAN_ONLY.search(text) and not _UKRAINIAN_ONLY.search(text):
            return "ru"
        if _UKRAINIAN_ONLY.search(text) or not any(w in _RUSSIAN_WORDS for w in words):
            return "uk"
        return "ru"
    if _PORTUGUESE_ONLY.search(text):
        return "pt"  # shares too many stopwords with Spanish to be read as it
    scores = {"en": sum(w in ENGLISH_STOPWORDS for w in words)}
    for code in ("es", "fr", "de"):
        stopwords = language(code).stopwords
        scores[code] = sum(w in stopwords for w in words)
    best = max(scores, key=lambda code: (scores[code], code == "en"))
    if best != "en" and scores[best] >= 2:
        return best
    if scores["en"] or len(words) < _MIN_UNKNOWN_WORDS:
        return "en"  # also a heading or a list of figures, as before amber-drift-2
    # A long passage with no English word and at most one of another language's ("de"
    # makes Dutch no Spanish): a language Amber does not know.
    return "und-Latn"
