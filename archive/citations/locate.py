"""Finding a quote in a document's extracted text: exact, or under a normalisation.

A citation's quote must really be in the captured document. :func:`locate` looks for it in
the text an extractor produced (:mod:`archive.citations.extract`): first as an exact
substring, then under the normalisation (:mod:`archive.citations.normalise`; the current
``amber-norm-2`` unless the caller names the version a stored citation was matched under). There is no
fuzzy acceptance: after normalisation the quote must be a substring, character for
character. Offsets are always those of the *original* extracted text (W3C
``TextPositionSelector``: code points before normalisation), and ``text[start:end]`` is the
source's own spelling of the whole matched span; a match never begins or ends inside a
character a rule replaced or NFC merged (``docs/specs/amber-norm-1.md``, ``amber-norm-2.md``).

When the quote occurs more than once (overlapping occurrences count), ``prefix`` and
``suffix`` (compared after normalisation, by how many characters agree next to the quote)
choose, then the occurrence whose start is nearest to ``position``, then the first. They
only choose: a quote that is found is never refused because its context disagrees.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Literal

from archive.citations.context import ContextReader
from archive.citations.normalise import (
    NORMALISATION_VERSION,
    Mode,
    PreparedText,
    Version,
    check_quote,
    normalise_as,
    prepare,
)
from archive.exceptions import EmptyQuote, InvalidInput, QuoteNotFound, QuoteTooCommon

DEFAULT_CONTEXT = 32
_CONTEXT_COMPARED = 256  # code points of prefix/suffix that take part in choosing


@dataclass(frozen=True)
class QuoteMatch:
    start: int  # code points into the extracted text, before normalisation
    end: int
    exact: str  # text[start:end]: the source's own spelling
    prefix: str  # up to ``context`` code points before ``start``
    suffix: str  # up to ``context`` code points after ``end``
    method: Literal["exact", "normalised"]
    occurrences: int


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


def _occurrences(haystack: str, needle: str, limit: int | None) -> list[int]:
    """Where ``needle`` starts in ``haystack`` (overlapping ones too), refusing past ``limit``
    of them: a linear scan that stops there, so every later step is bounded by it."""
    found: list[int] = []
    at = haystack.find(needle)
    while at >= 0:
        if limit is not None and len(found) >= limit:
            raise QuoteTooCommon(
                f"the quote occurs more than {limit} times in the document's text, so it "
                "identifies no one passage: quote more of it ([citations] "
                "max_quote_occurrences)"
            )
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
    prepared: PreparedText,
    spans: list[tuple[int, int]],
    mode: Mode,
    prefix: str | None,
    suffix: str | None,
    position: int | None,
    version: Version,
) -> tuple[int, int]:
    if len(spans) == 1 or (not prefix and not suffix and position is None):
        return spans[0]
    want_before = normalise_as(prefix, mode, version)[-_CONTEXT_COMPARED:] if prefix else ""
    want_after = normalise_as(suffix, mode, version)[:_CONTEXT_COMPARED] if suffix else ""
    reader = ContextReader(prepared, mode, version) if want_before or want_after else None
    best: tuple[int, int] | None = None
    best_key: tuple[int, int] = (0, 0)
    for start, end in spans:
        agreement = 0
        if reader is not None and want_before:
            before = reader.before(start, len(want_before))
            agreement += _common_suffix(before, want_before)
        if reader is not None and want_after:
            after = reader.after(end, len(want_after))
            agreement += _common_prefix(after, want_after)
        distance = abs(start - position) if position is not None else 0
        key = (-agreement, distance)
        if best is None or key < best_key:  # strict: ties keep the earlier occurrence
            best, best_key = (start, end), key
    assert best is not None
    return best


def locate(
    text: str | PreparedText,
    exact: str,
    *,
    prefix: str | None = None,
    suffix: str | None = None,
    position: int | None = None,
    pdf: bool = False,
    context: int = DEFAULT_CONTEXT,
    normalisation: Version = NORMALISATION_VERSION,
    max_occurrences: int | None = None,
) -> QuoteMatch:
    """Find ``exact`` in ``text`` (extracted text, or :func:`prepare`'d — then its own
    ``pdf`` flag applies). Exact occurrences first; if there are none, occurrences under the
    normalisation ``normalisation``. Raises :class:`EmptyQuote` or :class:`QuoteNotFound`
    (both :class:`~archive.exceptions.InvalidInput`), or :class:`QuoteTooCommon` when it
    occurs more than ``max_occurrences`` times (then nothing more is compared: with the
    text's length, that bounds what locating costs a request; None, no bound)."""
    check_quote(exact)
    if not normalise_as(
        exact, "plain", normalisation
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
        for at in _occurrences(source, exact, max_occurrences)
        if not (_inside_a_character(source, at) or _inside_a_character(source, at + len(exact)))
    ]
    if not spans:
        method = "normalised"
        for mode in prepared.modes:
            wanted = normalise_as(exact, mode, normalisation)
            if not wanted:
                raise EmptyQuote("the quote is empty")
            variant = prepared.variant(mode, normalisation)
            found = _occurrences(variant.normalised, wanted, max_occurrences)
            spans = [
                span
                for span in (variant.span(at, at + len(wanted)) for at in found)
                if span is not None
            ]
            if spans:
                break
        else:
            raise QuoteNotFound(
                f"the quote is not in the document's text, exactly or under {normalisation}"
            )
    start, end = _choose(prepared, spans, mode, prefix, suffix, position, normalisation)
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
