"""The edit rules for passages in Spanish, French, German, Ukrainian, Chinese and Arabic.

The same questions as the English rules (:mod:`.edits`), asked of each language's data
(:mod:`.languages`): per changed hunk, was a negator added or removed; per antonym or
direction group, did one pole give way to the other; did the sequence of modal classes
change; did a number, amount or percentage change or go. Numbers are read the same way in
every language: any decimal digits (Arabic-Indic, full-width after ``amber-norm-2``), CJK
numerals before a counter or currency, currency symbols and each language's currency words.
Specified in ``docs/specs/amber-drift-2.md``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from rapidfuzz.distance import Levenshtein

from archive.citations import normalise
from archive.drift.rules.languages import Language

_CJK_CHAR = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff"
_TOKEN = re.compile(
    rf"(?P<num>\d+(?:[.,\u066b\u066c]\d+)*)"
    rf"|(?P<cjk>[{_CJK_CHAR}])"
    rf"|(?P<word>[^\W\d_{_CJK_CHAR}]+(?:['-][^\W\d_{_CJK_CHAR}]+)*)"
    rf"|(?P<other>[^\w\s])"
)
_ARABIC_MARKS = re.compile("[\u0640\u064b-\u065f\u0670]")  # tatweel and optional vowel marks
_CURRENCY_SYMBOLS = {
    "€": "EUR",
    "$": "USD",
    "£": "GBP",
    "¥": "JPY/CNY",
    "₴": "UAH",
    "₽": "RUB",
    "₩": "KRW",
    "₹": "INR",
}
_CJK_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_CJK_UNITS = {"十": 10, "百": 100, "千": 1000}
_CJK_SCALES = {"万": 10_000, "亿": 100_000_000}
# A CJK numeral is a number only before one of these (or after 第): 一 alone is also "a".
_SHORT_HUNK = 3  # tokens (ideographs, in Chinese: up to 3 characters, then only 2 words)
_CJK_COUNTERS = frozenset("元块角人个名次年月日号倍岁辆条家所座项位天周层%万亿公里米吨")


class Tokens:
    """A passage's lower-cased tokens in one language (digits made ASCII)."""

    def __init__(self, text: str, lang: Language) -> None:
        self.lang = lang
        self.words: list[str] = []
        self.kinds: list[str] = []
        source = _ARABIC_MARKS.sub("", normalise(text)) if text.strip() else ""
        for match in _TOKEN.finditer(source.lower()):
            kind = match.lastgroup or "other"
            value = match.group()
            if kind == "num":
                value = "".join(
                    str(unicodedata.digit(c)) if c.isdigit() else c for c in value
                ).translate({0x066B: ".", 0x066C: ","})
            elif kind == "word" and lang.elisions:
                cut = value.find("'")
                if 0 < cut and value[: cut + 1] in lang.elisions and cut + 1 < len(value):
                    self.words.append(value[: cut + 1])
                    self.kinds.append("word")
                    value = value[cut + 1 :]
            self.words.append(value)
            self.kinds.append(kind)


def _decimal(token: str, decimal_comma: bool) -> Decimal | None:
    text = token
    if "," in token and "." in token:
        if token.rfind(",") > token.rfind("."):
            text = token.replace(".", "").replace(",", ".")
        else:
            text = token.replace(",", "")
    elif "," in token:
        groups = token.split(",")
        thousands = all(len(g) == 3 for g in groups[1:]) and not decimal_comma
        text = token.replace(",", "") if thousands else token.replace(",", ".", 1)
        if token.count(",") > 1:
            text = token.replace(",", "")
    elif "." in token:
        groups = token.split(".")
        if token.count(".") > 1 or (decimal_comma and all(len(g) == 3 for g in groups[1:])):
            text = token.replace(".", "")
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _cjk_number(words: list[str], i: int) -> tuple[Decimal, int] | None:
    """A CJK numeral starting at ``i`` followed by a counter: ``(value, end)``."""
    j = i
    while j < len(words) and (
        words[j] in _CJK_DIGITS or words[j] in _CJK_UNITS or words[j] in _CJK_SCALES
    ):
        j += 1
    if j == i or j >= len(words) or words[j] not in _CJK_COUNTERS:
        if not (j > i and i > 0 and words[i - 1] in ("第", "之")):  # 第三, 百分之十五
            return None
    total, section, digit = 0, 0, -1
    for word in words[i:j]:
        if word in _CJK_DIGITS:
            digit = _CJK_DIGITS[word]
        elif word in _CJK_UNITS:
            section += (digit if digit >= 0 else 1) * _CJK_UNITS[word]
            digit = -1
        else:
            total = (total + section + max(digit, 0)) * _CJK_SCALES[word]
            section, digit = 0, -1
    return Decimal(total + section + max(digit, 0)), j


def numbers(tokens: Tokens) -> tuple[list[str], list[str], list[bool], list[int]]:
    """Number atoms (``<currency><value><unit>``), their surface, whether each is money, and
    the token index of each."""
    words, kinds, lang = tokens.words, tokens.kinds, tokens.lang
    atoms: list[str] = []
    shown: list[str] = []
    money: list[bool] = []
    positions: list[int] = []
    n = len(words)
    i = 0
    while i < n:
        value: Decimal | None = None
        j = i + 1
        if kinds[i] == "num":
            value = _decimal(words[i], lang.decimal_comma)
        elif words[i] in lang.number_words:
            value = Decimal(lang.number_words[words[i]])
        elif kinds[i] == "cjk":
            found = _cjk_number(words, i)
            if found is not None:
                value, j = found
        if value is None:
            i += 1
            continue
        if j < n and words[j] in ("万", "亿"):
            value *= 10_000 if words[j] == "万" else 100_000_000
            j += 1
        start = i
        currency = ""
        if i > 0 and words[i - 1] in _CURRENCY_SYMBOLS:
            currency, start = _CURRENCY_SYMBOLS[words[i - 1]], i - 1
        elif j < n and words[j] in _CURRENCY_SYMBOLS:
            currency, j = _CURRENCY_SYMBOLS[words[j]], j + 1
        else:
            hit = lang.currencies.match_at(words, j) if j < n else None
            if hit is not None:
                currency, j = hit[0], j + hit[1]
        unit = ""
        if j < n and words[j] == "%":
            unit, j = "%", j + 1
        elif j < n and (hit := lang.percent.match_at(words, j)) is not None:
            unit, j = "%", j + hit[1]
        elif (
            i > 0
            and lang.percent.match_at(words, max(0, i - 3)) is not None
            and words[i - 1] in ("之",)
        ):
            unit = "%"  # 百分之十二
        atoms.append(f"{currency}{format(value.normalize(), 'f')}{unit}")
        shown.append(("" if lang.characters else " ").join(words[start:j]))
        money.append(bool(currency))
        positions.append(i)
        i = j
    return atoms, shown, money, positions


def months(tokens: Tokens) -> tuple[list[str], list[str], list[int]]:
    """Month names as atoms (``m03``), as written, and their token indexes: a changed month
    is a changed date, as a changed day or year (a number) is."""
    table = tokens.lang.months
    at = [i for i, w in enumerate(tokens.words) if w in table]
    words = [tokens.words[i] for i in at]
    return [f"m{table[w]:02d}" for w in words], words, at


def changed_regions(old: list[str], new: list[str]) -> list[tuple[int, int, int, int]]:
    """Maximal changed regions ``(old_start, old_end, new_start, new_end)``."""
    hunks: list[tuple[int, int, int, int]] = []
    for op in Levenshtein.opcodes(old, new):
        if op.tag == "equal":
            continue
        if hunks and hunks[-1][1] == op.src_start and hunks[-1][3] == op.dest_start:
            a, _, b, _ = hunks[-1]
            hunks[-1] = (a, op.src_end, b, op.dest_end)
        else:
            hunks.append((op.src_start, op.src_end, op.dest_start, op.dest_end))
    return hunks


def sequence_reason(
    name: str,
    old: Sequence[str],
    new: Sequence[str],
    old_shown: Sequence[str],
    new_shown: Sequence[str],
) -> str | None:
    if list(old) == list(new):
        return None
    removed = Counter(old) - Counter(new)
    added = Counter(new) - Counter(old)
    first_removed = next((s for a, s in zip(old, old_shown, strict=True) if removed.get(a)), None)
    first_added = next((s for a, s in zip(new, new_shown, strict=True) if added.get(a)), None)
    if first_removed is not None and first_added is not None:
        return f"{name}_changed:{first_removed}->{first_added}"
    if first_removed is not None:
        return f"{name}_removed:{first_removed}"
    if first_added is not None:
        return f"{name}_added:{first_added}"
    return f"{name}_order_changed"


def _pole_flip(old: list[int], new: list[int]) -> tuple[int, int] | None:
    lost = Counter(old) - Counter(new)
    gained = Counter(new) - Counter(old)
    if lost and gained:
        return next(i for i, p in enumerate(old) if lost[p]), next(
            j for j, p in enumerate(new) if gained[p]
        )
    if not lost and not gained and old != new:
        first = next(i for i, (p, q) in enumerate(zip(old, new, strict=True)) if p != q)
        return first, first
    if gained and not lost and set(old) == {-p for p in gained}:
        # The opposite pole added to the one there was: "задовольнив" -> "відмовив у
        # задоволенні" (refused to grant), "aprobó" -> "rechazó lo aprobado".
        return 0, next(j for j, p in enumerate(new) if gained[p])
    return None


def reversal_reasons(before: Tokens, after: Tokens) -> tuple[list[str], list[str]]:
    """Reasons for ``reversal``, and notes that only make the edit ``material`` (a value
    inserted where nothing was replaced narrows the claim without contradicting it)."""
    lang = before.lang
    old, new = before.words, after.words
    hunks = changed_regions(old, new)
    reasons: list[str] = []
    notes: list[str] = []

    for a0, a1, b0, b1 in hunks:
        removed = lang.negators.find(old[a0:a1], lang.not_negators)
        added = lang.negators.find(new[b0:b1], lang.not_negators)
        if len(added) > len(removed):
            reasons.append(f"negation_added:{added[0][1]}")
        elif len(removed) > len(added):
            reasons.append(f"negation_removed:{removed[0][1]}")

    old_polar, new_polar = lang.polar.find(old), lang.polar.find(new)
    groups = {label.split(":")[0] for label, _, _ in old_polar} & {
        label.split(":")[0] for label, _, _ in new_polar
    }
    for group in sorted(groups):
        old_seq = [
            (int(lbl.split(":")[1]), w) for lbl, w, _ in old_polar if lbl.startswith(group + ":")
        ]
        new_seq = [
            (int(lbl.split(":")[1]), w) for lbl, w, _ in new_polar if lbl.startswith(group + ":")
        ]
        flip = _pole_flip([p for p, _ in old_seq], [p for p, _ in new_seq])
        if flip is not None:
            kind = "direction" if group == "direction" else "antonym"
            reasons.append(f"{kind}:{old_seq[flip[0]][1]}->{new_seq[flip[1]][1]}")

    # A polar word replaced, within a short hunk, by words the data does not know (or a
    # word it does not know replaced by a polar one): in doubt, a reversal, as in English.
    for a0, a1, b0, b1 in hunks:
        if not (0 < a1 - a0 <= _SHORT_HUNK and 0 < b1 - b0 <= _SHORT_HUNK):
            continue
        removed_hits = [w for _, w, _ in lang.polar.find(old[a0:a1])]
        added_hits = [w for _, w, _ in lang.polar.find(new[b0:b1])]
        if bool(removed_hits) != bool(added_hits):
            others = [w for w in (new[b0:b1] if removed_hits else old[a0:a1]) if w[:1].isalpha()]
            if others:
                polar = (removed_hits or added_hits)[0]
                shown = (
                    f"{polar}->{' '.join(others)}"
                    if removed_hits
                    else f"{' '.join(others)}->{polar}"
                )
                reasons.append(f"polar_word_replaced:{shown}")

    old_modal, new_modal = lang.modals.find(old), lang.modals.find(new)
    reason = sequence_reason(
        "modal",
        [c for c, _, _ in old_modal],
        [c for c, _, _ in new_modal],
        [w for _, w, _ in old_modal],
        [w for _, w, _ in new_modal],
    )
    if reason:
        reasons.append(reason)

    replaced = {j for a0, a1, b0, b1 in hunks if a1 > a0 for j in range(b0, b1)}
    old_months, old_month_words, _ = months(before)
    new_months, new_month_words, new_month_at = months(after)
    reason = sequence_reason("date", old_months, new_months, old_month_words, new_month_words)
    if reason:
        gained_months = Counter(new_months) - Counter(old_months)
        inserted = reason.startswith("date_added") and not any(
            gained_months[m] and at in replaced
            for m, at in zip(new_months, new_month_at, strict=True)
        )
        (notes if inserted else reasons).append(reason)
    old_numbers, old_shown, old_money, _ = numbers(before)
    new_numbers, new_shown, new_money, new_at = numbers(after)
    reason = sequence_reason("number", old_numbers, new_numbers, old_shown, new_shown)
    if reason:
        if any(old_money) or any(new_money):
            reason = reason.replace("number_", "amount_", 1)
        gained = Counter(new_numbers) - Counter(old_numbers)
        inserted_only = reason.split(":")[0].endswith("_added") and not any(
            gained[atom] and at in replaced for atom, at in zip(new_numbers, new_at, strict=True)
        )
        (notes if inserted_only else reasons).append(reason)
    return list(dict.fromkeys(reasons)), notes


def material_reasons(before: Tokens, after: Tokens) -> list[str]:
    old = [w for w, k in zip(before.words, before.kinds, strict=True) if k != "other"]
    new = [w for w, k in zip(after.words, after.kinds, strict=True) if k != "other"]
    if before.words == after.words:  # only case or optional Arabic vowel marks differ
        return ["spelling_changed"]
    if old == new:
        return ["punctuation_changed"]
    it = iter(old)
    if len(new) < len(old) and all(w in it for w in new):
        return ["truncated"]
    it = iter(new)
    if len(new) > len(old) and all(w in it for w in old):
        return ["extended"]
    return ["reworded"]
