"""Finding a quote in a document's extracted text: exact, or under a documented normalisation.

A citation's quote must really be in the captured document. :func:`locate` looks for it in
the text an extractor produced (:mod:`archive.text`): first as an exact substring, then
under the normalisation below. There is no fuzzy acceptance: after normalisation the quote
must be a substring, character for character. Offsets are always those of the *original*
extracted text (W3C ``TextPositionSelector``: code points before normalisation), and
``text[start:end]`` is the source's own spelling of the whole matched span.

Normalisation ``amber-norm-1`` (:data:`NORMALISATION_VERSION`). Applied identically to the
quote and to the document text, in this order:

1. **Unicode NFC** (Python's ``unicodedata``): composed and decomposed accents are equal.
2. **Invisible break opportunities are deleted**: SOFT HYPHEN U+00AD, ZERO WIDTH SPACE
   U+200B, WORD JOINER U+2060, ZERO WIDTH NO-BREAK SPACE / BOM U+FEFF.
3. **Whitespace runs become one space**: any run of whitespace — U+0020, TAB, LF, VT, FF,
   CR, U+001C–U+001F, NEL U+0085, NO-BREAK SPACE U+00A0, U+1680, U+2000–U+200A, LINE and
   PARAGRAPH SEPARATOR U+2028/U+2029, NARROW NO-BREAK SPACE U+202F, U+205F, IDEOGRAPHIC
   SPACE U+3000 (what Python 3.11's ``str.isspace()`` accepts, frozen in
   ``_WHITESPACE``) — together with any characters of rule 2 inside it, becomes a single
   U+0020. The quote is also stripped of leading and trailing spaces.
4. **Typographic quotes** become ASCII: ‘ ’ ‚ ‛ ′ ʼ (U+2018, U+2019, U+201A, U+201B,
   U+2032, U+02BC) → ``'``; “ ” „ ‟ ″ (U+201C, U+201D, U+201E, U+201F, U+2033) → ``"``.
   Guillemets (« » ‹ ›) are *not* mapped.
5. **Dashes and minus signs** become ``-``: U+2010 HYPHEN, U+2011 NON-BREAKING HYPHEN,
   U+2012 FIGURE DASH, U+2013 EN DASH, U+2014 EM DASH, U+2015 HORIZONTAL BAR, U+2212
   MINUS SIGN, U+FE58, U+FE63, U+FF0D. (``--`` is *not* a dash.)
6. **Ellipsis** U+2026 → ``...``.

For PDFs only (``pdf=True``; the extractor is ``amber-pdf``), additionally:

7. **Ligatures** are spelled out: U+FB00 ff, U+FB01 fi, U+FB02 fl, U+FB03 ffi, U+FB04 ffl,
   U+FB05 st, U+FB06 st.
8. **Line-break hyphenation**: a hyphen (``-`` or anything rule 5 made one) after a letter, digit or
   ``_`` (``\\w``) and followed by whitespace (a line break as extractors lay out line
   ends; any whitespace, since rule 3 comes first) is *dehyphenated*
   — hyphen and whitespace deleted — when the next character is a lower-case letter
   (``evi-\\ndence`` → ``evidence``), and otherwise keeps the hyphen and drops the
   whitespace (``Anti-\\nAmerican`` → ``Anti-American``). A soft hyphen followed by
   whitespace is deleted with it. Because a compound can also break at its hyphen
   (``state-\\nof-the-art``), a quote not found that way is looked for again with every
   such hyphen kept (``state-of-the-art``).

A match covers whole source characters: one that would begin or end inside a character a
rule replaced by several (``.`` of ``…``, ``i`` of ``ﬁ``) or that NFC merged does not count,
so ``text[start:end]`` always normalises to exactly the normalised quote.

Nothing else is equivalent: case, other punctuation, spelling, word order and omitted words
(``...`` eliding text) all make a quote not found. Any change to these rules must change
:data:`NORMALISATION_VERSION`; it is recorded with each citation and :func:`quote_hash`
depends on it.

When the quote occurs more than once (overlapping occurrences count), ``prefix`` and
``suffix`` (compared after normalisation, by how many characters agree next to the quote)
choose, then the occurrence whose start is nearest to ``position``, then the first. They
only choose: a quote that is found is never refused because its context disagrees.
"""

from __future__ import annotations

import bisect
import re
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from archive.exceptions import InvalidInput
from archive.hashing import content_address

NORMALISATION_VERSION = "amber-norm-1"

DEFAULT_CONTEXT = 32
_CONTEXT_COMPARED = 256  # code points of prefix/suffix that take part in choosing


class EmptyQuote(InvalidInput):
    code = "empty_quote"


class QuoteNotFound(InvalidInput):
    code = "quote_not_found"


@dataclass(frozen=True)
class QuoteMatch:
    start: int  # code points into the extracted text, before normalisation
    end: int
    exact: str  # text[start:end]: the source's own spelling
    prefix: str  # up to ``context`` code points before ``start``
    suffix: str  # up to ``context`` code points after ``end``
    method: Literal["exact", "normalised"]
    occurrences: int


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


_PLAIN_RULES = re.compile(f"{_RUN}|(?P<map>{_char_class(_EXPANDED)})")
_PDF_RULES = re.compile(f"{_HYPHEN_BREAK}|{_RUN}|(?P<map>{_char_class(_PDF_EXPANDED)})")

Mode = Literal["plain", "pdf", "pdf-keep-hyphens"]


def _one_for_one(text: str) -> str:
    for char, replacement in _ONE_FOR_ONE:
        if char in text:
            text = text.replace(char, replacement)
    return text


def _replacement(mode: Mode, source: str, match: re.Match[str]) -> str:
    kind = match.lastgroup
    value = match.group()
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


def _apply_rules(source: str, mode: Mode, offsets: _Map | None) -> str:
    """Rules 2–8 on NFC text; records the offset map in ``offsets`` when given.

    Equivalent to replacing each match of ``finditer`` left to right; matches are only
    tried where a needle is, starting from the beginning of the run the needle sits in.
    """
    source = _one_for_one(source)
    plain = mode == "plain"
    rules = _PLAIN_RULES if plain else _PDF_RULES
    parts: list[str] = []
    at = 0  # in source: everything before is done
    length = 0  # of the output so far
    for needle_at in _positions(source, _NEEDLES if plain else _PDF_NEEDLES):
        if needle_at < at:
            continue
        begin = needle_at
        while begin > at and source[begin - 1] in _RUN_CHARS:
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


def _apply_rules_reference(source: str, mode: Mode) -> str:
    """The rules by a plain scan (slow): what :func:`_apply_rules` must equal (tests)."""
    source = _one_for_one(source)
    rules = _PLAIN_RULES if mode == "plain" else _PDF_RULES
    return rules.sub(lambda match: _replacement(mode, source, match), source)


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


def _normalise(text: str, mode: Mode) -> str:
    return _apply_rules(unicodedata.normalize("NFC", text), mode, None).strip(" ")


def normalise(text: str, *, pdf: bool = False) -> str:
    """``text`` under :data:`NORMALISATION_VERSION` (rules 1–6; 7–8 too when ``pdf``)."""
    return _normalise(text, "pdf" if pdf else "plain")


def quote_hash(exact: str) -> str:
    """``blake3:<hex>`` of the UTF-8 of the normalised quote (rules 1–6, whatever the source)."""
    normalised = normalise(_check_quote(exact))
    if not normalised:
        raise EmptyQuote("the quote is empty")
    return content_address(normalised.encode("utf-8"))


# -- prepared texts -----------------------------------------------------------------------


class _Variant:
    __slots__ = ("nfc_map", "normalised", "rules_map")

    def __init__(self, text: str, mode: Mode) -> None:
        nfc, self.nfc_map = _nfc_with_map(text)
        self.rules_map = _Map()
        self.normalised = _apply_rules(nfc, mode, self.rules_map)

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
        self._variants: dict[Mode, _Variant] = {}

    @property
    def modes(self) -> tuple[Mode, ...]:
        return ("pdf", "pdf-keep-hyphens") if self.pdf else ("plain",)

    def variant(self, mode: Mode) -> _Variant:
        found = self._variants.get(mode)
        if found is None:  # a race only builds it twice
            found = self._variants[mode] = _Variant(self.text, mode)
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


# -- locating -----------------------------------------------------------------------------


def _check_quote(exact: object) -> str:
    if not isinstance(exact, str):
        raise InvalidInput("quote.exact must be a string")
    if not exact or exact.isspace():
        raise EmptyQuote("the quote is empty")
    try:
        exact.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("the quote is not valid Unicode (lone surrogate)") from None
    return exact


def _inside_a_character(text: str, at: int) -> bool:
    """Whether a cut at ``at`` falls inside what NFC makes one character: before a
    combining mark, or between two characters NFC composes (Hangul jamo, some Indic vowel
    signs). An exact match cut there is not in the visible text (``cafe`` of ``cafe\u0301``)."""
    if at <= 0 or at >= len(text) or text[at] < "\x80":
        return False  # an ASCII character never joins what comes before it (the usual case)
    # NFC acts on a starter and the marks after it (a Hangul syllable is at most three
    # jamo): a cut is clean when normalising each side alone gives what normalising both
    # together gives. Eight characters a side cover any realistic combining sequence.
    before, after = text[max(0, at - 8) : at], text[at : at + 8]
    nfc = unicodedata.normalize
    return nfc("NFC", before + after) != nfc("NFC", before) + nfc("NFC", after)


def _occurrences(haystack: str, needle: str) -> list[int]:
    found = []
    at = haystack.find(needle)
    while at >= 0:
        found.append(at)
        at = haystack.find(needle, at + 1)
    return found


def _common_suffix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        n += 1
    return n


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _choose(
    text: str,
    spans: list[tuple[int, int]],
    mode: Mode,
    prefix: str | None,
    suffix: str | None,
    position: int | None,
) -> tuple[int, int]:
    if len(spans) == 1 or (not prefix and not suffix and position is None):
        return spans[0]
    want_before = _normalise(prefix, mode)[-_CONTEXT_COMPARED:] if prefix else ""
    want_after = _normalise(suffix, mode)[:_CONTEXT_COMPARED] if suffix else ""
    best: tuple[int, int] | None = None
    best_key: tuple[int, int] = (0, 0)
    for start, end in spans:
        agreement = 0
        if want_before:
            before = _normalised_context(text, start, -len(want_before), mode)
            agreement += _common_suffix(before, want_before)
        if want_after:
            after = _normalised_context(text, end, len(want_after), mode)
            agreement += _common_prefix(after, want_after)
        distance = abs(start - position) if position is not None else 0
        key = (-agreement, distance)
        if best is None or key < best_key:  # strict: ties keep the earlier occurrence
            best, best_key = (start, end), key
    assert best is not None
    return best


def _normalised_context(text: str, at: int, wanted: int, mode: Mode) -> str:
    """At least ``abs(wanted)`` normalised characters of ``text`` before ``at`` (negative)
    or after it (or all there are). Normalisation shrinks whitespace runs, soft hyphens and
    zero-width characters, so a fixed raw window could hold too few characters to compare."""
    window = 4 * abs(wanted) + 64
    while True:
        if wanted < 0:
            lo = max(0, at - window)
            context, complete = _normalise(text[lo:at], mode), lo == 0
        else:
            hi = min(len(text), at + window)
            context, complete = _normalise(text[at:hi], mode), hi == len(text)
        if complete or len(context) > abs(wanted):  # one more: a cut run of spaces may shrink
            return context
        window *= 4


def locate(
    text: str | PreparedText,
    exact: str,
    *,
    prefix: str | None = None,
    suffix: str | None = None,
    position: int | None = None,
    pdf: bool = False,
    context: int = DEFAULT_CONTEXT,
) -> QuoteMatch:
    """Find ``exact`` in ``text`` (extracted text, or :func:`prepare`'d — then its own
    ``pdf`` flag applies). Exact occurrences first; if there are none, occurrences under the
    normalisation. Raises :class:`EmptyQuote` or :class:`QuoteNotFound` (both
    :class:`~archive.exceptions.InvalidInput`)."""
    _check_quote(exact)
    if not _normalise(
        exact, "plain"
    ):  # e.g. only soft hyphens: nothing :func:`quote_hash` could hash
        raise EmptyQuote("the quote is empty")
    if position is not None and (isinstance(position, bool) or not isinstance(position, int)):
        raise InvalidInput("quote.position must be an integer")
    for name, value in (("prefix", prefix), ("suffix", suffix)):
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"quote.{name} must be a string")
    prepared = text if isinstance(text, PreparedText) else prepare(text, pdf=pdf)
    source = prepared.text

    method: Literal["exact", "normalised"] = "exact"
    mode = prepared.modes[0]
    spans = [
        (at, at + len(exact))
        for at in _occurrences(source, exact)
        if not (_inside_a_character(source, at) or _inside_a_character(source, at + len(exact)))
    ]
    if not spans:
        method = "normalised"
        for mode in prepared.modes:
            wanted = _normalise(exact, mode)
            if not wanted:
                raise EmptyQuote("the quote is empty")
            variant = prepared.variant(mode)
            found = _occurrences(variant.normalised, wanted)
            spans = [
                span
                for span in (variant.span(at, at + len(wanted)) for at in found)
                if span is not None
            ]
            if spans:
                break
        else:
            raise QuoteNotFound(
                f"the quote is not in the document's text, exactly or under {NORMALISATION_VERSION}"
            )
    start, end = _choose(source, spans, mode, prefix, suffix, position)
    context = max(0, context)
    return QuoteMatch(
        start=start,
        end=end,
        exact=source[start:end],
        prefix=source[max(0, start - context) : start],
        suffix=source[end : end + context],
        method=method,
        occurrences=len(spans),
    )
