"""The edit rules: ``reversal`` or ``material`` for a passage edited into another, and the
word-level diff.

:class:`RuleClassifier` compares the old and new passage's negators, negative affixes,
antonyms, modals, quantifiers, numbers, dates and roles around relation words; any change
of those is a reversal, leaning to ``reversal`` when in doubt. Specified in
``docs/specs/amber-drift-1.md`` ("Edit rules").
"""

from __future__ import annotations

from collections import Counter

from rapidfuzz.distance import Levenshtein

from archive.citations import normalise
from archive.drift.rules import multilingual
from archive.drift.rules.languages import JUDGED, detect, language
from archive.drift.rules.lexicon import NEGATIVE_PREFIXES, NOT_POLAR_ALONE, RELATIONS, STOPWORDS
from archive.drift.rules.multilingual import changed_regions, sequence_reason
from archive.drift.rules.outcomes import RULES_VERSION, Classifier, EditAssessment, Verdict
from archive.drift.rules.phrases import is_negator, lexicon_hits, modal_classes, quantifiers
from archive.drift.rules.tokens import TOKEN, Tokens, tokenise


def _negative_affix(a: str, b: str) -> bool:
    """``b`` is ``a`` with a negative prefix (or -less for -ful)."""
    if len(a) < 4 or (not a.isalpha() and "-" not in a):
        return False
    for prefix in NEGATIVE_PREFIXES:
        if b == prefix + a and (prefix != "a" or len(a) >= 5):
            return True
    return a.endswith("ful") and b == a[:-3] + "less"


UNJUDGED = "language_unsupported"  # a reason: the rules cannot read this language


class RuleClassifier:
    """The documented rules (module docstring); :data:`RULES_VERSION` names them."""

    name = "rules"
    version = RULES_VERSION

    def assess(self, old: str, new: str) -> EditAssessment:
        if not new.strip():
            return EditAssessment(Verdict.MATERIAL, ("deleted",), word_diff(old, new))
        code = detect(old)
        if code == "en":
            return _assess_english(old, new)
        diff = word_diff(old, new)
        if code not in JUDGED:
            # Not read, so not judged: material (never identical or cosmetic) and flagged
            # for a person (``DriftService`` sets needs_review on this reason).
            return EditAssessment(Verdict.MATERIAL, (f"{UNJUDGED}:{code}",), diff)
        lang = language(code)
        before, after = multilingual.Tokens(old, lang), multilingual.Tokens(new, lang)
        reasons, notes = multilingual.reversal_reasons(before, after)
        tag = f"language:{code}"
        if reasons:
            return EditAssessment(Verdict.REVERSAL, (*reasons, *notes, tag), diff)
        found = multilingual.material_reasons(before, after)
        return EditAssessment(Verdict.MATERIAL, (*notes, *found, tag), diff)


def _assess_english(old: str, new: str) -> EditAssessment:
    """The English rules (``amber-drift-1``'s, unchanged)."""
    before, after = tokenise(old), tokenise(new)
    reasons, notes = _reversal_reasons(before, after)
    diff = word_diff(old, new)
    if reasons:
        return EditAssessment(Verdict.REVERSAL, tuple(reasons + notes), diff)
    return EditAssessment(Verdict.MATERIAL, tuple(notes + _material_reasons(before, after)), diff)


def _reversal_reasons(before: Tokens, after: Tokens) -> tuple[list[str], list[str]]:
    """Reasons for ``reversal``, and notes that only make the edit ``material`` (a number or
    date *added* where none was removed narrows the claim without contradicting it)."""
    reasons: list[str] = []
    notes: list[str] = []
    old, new = before.lower, after.lower
    hunks = changed_regions(old, new)

    # Negation, per changed hunk.
    for a0, a1, b0, b1 in hunks:
        removed = [w for w in old[a0:a1] if is_negator(w)]
        added = [w for w in new[b0:b1] if is_negator(w)]
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
        removed_hits = lexicon_hits(old[a0:a1])
        added_hits = lexicon_hits(new[b0:b1])
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
            polar = next((w for _, _, w in removed_hits if w not in NOT_POLAR_ALONE), None)
            added_words = [w for w in new[b0:b1] if w[:1].isalpha()]
            if polar is not None and added_words:
                reasons.append(f"polar_word_replaced:{polar}->{' '.join(added_words)}")

    # Antonyms and outcome verbs: per group, a pole replaced by the other (see _pole_flip).
    old_hits, new_hits = lexicon_hits(old), lexicon_hits(new)
    for group in sorted({g for g, _, _ in old_hits} & {g for g, _, _ in new_hits}):
        old_seq = [(p, w) for g, p, w in old_hits if g == group]
        new_seq = [(p, w) for g, p, w in new_hits if g == group]
        flip = _pole_flip([p for p, _ in old_seq], [p for p, _ in new_seq])
        if flip is not None:
            reasons.append(f"antonym:{old_seq[flip[0]][1]}->{new_seq[flip[1]][1]}")

    # Modality.
    old_modal, new_modal = modal_classes(before), modal_classes(after)
    if [c for c, _ in old_modal] != [c for c, _ in new_modal]:
        reason = sequence_reason(
            "modal",
            [c for c, _ in old_modal],
            [c for c, _ in new_modal],
            [w for _, w in old_modal],
            [w for _, w in new_modal],
        )
        if reason:
            reasons.append(reason)

    # Quantifiers.
    old_q, new_q = quantifiers(old), quantifiers(new)
    reason = sequence_reason(
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
    reason = sequence_reason("date", old_dates, new_dates, old_dates_shown, new_dates_shown)
    if reason:
        added_only = reason.startswith("date_added:")
        if added_only and not _added_in(replaced, old_dates, new_dates, after.date_positions):
            notes.append(reason)
        else:
            reasons.append(reason)
    old_numbers, old_shown, old_money = before.numbers
    new_numbers, new_shown, new_money = after.numbers
    reason = sequence_reason("number", old_numbers, new_numbers, old_shown, new_shown)
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


def _stem(word: str) -> str:
    return word[:5] if len(word) > 5 else word


def _swapped(old: list[str], new: list[str]) -> str | None:
    """A relation word whose content-word neighbours (within three words) traded sides."""
    if old == new:
        return None

    def side(words: list[str]) -> set[str]:
        return {_stem(w) for w in words if w.isalnum() and w not in STOPWORDS}

    for i, word in enumerate(old):
        if word not in RELATIONS or word not in new:
            continue
        j = new.index(word)
        old_left, old_right = side(old[max(0, i - 3) : i]), side(old[i + 1 : i + 4])
        new_left, new_right = side(new[max(0, j - 3) : j]), side(new[j + 1 : j + 4])
        crossed = len(old_left & new_right) + len(old_right & new_left)
        kept = len(old_left & new_left) + len(old_right & new_right)
        if old_left & new_right and old_right & new_left and crossed > kept:
            return word
    return None


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


def _material_reasons(before: Tokens, after: Tokens) -> list[str]:
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
    for a0, a1, b0, b1 in changed_regions(old_words, new_words):
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
    a = [(m.start(), m.end()) for m in TOKEN.finditer(a_text)]
    b = [(m.start(), m.end()) for m in TOKEN.finditer(b_text)]
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
