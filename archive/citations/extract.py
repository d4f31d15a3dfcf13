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
  lays it out, pages joined by :data:`PDF_PAGE_SEPARATOR`.
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
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass

import pypdfium2
import pypdfium2.version
import selectolax

from archive.citations.charsets import codec
from archive.citations.html_extractor import html_text
from archive.exceptions import InvalidContent
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

PDF_PAGE_SEPARATOR = "\n\f\n"

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


def extract_text(
    content: bytes,
    media_type: str,
    *,
    tenant: str | None = None,
    cache_key: str | None = None,
) -> ExtractedText:
    """The visible text of ``content`` read as ``media_type`` (``docs/specs/extractors.md``).

    ``tenant`` is whose request this is: only that tenant's earlier extractions are reused
    (work done for a tenant MUST name it; ``None`` is a scope of its own, shared only by
    callers acting for no tenant). ``cache_key`` must identify the bytes (their content
    address, ``blake3:…``); without it the bytes are hashed to look the cache up. Raises :class:`InvalidContent` for media types
    with no extractor, undecodable declared text and unreadable PDFs.

    The extractors (:func:`html_text`, :func:`pdf_text`, :func:`plain_text`) are looked up
    in this module at each call: replacing one here is seen (tests count extractions so).
    """
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise InvalidContent("content must be bytes")
    content = bytes(content)
    essence, charset = _parse_media_type(media_type)
    kind = _kind(essence)
    if kind is None:
        raise InvalidContent(f"cannot extract text from {essence or 'an empty media type'}")
    key = (tenant, cache_key or content_address(content), f"{kind};{(charset or '').lower()}")
    found = _cache_get(key)
    if found is not None:
        return found
    if kind == "html":
        result = ExtractedText(html_text(content, charset), HTML_EXTRACTOR, HTML_EXTRACTOR_VERSION)
    elif kind == "pdf":
        result = ExtractedText(pdf_text(content), PDF_EXTRACTOR, PDF_EXTRACTOR_VERSION)
    else:
        result = ExtractedText(
            plain_text(content, charset), PLAIN_EXTRACTOR, PLAIN_EXTRACTOR_VERSION
        )
    _cache_put(key, result)
    return result


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


# -- PDF ----------------------------------------------------------------------------------

_pdfium_lock = threading.Lock()  # PDFium is not thread-safe
_PDF_LINE_BREAKS = re.compile(r"\r\n?")


def pdf_text(content: bytes) -> str:
    """Each page's text as PDFium lays it out, pages joined by :data:`PDF_PAGE_SEPARATOR`."""
    pages: list[str] = []
    with _pdfium_lock:
        try:
            document = pypdfium2.PdfDocument(content)
        except pypdfium2.PdfiumError as error:
            raise InvalidContent(f"cannot read PDF: {error}") from None
        try:
            for index in range(len(document)):
                page = document[index]
                try:
                    textpage = page.get_textpage()
                    try:
                        pages.append(textpage.get_text_bounded())
                    finally:
                        textpage.close()
                finally:
                    page.close()
        except pypdfium2.PdfiumError as error:
            raise InvalidContent(f"cannot read PDF: {error}") from None
        finally:
            document.close()
    text = PDF_PAGE_SEPARATOR.join(pages)
    text = _PDF_LINE_BREAKS.sub("\n", text)
    # PDFium's marker for a hyphen it took for line-end hyphenation (line break dropped).
    return text.replace("\x02", "-\n").replace("\ufffe", "-\n")
