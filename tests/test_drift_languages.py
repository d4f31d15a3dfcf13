"""Drift verdicts in Spanish, French, German, Ukrainian, Chinese and Arabic (``amber-drift-2``).

The labelled corpus ``tests/drift_corpus/languages/`` (runner: ``benchmarks/drift_accuracy.py
--languages``) is held, per language, to the English bars: verdict accuracy and reversal
recall of 95 % or more, soft-404 precision of 95 % or more. Properties: a pure formatting
change is never a reversal, and a negation inserted into a passage never leaves it identical
or cosmetic, in every judged language. A language without data is said so and flagged.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archive.citations import prepare
from archive.drift.rules import JUDGED, UNJUDGED, Verdict, assess_edit, classify, detect
from archive.drift.rules.languages import DATA_FORMAT, DATA_FORMAT_VERSION, language
from archive.hashing import content_address

ROOT = Path(__file__).resolve().parent.parent
FAST = settings(max_examples=60, deadline=None, database=None, derandomize=True)


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "drift_accuracy", ROOT / "benchmarks" / "drift_accuracy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("drift_accuracy", module)
    spec.loader.exec_module(module)
    return module


RUNNER = _runner()
CASES: list[dict[str, Any]] = RUNNER.load_cases(RUNNER.LANGUAGES)


@pytest.fixture(scope="module")
def evaluation() -> dict[str, Any]:
    _, summary = RUNNER.evaluate(CASES, RUNNER.LANGUAGES)
    return dict(summary)


def test_corpus_covers_every_language_and_kind() -> None:
    documents = RUNNER.load_documents(RUNNER.LANGUAGES)
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids))
    for code in JUDGED:
        mine = [case for case in CASES if case["lang"] == code]
        assert len(mine) >= 10, code
        categories = {case["category"] for case in mine}
        for needed in ("markup", "deleted", "reworded", "negation", "direction", "soft_404"):
            assert needed in categories, (code, needed)
        assert sum(case["expected"] == "reversal" for case in mine) >= 4, code
        assert {case["expected"] for case in mine} >= {
            "identical",
            "cosmetic",
            "material",
            "reversal",
            "gone",
            "soft_404",
        }
    for case in CASES:
        RUNNER.build_inputs(case, documents)  # edits match, quotes are in the old pages


@pytest.mark.parametrize("code", JUDGED)
def test_each_language_meets_the_english_bars(evaluation: dict[str, Any], code: str) -> None:
    row = evaluation["per_language"][code]
    misses = [m for m in evaluation["misses"] if m["id"].startswith(f"{code}-")]
    assert row["accuracy"] >= 0.95, misses
    assert row["reversal_recall"] >= 0.95, misses
    assert row["soft_404_precision"] >= 0.95, misses


def test_language_data_files_have_a_format_and_a_version() -> None:
    folder = ROOT / "archive" / "drift" / "rules" / "lexicon" / "languages"
    assert sorted(p.stem for p in folder.glob("*.json")) == sorted(JUDGED)
    for path in folder.glob("*.json"):
        raw = json.loads(path.read_text("utf-8"))
        assert (raw["format"], raw["format_version"]) == (DATA_FORMAT, DATA_FORMAT_VERSION)
        assert raw["language"] == path.stem
        for key in ("negators", "groups", "modals", "currencies", "not_found", "stopwords"):
            assert raw[key], (path.stem, key)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("El consejo aprobó la ampliación de la línea 4 hasta el hospital.", "es"),
        ("Le conseil a approuvé le projet de la place du Marché.", "fr"),
        ("Der Kreistag hat den Vorschlag für eine neue Anlage genehmigt.", "de"),
        ("Година паркування коштуватиме 20 гривень.", "uk"),
        ("Виконавчий комітет схвалив проєкт реконструкції площі.", "uk"),
        ("市政府批准了地铁三号线的延伸工程。", "zh"),
        ("وافق المجلس البلدي على مشروع تجديد الساحة الرئيسية.", "ar"),
        ("The council approved the extension of line 4.", "en"),
        ("Approved.", "en"),
        ("The Authority shall publish anonymised registration statistics every quarter.", "en"),
        ("Fees: £10 adults, £5 children, free under 5s, family ticket £25", "en"),
        ("De gemeenteraad heeft het plan voor het nieuwe plein goedgekeurd vandaag.", "und-Latn"),
        ("Sperrmüll muss mindestens zwei Wochen vorher angemeldet werden.", "de"),
        ("L'amende pour stationnement gênant s'élève à 35 euros.", "fr"),
        ("Исполнительный комитет одобрил проект реконструкции площади.", "ru"),
        ("東京都は新しい規則を発表した。", "ja"),
        ("서울시는 새 규칙을 발표했다.", "ko"),
        ("Ο δήμος ενέκρινε το σχέδιο ανάπλασης της πλατείας.", "und-other"),
        ("A câmara aprovou o projeto de renovação da praça principal.", "pt"),
        ("12 345", "und"),
    ],
)
def test_detect(text: str, code: str) -> None:
    assert detect(text) == code


def test_an_unread_language_is_said_and_never_guessed() -> None:
    old = "Исполнительный комитет одобрил проект реконструкции площади."
    new = "Исполнительный комитет отклонил проект реконструкции площади."
    assessment = assess_edit(old, new)
    assert assessment.verdict == Verdict.MATERIAL
    assert assessment.reasons == (f"{UNJUDGED}:ru",)
    page_old = f"Новости\n{old}\nКонец."
    page_new = f"Новости\n{new}\nКонец."
    outcome = classify(
        status=200,
        error=None,
        live_hash=content_address(page_new.encode()),
        recorded_hash=content_address(page_old.encode()),
        not_modified=False,
        live_text=prepare(page_new),
        old_exact=old,
        prefix="Новости\n",
        suffix="\nКонец.",
        position=8,
        soft404=None,
    )
    assert outcome.verdict == Verdict.MATERIAL
    assert outcome.reasons[0].startswith(UNJUDGED)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "El horario entrará en vigor el 3 de noviembre.",
            "El horario entrará en vigor el 3 de diciembre.",
        ),
        (
            "Les règles s'appliqueront à partir du 2 septembre.",
            "Les règles s'appliqueront à partir du 2 octobre.",
        ),
        (
            "Die Gebühren gelten ab dem 1. Januar für alle.",
            "Die Gebühren gelten ab dem 1. Juli für alle.",
        ),
        ("Правила набудуть чинності 1 березня.", "Правила набудуть чинності 1 квітня."),
        (
            "ستدخل القواعد حيز التنفيذ في الأول من أبريل.",
            "ستدخل القواعد حيز التنفيذ في الأول من مايو.",
        ),
        ("新方案将于3月1日起实施。", "新方案将于4月1日起实施。"),
    ],
)
def test_a_changed_month_is_a_reversal(old: str, new: str) -> None:
    assessment = assess_edit(old, new)
    assert assessment.verdict == Verdict.REVERSAL, assessment.reasons
    assert assessment.reasons[0].startswith(("date_changed", "number_changed"))


# -- properties -----------------------------------------------------------------------------

# (language, passage, the passage with a negation inserted)
NEGATED = {
    "es": (
        "El consejo aprobó la ampliación de la línea.",
        "El consejo no aprobó la ampliación de la línea.",
    ),
    "fr": (
        "Le conseil a approuvé le projet du Marché.",
        "Le conseil n'a pas approuvé le projet du Marché.",
    ),
    "de": (
        "Der Kreistag hat den Vorschlag genehmigt.",
        "Der Kreistag hat den Vorschlag nicht genehmigt.",
    ),
    "uk": (
        "Виконавчий комітет схвалив проєкт площі.",
        "Виконавчий комітет не схвалив проєкт площі.",
    ),
    "zh": ("市政府批准了地铁三号线的延伸工程。", "市政府没有批准地铁三号线的延伸工程。"),
    "ar": (
        "وافق المجلس البلدي على مشروع تجديد الساحة.",
        "لم يوافق المجلس البلدي على مشروع تجديد الساحة.",
    ),
}
# What a page's markup may do to a passage's text without changing a character a reader sees.
FORMATTING = st.sampled_from(["\n", "  ", "\u00a0", " \n ", "\u00ad", "\u200b"])


def _outcome(old_passage: str, new_passage: str) -> Any:
    before, after = "Titre\n", "\nFin."
    old_text, new_text = before + old_passage + after, before + new_passage + after
    return classify(
        status=200,
        error=None,
        live_hash=content_address(new_text.encode()),
        recorded_hash=content_address(old_text.encode()),
        not_modified=False,
        live_text=prepare(new_text),
        old_exact=old_passage,
        prefix=before,
        suffix=after,
        position=len(before),
        soft404=None,
    )


def _reformat(passage: str, data: st.DataObject) -> str:
    """``passage`` with a formatting character at some places between or inside words."""
    out = []
    for char in passage:
        out.append(char)
        if char == " " and data.draw(st.booleans()):
            out.append(data.draw(FORMATTING))
    return "".join(out)


@pytest.mark.parametrize("code", JUDGED)
@given(data=st.data())
@FAST
def test_property_formatting_is_never_a_reversal(code: str, data: st.DataObject) -> None:
    for passage in NEGATED[code]:
        outcome = _outcome(passage, _reformat(passage, data))
        assert outcome.verdict != Verdict.REVERSAL
        assert outcome.verdict in (Verdict.IDENTICAL, Verdict.COSMETIC)  # identical: none drawn


@pytest.mark.parametrize("code", JUDGED)
def test_an_inserted_negation_is_never_identical_or_cosmetic(code: str) -> None:
    plain, negated = NEGATED[code]
    assert detect(plain) == code
    outcome = _outcome(plain, negated)
    assert outcome.verdict == Verdict.REVERSAL, outcome.reasons
    assert any(r.startswith("negation_added") for r in outcome.reasons), outcome.reasons


@pytest.mark.parametrize("code", JUDGED)
@given(data=st.data())
@FAST
def test_property_a_negator_inserted_anywhere_is_not_missed(code: str, data: st.DataObject) -> None:
    """Any of the language's plain negators, inserted into any corpus passage before any of
    its words but the first (before the first, the passage itself is intact)."""
    lang = language(code)
    passages = [c["quote"] for c in CASES if c["lang"] == code and c["kind"] == "page"]
    passage = data.draw(st.sampled_from(passages))
    raw = json.loads(
        (ROOT / "archive/drift/rules/lexicon/languages" / f"{code}.json").read_text("utf-8")
    )
    negator = data.draw(st.sampled_from([n for n in raw["negators"] if not n.endswith(("*", "'"))]))
    if lang.characters:
        cut = data.draw(st.integers(1, len(passage) - 1))
        negated = passage[:cut] + negator + passage[cut:]
    else:
        words = passage.split(" ")
        cut = data.draw(st.integers(1, len(words) - 1))
        negated = " ".join([*words[:cut], negator, *words[cut:]])
    outcome = _outcome(passage, negated)
    assert outcome.verdict not in (Verdict.IDENTICAL, Verdict.COSMETIC)
    assert outcome.verdict == Verdict.REVERSAL, (negated, outcome.reasons)
