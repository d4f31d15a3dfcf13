"""The normalised text next to an occurrence of a quote, for choosing it by prefix or suffix.

``docs/specs/amber-norm-1.md`` defines the context of an occurrence as a *window* of the
source text normalised on its own: ``4n + 64`` code points next to it, grown fourfold while
its normalised form is no longer than the ``n`` code points compared. :func:`window_context`
is that definition. Normalising a window for every occurrence costs the window's length per
occurrence, so a short quote repeated throughout a long text cost their product.

:class:`ContextReader` gets the same code points from the document's normalised text, built
once (:class:`~archive.citations.normalise.PreparedText`). That works because of *clean
cuts*: a position before an ASCII character that is not whitespace (nor, in the PDF modes, a
hyphen; nor, in mode ``pdf``, a lower-case letter that ends a hyphen and a run of spaces).
NFC never joins across an ASCII character, and no rule's match contains such a character or
looks at it, so normalising the text between two clean cuts gives exactly the normalised
document's text between them. A window's end next to the occurrence is cut where the
occurrence is, not necessarily cleanly, so the stretch from the nearest clean cut to it is
normalised on its own; its far end moves as the window grows, so the nearest clean cut
inside the first window stands in for it, and only what lies beyond that cut, which the
compared code points never reach, depends on it. Where that does not give enough code
points (no clean cut near, or too much whitespace), the window is normalised as specified.
"""

from __future__ import annotations

import bisect
import re
import unicodedata

from archive.citations.normalise import (
    _DELETED,
    _WHITESPACE,
    NORMALISATION_VERSION,
    Mode,
    PreparedText,
    Version,
    _apply_rules,
    _Map,
    _Variant,
    normalise_as,
)

_ASCII_CLEAN = {
    "plain": re.compile(r"[\x00-\x08\x0e-\x1b\x21-\x7f]"),
    "pdf": re.compile(r"[\x00-\x08\x0e-\x1b\x21-\x2c\x2e-\x7f]"),
}
# A hyphen (any dash rule 5 makes one) and a run of spaces: rule 8 in mode ``pdf`` looks at
# the character right after such a run, so a cut there is not clean.
_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"
_HYPHEN_AND_RUN = re.compile(f"[-\u00ad{_DASHES}][ {_WHITESPACE}{_DELETED}]+")


def window_context(
    text: str, at: int, wanted: int, mode: Mode, version: Version = NORMALISATION_VERSION
) -> str:
    """At least ``abs(wanted)`` normalised characters of ``text`` before ``at`` (negative)
    or after it (or all there are). Normalisation shrinks whitespace runs, soft hyphens and
    zero-width characters, so a fixed raw window could hold too few characters to compare."""
    window = 4 * abs(wanted) + 64
    while True:
        if wanted < 0:
            lo = max(0, at - window)
            context, complete = normalise_as(text[lo:at], mode, version), lo == 0
        else:
            hi = min(len(text), at + window)
            context, complete = normalise_as(text[at:hi], mode, version), hi == len(text)
        if complete or len(context) > abs(wanted):  # one more: a cut run of spaces may shrink
            return context
        window *= 4


# Each ASCII character as "1" where a cut before it is clean, else "0" (``str.translate``
# leaves every other character as it is, and none of them is "1").
_MASKS = {
    kind: {code: "1" if pattern.fullmatch(chr(code)) else "0" for code in range(128)}
    for kind, pattern in _ASCII_CLEAN.items()
}


def _clean_mask(text: str, mode: Mode) -> str:
    """A string as long as ``text`` holding "1" exactly where a cut before that character
    is clean (the start and end of the text, always clean, aside): searched with ``find``
    and ``rfind`` next to an occurrence, at C speed, instead of listing every clean cut of
    a text that may hold millions."""
    kind = "plain" if mode == "plain" else "pdf"
    mask = text.translate(_MASKS[kind])
    if mode == "pdf":
        pieces: list[str] = []
        at = 0
        for match in _HYPHEN_AND_RUN.finditer(text):
            end = match.end()
            if end < len(text):
                pieces += (mask[at:end], "0")
                at = end + 1
        if pieces:
            mask = "".join(pieces) + mask[at:]
    return mask


def _forward(offsets: _Map, position: int) -> int | None:
    """Where source ``position`` (before a character no step replaced) went, or ``None``."""
    i = bisect.bisect_right(offsets.sources, position) - 1
    if i < 0 or position >= offsets.source_ends[i]:
        return None
    if offsets.identity[i]:
        return offsets.starts[i] + position - offsets.sources[i]
    return offsets.starts[i] if position == offsets.sources[i] else None


class ContextReader:
    """:func:`window_context` of one prepared text in one mode, from its normalised form."""

    def __init__(
        self, prepared: PreparedText, mode: Mode, version: Version = NORMALISATION_VERSION
    ) -> None:
        self.text = prepared.text
        self.mode = mode
        self.version: Version = version
        self.variant: _Variant = prepared.variant(mode, version)
        self.mask = _clean_mask(self.text, mode)

    def _last_cut(self, lo: int, hi: int) -> int | None:
        """The last clean cut in ``lo..hi`` (both included), or None."""
        if lo <= len(self.text) <= hi:
            return len(self.text)
        found = self.mask.rfind("1", lo, hi + 1)
        if found >= 0:
            return found
        return 0 if lo <= 0 <= hi else None

    def _first_cut(self, lo: int, hi: int) -> int | None:
        """The first clean cut in ``lo..hi`` (both included), or None."""
        if lo <= 0 <= hi:
            return 0
        found = self.mask.find("1", lo, hi + 1)
        if found >= 0:
            return found
        return len(self.text) if lo <= len(self.text) <= hi else None

    def _normalised_at(self, cut: int) -> int | None:
        """Offset in the normalised text of the clean cut ``cut``."""
        if cut == 0:
            return 0
        if cut == len(self.text):
            return len(self.variant.normalised)
        position: int | None = cut
        if self.variant.nfc_map is not None:
            position = _forward(self.variant.nfc_map, cut)
        return None if position is None else _forward(self.variant.rules_map, position)

    def _between(self, lo: int, hi: int) -> str | None:
        """Normalised text between clean cuts ``lo`` <= ``hi`` (no outer spaces removed)."""
        begin, finish = self._normalised_at(lo), self._normalised_at(hi)
        if begin is None or finish is None:
            return None
        return self.variant.normalised[begin:finish]

    def _alone(self, lo: int, hi: int) -> str:
        if lo == hi:  # the usual case: the occurrence is next to a clean cut
            return ""
        return _apply_rules(
            unicodedata.normalize("NFC", self.text[lo:hi]), self.mode, None, self.version
        )

    def before(self, at: int, wanted: int) -> str:
        """The last ``wanted`` code points (or all there are) of
        ``window_context(text, at, -wanted, mode)``."""
        first = max(0, at - (4 * wanted + 64))
        near = self._last_cut(first, at)  # the clean cut nearest before ``at``
        far = self._first_cut(first, at)  # within every window
        if near is not None and far is not None:
            middle = self._between(far, near)
            if middle is not None:
                tail = (middle + self._alone(near, at)).rstrip(" ")
                if far == 0:  # the first window is all the text before ``at``
                    return tail.lstrip(" ")[-wanted:]
                if len(tail.lstrip(" ")) >= wanted:
                    return tail[len(tail) - wanted :]
        return window_context(self.text, at, -wanted, self.mode, self.version)[-wanted:]

    def after(self, at: int, wanted: int) -> str:
        """The first ``wanted`` code points (or all there are) of
        ``window_context(text, at, wanted, mode)``."""
        last = min(len(self.text), at + 4 * wanted + 64)
        near = self._first_cut(at, last)
        far = self._last_cut(at, last)
        if near is not None and far is not None:
            middle = self._between(near, far)
            if middle is not None:
                head = (self._alone(at, near) + middle).lstrip(" ")
                if far == len(self.text):  # the first window is all the text after ``at``
                    return head.rstrip(" ")[:wanted]
                if len(head.rstrip(" ")) >= wanted:
                    return head[:wanted]
        return window_context(self.text, at, wanted, self.mode, self.version)[:wanted]
