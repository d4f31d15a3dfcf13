"""Soft-404 and redirect signals: is a page that answered 2xx a "not found" page in
disguise? And the ``<title>`` those signals read.

Any one signal makes a soft 404: a not-found title or body phrase, an empty body, a redirect
to a home, error, search or section-index page, or text nearly the same as what a random
sibling URL answers. Specified in ``docs/specs/amber-drift-1.md`` ("Soft 404").
"""

from __future__ import annotations

import re
from collections import Counter
from urllib.parse import urlsplit

from rapidfuzz import fuzz
from selectolax.lexbor import LexborHTMLParser

from archive.citations import decode_html, normalise
from archive.drift.rules.languages import all_languages
from archive.drift.rules.outcomes import Soft404Signals

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


def _phrases() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The not-found phrases of every language's data: (anywhere, title or short body)."""
    languages = all_languages()
    return (
        tuple(p for lang in languages for p in lang.page_gone),
        tuple(p for lang in languages for p in lang.gone),
    )


_PAGE_PHRASES, _WHOLE_PHRASES = _phrases()
# Each search scans the window: phrases with a non-ASCII character are not looked for in an
# ASCII window (most English pages, once normalised), which halves the cost on those.
_PAGE_ASCII = tuple(p for p in _PAGE_PHRASES if p.isascii())
_WHOLE_ASCII = tuple(p for p in _WHOLE_PHRASES if p.isascii())


def _gone_phrase(text: str, *, whole: bool) -> bool:
    """A "page not found"-style phrase in ``text``; any "gone" phrase at all when ``whole``
    (a title, a short body). The English patterns, then each language's data (plain
    substrings of the lower-cased, normalised text)."""
    lowered = text.lower()
    ascii_only = lowered.isascii()
    if any(p in lowered for p in (_PAGE_ASCII if ascii_only else _PAGE_PHRASES)):
        return True
    if whole and any(p in lowered for p in (_WHOLE_ASCII if ascii_only else _WHOLE_PHRASES)):
        return True
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
