"""The visible text of a captured document: named, versioned extractors.

Quotes are matched against the text these extractors produce, and the W3C
``TextPositionSelector`` of a citation counts code points in it. The extractor's name and
version are recorded with every citation, and the drift job re-extracts with the same
extractor, so an extractor upgrade alone never reads as drift: **any change to what an
extractor produces for some input must bump its version** (the ``_*_RULES`` numbers below;
the underlying library's version is part of the version string too).

Extractors (``ExtractedText.extractor`` / ``extractor_version``):

``amber-html`` ``1+lexbor-<selectolax version>``
    ``text/html``, ``application/xhtml+xml``. Parsed with Lexbor (selectolax). *All* text a
    reader sees, with no boilerplate removal: navigation, sidebars, tables, captions, figure
    captions, footers count. Left out: elements that are never rendered — ``head`` (the
    ``<title>`` included: it is the tab label, not page text; a ``<title>`` in ``body`` or
    in SVG is skipped too), ``script``, ``style``, ``noscript``, ``template``, ``iframe``
    and ``canvas`` fallback content, ``datalist``, SVG ``desc`` — and comments. Custom and
    unknown elements are inline. Attribute text (``alt``, ``title``, ``value``,
    ``aria-label``) is not visible text and is left out. CSS is not evaluated: an element
    hidden by the ``hidden`` attribute or by a stylesheet still contributes its text (an
    agent's fetch tool sees it).
    Layout follows the spirit of ``innerText``: inline elements (``a``, ``b``, ``span``,
    ``em``, ``code``…) join with no separator, so ``Hello <b>big</b> world`` gives
    ``Hello big world``; runs of ASCII whitespace (space, tab, LF, FF, CR, plus VT and
    U+001C–U+001F) collapse to one space, and whitespace at the start and end of a line is
    dropped; block elements (``p``, ``div``, ``li``, ``h1``–``h6``, ``tr``, ``table``,
    ``caption``, ``figcaption``, ``blockquote``, ``section``, ``nav``, ``aside``,
    ``footer``, ``dt``, ``dd``…) are separated by one ``"\\n"``; table cells (``td``, ``th``) within a row by one ``"\\t"``;
    ``<br>`` is a ``"\\n"`` of its own; ``<hr>`` a block boundary. Inside ``pre``,
    ``textarea``, ``listing``, ``xmp`` and ``plaintext`` the text is kept verbatim.
    Character references are decoded (``&nbsp;`` stays U+00A0 — quote normalisation, not
    the extractor, treats it as a space). NUL characters are dropped.

    Decoding (WHATWG order): a byte-order mark, else the ``charset`` parameter of the media
    type, else a ``<meta charset>`` / ``<meta http-equiv=Content-Type>`` in the first
    1024 bytes, else UTF-8; ``latin1``/``ascii``/``iso-8859-1`` labels mean windows-1252 as
    browsers read them; unknown labels and non-text codecs (``zlib``, ``base64``) are
    ignored; undecodable bytes become U+FFFD (HTML in the wild is not always what it
    declares, and browsers read it the same way).

``amber-pdf`` ``1+pdfium-<PDFium build>+pypdfium2-<version>``
    ``application/pdf``, through pypdfium2. Each page's text as PDFium lays it out
    (``FPDFText_GetBoundedText``), with ``"\\r\\n"`` and lone ``"\\r"`` turned into
    ``"\\n"``. PDFium replaces a hyphen at a line end by a marker and drops the line break;
    the extractor restores what the page shows, ``"-\\n"`` (quote normalisation then
    decides whether it was hyphenation). Pages are joined with ``"\\n\\f\\n"``. A file
    PDFium cannot open (malformed, encrypted) is refused with ``InvalidContent``.

``amber-plain`` ``1``
    ``text/*`` (other than HTML), ``application/json``, ``application/xml``,
    ``application/*+json``, ``application/*+xml``, YAML, TOML, JavaScript: the decoded
    text, verbatim, markup and all (line breaks untouched). The ``charset`` parameter is
    obeyed (default UTF-8); a UTF-8 byte-order mark is dropped; an unknown or non-text
    charset is refused. Bytes that are not valid in the declared (or default) charset are
    refused with ``InvalidContent("text content is not valid <charset>")`` — text must be
    what it says.

Anything else (images, archives, octet streams) is refused with ``InvalidContent``.

Extraction is deterministic (same bytes, media type and extractor version → same text) and
cached: ``extract_text(..., cache_key=<content hash>)`` keeps the last few results, so ten
citations of one page extract it once.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

import pypdfium2
import pypdfium2.version
import selectolax
from selectolax.lexbor import LexborHTMLParser, LexborNode

from archive.exceptions import InvalidContent
from archive.hashing import content_address

HTML_EXTRACTOR = "amber-html"
PDF_EXTRACTOR = "amber-pdf"
PLAIN_EXTRACTOR = "amber-plain"

# Bump when the rules change what an extractor outputs for some input (see module docstring).
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

_cache: OrderedDict[tuple[str, str], ExtractedText] = OrderedDict()
_cache_chars = 0
_cache_lock = threading.Lock()


def clear_cache() -> None:
    global _cache_chars
    with _cache_lock:
        _cache.clear()
        _cache_chars = 0


def _cache_get(key: tuple[str, str]) -> ExtractedText | None:
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
        return found


def _cache_put(key: tuple[str, str], value: ExtractedText) -> None:
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


def extract_text(content: bytes, media_type: str, *, cache_key: str | None = None) -> ExtractedText:
    """The visible text of ``content`` read as ``media_type`` (see the module docstring).

    ``cache_key`` must identify the bytes (their content address, ``blake3:…``); without it
    the bytes are hashed to look the cache up. Raises :class:`InvalidContent` for media types
    with no extractor, undecodable declared text and unreadable PDFs.
    """
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise InvalidContent("content must be bytes")
    content = bytes(content)
    essence, charset = _parse_media_type(media_type)
    kind = _kind(essence)
    if kind is None:
        raise InvalidContent(f"cannot extract text from {essence or 'an empty media type'}")
    key = (cache_key or content_address(content), f"{kind};{(charset or '').lower()}")
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


# Character encodings a document may declare: the WHATWG Encoding Standard's (what browsers
# decode) plus UTF-32 and plain Latin-1/ASCII for text/plain. Python knows many more
# "text" codecs that transform rather than decode (idna, punycode, unicode_escape, utf-7):
# a page declaring one must not make invisible text quotable, nor crash the extractor.
_CHARACTER_ENCODINGS = frozenset(
    codecs.lookup(name).name
    for name in (
        "utf-8",
        "utf-16",
        "utf-16-le",
        "utf-16-be",
        "utf-32",
        "utf-32-le",
        "utf-32-be",
        "ascii",
        "latin-1",
        "cp866",
        "iso8859-2",
        "iso8859-3",
        "iso8859-4",
        "iso8859-5",
        "iso8859-6",
        "iso8859-7",
        "iso8859-8",
        "iso8859-9",
        "iso8859-10",
        "iso8859-11",
        "iso8859-13",
        "iso8859-14",
        "iso8859-15",
        "iso8859-16",
        "koi8-r",
        "koi8-u",
        "mac-roman",
        "mac-cyrillic",
        "cp874",
        "tis-620",
        "cp1250",
        "cp1251",
        "cp1252",
        "cp1253",
        "cp1254",
        "cp1255",
        "cp1256",
        "cp1257",
        "cp1258",
        "gbk",
        "gb18030",
        "big5",
        "big5hkscs",
        "euc_jp",
        "iso2022_jp",
        "shift_jis",
        "cp932",
        "euc_kr",
        "cp949",
    )
)


def _codec(label: str) -> str | None:
    """Python's name for a character encoding label; ``None`` if unknown or not a character
    encoding (``charset=zlib``, ``base64`` or ``unicode_escape`` must not make us
    decompress, decode or unescape)."""
    try:
        name = codecs.lookup(label).name
    except (LookupError, ValueError, TypeError):
        return None
    return name if name in _CHARACTER_ENCODINGS else None


def plain_text(content: bytes, charset: str | None) -> str:
    label = charset or "utf-8"
    name = _codec(label)
    if name is None:
        raise InvalidContent(f"text content declares an unknown charset {label!r}")
    if name == "utf-8":
        name = "utf-8-sig"  # drop a UTF-8 byte-order mark
    try:
        return content.decode(name, "strict")
    except (UnicodeDecodeError, LookupError, ValueError):
        raise InvalidContent(f"text content is not valid {label}") from None


# -- HTML ---------------------------------------------------------------------------------

# WHATWG Encoding Standard: labels that browsers read as another (superset) encoding.
_WHATWG_LABELS = {
    "ascii": "cp1252",
    "us-ascii": "cp1252",
    "iso-8859-1": "cp1252",
    "iso8859-1": "cp1252",
    "iso_8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "l1": "cp1252",
    "cp819": "cp1252",
    "ibm819": "cp1252",
    "iso-ir-100": "cp1252",
    "windows-1252": "cp1252",
    "iso-8859-9": "cp1254",
    "latin5": "cp1254",
    "iso-8859-11": "cp874",
    "tis-620": "cp874",
    "gb2312": "gbk",
    "gb_2312": "gbk",
    "x-gbk": "gbk",
    "euc-kr": "cp949",
    "ks_c_5601-1987": "cp949",
    "utf-16": "utf-8",
    "utf-16le": "utf-8",
    "utf-16be": "utf-8",  # only a BOM selects UTF-16
    "unicode-1-1-utf-8": "utf-8",
    "utf8": "utf-8",
    "windows-874": "cp874",
    "x-mac-cyrillic": "mac-cyrillic",
    "x-mac-ukrainian": "mac-cyrillic",
}
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_META_CHARSET = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.IGNORECASE
)


def _html_codec(label: str | None) -> str | None:
    if not label:
        return None
    label = label.strip().lower()
    return _codec(_WHATWG_LABELS.get(label, label))


def decode_html(content: bytes, charset: str | None) -> str:
    for bom, name in _BOMS:
        if content.startswith(bom):
            return content[len(bom) :].decode(name, "replace")
    encoding = _html_codec(charset)
    if encoding is None:
        found = _META_CHARSET.search(content, 0, 1024)
        encoding = _html_codec(found.group(1).decode("ascii")) if found else None
    try:
        return content.decode(encoding or "utf-8", "replace")
    except (UnicodeError, LookupError):  # a codec that fails even with "replace"
        return content.decode("utf-8", "replace")


# Never rendered: their text is not visible text.
_SKIP_TAGS = (
    "head",
    "title",
    "script",
    "style",
    "noscript",
    "template",
    "iframe",
    "canvas",
    "datalist",
    "desc",
    "meta",
    "link",
    "base",
    "noframes",
    "noembed",
    "rp",
    "param",
    "video",
    "audio",
)
# Block-level boxes (CSS display other than inline in the HTML UA stylesheet).
_BLOCK_TAGS = (
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "caption",
    "center",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "frame",
    "frameset",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "html",
    "legend",
    "li",
    "listing",
    "main",
    "menu",
    "nav",
    "ol",
    "optgroup",
    "option",
    "p",
    "plaintext",
    "pre",
    "search",
    "section",
    "summary",
    "table",
    "tbody",
    "tfoot",
    "thead",
    "tr",
    "ul",
    "xmp",
)
_CELL_TAGS = ("td", "th")
_VERBATIM_TAGS = ("pre", "textarea", "listing", "xmp", "plaintext")

# Lexbor's static tag ids (the walk compares ints, not names). Element types Lexbor does
# not know get large per-document ids and are treated as inline.
_STATIC_TAG_LIMIT = 1 << 16
_TEXT_ID = 2  # LXB_TAG__TEXT


def _tag_ids(*names: str) -> frozenset[int]:
    parser = LexborHTMLParser("")
    ids = frozenset(parser.create_node(name).tag_id for name in names)
    if not all(_TEXT_ID < tag_id < _STATIC_TAG_LIMIT for tag_id in ids):
        raise RuntimeError("Lexbor's tag ids are not what amber-html expects")
    return ids


_BR_ID = next(iter(_tag_ids("br")))
_SKIP_IDS = _tag_ids(*_SKIP_TAGS)
_BLOCK_IDS = _tag_ids(*_BLOCK_TAGS)
_CELL_IDS = _tag_ids(*_CELL_TAGS)
_VERBATIM_IDS = _tag_ids(*_VERBATIM_TAGS)
_ELEMENT_IDS_FROM = next(iter(_tag_ids("a")))  # below: text, comment, document, doctype…

# What the walk does with an element, as bit flags in one lookup (absent: inline).
_K_BLOCK, _K_CELL, _K_VERBATIM, _K_BREAK, _K_LEAF = 1, 2, 4, 8, 16
_KINDS: dict[int, int] = {}
for _ids, _flag in (
    (_BLOCK_IDS, _K_BLOCK),
    (_CELL_IDS, _K_CELL),
    (_VERBATIM_IDS, _K_VERBATIM),
    (_SKIP_IDS, _K_LEAF),
    (frozenset({_BR_ID}), _K_BREAK | _K_LEAF),
):
    for _id in _ids:
        _KINDS[_id] = _KINDS.get(_id, 0) | _flag

# Collapsible whitespace: HTML's ASCII whitespace plus VT and the C0 separators FS..US, i.e.
# exactly what ``str.split()`` splits ASCII text on (the fast path below relies on that).
_COLLAPSIBLE = re.compile(r"[ \t\n\x0b\x0c\r\x1c-\x1f]+")

# Separators owed between two pieces of text; the strongest wins.
_SEPARATORS = ("", " ", "\t", "\n")
_SPACE, _CELL_BREAK, _LINE = 1, 2, 3


def html_text(content: bytes, charset: str | None = None) -> str:
    return html_to_text(decode_html(content, charset))


def html_to_text(markup: str) -> str:
    """The visible text of decoded HTML (rules in the module docstring)."""
    if "\x00" in markup:
        markup = markup.replace("\x00", "")  # the parser drops or replaces them anyway
    root = LexborHTMLParser(markup).root
    out: list[str] = []
    append = out.append
    pending = 0  # the separator owed before the next text (an index into _SEPARATORS)
    breaks = 0  # <br>s since the last text
    verbatim = 0  # depth inside pre-like elements
    kinds = _KINDS
    first_element = _ELEMENT_IDS_FROM
    stack: list[LexborNode] = []
    open_kinds: list[int] = []
    node: LexborNode | None = root
    while True:
        while node is None:
            if not stack:
                return "".join(out)
            kind = open_kinds.pop()
            if kind:
                if kind & _K_BLOCK:
                    pending = _LINE
                elif kind & _K_CELL and pending < _CELL_BREAK:
                    pending = _CELL_BREAK
                if kind & _K_VERBATIM:
                    verbatim -= 1
            node = stack.pop().next
        tag = node.tag_id
        if tag == _TEXT_ID:
            value = node.text_content
            node = node.next
            if not value:
                continue
            if verbatim:
                body = value
                trailing = False
            else:
                if value.isascii():
                    body = " ".join(value.split())
                else:
                    body = _COLLAPSIBLE.sub(" ", value).strip(" ")
                if not body:  # whitespace only
                    if pending < _SPACE:
                        pending = _SPACE
                    continue
                if value[0] != body[0] and pending < _SPACE:
                    pending = _SPACE
                trailing = value[-1] != body[-1]
            if out:
                if breaks:
                    append("\n" * breaks)
                elif pending:
                    append(_SEPARATORS[pending])
            append(body)
            breaks = 0
            pending = _SPACE if trailing else 0
            continue
        kind = kinds.get(tag, 0)
        if kind & _K_LEAF or tag < first_element:  # skipped subtree, <br>, comment, doctype
            if kind & _K_BREAK:
                breaks += 1
                pending = 0
            node = node.next
            continue
        if kind:
            if kind & _K_BLOCK:
                pending = _LINE
            elif kind & _K_CELL and pending < _CELL_BREAK:
                pending = _CELL_BREAK
            if kind & _K_VERBATIM:
                verbatim += 1
        stack.append(node)
        open_kinds.append(kind)
        node = node.child


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
