"""archive.drift.rules: locating changed passages, the edit rules, soft 404s, the verdict.

The labelled corpus (``tests/drift_corpus/``, runner in ``benchmarks/drift_accuracy.py``)
must keep reversal recall at 100 % and overall accuracy at 90 % or more; the unit tests
below pin each rule.
"""

from __future__ import annotations

import importlib.util
import random
import string
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from archive.citations import PreparedText, locate, prepare
from archive.drift.rules import (
    RULES_VERSION,
    CheckOutcome,
    Classifier,
    EditAssessment,
    PassageLocation,
    RuleClassifier,
    Soft404Signals,
    Verdict,
    assess_edit,
    classify,
    find_passage,
    html_title,
    soft_404_signals,
)

ROOT = Path(__file__).resolve().parent.parent


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
CASES: list[dict[str, Any]] = RUNNER.load_cases()
DOCUMENTS = RUNNER.load_documents()
VERDICTS = {v.value for v in Verdict}


# -- the corpus -----------------------------------------------------------------------------


def test_corpus_is_large_and_well_formed() -> None:
    assert len(CASES) >= 80
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    for case in CASES:
        assert case["expected"] in VERDICTS, case["id"]
        assert case["kind"] in ("page", "edit"), case["id"]
        RUNNER.build_inputs(case, DOCUMENTS)  # edits match, quotes are in the old pages
    expected = {case["expected"] for case in CASES}
    assert expected == VERDICTS, "every verdict is represented"
    categories = {case["category"] for case in CASES}
    for needed in (
        "whitespace",
        "markup",
        "boilerplate",
        "moved",
        "deleted",
        "reworded",
        "negation",
        "number",
        "date",
        "amount",
        "modal",
        "outcome",
        "quantifier",
        "antonym",
        "other_paragraph",
        "soft_404",
        "redirect",
        "different_document",
        "typo",
        "negative_prefix",
        "repeated",
    ):
        assert needed in categories, needed


@pytest.fixture(scope="module")
def evaluation() -> dict[str, Any]:
    _, summary = RUNNER.evaluate(CASES)
    return dict(summary)


def test_reversal_recall_is_total(evaluation: dict[str, Any]) -> None:
    missed = [m for m in evaluation["misses"] if m["expected"] == "reversal"]
    assert not missed, missed
    assert evaluation["per_verdict"]["reversal"]["recall"] == 1.0


def test_overall_accuracy(evaluation: dict[str, Any]) -> None:
    assert evaluation["accuracy"] >= 0.90, evaluation["misses"]


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if c["expected"] in ("identical", "gone", "unreachable", "reversal", "cosmetic")
    ],
    ids=lambda c: c["id"],
)
def test_corpus_case_that_must_not_miss(case: dict[str, Any]) -> None:
    """Status-driven verdicts, intact passages and reversals are exact on every case."""
    outcome = RUNNER.run_case(case, DOCUMENTS)
    assert outcome.verdict == case["expected"], outcome


def test_outcome_shape_on_corpus(evaluation: dict[str, Any]) -> None:
    for case in CASES[:60]:
        outcome = RUNNER.run_case(case, DOCUMENTS)
        assert isinstance(outcome, CheckOutcome)
        assert outcome.reasons, case["id"]
        if outcome.verdict in (Verdict.REVERSAL, Verdict.MATERIAL):
            assert outcome.diff is not None
        if outcome.verdict == Verdict.COSMETIC:
            assert outcome.location is not None and outcome.diff is None
        if outcome.location is not None:
            text = RUNNER.build_inputs(case, DOCUMENTS).kwargs["live_text"].text
            loc = outcome.location
            assert text[loc.start : loc.end] == loc.found_text


# -- find_passage ---------------------------------------------------------------------------

PAGE = (
    "Section 4. Registration.\n"
    "(a) Every operator of a drone weighing more than 250 grams must register with the "
    "Authority before its first flight.\n"
    "(b) Registration is valid for three years and may be renewed online.\n"
    "(c) The Authority shall publish the register every quarter."
)
QUOTE = (
    "Every operator of a drone weighing more than 250 grams must register with the "
    "Authority before its first flight."
)


def _find(
    new_text: str, quote: str = QUOTE, old_text: str = PAGE, **kwargs: Any
) -> PassageLocation | None:
    match = locate(old_text, quote)
    return find_passage(
        prepare(new_text),
        quote,
        prefix=match.prefix,
        suffix=match.suffix,
        position=match.start,
        **kwargs,
    )


def test_find_exact_and_normalised() -> None:
    found = _find(PAGE)
    assert found is not None and found.method == "exact" and found.score == 100
    assert found.found_text == QUOTE
    spaced = PAGE.replace("drone weighing", "drone\n   weighing").replace(
        "its first", "its\u00a0first"
    )
    found = _find(spaced)
    assert found is not None and found.method == "normalised" and found.score == 100
    assert found.found_text == spaced[found.start : found.end]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("must register", "need not register"),
        ("250 grams", "500 grams"),
        ("Every operator", "No operator"),  # the first word
        ("(a) Every", "(a) Not every"),  # a word inserted before the first word
        ("its first flight.", "its first commercial flight."),  # the last words
        ("before its first flight.", "before its first flight or within 30 days."),
    ],
)
def test_find_fuzzy_covers_the_whole_edited_passage(old: str, new: str) -> None:
    edited = PAGE.replace(old, new)
    found = _find(edited)
    assert found is not None and found.method == "fuzzy"
    expected = edited[edited.index("(a) ") + 4 : edited.index("\n(b)")]
    assert found.found_text == expected
    assert 60 <= found.score < 100


def test_find_moved_and_edited() -> None:
    moved = PAGE.replace("(a) " + QUOTE + "\n", "") + "\n(d) " + QUOTE.replace("must", "may")
    found = _find(moved)
    assert found is not None and found.method == "fuzzy"
    assert found.found_text == QUOTE.replace("must", "may")


def test_find_deleted_returns_none() -> None:
    assert _find(PAGE.replace("(a) " + QUOTE + "\n", "")) is None
    assert _find("Something else entirely, about the weather in spring.") is None
    assert _find("") is None


def test_find_min_score() -> None:
    heavily = PAGE.replace(QUOTE, "Every operator of a drone must register.")
    assert _find(heavily, min_score=95) is None
    found = _find(heavily, min_score=40)
    assert found is not None and found.found_text == "Every operator of a drone must register."


def test_find_repeated_clause_uses_context() -> None:
    old = "Part A. This section does not apply to charities. Part B. This section does not apply to charities. End."
    quote = "This section does not apply to charities."
    match = locate(old, quote, prefix="Part B. ", suffix=" End.")
    assert match.start > 20
    new = old.replace("Part B. This section does not apply", "Part B. This section applies")
    found = find_passage(
        prepare(new), quote, prefix=match.prefix, suffix=match.suffix, position=match.start
    )
    assert (
        found is not None
        and found.method == "fuzzy"
        and found.found_text == "This section applies to charities."
    )
    # the other copy edited instead: the cited one is intact
    other = old.replace("Part A. This section does not apply", "Part A. This section applies")
    found = find_passage(
        prepare(other), quote, prefix=match.prefix, suffix=match.suffix, position=match.start
    )
    assert (
        found is not None and found.method == "exact" and found.start == other.index("Part B. ") + 8
    )


def test_find_case_change_and_unicode_offsets() -> None:
    new = "\U0001f600 intro. " + PAGE.replace(QUOTE, QUOTE.upper())
    found = _find(new)
    assert found is not None and found.found_text == QUOTE.upper()
    assert new[found.start : found.end] == found.found_text


def test_find_pdf_text() -> None:
    text = "Intro line.\nThe commit-\ntee shall publish its ﬁndings every year.\nNext."
    quote = "The committee shall publish its findings every year."
    live = PreparedText(text.replace("every year", "every second year"), pdf=True)
    found = find_passage(live, quote, prefix="Intro line.\n", suffix="\nNext.")
    assert found is not None and found.method == "fuzzy"
    assert "every second year" in found.found_text and found.found_text.startswith("The commit")


# -- assess_edit ----------------------------------------------------------------------------

REVERSALS = [
    # negation
    (
        "Applicants must register within 30 days.",
        "Applicants must not register within 30 days.",
        "negation_added:not",
    ),
    ("API keys do not expire.", "API keys expire.", "negation_removed:not"),
    (
        "The defendant was found guilty.",
        "The defendant was found not guilty.",
        "negation_added:not",
    ),
    ("They would appeal.", "They wouldn't appeal.", "negation_added:wouldn't"),
    ("Keys are never shared.", "Keys are always shared.", "negation_removed:never"),
    (
        "Data is kept unless the user objects.",
        "Data is kept if the user objects.",
        "negation_removed:unless",
    ),
    (
        "The drug is available with a prescription.",
        "The drug is available without a prescription.",
        "negation_added:without",
    ),
    # negative affixes
    ("The practice is lawful.", "The practice is unlawful.", "negation_prefix:lawful->unlawful"),
    (
        "The device is compliant.",
        "The device is non-compliant.",
        "negation_prefix:compliant->non-compliant",
    ),
    (
        "The claim was accurate.",
        "The claim was inaccurate.",
        "negation_prefix:accurate->inaccurate",
    ),
    (
        "The findings were consistent.",
        "The findings were inconsistent.",
        "negation_prefix:consistent->inconsistent",
    ),
    ("The staff were careful.", "The staff were careless.", "negation_prefix:careful->careless"),
    # antonyms and outcomes
    (
        "The court upheld the decision.",
        "The court overturned the decision.",
        "antonym:upheld->overturned",
    ),
    (
        "The board approved the merger.",
        "The board rejected the merger.",
        "antonym:approved->rejected",
    ),
    ("The licence was granted.", "The licence was denied.", "antonym:granted->denied"),
    (
        "Dogs are allowed in the park.",
        "Dogs are prohibited in the park.",
        "antonym:allowed->prohibited",
    ),
    ("Prices will increase.", "Prices will decrease.", "antonym:increase->decrease"),
    (
        "The product is safe for children.",
        "The product is dangerous for children.",
        "antonym:safe->dangerous",
    ),
    ("The appeal was dismissed.", "The appeal was allowed.", None),
    ("The jury convicted him.", "The jury acquitted him.", "antonym:convicted->acquitted"),
    ("The old API is supported.", "The old API is deprecated.", "antonym:supported->deprecated"),
    ("Exports rose sharply.", "Exports fell sharply.", "antonym:rose->fell"),
    (
        "The Senate passed the bill.",
        "The Senate struck down the bill.",
        "antonym:passed->struck down",
    ),
    # modality
    ("Operators must register.", "Operators may register.", "modal_changed:must->may"),
    ("Operators shall register.", "Operators should register.", "modal_changed:shall->should"),
    ("Operators may register.", "Operators must not register.", "modal_changed:may->must not"),
    ("Registration is required.", "Registration is optional.", "modal_changed:required->optional"),
    ("Operators must register.", "Operators need not register.", None),
    ("Staff can work from home.", "Staff cannot work from home.", "modal_changed:can->cannot"),
    ("The office will close.", "The office may close.", "modal_changed:will->may"),
    # quantifiers
    ("All members are eligible.", "Some members are eligible.", "quantifier_changed:all->some"),
    (
        "Every applicant is interviewed.",
        "Most applicants are interviewed.",
        "quantifier_changed:every->most",
    ),
    ("None of the samples failed.", "Some of the samples failed.", "quantifier_changed:none->some"),
    (
        "It runs at most once a day.",
        "It runs at least once a day.",
        "quantifier_changed:at most->at least",
    ),
    (
        "Firms with more than 50 staff",
        "Firms with fewer than 50 staff",
        "quantifier_changed:more than->fewer than",
    ),
    # numbers
    ("Sixteen people were hurt.", "Twelve people were hurt.", "number_changed:Sixteen->Twelve"),
    ("Sixteen people were hurt.", "12 people were hurt.", "number_changed:Sixteen->12"),
    ("The rate rose to 5%.", "The rate rose to 7%.", "number_changed:5%->7%"),
    ("The rate is 5 per cent.", "The rate is 5 percentage points.", None),
    ("It lasts 30 days.", "It lasts 30 weeks.", "number_changed:30 days->30 weeks"),
    ("It lasts thirty-five days.", "It lasts forty days.", None),
    ("Batches 11 to 19 are affected.", "Batches 19 to 11 are affected.", "number_order_changed"),
    ("The fine is up to £1,000.", "The fine is unlimited.", "amount_removed:£1,000"),
    ("for the second year", "for the third year", "number_changed:second year->third year"),
    ("in the 2nd round", "in the 3rd round", "number_changed:2nd->3rd"),
    ("Half of the staff agreed.", "A quarter of the staff agreed.", "number_changed:Half->quarter"),
    # amounts
    ("The fee is $500.", "The fee is $5,000.", "amount_changed:$500->$5,000"),
    ("The fee is $500.", "The fee is €500.", "amount_changed:$500->€500"),
    (
        "It costs EUR 2 million.",
        "It costs EUR 3 million.",
        "amount_changed:EUR 2 million->EUR 3 million",
    ),
    ("It costs $2m.", "It costs $2bn.", None),
    ("It costs 40 dollars.", "It costs 40 euros.", "amount_changed:40 dollars->40 euros"),
    # dates
    ("It applies from 1 March 2024.", "It applies from 1 May 2024.", "date_changed:1 March->1 May"),
    (
        "It applies from 2024-03-01.",
        "It applies from 2024-05-01.",
        "date_changed:2024-03-01->2024-05-01",
    ),
    ("Reviewed in 2019.", "Reviewed in 2021.", "date_changed:2019->2021"),
    ("Due on 03/04/2024.", "Due on 04/03/2024.", None),
    ("Closed on Monday.", "Closed on Tuesday.", "date_changed:Monday->Tuesday"),
    (
        "It applies from 1 January 2025.",
        "It applies from a date to be set by the minister.",
        "date_removed:1 January",
    ),
    ("The vote is in May.", "The vote is in June.", "date_changed:May->June"),
    # neutral pole, cross-group opposites, polar words replaced (in doubt: reversal)
    (
        "The bank kept interest rates on hold.",
        "The bank raised interest rates.",
        "antonym:on hold->raised",
    ),
    ("Core inflation remained unchanged.", "Core inflation rose.", "antonym:unchanged->rose"),
    ("The plant will be shut down.", "The plant will stay open.", "antonym:down->open"),
    (
        "The drug was withdrawn from the market.",
        "The drug was returned to the market.",
        "polar_word_replaced:withdrawn->returned to",
    ),
    ("The panel ruled unanimously.", "The panel ruled 2-1.", "quantifier_removed:unanimously"),
    ("Upheld by a unanimous bench.", "Upheld by a divided bench.", "antonym:unanimous->divided"),
    (
        "The airport handled 3.1m passengers.",
        "The airport handled 31m passengers.",
        "number_changed:3.1m->31m",
    ),
    (
        "The results were disappointing.",
        "The results were encouraging.",
        "antonym:disappointing->encouraging",
    ),
    ("Side effects are rare.", "Side effects are common.", "antonym:rare->common"),
    (
        "The road reopens next week.",
        "The road reopens next month.",
        "date_changed:next week->next month",
    ),
    ("It is due today.", "It is due tomorrow.", "date_changed:today->tomorrow"),
    (
        "It cut visits by 82% in the first season.",
        "It cut visits by 82% in the first two seasons.",
        "number_added:two",
    ),
    (
        "Consult residents before deciding.",
        "Decide before consulting residents.",
        "order_swapped:before",
    ),
    ("Team Alpha beat Team Bravo.", "Team Bravo beat Team Alpha.", "order_swapped:beat"),
    ("Revenue was higher than costs.", "Costs were higher than revenue.", "order_swapped:than"),
]


@pytest.mark.parametrize(("old", "new", "reason"), REVERSALS, ids=lambda v: str(v)[:40])
def test_reversals(old: str, new: str, reason: str | None) -> None:
    result = assess_edit(old, new)
    assert result.verdict == Verdict.REVERSAL, result
    if reason is not None:
        assert reason in result.reasons, result.reasons


MATERIALS = [
    ("The agency published its report.", "The agency released its report.", "reworded"),
    (
        "Users should recieve an email.",
        "Users should receive an email.",
        "spelling_changed:recieve->receive",
    ),
    (
        "Allergens must be emphasised.",
        "Allergens must be emphasized.",
        "spelling_changed:emphasised->emphasized",
    ),
    ("The Office revised it.", "The office revised it.", "case_changed"),
    ("for example in bold", "for example, in bold", "punctuation_changed"),
    ("Sixteen people were hurt.", "16 people were hurt.", "number_reformatted"),
    ("The rate is 4.5 percent.", "The rate is 4.5%.", "number_reformatted"),
    ("It costs €1,000.", "It costs €1000.", "number_reformatted"),
    ("It costs $2 million.", "It costs $2,000,000.", "number_reformatted"),
    (
        "Housing advocates welcomed the decision, saying it helps renters.",
        "Housing advocates welcomed the decision.",
        "truncated",
    ),
    ("Changes apply after a restart.", "Changes apply after a restart or a reload.", "extended"),
    ("The committee met.", "", "deleted"),
    ("The vaccine was approved.", "The vaccine was authorised.", "reworded"),
    ("They would not appeal.", "They wouldn't appeal.", None),
    ("The decision was made by the board.", "The board made the decision.", None),
    (
        "Tickets cost €25 for adults.",
        "Tickets cost €25 for adults and €10 for children.",
        "amount_added:€10",
    ),
    ("The museum opens daily.", "The museum opens daily from 9 May.", "date_added:9 May"),
    ("In 2023, the fund returned 7%.", "The fund returned 7% in 2023.", None),
    ("Lord Justice Hale agreed.", "Lady Justice Hale agreed.", None),
    ("The May meeting was short.", "The May meeting was brief.", None),  # May the month, unchanged
    ("You may apply.", "You may submit an application.", None),
    (
        "The airport handled 3.1 million passengers.",
        "The airport handled 3.1m passengers.",
        "number_reformatted",
    ),
    ("Staff are required to attend.", "Staff must attend.", None),  # same obligation
    ("The ruling was upheld.", "The ruling was affirmed.", None),  # same pole
    ("Rates stayed unchanged.", "Rates were unchanged.", None),
    ("Apply before the deadline.", "Apply well before the deadline.", "extended"),
    (
        "The decision was made by the board before the vote.",
        "The board made the decision before the vote.",
        None,
    ),
    (
        "Applications open on 1 April.",
        "Applications open on 1 April and close on 30 April.",
        "date_added:30 April",
    ),
]


@pytest.mark.parametrize(("old", "new", "reason"), MATERIALS, ids=lambda v: str(v)[:40])
def test_materials(old: str, new: str, reason: str | None) -> None:
    result = assess_edit(old, new)
    assert result.verdict == Verdict.MATERIAL, result
    assert result.reasons
    if reason is not None:
        assert reason in result.reasons, result.reasons


def test_diff_is_word_level_and_compact() -> None:
    result = assess_edit(
        "The court upheld the decision of the lower tribunal in the matter of the appeal brought last year.",
        "The court overturned the decision of the lower tribunal in the matter of the appeal brought last year.",
    )
    assert result.diff.startswith("The court [-upheld-] {+overturned+} the decision")
    long = " ".join(f"w{i}" for i in range(40))
    diff = assess_edit(long + " must", long + " may").diff
    assert "…" in diff and "[-must-] {+may+}" in diff and len(diff) < 80
    assert assess_edit("Gone now.", "").diff == "[-Gone now.-]"


def test_assessment_is_deterministic() -> None:
    for old, new, _ in REVERSALS + MATERIALS:
        assert assess_edit(old, new) == assess_edit(old, new)


# -- pluggable classifier -------------------------------------------------------------------


class AlwaysMaterial:
    def assess(self, old: str, new: str) -> EditAssessment:
        return EditAssessment(Verdict.MATERIAL, ("model:says_so",), "d")


def test_classifier_protocol_and_plugging() -> None:
    rules: Classifier = RuleClassifier()
    assert rules.assess("a must b", "a may b").verdict == Verdict.REVERSAL
    plugged: Classifier = AlwaysMaterial()
    outcome = classify(**_ok(PAGE.replace("must register", "may register")), classifier=plugged)
    assert outcome.verdict == Verdict.MATERIAL and outcome.reasons == ("model:says_so",)
    assert RULES_VERSION == "amber-drift-2"


# -- soft 404 -------------------------------------------------------------------------------

URL = "https://news.example.com/2024/05/14/some-story"


def _soft(**kwargs: Any) -> Soft404Signals:
    args: dict[str, Any] = dict(
        requested_url=URL,
        final_url=URL,
        status=200,
        title="Some story - News",
        text="A long and ordinary article. " * 40,
        probe_text=None,
    )
    args.update(kwargs)
    return soft_404_signals(**args)


@pytest.mark.parametrize(
    "title",
    [
        "Page not found | Example",
        "404 - Example",
        "Oops! That page can’t be found.",
        "Error 404",
        "This page no longer exists",
        "Seite nicht gefunden",
        "Fehler 404 – Beispiel",
        "Page introuvable",
        "Cette page n'existe plus",
        "Página no encontrada",
        "Not Found",
        "Content removed",
    ],
)
def test_soft404_titles(title: str) -> None:
    signals = _soft(title=title)
    assert signals.is_soft_404 and "title:not_found" in signals.reasons


@pytest.mark.parametrize(
    "title",
    ["Inflation eases to 3.1% | Ledger", "Found: the missing link in fossil record", None, ""],
)
def test_soft404_ordinary_titles(title: str | None) -> None:
    assert _soft(title=title) == Soft404Signals(False, ())


def test_soft404_body_signals() -> None:
    assert _soft(text="Sorry, this page is no longer available.").reasons == ("body:not_found",)
    assert _soft(text="Die gesuchte Seite wurde nicht gefunden.").is_soft_404
    assert _soft(text="Lo sentimos, la página no existe.").is_soft_404
    long_article = (
        "The minister said the old scheme is no longer available to new applicants. " * 40
    )
    assert not _soft(text=long_article).is_soft_404  # a phrase in a long body is not enough
    navigation = "Home News Sport " * 400 + "The page you were looking for could not be found."
    assert not _soft(text=navigation).is_soft_404  # beyond the first 5000 characters
    assert _soft(text="   ").reasons == ("body:empty",)


@pytest.mark.parametrize(
    ("final", "reason"),
    [
        ("https://news.example.com/", "redirect:home"),
        ("https://news.example.com", "redirect:home"),
        ("https://www.news.example.com/index.html", "redirect:home"),
        ("https://news.example.com/en/", "redirect:home"),
        ("https://news.example.com/en-gb/home", "redirect:home"),
        ("https://other.example.org/", "redirect:home"),
        ("https://news.example.com/404.html", "redirect:error_page"),
        ("https://news.example.com/errors/not-found?from=x", "redirect:error_page"),
        ("https://news.example.com/search?q=some+story", "redirect:search"),
        ("https://news.example.com/2024/", "redirect:landing"),
        ("https://news.example.com/2024/05/index.html", "redirect:landing"),
    ],
)
def test_soft404_redirects(final: str, reason: str) -> None:
    signals = _soft(final_url=final)
    assert signals.is_soft_404 and reason in signals.reasons


@pytest.mark.parametrize(
    "final",
    [
        URL,
        URL + "/",
        URL.replace("https:", "http:"),
        URL.replace("news.", "www.news."),
        "https://news.example.com/2024/05/15/some-story-updated",
        "https://news.example.com/stories/some-story",
        "https://archive.example.org/2024/05/14/some-story",
    ],
)
def test_soft404_harmless_redirects(final: str) -> None:
    assert not _soft(final_url=final).is_soft_404


def test_soft404_probe_similarity() -> None:
    template = "Site name\nHome News Sport\nSorry about that\nTry the search\nFooter links\n"
    page = template * 60 + "Requested: /a/b\n"
    probe = template * 60 + "Requested: /a/zq81x\n"
    signals = _soft(text=page, probe_text=probe)
    assert signals.is_soft_404 and signals.reasons[0].startswith("probe_similar:")
    short = _soft(text="Nothing here, go home.", probe_text="Nothing here, go home!")
    assert short.is_soft_404
    article = "\n".join(f"Paragraph {i} of a real article with its own words." for i in range(80))
    assert not _soft(text=article + template, probe_text=template * 3).is_soft_404
    assert not _soft(text=article, probe_text="").is_soft_404


# -- html_title -----------------------------------------------------------------------------


def test_html_title() -> None:
    assert (
        html_title(
            b"<html><head><title> Page \n not  found </title></head><body>x</body>", "text/html"
        )
        == "Page not found"
    )
    assert (
        html_title("<title>Caf\u00e9</title>".encode("cp1252"), "text/html; charset=windows-1252")
        == "Caf\u00e9"
    )
    assert html_title(b"<title>A &amp; B</title>", "application/xhtml+xml") == "A & B"
    assert html_title(b"<html><body>no title</body></html>", "text/html") is None
    assert html_title(b"<title>  </title>", "text/html") is None
    assert html_title(b"<title>x</title>", "text/plain") is None
    assert html_title(b"%PDF-1.7", "application/pdf") is None
    big = (
        b"<html><head><title>Big</title></head><body>"
        + b"<p>filler</p>" * 20000
        + b"</body></html>"
    )
    assert html_title(big, "text/html") == "Big"


# -- classify: precedence -------------------------------------------------------------------

HASH_OLD = "blake3:" + "a" * 64
HASH_NEW = "blake3:" + "b" * 64


def _ok(new_text: str | None, **overrides: Any) -> dict[str, Any]:
    match = locate(PAGE, QUOTE)
    args: dict[str, Any] = dict(
        status=200,
        error=None,
        live_hash=HASH_NEW,
        recorded_hash=HASH_OLD,
        not_modified=False,
        live_text=prepare(new_text) if new_text is not None else None,
        old_exact=QUOTE,
        prefix=match.prefix,
        suffix=match.suffix,
        position=match.start,
        soft404=Soft404Signals(False, ()),
    )
    args.update(overrides)
    return args


SOFT = Soft404Signals(True, ("title:not_found",))


@pytest.mark.parametrize(
    ("overrides", "verdict", "reason"),
    [
        (dict(error="timeout", status=None), Verdict.UNREACHABLE, "error:timeout"),
        (
            dict(error="refused by fetch guard", status=200),
            Verdict.UNREACHABLE,
            "error:refused by fetch guard",
        ),
        (dict(status=None), Verdict.UNREACHABLE, "no_response"),
        (dict(status=500), Verdict.UNREACHABLE, "status:500"),
        (dict(status=503, live_hash=HASH_OLD), Verdict.UNREACHABLE, "status:503"),
        (dict(status=429), Verdict.UNREACHABLE, "status:429"),
        (dict(status=403), Verdict.UNREACHABLE, "status:403"),
        (dict(status=400), Verdict.UNREACHABLE, "status:400"),
        (dict(status=302), Verdict.UNREACHABLE, "status:302"),
        (dict(status=404), Verdict.GONE, "status:404"),
        (dict(status=410, live_hash=HASH_OLD), Verdict.GONE, "status:410"),
        (dict(status=451), Verdict.GONE, "status:451"),
        (dict(status=304, not_modified=True, live_text=None), Verdict.IDENTICAL, "not_modified"),
        (dict(live_hash=HASH_OLD, soft404=SOFT), Verdict.IDENTICAL, "hash_equal"),
        (dict(soft404=SOFT), Verdict.COSMETIC, "passage_exact"),
    ],
)
def test_classify_precedence(overrides: dict[str, Any], verdict: Verdict, reason: str) -> None:
    outcome = classify(**_ok(PAGE, **overrides))
    assert outcome.verdict == verdict and reason in outcome.reasons, outcome


def test_classify_content_verdicts() -> None:
    cosmetic = classify(**_ok("New banner\n" + PAGE.replace("drone weighing", "drone  weighing")))
    assert cosmetic.verdict == Verdict.COSMETIC and cosmetic.reasons == ("passage_normalised",)
    assert cosmetic.location is not None and cosmetic.diff is None

    deleted = PAGE.replace("(a) " + QUOTE + "\n", "")
    soft = classify(**_ok(deleted, soft404=SOFT))
    assert (
        soft.verdict == Verdict.SOFT_404
        and soft.reasons == ("title:not_found",)
        and soft.location is None
    )
    material = classify(**_ok(deleted))
    assert material.verdict == Verdict.MATERIAL and material.reasons == ("deleted",)
    assert material.location is None and material.diff is not None
    nothing = classify(**_ok(None))
    assert nothing.verdict == Verdict.MATERIAL and "deleted" in nothing.reasons

    reversal = classify(**_ok(PAGE.replace("250 grams", "500 grams"), soft404=SOFT))
    assert reversal.verdict == Verdict.REVERSAL  # the passage is there (edited): not a soft 404
    assert reversal.reasons == ("number_changed:250->500",)
    assert reversal.location is not None and reversal.location.method == "fuzzy"
    assert reversal.diff is not None and "[-250-] {+500+}" in reversal.diff

    typo = classify(**_ok(PAGE.replace("Authority before", "Authorty before")))
    assert typo.verdict == Verdict.MATERIAL and typo.reasons == (
        "spelling_changed:authority->authorty",
    )


# -- speed ------------------------------------------------------------------------------------


def _big_text(seed: int) -> tuple[str, str]:
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 10)))
        for _ in range(3000)
    ]
    sentences = [
        " ".join(rng.choice(vocabulary) for _ in range(rng.randint(8, 25))).capitalize() + "."
        for _ in range(900)
    ]
    return "\n".join(sentences), sentences[450]


def test_speed_on_100_kib_pages() -> None:
    text, quote = _big_text(7)
    assert len(text) > 100 * 1024 * 0.9
    at = text.index(quote)
    prefix, suffix = text[at - 32 : at], text[at + len(quote) : at + len(quote) + 32]
    words = quote.split()
    variants = [
        text,  # exact
        text.replace(quote, " ".join([*words[:4], "not", *words[4:]])),  # edited in place
        text.replace(quote + "\n", "")
        + "\n"
        + quote.replace(words[3], words[3] + "x"),  # moved + edited
        text.replace(quote, ""),  # deleted
    ]
    for variant in variants:
        started = time.perf_counter()
        rounds = 10
        for _ in range(rounds):
            live = PreparedText(variant)  # fresh: normalisation counted
            outcome = classify(
                status=200,
                error=None,
                live_hash=HASH_NEW,
                recorded_hash=HASH_OLD,
                not_modified=False,
                live_text=live,
                old_exact=quote,
                prefix=prefix,
                suffix=suffix,
                position=at,
                soft404=Soft404Signals(False, ()),
            )
        per_call = (time.perf_counter() - started) / rounds
        assert per_call < 0.025, (per_call, outcome)  # ~1-2 ms typical; generous for slow CI
    assert outcome.verdict == Verdict.MATERIAL and outcome.reasons == ("deleted",)
