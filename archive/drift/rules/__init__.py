"""The drift rules ``amber-drift-2``: what happened to a cited passage on the live page.

Pure: no database, no HTTP, no logging. The drift job re-fetches a cited URI-R, extracts its
text with the extractor the citation used, and calls :func:`classify` once per cited
passage; the same inputs under the same :data:`RULES_VERSION` give the same verdict,
reasons and diff. The rules are specified in ``docs/specs/amber-drift-1.md`` and
``docs/specs/amber-drift-2.md`` (what changed: languages); any change to
what they decide for some input must bump :data:`RULES_VERSION` (recorded with every check).

- :mod:`.verdict` — :func:`classify`, the verdicts' precedence (first match wins);
- :mod:`.locate` — :func:`find_passage`, the passage (or what became of it) in the live text;
- :mod:`.edits` — :func:`assess_edit` / :class:`RuleClassifier` (``reversal`` or
  ``material``) and :func:`word_diff`, reading :mod:`.tokens`, :mod:`.phrases` and the word
  lists in :mod:`.lexicon`;
- :mod:`.languages` — :func:`detect` and each language's data (``lexicon/languages/*.json``);
  :mod:`.multilingual` — the edit rules in Spanish, French, German, Ukrainian, Chinese, Arabic;
- :mod:`.soft404` — :func:`soft_404_signals` and :func:`html_title`;
- :mod:`.outcomes` — the verdicts and result records.

A stronger :class:`Classifier` (e.g. an NLI model) can be passed to :func:`classify` without
touching the rest.
"""

from __future__ import annotations

from archive.drift.rules.edits import (
    DEFAULT_CLASSIFIER,
    UNJUDGED,
    RuleClassifier,
    assess_edit,
    word_diff,
)
from archive.drift.rules.languages import JUDGED, detect
from archive.drift.rules.locate import find_passage
from archive.drift.rules.outcomes import (
    RULES_VERSION,
    CheckOutcome,
    Classifier,
    EditAssessment,
    PassageLocation,
    Soft404Signals,
    Verdict,
)
from archive.drift.rules.soft404 import html_title, soft_404_signals
from archive.drift.rules.verdict import Classify, classify

__all__ = [
    "DEFAULT_CLASSIFIER",
    "JUDGED",
    "RULES_VERSION",
    "UNJUDGED",
    "CheckOutcome",
    "Classifier",
    "Classify",
    "EditAssessment",
    "PassageLocation",
    "RuleClassifier",
    "Soft404Signals",
    "Verdict",
    "assess_edit",
    "classify",
    "detect",
    "find_passage",
    "html_title",
    "soft_404_signals",
    "word_diff",
]
