"""Function words the edit rules read: negators, negative affixes, deontic modals,
quantifiers, relation words and stopwords (``docs/specs/amber-drift-1.md``).
"""

from __future__ import annotations

NEGATORS = frozenset(
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
NEGATIVE_PREFIXES = (
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
OBLIGATION, PERMISSION, RECOMMENDATION, PROHIBITION = (
    "obligation",
    "permission",
    "recommendation",
    "prohibition",
)
OPTIONAL, DISCOURAGED, FUTURE, FUTURE_NOT = "optional", "discouraged", "future", "future_not"
MODAL_VERBS: dict[str, str] = {
    "must": OBLIGATION,
    "shall": OBLIGATION,
    "may": PERMISSION,
    "can": PERMISSION,
    "could": PERMISSION,
    "might": PERMISSION,
    "should": RECOMMENDATION,
    "ought": RECOMMENDATION,
    "will": FUTURE,
}
MODAL_WORDS: dict[str, str] = {
    **{
        w: OBLIGATION
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
        w: PERMISSION
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
    **{w: OPTIONAL for w in ("optional", "voluntary", "discretionary")},
    **{
        w: RECOMMENDATION
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
        w: PROHIBITION
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
    "shouldn't": DISCOURAGED,
    "won't": FUTURE_NOT,
    "needn't": OPTIONAL,
}
NEGATED_CLASS = {
    OBLIGATION: OPTIONAL,
    PERMISSION: PROHIBITION,
    RECOMMENDATION: DISCOURAGED,
    PROHIBITION: PERMISSION,
    FUTURE: FUTURE_NOT,
    OPTIONAL: OBLIGATION,
}
STRONG_VERBS = frozenset({"must", "shall"})  # "must not" forbids; "not required" permits

# Quantifier classes.
QUANTIFIERS: dict[str, str] = {
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
QUANTIFIER_BIGRAMS = frozenset(w for w in QUANTIFIERS if " " in w and w.count(" ") == 1)
QUANTIFIER_TRIGRAMS = frozenset(w for w in QUANTIFIERS if w.count(" ") == 2)

# Relation words: content words trading sides around one swap the roles.
RELATIONS = frozenset(
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

# Words that never count as content words beside a relation word.
STOPWORDS = frozenset(
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
