"""The expressions the edit rules compare, in order: negators, deontic modals, quantifiers
and antonym-lexicon words (``docs/specs/amber-drift-1.md``).
"""

from __future__ import annotations

from collections.abc import Iterable

from archive.drift.rules.lexicon import (
    CURRENCY_SYMBOLS,
    DISCOURAGED,
    FUTURE_NOT,
    LEXICON,
    LEXICON_FIRST_WORDS,
    MODAL_VERBS,
    MODAL_WORDS,
    NEGATED_CLASS,
    NEGATORS,
    NUMBER_WORDS,
    PROHIBITION,
    QUANTIFIER_BIGRAMS,
    QUANTIFIER_TRIGRAMS,
    QUANTIFIERS,
    STRONG_VERBS,
)
from archive.drift.rules.tokens import Tokens, is_month_may


def is_negator(word: str) -> bool:
    return word in NEGATORS or word.endswith("n't")


def _ngrams(words: list[str], i: int) -> Iterable[str]:
    if i + 2 < len(words):
        yield f"{words[i]} {words[i + 1]} {words[i + 2]}"
    if i + 1 < len(words):
        yield f"{words[i]} {words[i + 1]}"
    yield words[i]


def modal_classes(tokens: Tokens) -> list[tuple[str, str]]:
    """``(class, words)`` for each deontic expression, in order."""
    lower = tokens.lower
    found: list[tuple[str, str]] = []
    n = len(lower)
    skip_until = -1
    for i, word in enumerate(lower):
        if i < skip_until:
            continue
        phrase, klass = word, None
        if i + 1 < n and f"{word} {lower[i + 1]}" in MODAL_WORDS:
            phrase = f"{word} {lower[i + 1]}"
            klass = MODAL_WORDS[phrase]
            skip_until = i + 2
        elif word in MODAL_VERBS:
            if word == "may" and is_month_may(tokens.surface, lower, i):
                continue  # "in May", "1 May 2024"
            if word == "can" and i > 0 and lower[i - 1] in ("a", "the"):
                continue
            klass = MODAL_VERBS[word]
        elif word in MODAL_WORDS:
            klass = MODAL_WORDS[word]
        elif word.endswith("n't") and word[:-3] in MODAL_VERBS:
            klass = NEGATED_CLASS.get(MODAL_VERBS[word[:-3]], PROHIBITION)
            if word[:-3] in STRONG_VERBS:
                klass = PROHIBITION
            found.append((klass, word))
            continue
        if klass is None:
            continue
        if klass not in (PROHIBITION, DISCOURAGED, FUTURE_NOT) or phrase in ("cannot",):
            after = lower[i + 1 : i + 3] if word in MODAL_VERBS else lower[i + 1 : i + 2]
            before = lower[max(0, i - 2) : i]
            negated = any(
                is_negator(w) and w not in ("unless", "except", "without") for w in after
            ) or any(w in ("not", "never", "no") or w.endswith("n't") for w in before)
            if negated and phrase != "cannot":
                if word in STRONG_VERBS:
                    klass = PROHIBITION
                else:
                    klass = NEGATED_CLASS.get(klass, klass)
                phrase = f"{phrase} not"
        found.append((klass, phrase))
    return found


def quantifiers(lower: list[str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    n = len(lower)
    i = 0
    while i < n:
        trigram = " ".join(lower[i : i + 3])
        bigram = " ".join(lower[i : i + 2])
        if i + 2 < n and trigram in QUANTIFIER_TRIGRAMS:
            found.append((QUANTIFIERS[trigram], trigram))
            i += 3
            continue
        if i + 1 < n and bigram in QUANTIFIER_BIGRAMS:
            found.append((QUANTIFIERS[bigram], bigram))
            i += 2
            continue
        word = lower[i]
        if word in QUANTIFIERS and word not in (
            "about",
            "around",
            "over",
            "under",
            "above",
            "below",
            "little",
        ):
            found.append((QUANTIFIERS[word], word))
        elif (
            word in ("over", "under", "above", "below", "about", "around")
            and i + 1 < n
            and (
                lower[i + 1][:1].isdigit()
                or lower[i + 1] in NUMBER_WORDS
                or lower[i + 1] in CURRENCY_SYMBOLS
            )
        ):
            found.append((QUANTIFIERS[word], word))
        i += 1
    return found


def lexicon_hits(lower: list[str]) -> list[tuple[str, int, str]]:
    """``(group, pole, words)`` for each antonym-lexicon expression, in order."""
    found: list[tuple[str, int, str]] = []
    n = len(lower)
    i = 0
    while i < n:
        step = 1
        if lower[i] not in LEXICON_FIRST_WORDS:
            i += 1
            continue
        for phrase in _ngrams(lower, i):
            entries = LEXICON.get(phrase)
            if entries:
                found.extend((group, pole, phrase) for group, pole in entries)
                step = phrase.count(" ") + 1
                break
        i += step
    return found
