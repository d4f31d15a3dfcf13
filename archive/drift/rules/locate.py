"""Locating the cited passage, or what became of it, in the live extracted text.

Exact, then under the quote normalisation (:func:`archive.citations.locate`), then fuzzy:
candidate places are voted for by cheap anchors (shingles of the quote, the recorded prefix
and suffix, the recorded position), a window around the strongest is aligned word by word,
and the new passage is what lies between where the old context ended and began again.
Specified in ``docs/specs/amber-drift-1.md`` ("Locating the passage").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rapidfuzz import fuzz
from rapidfuzz.distance import Indel

from archive.citations import PreparedText, QuoteMatch, locate, normalise
from archive.drift.rules.outcomes import PassageLocation
from archive.exceptions import QuoteNotFound

_ALIGN_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD_SPAN = re.compile(r"\S+")
_SENTENCE_END = frozenset(".!?")
_CONTEXT_CHARS = 48  # of the recorded prefix/suffix used to anchor and align
_CONTEXT_TOKENS = 8
_MAX_SHINGLES = 8
_MAX_HITS = 8  # an anchor found more often than this is not distinctive: ignored
_MAX_CANDIDATES = 3
_HIGH_SCORE = 80.0  # a context-anchored fuzzy match this close beats a context-less exact one
_CONTEXT_BONUS = 5.0  # ranking bonus per side (prefix, suffix) aligned next to a candidate


def find_passage(
    live: PreparedText,
    old_exact: str,
    *,
    prefix: str = "",
    suffix: str = "",
    position: int | None = None,
    min_score: float = 60.0,
) -> PassageLocation | None:
    """Where ``old_exact`` (or what became of it) is in ``live``; ``None`` if nothing is similar
    enough (the passage was deleted). See the module docstring."""
    try:
        match = locate(
            live, old_exact, prefix=prefix or None, suffix=suffix or None, position=position
        )
    except QuoteNotFound:
        match = None
    if match is not None:
        if _glued(live.text, match, prefix, suffix):
            # Found inside a longer word ("وافق" in "يوافق", "approved" in "disapproved"):
            # the passage's own first or last word changed, so it is not intact.
            anchored = _fuzzy(live, old_exact, prefix, suffix, None, context_only=True)
            if anchored is None:
                anchored = _fuzzy(live, old_exact, prefix, suffix, position, context_only=False)
            if anchored is not None:
                return _location(live, _to_context(live.text, anchored, prefix, suffix))
        if not _context_disagrees(live, match, prefix, suffix):
            return PassageLocation(match.start, match.end, match.exact, match.method, 100.0)
        # Maybe a repeated clause: is the cited occurrence, where its context still is, edited?
        anchored = _fuzzy(live, old_exact, prefix, suffix, None, context_only=True)
        if anchored is not None and anchored[0] >= _HIGH_SCORE:
            return _location(live, anchored)
        return PassageLocation(match.start, match.end, match.exact, match.method, 100.0)
    found = _fuzzy(live, old_exact, prefix, suffix, position, context_only=False)
    if found is None or found[0] < min_score:
        return None
    return _location(live, found)


def _location(live: PreparedText, found: tuple[float, int, int]) -> PassageLocation:
    score, start, end = found
    return PassageLocation(start, end, live.text[start:end], "fuzzy", round(score, 2))


_CONTEXT_REACH = 64  # code points between a found passage and its recorded context


def _to_context(
    text: str, found: tuple[float, int, int], prefix: str, suffix: str
) -> tuple[float, int, int]:
    """``found`` widened to where the recorded prefix ends and the suffix begins, when they
    are near: words inserted next to the passage (a negator before it) belong to it."""
    score, start, end = found
    tail, head = prefix.strip()[-12:], suffix.strip()[:12]
    if tail:
        at = text.rfind(tail, max(0, start - _CONTEXT_REACH), start + len(tail))
        if at >= 0 and at + len(tail) <= start:
            start = at + len(tail)
            while start < end and text[start].isspace():
                start += 1
    if head:
        at = text.find(head, max(start, end - len(head)), end + _CONTEXT_REACH)
        if at >= end:
            end = at
            while end > start and text[end - 1].isspace():
                end -= 1
    return score, start, end


def _glued(text: str, match: QuoteMatch, prefix: str, suffix: str) -> bool:
    """``match`` begins or ends inside a word of the live text where the recorded context
    had another character next to it (amber-drift-2)."""
    exact = match.exact
    before = text[match.start - 1] if match.start > 0 else ""
    after = text[match.end] if match.end < len(text) else ""
    start_glued = before.isalnum() and exact[:1].isalnum() and prefix[-1:] != before
    end_glued = after.isalnum() and exact[-1:].isalnum() and suffix[:1] != after
    return start_glued or end_glued


def _context_disagrees(live: PreparedText, match: QuoteMatch, prefix: str, suffix: str) -> bool:
    """Neither the recorded prefix's tail nor the suffix's head is next to ``match``."""
    if not prefix and not suffix:
        return False
    pdf = live.pdf
    checks = []
    if prefix:
        want = normalise(prefix, pdf=pdf)[-16:]
        if want:
            have = normalise(
                live.text[max(0, match.start - 4 * len(want) - 16) : match.start], pdf=pdf
            )
            checks.append(have.endswith(want))
    if suffix:
        want = normalise(suffix, pdf=pdf)[:16]
        if want:
            have = normalise(live.text[match.end : match.end + 4 * len(want) + 16], pdf=pdf)
            checks.append(have.startswith(want))
    return bool(checks) and not any(checks)


def _lowered(text: str) -> str:
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text  # "İ".lower() is two code points


def _occurrences(text: str, needle: str, limit: int) -> list[int] | None:
    """Start offsets of ``needle`` in ``text``; ``None`` when there are more than ``limit``."""
    found: list[int] = []
    at = text.find(needle)
    while at >= 0:
        if len(found) == limit:
            return None
        found.append(at)
        at = text.find(needle, at + 1)
    return found


def _candidates(text: str, quote: str, before: str, after: str, position: int | None) -> list[int]:
    """Likely start offsets of the (changed) passage in normalised lower-cased ``text``."""
    votes: list[tuple[int, float]] = []
    words = [(m.start(), m.end()) for m in _WORD_SPAN.finditer(quote)]
    if len(words) >= 3:
        count = len(words) - 2
        step = max(1, count // _MAX_SHINGLES)
        picks = set(range(0, count, step)) | {count - 1}
        for i in sorted(picks):
            piece = quote[words[i][0] : words[i + 2][1]]
            if len(piece) < 8:
                continue
            for at in _occurrences(text, piece, _MAX_HITS) or ():
                votes.append((at - words[i][0], 1.0))
    long_words = (
        sorted((w for w in words if w[1] - w[0] >= 7), key=lambda w: w[0] - w[1])[:5]
        if not votes
        else []
    )  # only when no shingle survived: each find scans the page
    for begin, end in long_words:
        for at in _occurrences(text, quote[begin:end], 4) or ():
            votes.append((at - begin, 0.5))
    if before:
        tail = before[-32:]
        cut = tail.find(" ")
        tail = tail[cut + 1 :] if 0 <= cut < len(tail) - 8 else tail
        for at in _occurrences(text, tail, 4) or ():
            votes.append((at + len(tail) + 1, 2.0))
    if after:
        head = after[:32]
        cut = head.rfind(" ")
        head = head[:cut] if cut > 8 else head
        for at in _occurrences(text, head, 4) or ():
            votes.append((at - len(quote) - 1, 2.0))
    if position is not None and 0 <= position < len(text):
        votes.append((position, 0.25))
    if not votes:
        return []
    votes.sort()
    spread = max(24, len(quote) // 3)
    clusters: list[tuple[float, int]] = []
    group: list[tuple[int, float]] = [votes[0]]
    for vote in votes[1:]:
        if vote[0] - group[-1][0] <= spread:
            group.append(vote)
        else:
            clusters.append(_cluster(group))
            group = [vote]
    clusters.append(_cluster(group))
    clusters.sort(key=lambda c: -c[0])
    return [center for _, center in clusters[:_MAX_CANDIDATES]]


def _cluster(group: list[tuple[int, float]]) -> tuple[float, int]:
    weight = sum(w for _, w in group)
    return weight, group[len(group) // 2][0]


def _context_only_candidates(text: str, before: str, after: str, quote_len: int) -> list[int]:
    """Starts implied by the recorded prefix and suffix alone (both required)."""
    if not before or not after:
        return []
    tail, head = before[-24:], after[:24]
    starts = _occurrences(text, tail, 4) or []
    ends = _occurrences(text, head, 4) or []
    found = []
    for s in starts:
        for e in ends:
            if 0 <= e - (s + len(tail)) <= 3 * quote_len + 64:
                found.append(s + len(tail) + 1)
    return found[:_MAX_CANDIDATES]


def _fuzzy(
    live: PreparedText,
    old_exact: str,
    prefix: str,
    suffix: str,
    position: int | None,
    *,
    context_only: bool,
) -> tuple[float, int, int] | None:
    """Best ``(score, start, end)`` in original offsets, or ``None``."""
    pdf = live.pdf
    variant = live.variant(live.modes[0])
    text = _lowered(variant.normalised)
    quote = normalise(old_exact, pdf=pdf).lower()
    if not quote or not text:
        return None
    before = normalise(prefix, pdf=pdf).lower()[-_CONTEXT_CHARS:] if prefix else ""
    after = normalise(suffix, pdf=pdf).lower()[:_CONTEXT_CHARS] if suffix else ""
    if context_only:
        starts = _context_only_candidates(text, before, after, len(quote))
    else:
        starts = _candidates(text, quote, before, after, position)
    if not starts:
        return None
    q_tokens = _ALIGN_TOKEN.findall(quote)
    b_tokens = _ALIGN_TOKEN.findall(before)[-_CONTEXT_TOKENS:] if before else []
    a_tokens = _ALIGN_TOKEN.findall(after)[:_CONTEXT_TOKENS] if after else []
    best: tuple[float, float, int, int] | None = None
    for start in starts:
        span = _align(
            text, start, quote, q_tokens, b_tokens, a_tokens, require_context=context_only
        )
        if span is None:
            continue
        s, e, sides = span
        score = fuzz.ratio(quote, text[s:e])
        rank = score + _CONTEXT_BONUS * sides  # where the old context still is, is where it was
        if best is None or rank > best[0]:
            best = (rank, score, s, e)
    if best is None:
        return None
    _, score, start, end = best
    for widen in range(4):  # a span must not begin or end inside a replaced character ("…")
        found = variant.span(max(0, start - widen), min(len(text), end + widen))
        if found is not None:
            return score, found[0], found[1]
    return None


def _align(
    text: str,
    center: int,
    quote: str,
    q_tokens: list[str],
    b_tokens: list[str],
    a_tokens: list[str],
    *,
    require_context: bool,
) -> tuple[int, int, int] | None:
    """``(start, end, context sides aligned)``: the span of normalised ``text`` that replaced
    the quote, searched near ``center``."""
    slack = max(48, len(quote) // 2)
    lo = max(0, center - slack - _CONTEXT_CHARS)
    hi = min(len(text), center + len(quote) + slack + _CONTEXT_CHARS)
    while lo > 0 and not text[lo - 1].isspace():
        lo -= 1
    while hi < len(text) and not text[hi].isspace():
        hi += 1
    matches = list(_ALIGN_TOKEN.finditer(text, lo, hi))
    if not matches:
        return None
    region = [m.group() for m in matches]
    combined = b_tokens + q_tokens + a_tokens
    first_q, end_q = len(b_tokens), len(b_tokens) + len(q_tokens)
    blocks = [
        (op.src_start, op.dest_start, op.src_end - op.src_start)
        for op in Indel.opcodes(combined, region)
        if op.tag == "equal"
    ]
    blocks = _trim(blocks, len(combined))
    if not any(a < end_q and a + size > first_q for a, _, size in blocks):
        return None  # only context matched
    if require_context and not (
        b_tokens
        and a_tokens
        and any(a < first_q for a, _, _ in blocks)
        and any(a + size > end_q for a, _, size in blocks)
    ):
        return None
    b_start = _boundary_start(blocks, first_q, len(region))
    b_end = _boundary_end(blocks, end_q, len(region))
    has_before = any(a + size == first_q or (a < first_q < a + size) for a, _, size in blocks)
    has_after = any(a == end_q or (a < end_q < a + size) for a, _, size in blocks)
    if not has_before and quote[:1].isalpha() and _starts_sentence(quote, b_tokens):
        b_start = _to_sentence_start(region, text, matches, b_start)
    if not has_after and quote[-1:] in _SENTENCE_END:
        b_end = _to_sentence_end(region, b_end)
    if b_end <= b_start:
        return None
    return matches[b_start].start(), matches[b_end - 1].end(), int(has_before) + int(has_after)


def _trim(blocks: list[tuple[int, int, int]], length: int) -> list[tuple[int, int, int]]:
    """Drop edge blocks while that raises 2·matched / (length + span): stray edge matches."""

    def score(part: Sequence[tuple[int, int, int]]) -> float:
        matched = sum(size for _, _, size in part)
        span = part[-1][1] + part[-1][2] - part[0][1]
        return 2 * matched / (length + span)

    while len(blocks) > 1:
        current = score(blocks)
        left, right = score(blocks[1:]), score(blocks[:-1])
        if left > current and left >= right:
            blocks = blocks[1:]
        elif right > current:
            blocks = blocks[:-1]
        else:
            break
    return blocks


def _boundary_start(blocks: list[tuple[int, int, int]], first_q: int, region_len: int) -> int:
    prev: tuple[int, int, int] | None = None
    for a, b, size in blocks:
        if a < first_q < a + size:  # context and passage contiguous: nothing inserted between
            return b + first_q - a
        if a >= first_q:  # words inserted before the passage's first kept word belong to it
            missing = a - first_q
            if prev is None:
                return max(0, b - missing)
            gap_lo = prev[1] + prev[2]
            return max(gap_lo, b - (missing + 3))
        prev = (a, b, size)
    assert prev is not None
    return prev[1] + prev[2]


def _boundary_end(blocks: list[tuple[int, int, int]], end_q: int, region_len: int) -> int:
    nxt: tuple[int, int, int] | None = None
    for a, b, size in reversed(blocks):
        if a < end_q < a + size:
            return b + end_q - a
        if a + size <= end_q:
            missing = end_q - (a + size)
            if nxt is None:
                return min(region_len, b + size + missing)
            return min(nxt[1], b + size + missing + 3)
        nxt = (a, b, size)
    assert nxt is not None
    return nxt[1]


def _starts_sentence(quote: str, b_tokens: list[str]) -> bool:
    return not b_tokens or b_tokens[-1] in _SENTENCE_END or b_tokens[-1] in (":", ";")


def _to_sentence_start(
    region: list[str], text: str, matches: list[re.Match[str]], b_start: int
) -> int:
    for back in range(4):
        i = b_start - back
        if i <= 0:
            return b_start if i < 0 else 0
        previous = region[i - 1]
        gap = text[matches[i - 1].end() : matches[i].start()]
        if previous in _SENTENCE_END or previous in (":", ";") or "\n" in gap:
            return i
    return b_start


def _to_sentence_end(region: list[str], b_end: int) -> int:
    if b_end > 0 and region[b_end - 1] in _SENTENCE_END:
        return b_end
    for ahead in range(4):
        i = b_end + ahead
        if i >= len(region):
            break
        if region[i] in _SENTENCE_END:
            return i + 1
    return b_end
