"""A passage's tokens, and the numbers and dates in them.

Words, hyphenated words, contractions, numbers with separators, scaled numbers (``3.1m``),
ordinals, ISO and numeric dates, punctuation; values are canonicalised so that ``16`` and
``sixteen``, ``3.1 million`` and ``3.1m`` compare equal (``docs/specs/amber-drift-1.md``,
"Tokens, numbers and dates").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from functools import cached_property

from archive.citations import normalise
from archive.drift.rules.lexicon import (
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

TOKEN = re.compile(
    r"\d{4}-\d{2}-\d{2}"  # ISO date
    r"|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}(?!\d)"  # 15/03/2024, 03.15.24
    r"|\d+(?:st|nd|rd|th)\b"  # ordinals
    r"|\d+(?:[.,]\d+)*(?:bn|mn|tn|m|k)\b"  # 3.1m, 2bn, 10k: scaled numbers
    r"|\d+(?:[.,]\d+)*"  # numbers: 1,000  3.5  1.000.000
    r"|\w+(?:['-]\w+)*"  # words, hyphenated words, contractions
    r"|[^\w\s]"  # punctuation, currency symbols, %
)
_NUMBER_TOKEN = re.compile(r"\d+(?:[.,]\d+)*")
_SCALED_TOKEN = re.compile(r"(\d+(?:[.,]\d+)*)(bn|mn|tn|m|k)")
_ORDINAL_TOKEN = re.compile(r"(\d+)(?:st|nd|rd|th)")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_NUMERIC_DATE = re.compile(r"\d{1,2}[/.]\d{1,2}[/.]\d{2,4}")


def is_month_may(surface: list[str], lower: list[str], i: int) -> bool:
    """``May`` the month (next to a number, or after in/of/since/by…), not the modal."""
    if not surface[i].startswith("M"):
        return False
    near_number = (i + 1 < len(lower) and lower[i + 1][:1].isdigit()) or (
        i > 0 and lower[i - 1][:1].isdigit()
    )
    return near_number or (i > 0 and lower[i - 1] in MAY_CUES)


class Tokens:
    """A passage's tokens, and what the rules find in them (each computed once)."""

    def __init__(self, surface: list[str]) -> None:
        self.surface = surface  # as written (normalised)
        self.lower = [t.lower() for t in surface]
        self.date_positions: list[int] = []  # filled with ``dates``
        self.number_positions: list[int] = []  # filled with ``numbers``

    @cached_property
    def dates(self) -> tuple[list[str], list[str], set[int]]:
        atoms, shown, used, self.date_positions = _dates(self)
        return atoms, shown, used

    @cached_property
    def numbers(self) -> tuple[list[str], list[str], list[bool]]:
        atoms, shown, money, self.number_positions = _numbers(self, self.dates[2])
        return atoms, shown, money


def tokenise(text: str) -> Tokens:
    return Tokens(TOKEN.findall(normalise(text) if text.strip() else ""))


def _join(parts: Sequence[str]) -> str:
    """Tokens back to text: no space after a currency symbol, none before ``%``."""
    out = ""
    for part in parts:
        if out and not (out[-1] in CURRENCY_SYMBOLS or part == "%"):
            out += " "
        out += part
    return out


def _decimal(token: str) -> Decimal | None:
    commas, dots = token.count(","), token.count(".")
    text = token
    if commas and dots:
        if token.rfind(",") > token.rfind("."):  # 1.000,50
            text = token.replace(".", "").replace(",", ".")
        else:  # 1,000.50
            text = token.replace(",", "")
    elif commas:
        groups = token.split(",")
        text = (
            token.replace(",", "")
            if all(len(g) == 3 for g in groups[1:])
            else token.replace(",", ".")
        )
    elif dots > 1:
        text = token.replace(".", "")
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _format(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text


def _written_number(words: list[str], i: int) -> tuple[Decimal, int] | None:
    """A run of number words starting at ``i``: ``(value, end)``."""
    total, current, j, seen = 0, 0, i, False
    while j < len(words):
        word = words[j]
        parts = word.split("-")
        if all(p in NUMBER_WORDS for p in parts):
            current += sum(NUMBER_WORDS[p] for p in parts)
        elif word in ("hundred",) and seen:
            current = max(current, 1) * 100
        elif word in ("thousand", "million", "billion", "trillion") and seen:
            total += max(current, 1) * SCALES[word]
            current = 0
        elif (
            word == "and"
            and seen
            and j + 1 < len(words)
            and words[j + 1].split("-")[0] in NUMBER_WORDS
        ):
            pass
        else:
            break
        seen = True
        j += 1
    if not seen:
        return None
    return Decimal(total + current), j


def _dates(tokens: Tokens) -> tuple[list[str], list[str], set[int], list[int]]:
    """Date atoms (canonical, surface), the token indexes they use, and where each starts."""
    surface, lower = tokens.surface, tokens.lower
    atoms: list[str] = []
    shown: list[str] = []
    used: set[int] = set()
    positions: list[int] = []
    n = len(lower)
    for i, word in enumerate(lower):
        if i in used:
            continue
        token = surface[i]
        if _ISO_DATE.fullmatch(token) or _NUMERIC_DATE.fullmatch(token):
            atoms.append(token)
            positions.append(i)
            shown.append(token)
            used.add(i)
            continue
        month = MONTHS.get(word)
        if month is not None and token[:1].isupper():
            if word == "may" and not is_month_may(surface, lower, i):
                continue
            day = None
            pieces = [token]
            used.add(i)
            for k in (i + 1, i - 1):
                if 0 <= k < n and k not in used:
                    digits = _ORDINAL_TOKEN.fullmatch(lower[k])
                    value = digits.group(1) if digits else lower[k]
                    if value.isdigit() and 1 <= int(value) <= 31 and len(value) <= 2:
                        day = int(value)
                        used.add(k)
                        pieces = [token, surface[k]] if k > i else [surface[k], token]
                        break
            atoms.append(f"m{month:02d}" + (f"-{day:02d}" if day else ""))
            positions.append(i)
            shown.append(" ".join(pieces))
            continue
        if word in RELATIVE_DAYS:
            atoms.append(word)
            positions.append(i)
            shown.append(token)
            used.add(i)
            continue
        if word in RELATIVE_WORDS and i + 1 < n and lower[i + 1] in RELATIVE_UNITS:
            atoms.append(f"{word} {lower[i + 1]}")
            positions.append(i)
            shown.append(f"{token} {surface[i + 1]}")
            used.update((i, i + 1))
            continue
        if word in WEEKDAYS and token[:1].isupper():
            atoms.append(word)
            positions.append(i)
            shown.append(token)
            used.add(i)
            continue
        if len(word) == 4 and word.isdigit() and 1600 <= int(word) <= 2199:
            follows = lower[i + 1] if i + 1 < n else ""
            precedes = surface[i - 1] if i > 0 else ""
            if (
                follows not in ("%", "percent")
                and follows not in UNIT_WORDS
                and follows not in CURRENCY_WORDS
                and precedes not in CURRENCY_SYMBOLS
            ):
                atoms.append(f"y{word}")
                positions.append(i)
                shown.append(token)
                used.add(i)
    return atoms, shown, used, positions


def _numbers(tokens: Tokens, used: set[int]) -> tuple[list[str], list[str], list[bool], list[int]]:
    """Number atoms (canonical), their surface, whether each is a money amount, and the
    index of each number's token."""
    surface, lower = tokens.surface, tokens.lower
    atoms: list[str] = []
    shown: list[str] = []
    money: list[bool] = []
    positions: list[int] = []
    n = len(lower)
    i = 0
    while i < n:
        if i in used:
            i += 1
            continue
        word = lower[i]
        value: Decimal | None = None
        kind = ""
        j = i + 1
        if word[:1].isdigit():
            if _NUMBER_TOKEN.fullmatch(word):
                value = _decimal(word)
            elif ordinal := _ORDINAL_TOKEN.fullmatch(word):
                value, kind = Decimal(ordinal.group(1)), "#"
            elif scaled := _SCALED_TOKEN.fullmatch(word):
                value = _decimal(scaled.group(1))
                if value is not None:
                    value *= SCALES[scaled.group(2)]
        elif word in ORDINAL_WORDS:
            value, kind = Decimal(ORDINAL_WORDS[word]), "#"
        elif word in FRACTIONS:
            value = FRACTIONS[word]
        elif word.split("-", 1)[0] in NUMBER_WORDS:
            written = _written_number(lower, i)
            if written is not None:
                value, j = written
        if value is None:
            i += 1
            continue
        start = i
        if (j < n and lower[j] in SCALES and not kind and lower[j] not in ("m",)) or (
            j < n and lower[j] == "m" and i > 0 and surface[i - 1] in CURRENCY_SYMBOLS
        ):
            value *= SCALES[lower[j]]
            j += 1
        currency = ""
        if start > 0 and surface[start - 1] in CURRENCY_SYMBOLS:
            currency = CURRENCY_SYMBOLS[surface[start - 1]]
            start -= 1
        elif (
            start > 0
            and surface[start - 1].upper() in CURRENCY_CODES
            and surface[start - 1].isupper()
        ):
            currency = surface[start - 1].upper()
            start -= 1
        if j < n and (lower[j] in CURRENCY_WORDS or (surface[j] in CURRENCY_CODES)):
            currency = CURRENCY_WORDS.get(lower[j], surface[j])
            j += 1
        unit = ""
        if j < n and lower[j] in ("%", "percent", "pct"):
            unit, j = "%", j + 1
        elif j + 1 < n and lower[j] == "per" and lower[j + 1] == "cent":
            unit, j = "%", j + 2
        elif j + 1 < n and lower[j] == "percentage" and lower[j + 1] in ("point", "points"):
            unit, j = "pp", j + 2
        elif j < n and lower[j] in UNIT_WORDS and not currency:
            unit, j = " " + UNIT_WORDS[lower[j]], j + 1
        elif j + 1 < n and lower[j] == "-" and lower[j + 1] in UNIT_WORDS and not currency:
            unit, j = " " + UNIT_WORDS[lower[j + 1]], j + 2
        atoms.append(f"{kind}{currency}{_format(value)}{unit}")
        positions.append(i)
        shown.append(_join(surface[start:j]))
        money.append(bool(currency))
        i = j
    return atoms, shown, money, positions
