"""Quote normalisations ``amber-norm-1`` and ``amber-norm-2``: the frozen equivalences a
quote is matched under.

Applied identically to a quote and to a document's extracted text: Unicode NFC; invisible
break opportunities deleted; whitespace runs made one space; typographic quotes, dashes and
the ellipsis spelled in ASCII; for PDFs also ligatures spelled out and line-break
hyphenation undone. ``amber-norm-2`` adds, for text in other scripts: guillemets and CJK
quotation marks spelled in ASCII, a whitespace run between two CJK characters deleted (a
browser drops such a segment break) and the width folding of full-width punctuation, digits
and Latin letters. Nothing else is equivalent (case, other punctuation, spelling, omitted
words). The full rules, in order, and how offsets map back to the code points of the
extracted text are specified in ``docs/specs/amber-norm-1.md`` and
``docs/specs/amber-norm-2.md``. Any change to what these rules produce for some input must
change the version: it is recorded with each citation and :func:`quote_hash` depends on it.
New citations use :data:`NORMALISATION_VERSION`; a stored one keeps the version it was
matched under (every function takes ``version``).

:class:`PreparedText` holds a document's text with its normalised forms and the offset
maps back to it, built once; :mod:`archive.citations.locate` searches them. Rule numbers in
the comments below are those of the specification.
"""

from __future__ import annotations

import bisect
import re
import threading
import unicodedata
from collections import OrderedDict
from typing import Literal

from archive.exceptions import EmptyQuote, InvalidInput
from archive.hashing import content_address

Version = Literal["amber-norm-1", "amber-norm-2"]
NORMALISATION_VERSION: Version = "amber-norm-2"
NORMALISATION_VERSIONS: tuple[Version, ...] = ("amber-norm-1", "amber-norm-2")


# -- the rules ----------------------------------------------------------------------------

# Rules 3 (one character at a time), 4 and 5: one character for one, so offsets are kept.
# Every character but U+0020 for which Python 3.11's ``str.isspace()`` is true, fixed here so
# that a newer Unicode database cannot change the rules under the same version.
_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_ONE_FOR_ONE: tuple[tuple[str, str], ...] = (
    *((c, " ") for c in _WHITESPACE),
    *((c, "'") for c in "\u2018\u2019\u201a\u201b\u2032\u02bc"),
    *((c, '"') for c in "\u201c\u201d\u201e\u201f\u2033"),
    *((c, "-") for c in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"),
)
# amber-norm-2, rule 4 extended: guillemets and CJK quotation marks (one for one).
_QUOTES_2: tuple[tuple[str, str], ...] = (
    *((c, '"') for c in "\u00ab\u00bb\u300c\u300d\u301d\u301e\u301f"),
    *((c, "'") for c in "\u2039\u203a\u300e\u300f"),
)
_QUOTES_2_CLASS = "[" + "".join(c for c, _ in _QUOTES_2) + "]"
# amber-norm-2, rule 10 (width folding, on the output of rules 2–8, one for one): the NFKC
# mapping of full-width ASCII (U+FF01–FF5E: punctuation, digits, Latin letters), of the
# half-width CJK punctuation and of the full-width signs; not the rest of NFKC (half-width
# katakana, compatibility ideographs, superscripts… stay as they are).
_WIDTH: dict[str, str] = {
    **{chr(0xFF01 + i): chr(0x21 + i) for i in range(94)},
    "\uff61": "\u3002",  # ｡ → 。
    "\uff62": '"',  # ｢ → 「, itself a quotation mark
    "\uff63": '"',  # ｣ → 」
    "\uff64": "\u3001",  # ､ → 、
    "\uff65": "\u30fb",  # ･ → ・
    "\uffe0": "\u00a2",
    "\uffe1": "\u00a3",
    "\uffe2": "\u00ac",
    "\uffe4": "\u00a6",
    "\uffe5": "\u00a5",
    "\uffe6": "\u20a9",
}
_WIDTH["\uff02"] = '"'
_WIDTH["\uff07"] = "'"
_WIDTH_TABLE = str.maketrans(_WIDTH)
_WIDE = re.compile("[\uff01-\uffe6]")
# amber-norm-2, rule 9: characters of East Asian Width W or F that CSS Text 3 drops a
# segment break between (CJK ideographs, kana, bopomofo, CJK and full-width punctuation;
# not Hangul, whose words are spaced). Read before width folding, on the NFC text.
_CJK = (
    "\u2e80-\u2fff\u3001-\u303f\u3040-\u30ff\u3100-\u312f\u3190-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff01-\uff60\uff61-\uff65"
    "\U00020000-\U0003134f"
)
_HAS_CJK = re.compile(f"[{_CJK}]")
_BELOW_U2E00 = bytes(range(0x2E))  # high bytes of UTF-16 code units below U+2E00


def _beyond_u2dff(text: str) -> bool:
    """Whether ``text`` has a character at or above U+2E00 (every CJK and width rule needs
    one). Regex classes scan a 100 KiB page in ~1.2 ms; this takes a fifth of that."""
    if text.isascii():
        return False
    high = text.encode("utf-16-le", "surrogatepass")[1::2]
    return bool(high.translate(None, _BELOW_U2E00))


# Rules 2, 3 (runs), 6, 7, 8: length-changing, on the output of the above.
_DELETED = "\u00ad\u200b\u2060\ufeff"
_EXPANDED = {"\u2026": "..."}
_LIGATURES = {
    "\ufb00": "ff",
    "\ufb01": "fi",
    "\ufb02": "fl",
    "\ufb03": "ffi",
    "\ufb04": "ffl",
    "\ufb05": "st",
    "\ufb06": "st",
}
_PDF_EXPANDED = {**_EXPANDED, **_LIGATURES}
_SPACE_OR_DELETED = f"[ {_DELETED}]"
_RUN = rf"(?P<ws>{_SPACE_OR_DELETED}{{2,}}|[{_DELETED}])"  # a lone space stays as it is
_HYPHEN_BREAK = rf"(?P<hy>(?<=\w)[-\u00ad]{_SPACE_OR_DELETED}* {_SPACE_OR_DELETED}*)"


def _char_class(chars: dict[str, str]) -> str:
    return "[" + "".join(re.escape(c) for c in chars) + "]"


# Rule 9 (amber-norm-2): a run of spaces and deleted characters between two CJK characters.
_CJK_BREAK = rf"(?P<cjk>(?<=[{_CJK}]){_SPACE_OR_DELETED}+(?=[{_CJK}]))"
_CJK_BREAKS = re.compile(_CJK_BREAK)
_PLAIN_RULES = re.compile(f"{_RUN}|(?P<map>{_char_class(_EXPANDED)})")
_PDF_RULES = re.compile(f"{_HYPHEN_BREAK}|{_RUN}|(?P<map>{_char_class(_PDF_EXPANDED)})")
_PLAIN_RULES_2 = re.compile(f"{_CJK_BREAK}|{_RUN}|(?P<map>{_char_class(_EXPANDED)})")
_PDF_RULES_2 = re.compile(
    f"{_CJK_BREAK}|{_HYPHEN_BREAK}|{_RUN}|(?P<map>{_char_class(_PDF_EXPANDED)})"
)

Mode = Literal["plain", "pdf", "pdf-keep-hyphens"]


def _rules(mode: Mode, version: Version) -> re.Pattern[str]:
    if version == "amber-norm-1":
        return _PLAIN_RULES if mode == "plain" else _PDF_RULES
    return _PLAIN_RULES_2 if mode == "plain" else _PDF_RULES_2


def check_version(version: object) -> Version:
    """``version`` if it names a normalisation; else :class:`InvalidInput`."""
    if version == "amber-norm-1":
        return "amber-norm-1"
    if version == "amber-norm-2":
        return "amber-norm-2"
    raise InvalidInput(f"unknown normalisation {version!r}")


def _one_for_one(text: str, version: Version = "amber-norm-1") -> str:
    for char, replacement in _ONE_FOR_ONE:
        if char in text:
            text = text.replace(char, replacement)
    if version != "amber-norm-1" and not text.isascii():
        for char, replacement in _QUOTES_2:
            if char in text:
                text = text.replace(char, replacement)
    return text


def _fold_width(text: str, version: Version) -> str:
    """Rule 10 of ``amber-norm-2`` (one for one, so offset maps stay as they are)."""
    if version == "amber-norm-1" or not _beyond_u2dff(text) or _WIDE.search(text) is None:
        return text
    return text.translate(_WIDTH_TABLE)


def _replacement(mode: Mode, source: str, match: re.Match[str]) -> str:
    kind = match.lastgroup
    value = match.group()
    if kind == "cjk":
        return ""
    if kind == "ws":
        return " " if " " in value else ""
    if kind == "map":
        return _PDF_EXPANDED[value]
    # hy: a hyphen and the line break after it (PDF only)
    if value[0] == "\u00ad":
        return ""
    if mode == "pdf":
        after = match.end()
        if after < len(source) and source[after].islower():
            return ""
    return "-"


# -- offset maps --------------------------------------------------------------------------


class _Map:
    """Piecewise map from positions in a rewritten string back to its source.

    Segment ``i`` covers rewritten positions ``[starts[i], starts[i+1])`` and came from
    source ``[sources[i], source_ends[i])``; identity segments map position by position,
    replaced ones only as a whole. Deleted source characters belong to no segment.
    """

    __slots__ = ("identity", "length", "source_ends", "sources", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.sources: list[int] = []
        self.source_ends: list[int] = []
        self.identity: list[bool] = []
        self.length = 0  # of the rewritten string

    def add(self, start: int, source: int, source_end: int, identity: bool, length: int) -> None:
        self.starts.append(start)
        self.sources.append(source)
        self.source_ends.append(source_end)
        self.identity.append(identity)
        self.length = start + length

    def aligned(self, position: int) -> bool:
        """Whether ``position`` falls between source characters (not inside a replacement)."""
        i = bisect.bisect_right(self.starts, position) - 1
        return i < 0 or position >= self.length or self.identity[i] or position == self.starts[i]

    def start_of(self, position: int) -> int:
        i = bisect.bisect_right(self.starts, position) - 1
        if i < 0:
            return 0
        if self.identity[i]:
            return self.sources[i] + position - self.starts[i]
        return self.sources[i]

    def end_of(self, position: int) -> int:
        if position <= 0:
            return self.sources[0] if self.sources else 0
        i = bisect.bisect_right(self.starts, position - 1) - 1
        if self.identity[i]:
            return self.sources[i] + position - self.starts[i]
        return self.source_ends[i]


# Every match of the rules contains one of these (two spaces, a deleted or expanded character,
# a hyphen before a space), so only their neighbourhoods are tried: a regex scan of the whole
# text costs ~50 ns a character, ``str.find`` a fraction of that.
_NEEDLES = ("  ", *_DELETED, *_EXPANDED)
_PDF_NEEDLES = (*_NEEDLES, *_LIGATURES, "- ")
_RUN_CHARS = frozenset(" -" + _DELETED)  # characters a match can start with before its needle


def _positions(text: str, needles: tuple[str, ...]) -> list[int]:
    found: list[int] = []
    for needle in needles:
        at = text.find(needle)
        while at >= 0:
            found.append(at)
            at = text.find(needle, at + len(needle))
    found.sort()
    return found


def _apply_rules(
    source: str, mode: Mode, offsets: _Map | None, version: Version = "amber-norm-1"
) -> str:
    """Rules 2–8 (and 9–10 of ``amber-norm-2``) on NFC text; records the offset map in
    ``offsets`` when given.

    Equivalent to replacing each match of ``finditer`` left to right; matches are only
    tried where a needle is, starting from the beginning of the run the needle sits in.
    """
    source = _one_for_one(source, version)
    plain = mode == "plain"
    rules = _rules(mode, version)
    parts: list[str] = []
    at = 0  # in source: everything before is done
    tried = 0  # every position in [at, tried) a match could start at has been tried, in vain
    length = 0  # of the output so far
    needles = _positions(source, _NEEDLES if plain else _PDF_NEEDLES)
    wide = version != "amber-norm-1" and _beyond_u2dff(source)
    if wide and _HAS_CJK.search(source):
        # A lone space is no needle: only between two CJK characters does it go.
        needles = sorted({*needles, *(m.start() for m in _CJK_BREAKS.finditer(source))})
    for needle_at in needles:
        if needle_at < at:
            continue
        # A needle's run reaching back to ``tried`` reaches back as far as the previous
        # needle's did, and those positions all failed: trying them again cannot find a
        # match, and walking back over them again made a long run of failures quadratic.
        floor = max(at, tried)
        begin = needle_at
        while begin > floor and source[begin - 1] in _RUN_CHARS:
            begin -= 1
        for candidate in range(begin, needle_at + 1):
            match = rules.match(source, candidate)
            if match is not None:
                break
        else:
            tried = needle_at + 1
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
    result = "".join(parts)
    return _fold_width(result, version) if wide else result


def _apply_rules_reference(source: str, mode: Mode, version: Version = "amber-norm-1") -> str:
    """The rules by a plain scan (slow): what :func:`_apply_rules` must equal (tests)."""
    source = _one_for_one(source, version)
    rules = _rules(mode, version)
    return _fold_width(rules.sub(lambda match: _replacement(mode, source, match), source), version)


_NON_ASCII_RUN = re.compile(r"[\x00-\x7f]?[^\x00-\x7f]+")


def _nfc_with_map(text: str) -> tuple[str, _Map | None]:
    """NFC of ``text`` and a map back to ``text`` (``None``: already NFC, the identity).

    NFC never reaches across an ASCII character (a starter nothing composes with), so each
    non-ASCII run with the character before it is normalised on its own, and within a run
    that changes, each starter with the marks after it — unless that gives a different
    result (compositions of two starters), when the run maps as a whole.
    """
    if unicodedata.is_normalized("NFC", text):
        return text, None
    offsets = _Map()
    parts: list[str] = []
    at = 0
    length = 0

    def keep(begin: int, finish: int) -> None:
        nonlocal length
        offsets.add(length, begin, finish, True, finish - begin)
        parts.append(text[begin:finish])
        length += finish - begin

    def replace(begin: int, finish: int, value: str) -> None:
        nonlocal length
        if value:
            offsets.add(length, begin, finish, False, len(value))
            parts.append(value)
            length += len(value)

    for match in _NON_ASCII_RUN.finditer(text):
        run = match.group()
        if unicodedata.is_normalized("NFC", run):
            continue
        begin, finish = match.span()
        if begin > at:
            keep(at, begin)
        composed = unicodedata.normalize("NFC", run)
        cuts = [i for i, char in enumerate(run) if i == 0 or not unicodedata.combining(char)]
        cuts.append(len(run))
        pieces = [(cuts[k], cuts[k + 1]) for k in range(len(cuts) - 1)]
        normalised = [unicodedata.normalize("NFC", run[a:b]) for a, b in pieces]
        if "".join(normalised) == composed:
            for (a, b), value in zip(pieces, normalised, strict=True):
                if value == run[a:b]:
                    keep(begin + a, begin + b)
                else:
                    replace(begin + a, begin + b, value)
        else:
            replace(begin, finish, composed)
        at = finish
    if at < len(text):
        keep(at, len(text))
    result = "".join(parts)
    expected = unicodedata.normalize("NFC", text)
    if result != expected:  # cannot happen; never trust a map blindly
        whole = _Map()
        whole.add(0, 0, len(text), False, len(expected))
        return expected, whole
    return result, offsets


def normalise_as(text: str, mode: Mode, version: Version = NORMALISATION_VERSION) -> str:
    """``text`` under ``version`` in ``mode`` (``pdf-keep-hyphens``: the PDF rules with every
    line-break hyphen kept), stripped of outer spaces."""
    return _apply_rules(unicodedata.normalize("NFC", text), mode, None, version).strip(" ")


def normalise(text: str, *, pdf: bool = False, version: Version = NORMALISATION_VERSION) -> str:
    """``text`` under ``version`` (rules 1–6, 9–10; 7–8 too when ``pdf``)."""
    return normalise_as(text, "pdf" if pdf else "plain", version)


def check_quote(exact: object) -> str:
    """``exact`` if it is a non-blank, encodable string; else :class:`InvalidInput`."""
    if not isinstance(exact, str):
        raise InvalidInput("quote.exact must be a string")
    if not exact or exact.isspace():
        raise EmptyQuote("the quote is empty")
    try:
        exact.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("the quote is not valid Unicode (lone surrogate)") from None
    return exact


def quote_hash(exact: str, version: Version = NORMALISATION_VERSION) -> str:
    """``blake3:<hex>`` of the UTF-8 of the quote normalised under ``version`` (the plain
    rules, whatever the source)."""
    normalised = normalise(check_quote(exact), version=version)
    if not normalised:
        raise EmptyQuote("the quote is empty")
    return content_address(normalised.encode("utf-8"))


# -- prepared texts -----------------------------------------------------------------------


class _Variant:
    __slots__ = ("nfc_map", "normalised", "rules_map")

    def __init__(self, text: str, mode: Mode, version: Version = NORMALISATION_VERSION) -> None:
        nfc, self.nfc_map = _nfc_with_map(text)
        self.rules_map = _Map()
        self.normalised = _apply_rules(nfc, mode, self.rules_map, version)

    def span(self, start: int, end: int) -> tuple[int, int] | None:
        """Original offsets of normalised ``[start, end)`` (a non-empty span), or ``None``
        if it begins or ends inside a replaced character (``.`` of ``…``, ``i`` of ``ﬁ``):
        a match must cover whole source characters, so that it normalises to the quote."""
        rules, nfc = self.rules_map, self.nfc_map
        if not (rules.aligned(start) and rules.aligned(end)):
            return None
        begin, finish = rules.start_of(start), rules.end_of(end)
        if nfc is not None:
            if not (nfc.aligned(begin) and nfc.aligned(finish)):
                return None
            begin, finish = nfc.start_of(begin), nfc.end_of(finish)
        return begin, finish


class PreparedText:
    """A document's extracted text with its normalised forms, built once, on first need."""

    __slots__ = ("_variants", "pdf", "text")

    def __init__(self, text: str, *, pdf: bool = False) -> None:
        if not isinstance(text, str):
            raise TypeError("text must be str")
        self.text = text
        self.pdf = pdf
        self._variants: dict[tuple[Mode, Version], _Variant] = {}

    @property
    def modes(self) -> tuple[Mode, ...]:
        return ("pdf", "pdf-keep-hyphens") if self.pdf else ("plain",)

    def variant(self, mode: Mode, version: Version = NORMALISATION_VERSION) -> _Variant:
        found = self._variants.get((mode, version))
        if found is None:  # a race only builds it twice
            found = self._variants[mode, version] = _Variant(self.text, mode, version)
        return found

    @property
    def normalised(self) -> str:
        return self.variant(self.modes[0]).normalised


_PREPARED_CACHE = 8
_prepared: OrderedDict[tuple[int, bool], PreparedText] = OrderedDict()
_prepared_lock = threading.Lock()


def prepare(text: str, *, pdf: bool = False) -> PreparedText:
    """The :class:`PreparedText` of ``text``; the last few are reused (same object, same flag)."""
    key = (id(text), pdf)
    with _prepared_lock:
        found = _prepared.get(key)
        if found is not None and found.text is text:
            _prepared.move_to_end(key)
            return found
    prepared = PreparedText(text, pdf=pdf)
    with _prepared_lock:
        _prepared[key] = prepared  # holds ``text``, so its id cannot be reused meanwhile
        _prepared.move_to_end(key)
        while len(_prepared) > _PREPARED_CACHE:
            _prepared.popitem(last=False)
    return prepared


def forget_prepared() -> None:
    """Forget every text prepared lately (they are keyed by object, not by what they are
    from, so an erasure forgets them all: at most eight, cheap to prepare again)."""
    with _prepared_lock:
        _prepared.clear()
