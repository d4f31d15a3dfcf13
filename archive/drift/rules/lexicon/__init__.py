"""The word lists of the drift edit rules, and the antonym lexicon built from them.

Data only, split by kind: :mod:`.antonyms` (polar words), :mod:`.function_words` (negators,
modal verbs, quantifiers, relation words) and :mod:`.values` (numbers, currencies, units,
dates). They are part of ``amber-drift-1`` (``docs/specs/amber-drift-1.md``): changing a
list changes verdicts, so it bumps the rules version.
"""

from __future__ import annotations

from archive.drift.rules.lexicon.antonyms import ANTONYM_GROUPS, NEUTRAL_POLES
from archive.drift.rules.lexicon.function_words import (
    DISCOURAGED,
    FUTURE_NOT,
    MODAL_VERBS,
    MODAL_WORDS,
    NEGATED_CLASS,
    NEGATIVE_PREFIXES,
    NEGATORS,
    PROHIBITION,
    QUANTIFIER_BIGRAMS,
    QUANTIFIER_TRIGRAMS,
    QUANTIFIERS,
    RELATIONS,
    STOPWORDS,
    STRONG_VERBS,
)
from archive.drift.rules.lexicon.values import (
    CURRENCY_CODES,
    CURRENCY_SYMBOLS,
    CURRENCY_WORDS,
    FRACTIONS,
    MAY_CUES,
    MONTHS,
    NUMBER_WORDS,
    ORDINAL_WORDS,
    RELATIVE_DAYS,
    RELATIVE_UNITS,
    RELATIVE_WORDS,
    SCALES,
    UNIT_WORDS,
    WEEKDAYS,
)

__all__ = [
    "ANTONYM_GROUPS",
    "CURRENCY_CODES",
    "CURRENCY_SYMBOLS",
    "CURRENCY_WORDS",
    "DISCOURAGED",
    "FRACTIONS",
    "FUTURE_NOT",
    "LEXICON",
    "LEXICON_FIRST_WORDS",
    "MAY_CUES",
    "MODAL_VERBS",
    "MODAL_WORDS",
    "MONTHS",
    "NEGATED_CLASS",
    "NEGATIVE_PREFIXES",
    "NEGATORS",
    "NEUTRAL_POLES",
    "NOT_POLAR_ALONE",
    "NUMBER_WORDS",
    "ORDINAL_WORDS",
    "PROHIBITION",
    "QUANTIFIERS",
    "QUANTIFIER_BIGRAMS",
    "QUANTIFIER_TRIGRAMS",
    "RELATIONS",
    "RELATIVE_DAYS",
    "RELATIVE_UNITS",
    "RELATIVE_WORDS",
    "SCALES",
    "STOPWORDS",
    "STRONG_VERBS",
    "UNIT_WORDS",
    "WEEKDAYS",
    "inflections",
]


def inflections(base: str) -> set[str]:
    """``base`` and the regular inflections (over-generation is harmless)."""
    if " " in base:
        first, rest = base.split(" ", 1)
        return {f"{form} {rest}" for form in inflections(first)}
    forms = {
        base,
        base + "s",
        base + "es",
        base + "ed",
        base + "d",
        base + "ing",
        base + "ly",
        base + "er",
        base + "est",
    }
    if base.endswith("e"):
        forms |= {base[:-1] + "ing", base[:-1] + "ion"}
    if base.endswith("y"):
        forms |= {
            base[:-1] + "ies",
            base[:-1] + "ied",
            base[:-1] + "ily",
            base[:-1] + "ier",
            base[:-1] + "iest",
        }
    if len(base) >= 3 and base[-1] in "bdglmnprt" and base[-2] in "aeiou":  # permitted, acquitted
        forms |= {base + base[-1] + "ed", base + base[-1] + "ing"}
    return forms


def _build_lexicon() -> dict[str, tuple[tuple[str, int], ...]]:
    lexicon: dict[str, set[tuple[str, int]]] = {}
    for group, (positive, negative) in ANTONYM_GROUPS.items():
        for pole, words in ((1, positive), (-1, negative), (0, NEUTRAL_POLES.get(group, ()))):
            for word in words:
                for form in inflections(word):
                    lexicon.setdefault(form, set()).add((group, pole))
    return {word: tuple(sorted(entries)) for word, entries in lexicon.items()}


LEXICON = _build_lexicon()
LEXICON_FIRST_WORDS = frozenset(word.split(" ", 1)[0] for word in LEXICON)

# Lexicon words too common, or handled by the modal rule, to count as replaced on their own.
NOT_POLAR_ALONE = frozenset(
    {
        "up",
        "down",
        "over",
        "under",
        "more",
        "less",
        "before",
        "after",
        "on",
        "off",
        "early",
        "late",
        "hold",
        "holding",
        "required",
        "allow",
        "allowed",
        "allows",
        "permit",
        "permits",
        "permitted",
        "recommended",
        "mandatory",
        "optional",
        "voluntary",
        "compulsory",
        "obligatory",
    }
)
