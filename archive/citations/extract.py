"""The visible text of a captured document: named, versioned extractors.

Quotes are matched against the text these extractors produce, and the W3C
``TextPositionSelector`` of a citation counts code points in it. The extractor's name and
version are recorded with every citation, and the drift job re-extracts with the same
extractor, so an extractor upgrade alone never reads as drift: **any change to what an
extractor produces for some input must bump its version** (the ``_*_RULES`` numbers below;
the underlying library's version is part of the version string too).

- ``amber-html`` (``text/html``, ``application/xhtml+xml``; Lexbor through selectolax):
  all visible text, no boilerplate removal (:mod:`archive.citations.html_extractor`).
- ``amber-pdf`` (``application/pdf``; PDFium through pypdfium2): each page's text as PDFium
  lays it out, pages joined by :data:`~archive.citations.pdf_extractor.PDF_PAGE_SEPARATOR`
  (:mod:`archive.citations.pdf_extractor`).
- ``amber-plain`` (other ``text/*``, JSON, XML, YAML, TOML, JavaScript): the decoded text,
  verbatim; bytes invalid in the declared charset are refused.

Anything else is refused with ``InvalidContent``. What "all visible text" means for each
extractor, and why the library versions are part of its version, is specified in
``docs/specs/extractors.md``.

Extraction is deterministic (same bytes, media type and extractor version → same text) and
cached: ``extract_text(..., tenant=…, cache_key=<content hash>)`` keeps the last few results,
so ten citations of one page extract it once. The cache is per tenant: a result is reused only
for the tenant whose request produced it, because a reused result answers in a fraction of the
time, and that difference would tell one tenant that another holds the same bytes.

What extraction may cost is bounded (:class:`~archive.config.ExtractionLimits`): PDF and
HTML are read in worker processes that are killed when they run too long or out of memory
(:mod:`archive.citations.sandbox`), except small HTML, whose cost has a proven bound and is
read here; a document over a limit raises :class:`ExtractionLimitExceeded` naming it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass

import pypdfium2.version
import selectolax

from archive.citations.charsets import codec
from archive.citations.html_extractor import html_text
from archive.citations.sandbox import worker_pool
from archive.config import ExtractionLimits
from archive.exceptions import ExtractionLimitExceeded, InvalidContent
from archive.hashing import content_address

HTML_EXTRACTOR = "amber-html"
PDF_EXTRACTOR = "amber-pdf"
PLAIN_EXTRACTOR = "amber-plain"

# Bump when the rules change what an extractor outputs (docs/specs/extractors.md).
# HTML 2, plain 2: only WHATWG character encodings are honoured as charsets (not idna,
# punycode, unicode_escape, utf-7 …): HTML reads such a label as unknown, plain text refuses it.
# HTML 3: noframes, noembed, rp, param (display: none in the HTML UA stylesheet) and the
# fallback content of video and audio (never shown by a browser that plays them) are not text.
_HTML_RULES = 3
_PDF_RULES = 1
_PLAIN_RULES = 2

HTML_EXTRACTOR_VERSION = f"{_HTML_RULES}+lexbor-{selectolax.__version__}"
PDF_EXTRACTOR_VERSION = (
    f"{_PDF_RULES}+pdfium-{pypdfium2.version.PDFIUM_INFO.build}"
    f"+pypdfium2-{pypdfium2.version.PYPDFIUM_INFO.version}"
)
PLAIN_EXTRACTOR_VERSION = f"{_PLAIN_RULES}"

EXTRACTORS: dict[str, str] = {
    HTML_EXTRACTOR: HTML_EXTRACTOR_VERSION,
    PDF_EXTRACTOR: PDF_EXTRACTOR_VERSION,
    PLAIN_EXTRACTOR: PLAIN_EXTRACTOR_VERSION,
}

CACHE_ENTRIES = 64
CACHE_MAX_CHARS = 64 * 1024 * 1024  # total extracted text kept, whatever the entry count


@dataclass(frozen=True)
class ExtractedText:
    text: str
    extractor: str
    extractor_version: str


# -- media types --------------------------------------------------------------------------

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
_PLAIN_APPLICATION_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-ndjson",
        "application/ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/sql",
    }
)


def _parse_media_type(media_type: str) -> tuple[str, str | None]:
    """``("type/subtype", charset-or-None)``, lower-cased, parameters other than charset ignored."""
    if not isinstance(media_type, str):
        raise InvalidContent("media type must be a string")
    essence, _, params = media_type.partition(";")
    essence = essence.strip().lower()
    charset = None
    for param in params.split(";"):
        name, sep, value = param.partition("=")
        if sep and name.strip().lower() == "charset":
            charset = value.strip().strip('"').strip("'").strip() or None
    return essence, charset


def _kind(essence: str) -> str | None:
    if essence in _HTML_TYPES:
        return "html"
    if essence in _PDF_TYPES:
        return "pdf"
    if essence.startswith("text/") or essence in _PLAIN_APPLICATION_TYPES:
        return "plain"
    if essence.startswith("application/") and essence.endswith(("+json", "+xml")):
        return "plain"
    return None


# -- cache --------------------------------------------------------------------------------

# (tenant or None, content address, "kind;charset") -> result. The tenant is part of the key
# so one tenant never benefits from (and so can never time) another tenant's extraction.
_CacheKey = tuple[str | None, str, str]
_cache: OrderedDict[_CacheKey, ExtractedText] = OrderedDict()
_cache_chars = 0
_cache_lock = threading.Lock()


def clear_cache() -> None:
    global _cache_chars
    with _cache_lock:
        _cache.clear()
        _cache_chars = 0


def forget_cached(tenant: str | None, addresses: Collection[str]) -> None:
    """Forget ``tenant``'s extractions of these content addresses (their bytes were erased)."""
    global _cache_chars
    with _cache_lock:
        for key in [k for k in _cache if k[0] == tenant and k[1] in addresses]:
            _cache_chars -= len(_cache.pop(key).text)


def cached_entries() -> int:
    """How many extraction results this process remembers (for /metrics)."""
    with _cache_lock:
        return len(_cache)


def _cache_get(key: _CacheKey) -> ExtractedText | None:
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
        return found


def _cache_put(key: _CacheKey, value: ExtractedText) -> None:
    global _cache_chars
    size = len(value.text)
    if size > CACHE_MAX_CHARS // 4:
        return
    with _cache_lock:
        old = _cache.pop(key, None)
        if old is not None:
            _cache_chars -= len(old.text)
        _cache[key] = value
        _cache_chars += size
        while _cache and (len(_cache) > CACHE_ENTRIES or _cache_chars > CACHE_MAX_CHARS):
            _, evicted = _cache.popitem(last=False)
            _cache_chars -= len(evicted.text)


# -- entry point --------------------------------------------------------------------------

# Small HTML is read in this process: its cost has a proven bound (docs/design.md,
# "Extraction limits"). Every element the parser builds comes from a start tag (a "<" in the
# bytes: every honoured encoding writes "<" with the byte 0x3C) or is a clone the tree
# builder makes of one (at most one per open formatting element at each "<"), so 256 of them
# bound the tree to ~66,000 elements whatever the markup; the worst markup found costs
# ~40 ms (benchmarks/bench_extraction_limits.py --inline-worst). Anything else goes to a worker.
INLINE_HTML_BYTES = 64 * 1024
INLINE_HTML_TAGS = 256

DEFAULT_LIMITS = ExtractionLimits()


def extract_text(
    content: bytes,
    media_type: str,
    *,
    tenant: str | None = None,
    cache_key: str | None = None,
    limits: ExtractionLimits | None = None,
    deadline: float | None = None,
) -> ExtractedText:
    """The visible text of ``content`` read as ``media_type`` (``docs/specs/extractors.md``).

    ``tenant`` is whose request this is: only that tenant's earlier extractions are reused
    (work done for a tenant MUST name it; ``None`` is a scope of its own, shared only by
    callers acting for no tenant). ``cache_key`` must identify the bytes (their content
    address, ``blake3:…``); without it the bytes are hashed to look the cache up. Raises
    :class:`InvalidContent` for media types with no extractor, undecodable declared text and
    unreadable PDFs.

    ``limits`` bound the work (default: :class:`ExtractionLimits` defaults); ``deadline``
    (a :func:`time.monotonic` instant) is when the caller's extraction time runs out, for a
    budget shared by several documents. A document over a limit raises
    :class:`ExtractionLimitExceeded` naming it (``time``, ``memory``, ``pages``, ``text``).

    The in-process extractors (:func:`html_text` for small HTML, :func:`plain_text`) are
    looked up in this module at each call: replacing one here is seen (tests count
    extractions so).
    """
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise InvalidContent("content must be bytes")
    content = bytes(content)
    essence, charset = _parse_media_type(media_type)
    kind = _kind(essence)
    if kind is None:
        raise InvalidContent(f"cannot extract text from {essence or 'an empty media type'}")
    limits = limits or DEFAULT_LIMITS
    key = (tenant, cache_key or content_address(content), f"{kind};{(charset or '').lower()}")
    found = _cache_get(key)
    if found is not None:
        _check_text_size(found.text, limits)  # it may have been read under other limits
        return found
    seconds = _time_left(limits, deadline)
    if kind == "plain":
        result = ExtractedText(
            plain_text(content, charset), PLAIN_EXTRACTOR, PLAIN_EXTRACTOR_VERSION
        )
    elif kind == "html" and _inline_html(content):
        result = ExtractedText(html_text(content, charset), HTML_EXTRACTOR, HTML_EXTRACTOR_VERSION)
    else:
        text = _in_worker(kind, content, charset, limits, seconds, deadline)
        if kind == "html":
            result = ExtractedText(text, HTML_EXTRACTOR, HTML_EXTRACTOR_VERSION)
        else:
            result = ExtractedText(text, PDF_EXTRACTOR, PDF_EXTRACTOR_VERSION)
    _check_text_size(result.text, limits)
    _cache_put(key, result)
    return result


def _inline_html(content: bytes) -> bool:
    return len(content) <= INLINE_HTML_BYTES and content.count(b"<") <= INLINE_HTML_TAGS


def _time_left(limits: ExtractionLimits, deadline: float | None) -> float:
    if deadline is None:
        return limits.timeout_seconds
    left = deadline - time.monotonic()
    if left <= 0:
        raise _request_time_spent(limits)
    return min(limits.timeout_seconds, left)


def _in_worker(
    kind: str,
    content: bytes,
    charset: str | None,
    limits: ExtractionLimits,
    seconds: float,
    deadline: float | None,
) -> str:
    try:
        return worker_pool(limits).extract(kind, content, charset, limits, seconds)
    except ExtractionLimitExceeded as error:
        if error.limit == "time" and seconds < limits.timeout_seconds and deadline is not None:
            raise _request_time_spent(limits) from None  # the request's budget ran out first
        raise


def _request_time_spent(limits: ExtractionLimits) -> ExtractionLimitExceeded:
    return ExtractionLimitExceeded(
        "time",
        limits.request_seconds,
        f"extracting this request's documents took longer than {limits.request_seconds:g} s",
    )


def _check_text_size(text: str, limits: ExtractionLimits) -> None:
    if len(text) > limits.max_text_chars:
        raise ExtractionLimitExceeded(
            "text",
            limits.max_text_chars,
            f"the extracted text is longer than {limits.max_text_chars} characters",
        )


# -- plain text ---------------------------------------------------------------------------


def plain_text(content: bytes, charset: str | None) -> str:
    label = charset or "utf-8"
    name = codec(label)
    if name is None:
        raise InvalidContent(f"text content declares an unknown charset {label!r}")
    if name == "utf-8":
        name = "utf-8-sig"  # drop a UTF-8 byte-order mark
    try:
        return content.decode(name, "strict")
    except (UnicodeDecodeError, LookupError, ValueError):
        raise InvalidContent(f"text content is not valid {label}") from None
