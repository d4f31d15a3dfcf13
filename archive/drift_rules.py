"""Drift classification: what happened to a cited passage on the live page (pure; no DB, no HTTP).

The drift job (:mod:`archive.drift`) re-fetches a cited URI-R, extracts its text with the
same extractor the citation used, and calls :func:`classify` once per cited passage. This
module decides; it never fetches, stores or logs. Everything here is deterministic: the
same inputs under the same :data:`RULES_VERSION` give the same verdict, reasons and diff.
**Any change to what these rules decide for some input must bump** :data:`RULES_VERSION`
(it is recorded with every check, like the extractor version).

Verdicts (the drift issue's precedence; first match wins)
----------------------------------------------------------

1. ``unreachable`` — a fetch error (DNS, timeout, connection, refused by the fetch guard:
   ``error`` set), no status, a 5xx, or a status that says nothing about the document:
   401/403/407 (access refused; often bot walls), 408/425/429 (try later), other 4xx than
   404/410/451, and an unfollowed 3xx. Inconclusive, never drift.
2. ``gone`` — 404, 410, and 451 (unavailable for legal reasons).
3. ``identical`` — 304 / ``not_modified``, or the live body's bytes hash to the recorded
   document hash.
4. ``cosmetic`` — the passage is *intact*: it is in the live extracted text exactly or under
   the quote normalisation (``amber-norm-1``, :mod:`archive.quotes`) — i.e. the citation
   would still verify against today's page — wherever it now is. Markup, whitespace,
   boilerplate, other paragraphs and the passage's position may all have changed.
   Deliberately strict: *any* other change to the passage's own characters (a one-letter
   typo fix, a case change, ``16`` → ``sixteen``) is not "intact" and is at least
   ``material`` — what the page says in the cited words is no longer what was quoted, and a
   typo fix is indistinguishable by rule from ``recieve`` → ``receive``-sized edits that do
   matter (``now`` → ``not``). The reasons then say ``spelling_changed``/``case_changed``
   so a reviewer sees at a glance that it is benign.
   One refinement: a quote can occur more than once on a page (a repeated clause). When the
   exact occurrence found has context that agrees with neither the recorded prefix nor
   suffix, and the place where prefix and suffix still are holds a close (fuzzy) version
   of the passage, that edited version is the cited one — so a clause negated in one
   section while an identical clause survives in another is not read as intact.
5. ``soft_404`` — the passage is absent (not even a fuzzy match) and
   :func:`soft_404_signals` says the page is a "not found"/removed page, a redirect to the
   home page or a generic landing page, or looks like a probe of a random sibling URL.
6. ``reversal`` / 7. ``material`` — decided by a :class:`Classifier` (default
   :class:`RuleClassifier`, see :func:`assess_edit`) on the old passage and what the live
   page says in its place: the closest fuzzy match, or ``""`` when the passage is gone
   (``material``, reason ``deleted``; also when the URL now serves a different document).

Locating a changed passage (:func:`find_passage`)
-------------------------------------------------

Exact, then normalised (:func:`archive.quotes.locate`), then fuzzy: candidate places are
voted for by cheap ``str.find`` anchors in the normalised, lower-cased live text — up to
eight three-word shingles of the quote (its five longest words when no shingle is found),
the tail of the recorded prefix, the head of the recorded suffix, and the recorded
position — so a 100 KiB page never meets an O(n·m) loop; the three strongest clusters are
tried. Around each, a window is aligned word by word (rapidfuzz's LCS opcodes) against
*prefix tail + quote + suffix head*; stray matches at the edges are trimmed, and the new
passage is what lies between where the old prefix ended and the old suffix began (up to
three words inserted at either edge belong to the passage: "All" → "Not all" is seen).
Without context the passage is widened to the sentence boundary when the old passage was a
whole sentence. The score is rapidfuzz's ``ratio`` (0–100, case-insensitive) of old and new
passage; a candidate with the old prefix and/or suffix still next to it gets +5 per side
when ranking (where the context still is, is where the passage was); below ``min_score``
(default 60) the passage counts as deleted. Offsets are mapped back to the original
extracted text, so ``live.text[start:end] == found_text``.

Edit rules (:func:`assess_edit`)
--------------------------------

Both passages are normalised (``amber-norm-1``) and tokenised (words, hyphenated words,
contractions, numbers with separators, ``3.1m``/``2bn``, ordinals, ISO/numeric dates,
punctuation); tokens are aligned case-insensitively (rapidfuzz Levenshtein opcodes) into
changed *hunks*. ``reversal`` when any of these fire (reason formats in brackets):

- **negation** ``negation_added:not`` / ``negation_removed:never`` — per hunk, the count of
  negators (not, no, never, none, nobody, nothing, nowhere, neither, nor, without, cannot,
  unless, except, non, n't contractions); ``not`` → ``n't`` is the same count;
- **negative affixes** ``negation_prefix:lawful->unlawful`` — a word gaining or losing
  un-/in-/im-/il-/ir-/non-/dis-/mis-/anti-/a-, or -ful ↔ -less;
- **antonyms and outcome verbs** ``antonym:upheld->overturned`` — curated groups with two
  poles (outcome: uphold/affirm/grant/approve/pass/win… ↔ overturn/quash/deny/reject/
  dismiss/repeal/lose…; permission: allow/permit/legal ↔ prohibit/ban/illegal; verdict;
  safety; direction: increase/rise/higher/above ↔ decrease/fall/lower/below, with a
  neutral pole unchanged/steady/on hold; truth; success; inclusion; timing; support;
  status: supported/available/open ↔ deprecated/unavailable/closed; presence; finance;
  quality; trade; permanence; visibility; compliance; membership; severity; price; length;
  strictness; employment; consensus; schedule; stability; evaluation such as
  encouraging/welcomed ↔ disappointing/criticised; frequency common ↔ rare; speed;
  exemption; life), all regular inflections generated. Per group, a pole lost and another gained, or the same
  poles in another order, is a flip (a polar word only removed or only added is not).
  Within one hunk, a polar word replaced by an opposite-sign word of *another* group
  (``shut down`` → ``stay open``) is a flip too, and a polar word replaced by one to three
  words the lexicon does not know is ``polar_word_replaced:withdrawn->returned to`` — in
  doubt, a reversal (common or deontic lexicon words such as up/on/required are exempt);
- **modality** ``modal_changed:must->may`` — the sequence of deontic classes (obligation:
  must/shall/required/mandatory/need to/have to; permission: may/can/permitted/allowed;
  optional; recommendation: should/recommended/advised; prohibition: must not/may not/
  cannot/prohibited/forbidden; future: will), negation turning obligation into prohibition
  (must/shall not) or optionality (not required, need not), permission into prohibition,
  recommendation into discouragement; ``May`` next to a number is the month;
- **quantifiers** ``quantifier_changed:all->some`` — the sequence of quantifier classes
  (universal all/every/each/always/unanimous; existential some/any/several; majority
  most/many/usually; minority few/rarely; none/no/never; only; bounds at least/at most/
  more than/less than/up to; exactly; approximately);
- **numbers** ``number_changed:16->12``, ``amount_changed:$500->€500`` (a currency on
  either side), ``number_removed:…``, ``number_order_changed`` — the sequence of values
  (digits with separators, decimals, written-out numbers, ordinals, half/quarter/dozen,
  scales hundred/thousand/million/bn/k) with their currency (symbol, ISO code or word) and
  unit (%, per cent, percentage points, days/weeks/…, mg/km/…): ``16`` → ``sixteen`` and
  ``3.1 million`` → ``3.1m`` are the same value;
- **dates** ``date_changed:2019->2021`` / ``date_removed:…`` — years, month names (with day
  of month), weekdays, ISO and numeric dates, relative dates (today, tomorrow, next week,
  last year…);
- **roles swapped** ``order_swapped:before`` — the content words on the two sides of a
  relation word (before, after, than, until, beat, defeated, against, versus, over) traded
  places: "consult residents before deciding" → "decide before consulting residents".

A number or date only *added* (``number_added:…``, ``date_added:…``) is ``material`` when it
was inserted (the old claim made more specific, nothing it said contradicted), and a
reversal when it replaced words ("in the first season" → "in the first two seasons"). Otherwise ``material`` with the
reasons that apply: ``deleted`` (nothing found), ``truncated`` (words only removed),
``extended`` (words only added), ``spelling_changed:a->b`` (one word replaced by a close
spelling), ``case_changed``, ``punctuation_changed``, ``number_reformatted``, or
``reworded``. When in doubt the rules lean to ``reversal``: a removed number or date, an
added modal, a moved negation, a polar word replaced by an unknown one all count — a review
is cheaper than a missed flip. The ``diff`` is word level on the normalised passages,
``[-removed-] {+added+}``, long unchanged runs elided with ``…``.

The rules only see words: an antonym the lexicon lacks, replaced together with other words,
is ``material``. A stronger :class:`Classifier` (e.g. an NLI model) can be passed to
:func:`classify` without touching the rest.

Soft 404 (:func:`soft_404_signals`)
-----------------------------------

Status-independent signals, any one of which makes a soft 404: a "not found"/"removed"/
"no longer available"/404-style ``<title>`` (English, German, French, Spanish); such a
phrase about *the page* in the first 5000 characters of text, or any such phrase in a
short body (< 1500 characters); an empty body; a redirect to a home page (``/``,
``/index.*``, ``/home``, ``/default.*``, a bare language root such as ``/en/``), to an
error page (``/404``, ``/not-found``, ``/error``…), to a search page, or to a section
index that is a directory prefix of the requested path (``/news/2019/05/x`` → ``/news/``);
and the page's text being ≥ 90 % similar to the probe of a random sibling URL on the
same host (line-level for long pages, character-level for short ones).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from functools import cached_property
from typing import Literal, Protocol
from urllib.parse import urlsplit

from rapidfuzz import fuzz
from rapidfuzz.distance import Indel, Levenshtein
from selectolax.lexbor import LexborHTMLParser

from archive.citations import PreparedText, QuoteMatch, decode_html, locate, normalise
from archive.exceptions import QuoteNotFound

RULES_VERSION = "amber-drift-1"

__all__ = [
    "RULES_VERSION",
    "CheckOutcome",
    "Classifier",
    "EditAssessment",
    "PassageLocation",
    "RuleClassifier",
    "Soft404Signals",
    "Verdict",
    "assess_edit",
    "classify",
    "find_passage",
    "html_title",
    "soft_404_signals",
]


class Verdict(StrEnum):
    IDENTICAL = "identical"
    COSMETIC = "cosmetic"
    MATERIAL = "material"
    REVERSAL = "reversal"
    GONE = "gone"
    SOFT_404 = "soft_404"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class PassageLocation:
    start: int  # code points into the live extracted text (before normalisation)
    end: int
    found_text: str  # live.text[start:end]
    method: Literal["exact", "normalised", "fuzzy"]
    score: float  # 100 for exact/normalised; rapidfuzz ratio of old vs found for fuzzy


@dataclass(frozen=True)
class EditAssessment:
    verdict: Verdict  # REVERSAL or MATERIAL
    reasons: tuple[str, ...]
    diff: str


@dataclass(frozen=True)
class Soft404Signals:
    is_soft_404: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class CheckOutcome:
    verdict: Verdict
    reasons: tuple[str, ...]
    location: PassageLocation | None
    diff: str | None


class Classifier(Protocol):
    """Decides ``reversal`` vs ``material`` for an edited (or deleted: ``new == ""``) passage."""

    def assess(self, old: str, new: str) -> EditAssessment: ...


# =========================================================================================
# Locating the passage
# =========================================================================================

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


# =========================================================================================
# Edit rules
# =========================================================================================

_TOKEN = re.compile(
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


def _inflections(base: str) -> set[str]:
    """``base`` and the regular inflections (over-generation is harmless)."""
    if " " in base:
        first, rest = base.split(" ", 1)
        return {f"{form} {rest}" for form in _inflections(first)}
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


# Two poles per group; a group whose poles differ between old and new passage is a reversal.
_ANTONYM_GROUPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "outcome": (
        (
            "uphold",
            "upheld",
            "affirm",
            "sustain",
            "confirm",
            "approve",
            "grant",
            "accept",
            "adopt",
            "pass",
            "endorse",
            "ratify",
            "enact",
            "authorise",
            "authorize",
            "award",
            "admit",
            "win",
            "won",
            "succeed",
            "allow the appeal",
            "granted",
            "victory",
            "cleared",
            "claim victory",
            "claimed victory",
        ),
        (
            "overturn",
            "reverse",
            "vacate",
            "quash",
            "set aside",
            "strike down",
            "struck down",
            "overrule",
            "annul",
            "invalidate",
            "dismiss",
            "deny",
            "reject",
            "refuse",
            "decline",
            "veto",
            "repeal",
            "revoke",
            "rescind",
            "withdraw",
            "withdrew",
            "withdrawn",
            "block",
            "suspend",
            "lose",
            "lost",
            "fail",
            "throw out",
            "threw out",
            "thrown out",
            "turn down",
            "turned down",
            "rule against",
            "ruled against",
            "defeat",
            "concede",
            "collapse",
        ),
    ),
    "permission": (
        (
            "allow",
            "permit",
            "authorised",
            "authorized",
            "legal",
            "lawful",
            "legitimate",
            "enable",
            "legalise",
            "legalize",
            "lift",
        ),
        (
            "prohibit",
            "forbid",
            "forbade",
            "forbidden",
            "ban",
            "bar",
            "disallow",
            "illegal",
            "unlawful",
            "illegitimate",
            "disable",
            "outlaw",
            "restrict",
            "impose",
            "criminalise",
            "criminalize",
        ),
    ),
    "verdict": (
        ("guilty", "convict", "liable", "culpable"),
        ("innocent", "acquit", "exonerate", "cleared", "blameless"),
    ),
    "safety": (
        ("safe", "secure", "harmless", "benign", "nontoxic", "non-toxic", "low-risk"),
        (
            "unsafe",
            "dangerous",
            "hazardous",
            "harmful",
            "toxic",
            "insecure",
            "vulnerable",
            "risky",
            "high-risk",
            "malicious",
        ),
    ),
    "direction": (
        (
            "increase",
            "rise",
            "rose",
            "risen",
            "raise",
            "grow",
            "grew",
            "grown",
            "gain",
            "expand",
            "boost",
            "climb",
            "higher",
            "highest",
            "more",
            "greater",
            "larger",
            "up",
            "above",
            "exceed",
            "over",
            "maximum",
            "upper",
            "improve",
            "strengthen",
            "accelerate",
            "extend",
            "lengthen",
            "surge",
            "jump",
            "double",
            "triple",
            "soar",
            "rocket",
            "spike",
            "upward",
            "upwards",
        ),
        (
            "decrease",
            "fall",
            "fell",
            "fallen",
            "drop",
            "decline",
            "reduce",
            "lower",
            "lowest",
            "cut",
            "shrink",
            "shrank",
            "less",
            "fewer",
            "smaller",
            "down",
            "below",
            "under",
            "minimum",
            "worsen",
            "weaken",
            "slow",
            "shorten",
            "plunge",
            "slump",
            "halve",
            "downward",
            "downwards",
            "ease",
            "dip",
            "slip",
            "plummet",
            "tumble",
            "sink",
            "sank",
            "slash",
        ),
    ),
    "truth": (
        ("true", "correct", "accurate", "valid", "proven", "verified"),
        (
            "false",
            "incorrect",
            "inaccurate",
            "invalid",
            "wrong",
            "debunked",
            "disproven",
            "unverified",
            "refuted",
            "untrue",
            "void",
            "null and void",
        ),
    ),
    "success": (
        ("success", "successful", "effective", "efficacious"),
        ("failure", "unsuccessful", "ineffective"),
    ),
    "inclusion": (
        ("include", "inclusive", "inside", "within", "cover", "covered", "eligible"),
        ("exclude", "exclusive", "outside", "excluding", "ineligible"),
    ),
    "timing": (
        ("before", "earlier", "prior", "earliest", "previously", "beforehand"),
        ("after", "later", "subsequent", "latest", "afterwards", "subsequently"),
    ),
    "support": (
        ("support", "favour", "favor", "agree", "endorse", "in favour", "in favor"),
        ("oppose", "against", "disagree", "dissent", "object", "condemn", "criticise", "criticize"),
    ),
    "status": (
        (
            "enable",
            "enabled",
            "active",
            "available",
            "supported",
            "recommended",
            "preferred",
            "stable",
            "open",
            "reopen",
            "online",
            "start",
            "restart",
            "launch",
            "current",
            "valid",
            "resume",
        ),
        (
            "disabled",
            "inactive",
            "unavailable",
            "deprecated",
            "unsupported",
            "discouraged",
            "obsolete",
            "close",
            "closed",
            "offline",
            "stop",
            "discontinue",
            "retire",
            "retired",
            "experimental",
            "unstable",
            "expired",
            "legacy",
        ),
    ),
    "presence": (
        ("present", "presence", "detected", "positive"),
        ("absent", "absence", "undetected", "negative", "missing"),
    ),
    "finance": (("profit", "surplus", "profitable"), ("loss", "losses", "deficit", "unprofitable")),
    "quality": (
        ("good", "better", "best", "strong", "stronger", "strongest"),
        ("bad", "worse", "worst", "weak", "weaker", "weakest", "poor"),
    ),
    "trade": (
        ("buy", "bought", "purchase", "overweight", "outperform"),
        ("sell", "sold", "underweight", "underperform"),
    ),
    "permanence": (("permanent", "indefinite"), ("temporary", "provisional", "interim")),
    "visibility": (("public", "disclosed"), ("private", "confidential", "secret", "undisclosed")),
    "compliance": (
        ("comply", "compliant", "compliance", "conform", "conformity"),
        (
            "violate",
            "violation",
            "breach",
            "infringe",
            "contravene",
            "noncompliant",
            "non-compliant",
        ),
    ),
    "membership": (("add", "added", "insert"), ("remove", "delete", "drop", "omit")),
    "obligation": (
        ("mandatory", "compulsory", "obligatory", "required"),
        ("voluntary", "optional", "discretionary"),
    ),
    "severity": (
        ("mild", "minor", "slight", "negligible", "moderate", "low-grade"),
        ("severe", "serious", "major", "critical", "grave", "life-threatening", "high-grade"),
    ),
    "price": (
        ("cheap", "inexpensive", "low-cost", "affordable"),
        ("expensive", "costly", "pricey", "unaffordable", "high-cost"),
    ),
    "length": (
        ("long", "longer", "longest", "long-term", "lengthy"),
        ("short", "shorter", "shortest", "short-term", "brief"),
    ),
    "strictness": (
        ("tighten", "strict", "stricter", "toughen", "harsh", "harsher", "stringent"),
        ("loosen", "relax", "lenient", "looser", "softer", "lax"),
    ),
    "employment": (
        ("hire", "recruit", "employ"),
        ("fire", "lay off", "laid off", "sack", "redundant"),
    ),
    "consensus": (
        ("unanimous", "unanimously", "consensus"),
        ("split", "divided", "majority", "dissent"),
    ),
    "schedule": (
        ("on schedule", "on track", "ahead of schedule", "on time", "early"),
        ("behind schedule", "delayed", "late", "overdue", "off track"),
    ),
    "stability": (
        ("hold", "holding", "intact", "stable"),
        ("collapse", "break down", "broke down", "broken down", "crumble", "unravel"),
    ),
    "evaluation": (
        (
            "encouraging",
            "promising",
            "welcome",
            "praise",
            "favourable",
            "favorable",
            "optimistic",
            "upbeat",
            "impressive",
            "excellent",
            "beneficial",
            "reassuring",
            "satisfactory",
            "satisfied",
            "pleased",
            "robust",
            "healthy",
        ),
        (
            "disappointing",
            "disappointed",
            "worrying",
            "concerning",
            "alarming",
            "troubling",
            "pessimistic",
            "bleak",
            "dire",
            "criticise",
            "criticize",
            "unfavourable",
            "unfavorable",
            "unsatisfactory",
            "dissatisfied",
            "detrimental",
            "disastrous",
            "dismal",
            "regret",
            "lacklustre",
            "lackluster",
            "weak",
        ),
    ),
    "frequency": (
        ("common", "frequent", "widespread", "usual", "typical", "prevalent", "routine"),
        ("rare", "uncommon", "infrequent", "unusual", "isolated", "sporadic", "exceptional"),
    ),
    "speed": (("fast", "quick", "rapid", "accelerate"), ("slow", "gradual", "decelerate")),
    "exemption": (
        ("subject to", "covered by", "bound by", "apply to"),
        ("exempt", "excused", "immune"),
    ),
    "life": (("alive", "survive", "living"), ("dead", "die", "died", "killed", "deceased")),
}


# A third, neutral pole where "no change" is itself a claim: kept on hold -> raised.
_NEUTRAL_POLES: dict[str, tuple[str, ...]] = {
    "direction": (
        "unchanged",
        "steady",
        "stable",
        "flat",
        "on hold",
        "held steady",
        "unaltered",
        "constant",
        "maintain",
        "freeze",
        "frozen",
        "stabilise",
        "stabilize",
        "level off",
        "levelled off",
        "leveled off",
    ),
}


def _build_lexicon() -> dict[str, tuple[tuple[str, int], ...]]:
    lexicon: dict[str, set[tuple[str, int]]] = {}
    for group, (positive, negative) in _ANTONYM_GROUPS.items():
        for pole, words in ((1, positive), (-1, negative), (0, _NEUTRAL_POLES.get(group, ()))):
            for word in words:
                for form in _inflections(word):
                    lexicon.setdefault(form, set()).add((group, pole))
    return {word: tuple(sorted(entries)) for word, entries in lexicon.items()}


_LEXICON = _build_lexicon()
_LEXICON_FIRST_WORDS = frozenset(word.split(" ", 1)[0] for word in _LEXICON)

# Lexicon words too common, or handled by the modal rule, to count as replaced on their own.
_NOT_POLAR_ALONE = frozenset(
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
_NEGATORS = frozenset(
    {
        "not",
        "no",
        "never",
        "none",
        "nobody",
        "nothing",
        "nowhere",
        "neither",
        "nor",
        "without",
        "cannot",
        "unless",
        "except",
        "non",
        "nought",
        "noone",
    }
)
_NEGATIVE_PREFIXES = (
    "non-",
    "non",
    "un",
    "in",
    "im",
    "il",
    "ir",
    "dis",
    "mis",
    "anti-",
    "anti",
    "a",
)

# Deontic classes.
_OBLIGATION, _PERMISSION, _RECOMMENDATION, _PROHIBITION = (
    "obligation",
    "permission",
    "recommendation",
    "prohibition",
)
_OPTIONAL, _DISCOURAGED, _FUTURE, _FUTURE_NOT = "optional", "discouraged", "future", "future_not"
_MODAL_VERBS: dict[str, str] = {
    "must": _OBLIGATION,
    "shall": _OBLIGATION,
    "may": _PERMISSION,
    "can": _PERMISSION,
    "could": _PERMISSION,
    "might": _PERMISSION,
    "should": _RECOMMENDATION,
    "ought": _RECOMMENDATION,
    "will": _FUTURE,
}
_MODAL_WORDS: dict[str, str] = {
    **{
        w: _OBLIGATION
        for w in (
            "required",
            "require",
            "requires",
            "requiring",
            "mandatory",
            "obligatory",
            "compulsory",
            "obliged",
            "obligated",
            "need to",
            "needs to",
            "have to",
            "has to",
            "had to",
        )
    },
    **{
        w: _PERMISSION
        for w in (
            "permitted",
            "allowed",
            "allow",
            "allows",
            "permit",
            "permits",
            "entitled",
            "free to",
        )
    },
    **{w: _OPTIONAL for w in ("optional", "voluntary", "discretionary")},
    **{
        w: _RECOMMENDATION
        for w in (
            "recommended",
            "recommend",
            "recommends",
            "encouraged",
            "encourage",
            "encourages",
            "advised",
            "advisable",
            "suggested",
        )
    },
    **{
        w: _PROHIBITION
        for w in (
            "prohibited",
            "prohibit",
            "prohibits",
            "forbidden",
            "forbid",
            "forbids",
            "banned",
            "barred",
            "disallowed",
            "cannot",
            "can't",
            "mustn't",
            "shan't",
            "mayn't",
        )
    },
    "shouldn't": _DISCOURAGED,
    "won't": _FUTURE_NOT,
    "needn't": _OPTIONAL,
}
_NEGATED_CLASS = {
    _OBLIGATION: _OPTIONAL,
    _PERMISSION: _PROHIBITION,
    _RECOMMENDATION: _DISCOURAGED,
    _PROHIBITION: _PERMISSION,
    _FUTURE: _FUTURE_NOT,
    _OPTIONAL: _OBLIGATION,
}
_STRONG_VERBS = frozenset({"must", "shall"})  # "must not" forbids; "not required" permits

# Quantifier classes.
_QUANTIFIERS: dict[str, str] = {
    **{
        w: "universal"
        for w in (
            "all",
            "every",
            "each",
            "everyone",
            "everybody",
            "everything",
            "always",
            "entire",
            "whole",
            "fully",
            "entirely",
            "both",
            "wholly",
            "completely",
            "unanimous",
            "unanimously",
        )
    },
    **{
        w: "existential"
        for w in (
            "some",
            "someone",
            "somebody",
            "sometimes",
            "several",
            "a few",
            "partial",
            "partially",
            "occasionally",
            "any",
            "anyone",
            "anybody",
            "either",
            "certain",
        )
    },
    **{
        w: "majority"
        for w in (
            "most",
            "many",
            "mostly",
            "majority",
            "usually",
            "often",
            "frequently",
            "generally",
            "much",
            "typically",
            "largely",
        )
    },
    **{w: "minority" for w in ("few", "rarely", "seldom", "minority", "little", "hardly")},
    **{w: "none" for w in ("none", "no", "never", "nobody", "nothing", "neither", "no one")},
    **{w: "only" for w in ("only", "exclusively", "solely")},
    **{
        w: "at_least"
        for w in ("at least", "no less than", "no fewer than", "minimum of", "or more")
    },
    **{
        w: "at_most"
        for w in ("at most", "no more than", "up to", "maximum of", "or less", "or fewer")
    },
    **{w: "more_than" for w in ("more than", "over", "exceeding", "above")},
    **{w: "less_than" for w in ("less than", "fewer than", "under", "below")},
    "exactly": "exactly",
    **{
        w: "approximately"
        for w in ("approximately", "roughly", "nearly", "almost", "around", "about")
    },
}
_QUANTIFIER_BIGRAMS = frozenset(w for w in _QUANTIFIERS if " " in w and w.count(" ") == 1)
_QUANTIFIER_TRIGRAMS = frozenset(w for w in _QUANTIFIERS if w.count(" ") == 2)

_UNITS_WORDS: dict[str, int] = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "dozen": 12,
}
_ORDINAL_WORDS: dict[str, int] = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
    "twentieth": 20,
    "thirtieth": 30,
    "hundredth": 100,
}
_FRACTIONS: dict[str, Decimal] = {
    "half": Decimal("0.5"),
    "quarter": Decimal("0.25"),
    "twice": Decimal(2),
}
_SCALES: dict[str, int] = {
    "hundred": 100,
    "thousand": 1000,
    "million": 10**6,
    "billion": 10**9,
    "trillion": 10**12,
    "k": 1000,
    "m": 10**6,
    "mn": 10**6,
    "bn": 10**9,
    "tn": 10**12,
}
_CURRENCY_SYMBOLS = {
    "$": "USD",
    "€": "EUR",
    "£": "GBP",
    "¥": "JPY",
    "₹": "INR",
    "₩": "KRW",
    "₣": "CHF",
}
_CURRENCY_CODES = frozenset(
    {
        "USD",
        "EUR",
        "GBP",
        "JPY",
        "CHF",
        "CAD",
        "AUD",
        "CNY",
        "INR",
        "SEK",
        "NOK",
        "DKK",
        "PLN",
        "NZD",
        "HKD",
        "SGD",
        "ZAR",
        "BRL",
        "MXN",
        "KRW",
    }
)
_CURRENCY_WORDS = {
    "dollar": "USD",
    "dollars": "USD",
    "euro": "EUR",
    "euros": "EUR",
    "pound": "GBP",
    "pounds": "GBP",
    "yen": "JPY",
    "franc": "CHF",
    "francs": "CHF",
    "rupees": "INR",
}
_UNIT_WORDS: dict[str, str] = {
    **{
        w: w.rstrip("s")
        for w in (
            "day",
            "days",
            "week",
            "weeks",
            "month",
            "months",
            "year",
            "years",
            "hour",
            "hours",
            "minute",
            "minutes",
            "second",
            "seconds",
            "decade",
            "decades",
        )
    },
    **{
        w: w
        for w in (
            "mg",
            "g",
            "kg",
            "km",
            "cm",
            "mm",
            "ml",
            "l",
            "mph",
            "kmh",
            "gb",
            "mb",
            "tb",
            "kb",
            "ms",
            "tonnes",
            "tons",
            "miles",
            "metres",
            "meters",
            "degrees",
            "times",
        )
    },
}
_MONTHS: dict[str, int] = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}
_WEEKDAYS = frozenset(
    {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)
_RELATIVE_DAYS = frozenset({"today", "tomorrow", "yesterday", "tonight"})
_RELATIVE_WORDS = frozenset({"next", "last", "this", "coming", "previous", "following"})
_RELATIVE_UNITS = frozenset(
    {
        "week",
        "weekend",
        "month",
        "year",
        "quarter",
        "decade",
        "spring",
        "summer",
        "autumn",
        "fall",
        "winter",
        "morning",
        "afternoon",
        "evening",
        "night",
    }
)
_MAY_CUES = frozenset(
    {
        "in",
        "of",
        "since",
        "until",
        "by",
        "from",
        "during",
        "early",
        "late",
        "mid",
        "end",
        "before",
        "after",
        "this",
        "last",
        "next",
        "on",
    }
)


def _is_month_may(surface: list[str], lower: list[str], i: int) -> bool:
    """``May`` the month (next to a number, or after in/of/since/by…), not the modal."""
    if not surface[i].startswith("M"):
        return False
    near_number = (i + 1 < len(lower) and lower[i + 1][:1].isdigit()) or (
        i > 0 and lower[i - 1][:1].isdigit()
    )
    return near_number or (i > 0 and lower[i - 1] in _MAY_CUES)


class _Tokens:
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


def _tokenise(text: str) -> _Tokens:
    return _Tokens(_TOKEN.findall(normalise(text) if text.strip() else ""))


def _is_negator(word: str) -> bool:
    return word in _NEGATORS or word.endswith("n't")


def _ngrams(words: list[str], i: int) -> Iterable[str]:
    if i + 2 < len(words):
        yield f"{words[i]} {words[i + 1]} {words[i + 2]}"
    if i + 1 < len(words):
        yield f"{words[i]} {words[i + 1]}"
    yield words[i]


# -- numbers and dates ----------------------------------------------------------------------


def _join(parts: Sequence[str]) -> str:
    """Tokens back to text: no space after a currency symbol, none before ``%``."""
    out = ""
    for part in parts:
        if out and not (out[-1] in _CURRENCY_SYMBOLS or part == "%"):
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
        if all(p in _UNITS_WORDS for p in parts):
            current += sum(_UNITS_WORDS[p] for p in parts)
        elif word in ("hundred",) and seen:
            current = max(current, 1) * 100
        elif word in ("thousand", "million", "billion", "trillion") and seen:
            total += max(current, 1) * _SCALES[word]
            current = 0
        elif (
            word == "and"
            and seen
            and j + 1 < len(words)
            and words[j + 1].split("-")[0] in _UNITS_WORDS
        ):
            pass
        else:
            break
        seen = True
        j += 1
    if not seen:
        return None
    return Decimal(total + current), j


def _dates(tokens: _Tokens) -> tuple[list[str], list[str], set[int], list[int]]:
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
        month = _MONTHS.get(word)
        if month is not None and token[:1].isupper():
            if word == "may" and not _is_month_may(surface, lower, i):
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
        if word in _RELATIVE_DAYS:
            atoms.append(word)
            positions.append(i)
            shown.append(token)
            used.add(i)
            continue
        if word in _RELATIVE_WORDS and i + 1 < n and lower[i + 1] in _RELATIVE_UNITS:
            atoms.append(f"{word} {lower[i + 1]}")
            positions.append(i)
            shown.append(f"{token} {surface[i + 1]}")
            used.update((i, i + 1))
            continue
        if word in _WEEKDAYS and token[:1].isupper():
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
                and follows not in _UNIT_WORDS
                and follows not in _CURRENCY_WORDS
                and precedes not in _CURRENCY_SYMBOLS
            ):
                atoms.append(f"y{word}")
                positions.append(i)
                shown.append(token)
                used.add(i)
    return atoms, shown, used, positions


def _numbers(tokens: _Tokens, used: set[int]) -> tuple[list[str], list[str], list[bool], list[int]]:
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
                    value *= _SCALES[scaled.group(2)]
        elif word in _ORDINAL_WORDS:
            value, kind = Decimal(_ORDINAL_WORDS[word]), "#"
        elif word in _FRACTIONS:
            value = _FRACTIONS[word]
        elif word.split("-", 1)[0] in _UNITS_WORDS:
            written = _written_number(lower, i)
            if written is not None:
                value, j = written
        if value is None:
            i += 1
            continue
        start = i
        if (j < n and lower[j] in _SCALES and not kind and lower[j] not in ("m",)) or (
            j < n and lower[j] == "m" and i > 0 and surface[i - 1] in _CURRENCY_SYMBOLS
        ):
            value *= _SCALES[lower[j]]
            j += 1
        currency = ""
        if start > 0 and surface[start - 1] in _CURRENCY_SYMBOLS:
            currency = _CURRENCY_SYMBOLS[surface[start - 1]]
            start -= 1
        elif (
            start > 0
            and surface[start - 1].upper() in _CURRENCY_CODES
            and surface[start - 1].isupper()
        ):
            currency = surface[start - 1].upper()
            start -= 1
        if j < n and (lower[j] in _CURRENCY_WORDS or (surface[j] in _CURRENCY_CODES)):
            currency = _CURRENCY_WORDS.get(lower[j], surface[j])
            j += 1
        unit = ""
        if j < n and lower[j] in ("%", "percent", "pct"):
            unit, j = "%", j + 1
        elif j + 1 < n and lower[j] == "per" and lower[j + 1] == "cent":
            unit, j = "%", j + 2
        elif j + 1 < n and lower[j] == "percentage" and lower[j + 1] in ("point", "points"):
            unit, j = "pp", j + 2
        elif j < n and lower[j] in _UNIT_WORDS and not currency:
            unit, j = " " + _UNIT_WORDS[lower[j]], j + 1
        elif j + 1 < n and lower[j] == "-" and lower[j + 1] in _UNIT_WORDS and not currency:
            unit, j = " " + _UNIT_WORDS[lower[j + 1]], j + 2
        atoms.append(f"{kind}{currency}{_format(value)}{unit}")
        positions.append(i)
        shown.append(_join(surface[start:j]))
        money.append(bool(currency))
        i = j
    return atoms, shown, money, positions


# -- modality and quantifiers -------------------------------------------------------------


def _modal_classes(tokens: _Tokens) -> list[tuple[str, str]]:
    """``(class, words)`` for each deontic expression, in order."""
    lower = tokens.lower
    found: list[tuple[str, str]] = []
    n = len(lower)
    skip_until = -1
    for i, word in enumerate(lower):
        if i < skip_until:
            continue
        phrase, klass = word, None
        if i + 1 < n and f"{word} {lower[i + 1]}" in _MODAL_WORDS:
            phrase = f"{word} {lower[i + 1]}"
            klass = _MODAL_WORDS[phrase]
            skip_until = i + 2
        elif word in _MODAL_VERBS:
            if word == "may" and _is_month_may(tokens.surface, lower, i):
                continue  # "in May", "1 May 2024"
            if word == "can" and i > 0 and lower[i - 1] in ("a", "the"):
                continue
            klass = _MODAL_VERBS[word]
        elif word in _MODAL_WORDS:
            klass = _MODAL_WORDS[word]
        elif word.endswith("n't") and word[:-3] in _MODAL_VERBS:
            klass = _NEGATED_CLASS.get(_MODAL_VERBS[word[:-3]], _PROHIBITION)
            if word[:-3] in _STRONG_VERBS:
                klass = _PROHIBITION
            found.append((klass, word))
            continue
        if klass is None:
            continue
        if klass not in (_PROHIBITION, _DISCOURAGED, _FUTURE_NOT) or phrase in ("cannot",):
            after = lower[i + 1 : i + 3] if word in _MODAL_VERBS else lower[i + 1 : i + 2]
            before = lower[max(0, i - 2) : i]
            negated = any(
                _is_negator(w) and w not in ("unless", "except", "without") for w in after
            ) or any(w in ("not", "never", "no") or w.endswith("n't") for w in before)
            if negated and phrase != "cannot":
                if word in _STRONG_VERBS:
                    klass = _PROHIBITION
                else:
                    klass = _NEGATED_CLASS.get(klass, klass)
                phrase = f"{phrase} not"
        found.append((klass, phrase))
    return found


def _quantifiers(lower: list[str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    n = len(lower)
    i = 0
    while i < n:
        trigram = " ".join(lower[i : i + 3])
        bigram = " ".join(lower[i : i + 2])
        if i + 2 < n and trigram in _QUANTIFIER_TRIGRAMS:
            found.append((_QUANTIFIERS[trigram], trigram))
            i += 3
            continue
        if i + 1 < n and bigram in _QUANTIFIER_BIGRAMS:
            found.append((_QUANTIFIERS[bigram], bigram))
            i += 2
            continue
        word = lower[i]
        if word in _QUANTIFIERS and word not in (
            "about",
            "around",
            "over",
            "under",
            "above",
            "below",
            "little",
        ):
            found.append((_QUANTIFIERS[word], word))
        elif (
            word in ("over", "under", "above", "below", "about", "around")
            and i + 1 < n
            and (
                lower[i + 1][:1].isdigit()
                or lower[i + 1] in _UNITS_WORDS
                or lower[i + 1] in _CURRENCY_SYMBOLS
            )
        ):
            found.append((_QUANTIFIERS[word], word))
        i += 1
    return found


def _lexicon_hits(lower: list[str]) -> list[tuple[str, int, str]]:
    """``(group, pole, words)`` for each antonym-lexicon expression, in order."""
    found: list[tuple[str, int, str]] = []
    n = len(lower)
    i = 0
    while i < n:
        step = 1
        if lower[i] not in _LEXICON_FIRST_WORDS:
            i += 1
            continue
        for phrase in _ngrams(lower, i):
            entries = _LEXICON.get(phrase)
            if entries:
                found.extend((group, pole, phrase) for group, pole in entries)
                step = phrase.count(" ") + 1
                break
        i += step
    return found


# -- the classifier -------------------------------------------------------------------------


def _sequence_reason(
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


def _hunks(old: list[str], new: list[str]) -> list[tuple[int, int, int, int]]:
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


def _negative_affix(a: str, b: str) -> bool:
    """``b`` is ``a`` with a negative prefix (or -less for -ful)."""
    if len(a) < 4 or (not a.isalpha() and "-" not in a):
        return False
    for prefix in _NEGATIVE_PREFIXES:
        if b == prefix + a and (prefix != "a" or len(a) >= 5):
            return True
    return a.endswith("ful") and b == a[:-3] + "less"


class RuleClassifier:
    """The documented rules (module docstring); :data:`RULES_VERSION` names them."""

    name = "rules"
    version = RULES_VERSION

    def assess(self, old: str, new: str) -> EditAssessment:
        if not new.strip():
            return EditAssessment(Verdict.MATERIAL, ("deleted",), word_diff(old, new))
        before, after = _tokenise(old), _tokenise(new)
        reasons, notes = _reversal_reasons(before, after)
        diff = word_diff(old, new)
        if reasons:
            return EditAssessment(Verdict.REVERSAL, tuple(reasons + notes), diff)
        return EditAssessment(
            Verdict.MATERIAL, tuple(notes + _material_reasons(before, after)), diff
        )


def _reversal_reasons(before: _Tokens, after: _Tokens) -> tuple[list[str], list[str]]:
    """Reasons for ``reversal``, and notes that only make the edit ``material`` (a number or
    date *added* where none was removed narrows the claim without contradicting it)."""
    reasons: list[str] = []
    notes: list[str] = []
    old, new = before.lower, after.lower
    hunks = _hunks(old, new)

    # Negation, per changed hunk.
    for a0, a1, b0, b1 in hunks:
        removed = [w for w in old[a0:a1] if _is_negator(w)]
        added = [w for w in new[b0:b1] if _is_negator(w)]
        if len(added) > len(removed):
            reasons.append(f"negation_added:{added[0]}")
        elif len(removed) > len(added):
            reasons.append(f"negation_removed:{removed[0]}")

    # Negative affixes (whole passage: alignment may not pair the two words).
    old_words, new_words = set(old), set(new)
    for word in sorted(new_words - old_words):
        base = next((w for w in old_words - new_words if _negative_affix(w, word)), None)
        if base is not None:
            reasons.append(f"negation_prefix:{base}->{word}")
    for word in sorted(old_words - new_words):
        base = next((w for w in new_words - old_words if _negative_affix(w, word)), None)
        if base is not None:
            reasons.append(f"negation_prefix:{word}->{base}")

    # Within one changed hunk: a polar word replaced by a word of the opposite sign from
    # another group ("shut down" -> "stay open"), or by words the lexicon does not know
    # ("withdrawn" -> "returned": in doubt, a reversal).
    for a0, a1, b0, b1 in hunks:
        removed_hits = _lexicon_hits(old[a0:a1])
        added_hits = _lexicon_hits(new[b0:b1])
        crossed = next(
            (
                (w1, w2)
                for g1, p1, w1 in removed_hits
                for g2, p2, w2 in added_hits
                if g1 != g2 and p1 * p2 < 0
            ),
            None,
        )
        if crossed is not None:
            reasons.append(f"antonym:{crossed[0]}->{crossed[1]}")
        elif not added_hits and a1 - a0 <= 3 and 0 < b1 - b0 <= 3:
            polar = next((w for _, _, w in removed_hits if w not in _NOT_POLAR_ALONE), None)
            added_words = [w for w in new[b0:b1] if w[:1].isalpha()]
            if polar is not None and added_words:
                reasons.append(f"polar_word_replaced:{polar}->{' '.join(added_words)}")

    # Antonyms and outcome verbs: per group, a pole replaced by the other (see _pole_flip).
    old_hits, new_hits = _lexicon_hits(old), _lexicon_hits(new)
    for group in sorted({g for g, _, _ in old_hits} & {g for g, _, _ in new_hits}):
        old_seq = [(p, w) for g, p, w in old_hits if g == group]
        new_seq = [(p, w) for g, p, w in new_hits if g == group]
        flip = _pole_flip([p for p, _ in old_seq], [p for p, _ in new_seq])
        if flip is not None:
            reasons.append(f"antonym:{old_seq[flip[0]][1]}->{new_seq[flip[1]][1]}")

    # Modality.
    old_modal, new_modal = _modal_classes(before), _modal_classes(after)
    if [c for c, _ in old_modal] != [c for c, _ in new_modal]:
        reason = _sequence_reason(
            "modal",
            [c for c, _ in old_modal],
            [c for c, _ in new_modal],
            [w for _, w in old_modal],
            [w for _, w in new_modal],
        )
        if reason:
            reasons.append(reason)

    # Quantifiers.
    old_q, new_q = _quantifiers(old), _quantifiers(new)
    reason = _sequence_reason(
        "quantifier",
        [c for c, _ in old_q],
        [c for c, _ in new_q],
        [w for _, w in old_q],
        [w for _, w in new_q],
    )
    if reason:
        reasons.append(reason)

    # Dates, then numbers (not counting the tokens dates used). A value only added is a
    # note (material) when it was inserted; when it replaced words ("the first season" ->
    # "the first two seasons"), it changed the claim.
    replaced = {j for a0, a1, b0, b1 in hunks if a1 > a0 for j in range(b0, b1)}
    old_dates, old_dates_shown, _ = before.dates
    new_dates, new_dates_shown, _ = after.dates
    reason = _sequence_reason("date", old_dates, new_dates, old_dates_shown, new_dates_shown)
    if reason:
        added_only = reason.startswith("date_added:")
        if added_only and not _added_in(replaced, old_dates, new_dates, after.date_positions):
            notes.append(reason)
        else:
            reasons.append(reason)
    old_numbers, old_shown, old_money = before.numbers
    new_numbers, new_shown, new_money = after.numbers
    reason = _sequence_reason("number", old_numbers, new_numbers, old_shown, new_shown)
    if reason:
        added_only = reason.startswith("number_added:")
        if any(old_money) or any(new_money):
            reason = reason.replace("number_", "amount_", 1)
        if added_only and not _added_in(replaced, old_numbers, new_numbers, after.number_positions):
            notes.append(reason)
        else:
            reasons.append(reason)

    # Roles swapped around a relation word: "consult residents before deciding" ->
    # "decide before consulting residents", "A beat B" -> "B beat A".
    swap = _swapped(old, new)
    if swap is not None:
        reasons.append(f"order_swapped:{swap}")
    return list(dict.fromkeys(reasons)), notes


def _added_in(replaced: set[int], old: list[str], new: list[str], positions: list[int]) -> bool:
    """Whether a value of ``new`` not in ``old`` sits where old words were replaced."""
    added = Counter(new) - Counter(old)
    return any(added[atom] and at in replaced for atom, at in zip(new, positions, strict=True))


_RELATIONS = frozenset(
    {
        "before",
        "after",
        "than",
        "until",
        "beat",
        "beats",
        "defeated",
        "defeats",
        "outperformed",
        "outperforms",
        "against",
        "versus",
        "vs",
        "over",
    }
)


def _stem(word: str) -> str:
    return word[:5] if len(word) > 5 else word


def _swapped(old: list[str], new: list[str]) -> str | None:
    """A relation word whose content-word neighbours (within three words) traded sides."""
    if old == new:
        return None

    def side(words: list[str]) -> set[str]:
        return {_stem(w) for w in words if w.isalnum() and w not in _STOPWORDS}

    for i, word in enumerate(old):
        if word not in _RELATIONS or word not in new:
            continue
        j = new.index(word)
        old_left, old_right = side(old[max(0, i - 3) : i]), side(old[i + 1 : i + 4])
        new_left, new_right = side(new[max(0, j - 3) : j]), side(new[j + 1 : j + 4])
        crossed = len(old_left & new_right) + len(old_right & new_left)
        kept = len(old_left & new_left) + len(old_right & new_right)
        if old_left & new_right and old_right & new_left and crossed > kept:
            return word
    return None


_STOPWORDS = frozenset(
    {
        "the",
        "a",
        "an",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "and",
        "or",
        "will",
        "would",
        "shall",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "has",
        "have",
        "had",
        "by",
        "with",
        "that",
        "this",
        "it",
        "its",
        "their",
        "his",
        "her",
        "they",
        "we",
        "you",
        "not",
    }
)


def _pole_flip(old: list[int], new: list[int]) -> tuple[int, int] | None:
    """``(old index, new index)`` of a flip: one pole lost and the other gained, or the
    same poles in another order (``upheld … rejecting`` → ``struck down … accepting``).
    A word only removed or only added is not a flip."""
    lost = Counter(old) - Counter(new)
    gained = Counter(new) - Counter(old)
    if lost and gained:  # poles are distinct values: what was lost is not what was gained
        return next(i for i, p in enumerate(old) if lost[p]), next(
            j for j, p in enumerate(new) if gained[p]
        )
    if not lost and not gained and old != new:
        first = next(i for i, (p, q) in enumerate(zip(old, new, strict=True)) if p != q)
        return first, first
    return None


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(word in it for word in short)


def _is_word(token: str) -> bool:
    """Not a punctuation token (tokens are words/numbers, or one other character)."""
    return token[:1].isalnum() or token[:1] == "_"


def _material_reasons(before: _Tokens, after: _Tokens) -> list[str]:
    old, new = before.lower, after.lower
    reasons: list[str] = []
    if old == new:
        if before.surface != after.surface:
            reasons.append("case_changed")
        return reasons or ["reworded"]
    old_words = [w for w in old if _is_word(w)]
    new_words = [w for w in new if _is_word(w)]
    if old_words == new_words:
        return ["punctuation_changed"]
    if len(new_words) < len(old_words) and _is_subsequence(new_words, old_words):
        reasons.append("truncated")
    elif len(new_words) > len(old_words) and _is_subsequence(old_words, new_words):
        reasons.append("extended")
    for a0, a1, b0, b1 in _hunks(old_words, new_words):
        if a1 - a0 == 1 and b1 - b0 == 1:
            a, b = old_words[a0], new_words[b0]
            if min(len(a), len(b)) >= 3 and Levenshtein.distance(a, b) <= max(
                1, min(len(a), len(b)) // 3
            ):
                reasons.append(f"spelling_changed:{a}->{b}")
    old_numbers, old_shown, _ = before.numbers
    new_numbers, new_shown, _ = after.numbers
    if old_numbers and old_numbers == new_numbers and old_shown != new_shown:
        reasons.append("number_reformatted")
    if not reasons or not any(r.startswith(("spelling", "number_reformatted")) for r in reasons):
        if "truncated" not in reasons and "extended" not in reasons:
            reasons.append("reworded")
    return reasons


DEFAULT_CLASSIFIER: Classifier = RuleClassifier()


def assess_edit(old: str, new: str) -> EditAssessment:
    """``reversal`` or ``material`` for ``old`` passage edited into ``new`` (``""``: deleted),
    by the default :class:`RuleClassifier`."""
    return DEFAULT_CLASSIFIER.assess(old, new)


# -- diff -----------------------------------------------------------------------------------

_DIFF_CONTEXT = 6


def word_diff(old: str, new: str) -> str:
    """Word-level inline diff of the normalised passages: ``[-removed-] {+added+}``, with the
    passages' own spacing and punctuation; unchanged runs longer than a few words elided."""
    a_text, b_text = normalise(old) if old.strip() else "", normalise(new) if new.strip() else ""
    a = [(m.start(), m.end()) for m in _TOKEN.finditer(a_text)]
    b = [(m.start(), m.end()) for m in _TOKEN.finditer(b_text)]
    ops = Levenshtein.opcodes([a_text[i:j] for i, j in a], [b_text[i:j] for i, j in b])
    out: list[str] = []
    at_a = at_b = 0  # ends of what has been rendered, in each text

    for index, op in enumerate(ops):
        i0, i1, j0, j1 = op.src_start, op.src_end, op.dest_start, op.dest_end
        if op.tag == "equal":
            begin = a[i0][0]
            if out and begin > at_a:
                out.append(" ")
            if i1 - i0 > 2 * _DIFF_CONTEXT + 1:
                pieces = []
                if index > 0:
                    pieces.append(a_text[begin : a[i0 + _DIFF_CONTEXT - 1][1]])
                pieces.append("…")
                if index < len(ops) - 1:
                    pieces.append(a_text[a[i1 - _DIFF_CONTEXT][0] : a[i1 - 1][1]])
                out.append(" ".join(pieces))
            else:
                out.append(a_text[begin : a[i1 - 1][1]])
            at_a, at_b = a[i1 - 1][1], b[j1 - 1][1]
            continue
        if i1 > i0:
            begin = a[i0][0]
            if out and begin > at_a:
                out.append(" ")
            out.append("[-" + a_text[begin : a[i1 - 1][1]] + "-]")
            at_a = a[i1 - 1][1]
        if j1 > j0:
            begin = b[j0][0]
            if out and (begin > at_b or i1 > i0):
                out.append(" ")
            out.append("{+" + b_text[begin : b[j1 - 1][1]] + "+}")
            at_b = b[j1 - 1][1]
    return "".join(out)


# =========================================================================================
# Soft 404
# =========================================================================================

_PAGE_GONE = re.compile(
    r"page\s+not\s+found|file\s+not\s+found|(?:page|document|article|content|resource)\s+"
    r"(?:you\s+(?:are|were)\s+looking\s+for\s+|you\s+requested\s+|requested\s+)?"
    r"(?:(?:cannot|can't|could\s+not|couldn't)\s+be\s+found|(?:does\s+not|doesn't)\s+exist|"
    r"(?:is|was|has\s+been)\s+(?:removed|deleted|moved|taken\s+down|unavailable|not\s+available))|"
    r"(?:page|content)\s+(?:unavailable|removed|no\s+longer\s+(?:exists|available))|"
    r"the\s+page\s+you\s+(?:are|were)\s+looking\s+for|the\s+page\s+you\s+requested|"
    r"we\s+(?:can't|cannot|couldn't|could\s+not)\s+find\s+(?:the|that|this)\s+page|"
    r"\berror\s+404\b|\b404\s+(?:error|not\s+found|page)\b|"
    r"seite\s+(?:wurde\s+)?nicht\s+gefunden|seite\s+(?:existiert\s+nicht|nicht\s+mehr\s+verfügbar)|"
    r"(?:gesuchte|angeforderte)\s+seite|fehler\s+404|"
    r"page\s+introuvable|page\s+non\s+trouvée|la\s+page\s+(?:que\s+vous|demandée)|erreur\s+404|"
    r"cette\s+page\s+n'existe\s+(?:pas|plus)|"
    r"página\s+no\s+encontrada|la\s+página\s+(?:que\s+busca|solicitada|no\s+existe)|"
    r"error\s+404|no\s+se\s+(?:ha\s+)?(?:encontrado|encontró)\s+la\s+página",
    re.IGNORECASE,
)
_GONE_PHRASE = re.compile(
    r"\b404\b|not\s+found|no\s+longer\s+(?:available|exists|online|published)|"
    r"has\s+been\s+(?:removed|deleted|withdrawn|taken\s+down|archived)|"
    r"(?:cannot|can't|could\s+not|couldn't)\s+be\s+found|(?:does\s+not|doesn't)\s+exist|"
    r"\bgone\b|nicht\s+gefunden|existiert\s+nicht|nicht\s+mehr\s+verfügbar|wurde\s+(?:entfernt|gelöscht)|"
    r"introuvable|n'existe\s+(?:pas|plus)|plus\s+disponible|a\s+été\s+supprimée?|"
    r"no\s+encontrad[oa]|no\s+existe|ya\s+no\s+está\s+disponible|ha\s+sido\s+eliminad[oa]",
    re.IGNORECASE,
)
_HOME_PATH = re.compile(
    r"/?(?:[a-z]{2}(?:[-_][a-z]{2})?/?)?(?:(?:index|default|home|start|welcome)(?:\.[a-z0-9]+)?/?)?",
    re.IGNORECASE,
)
_ERROR_PATH = re.compile(
    r"(?:^|[/_.-])(?:404|410|not[-_]?found|page[-_]?not[-_]?found|error|errors|gone|missing|removed)"
    r"(?:[/_.-]|$)",
    re.IGNORECASE,
)
_INDEX_FILE = re.compile(r"(?:index|default|home)(?:\.[a-z0-9]+)?", re.IGNORECASE)
_SEARCH_PATH = re.compile(r"(?:^|/)(?:search|suche|recherche|buscar)(?:[/.]|$)", re.IGNORECASE)
_SHORT_BODY = 1500
_PAGE_PHRASE_WINDOW = 5000
_PROBE_SIMILAR = 0.9


def _host(netloc: str) -> str:
    host = netloc.rsplit("@", 1)[-1].split(":", 1)[0].lower()
    return host[4:] if host.startswith("www.") else host


def _segments(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def _redirect_reasons(requested_url: str, final_url: str) -> list[str]:
    if not final_url or not requested_url:
        return []
    try:
        req, fin = urlsplit(requested_url), urlsplit(final_url)
    except ValueError:
        return []
    req_path, fin_path = req.path or "/", fin.path or "/"
    same_place = _host(req.netloc) == _host(fin.netloc) and req_path.rstrip("/") == fin_path.rstrip(
        "/"
    )
    if same_place and req.query == fin.query:
        return []  # http → https, www, trailing slash
    if _HOME_PATH.fullmatch(fin_path) and not _HOME_PATH.fullmatch(req_path) and not fin.query:
        return ["redirect:home"]
    if _ERROR_PATH.search(fin_path) and not _ERROR_PATH.search(req_path):
        return ["redirect:error_page"]
    if _SEARCH_PATH.search(fin_path) and not _SEARCH_PATH.search(req_path):
        return ["redirect:search"]
    if _host(req.netloc) == _host(fin.netloc):
        req_parts, fin_parts = _segments(req_path), _segments(fin_path)
        if fin_parts and _INDEX_FILE.fullmatch(fin_parts[-1]):  # /docs/index.html is /docs/
            fin_parts = fin_parts[:-1]
        if (
            len(fin_parts) < len(req_parts)
            and req_parts[: len(fin_parts)] == fin_parts
            and not fin.query
        ):
            return ["redirect:landing"]
    return []


def _similarity(a: str, b: str) -> float:
    """0–1: character-level for short texts, line-level (weighted by length) for long ones."""
    if not a.strip() or not b.strip():
        return 1.0 if not a.strip() and not b.strip() else 0.0
    la, lb = len(a), len(b)
    if min(la, lb) / max(la, lb) < _PROBE_SIMILAR - 0.2:
        return min(la, lb) / max(la, lb)
    if max(la, lb) <= 4000:
        return fuzz.ratio(a, b) / 100
    lines_a = Counter(line.strip() for line in a.splitlines() if line.strip())
    lines_b = Counter(line.strip() for line in b.splitlines() if line.strip())
    common = sum(len(line) * count for line, count in (lines_a & lines_b).items())
    total = max(
        sum(len(line) * count for line, count in lines_a.items()),
        sum(len(line) * count for line, count in lines_b.items()),
    )
    return common / total if total else 0.0


# Every match of the two patterns contains one of these (lower-cased): a cheap ``in`` test
# spares the regexes on ordinary pages.
_GONE_KEYWORDS = (
    "404",
    "found",
    "exist",
    "longer",
    "removed",
    "deleted",
    "withdrawn",
    "taken down",
    "archived",
    "gone",
    "looking for",
    "requested",
    "unavailable",
    "not available",
    "gefunden",
    "existiert",
    "verfügbar",
    "entfernt",
    "gelöscht",
    "seite",
    "introuvable",
    "existe",
    "disponible",
    "supprimé",
    "trouvée",
    "demandée",
    "encontr",
    "eliminad",
    "página",
    "moved",
    "missing",
)


def _gone_phrase(text: str, *, whole: bool) -> bool:
    """A "page not found"-style phrase in ``text``; any "gone" phrase at all when ``whole``
    (a title, a short body)."""
    lowered = text.lower()
    if not any(keyword in lowered for keyword in _GONE_KEYWORDS):
        return False
    return bool(_PAGE_GONE.search(text) or (whole and _GONE_PHRASE.search(text)))


def soft_404_signals(
    *,
    requested_url: str,
    final_url: str,
    status: int,
    title: str | None,
    text: str,
    probe_text: str | None,
) -> Soft404Signals:
    """Whether a fetched page is a "not found" page in disguise; see the module docstring.
    ``status`` is not used to decide (any status may carry a soft 404); it is accepted so the
    signals can grow without changing the call."""
    reasons: list[str] = []
    if title and _gone_phrase(normalise(title), whole=True):
        reasons.append("title:not_found")
    stripped = text.strip()
    if not stripped:
        reasons.append("body:empty")
    else:
        window = normalise(stripped[: _PAGE_PHRASE_WINDOW + 500])[:_PAGE_PHRASE_WINDOW]
        if _gone_phrase(window, whole=len(stripped) < _SHORT_BODY):
            reasons.append("body:not_found")
    reasons.extend(_redirect_reasons(requested_url, final_url))
    if probe_text is not None and stripped:
        similarity = _similarity(stripped, probe_text.strip())
        if similarity >= _PROBE_SIMILAR:
            reasons.append(f"probe_similar:{similarity:.2f}")
    return Soft404Signals(bool(reasons), tuple(reasons))


# =========================================================================================
# Page title
# =========================================================================================

_TITLE_END = re.compile(r"</title\s*>", re.IGNORECASE)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def html_title(content: bytes, media_type: str) -> str | None:
    """The document's ``<title>`` (whitespace collapsed), or ``None`` (none, empty, not HTML).
    Only the markup up to the first ``</title>`` is parsed."""
    essence, _, params = media_type.partition(";")
    if essence.strip().lower() not in _HTML_TYPES:
        return None
    charset = None
    for param in params.split(";"):
        name, sep, value = param.partition("=")
        if sep and name.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    markup = decode_html(bytes(content), charset)
    end = _TITLE_END.search(markup)
    if end is None:
        return None
    node = LexborHTMLParser(markup[: end.end()]).css_first("title")
    if node is None:
        return None
    title = " ".join((node.text(deep=True) or "").split())
    return title or None


# =========================================================================================
# The verdict
# =========================================================================================

_TEMPORARY = frozenset({408, 425, 429})
_ACCESS = frozenset({401, 403, 407})
_GONE = frozenset({404, 410, 451})


def classify(
    *,
    status: int | None,
    error: str | None,
    live_hash: str | None,
    recorded_hash: str,
    not_modified: bool,
    live_text: PreparedText | None,
    old_exact: str,
    prefix: str,
    suffix: str,
    position: int | None,
    soft404: Soft404Signals | None,
    classifier: Classifier | None = None,
) -> CheckOutcome:
    """One drift verdict for one cited passage (precedence in the module docstring)."""
    if error:
        return CheckOutcome(Verdict.UNREACHABLE, (f"error:{error}",), None, None)
    if status is None:
        return CheckOutcome(Verdict.UNREACHABLE, ("no_response",), None, None)
    if status >= 500 or status in _TEMPORARY or status in _ACCESS:
        return CheckOutcome(Verdict.UNREACHABLE, (f"status:{status}",), None, None)
    if status in _GONE:
        return CheckOutcome(Verdict.GONE, (f"status:{status}",), None, None)
    if not_modified or status == 304:
        return CheckOutcome(Verdict.IDENTICAL, ("not_modified",), None, None)
    if live_hash is not None and live_hash == recorded_hash:
        return CheckOutcome(Verdict.IDENTICAL, ("hash_equal",), None, None)
    if not 200 <= status < 300:
        return CheckOutcome(Verdict.UNREACHABLE, (f"status:{status}",), None, None)

    location = None
    if live_text is not None:
        location = find_passage(
            live_text, old_exact, prefix=prefix, suffix=suffix, position=position
        )
    if location is not None and _intact(location, old_exact, live_text):
        return CheckOutcome(Verdict.COSMETIC, (f"passage_{location.method}",), location, None)
    if location is None and soft404 is not None and soft404.is_soft_404:
        return CheckOutcome(Verdict.SOFT_404, soft404.reasons, None, None)
    judge = classifier or DEFAULT_CLASSIFIER
    assessment = judge.assess(old_exact, location.found_text if location is not None else "")
    reasons = assessment.reasons
    if live_text is None and location is None:
        reasons = (*reasons, "no_text")
    return CheckOutcome(assessment.verdict, reasons, location, assessment.diff)


def _intact(location: PassageLocation, old_exact: str, live: PreparedText | None) -> bool:
    if location.method != "fuzzy":
        return True
    pdf = live.pdf if live is not None else False
    return normalise(location.found_text, pdf=pdf) == normalise(old_exact, pdf=pdf)
