"""Character encodings: which labels a document may declare, and how HTML's is found.

Only real character encodings are honoured: the WHATWG Encoding Standard's (what browsers
decode) plus UTF-32 and plain Latin-1/ASCII for ``text/plain`` (:func:`codec`). HTML is
decoded as browsers do (:func:`decode_html`): a byte-order mark, else the ``charset``
parameter, else a ``<meta>`` declaration in the first 1024 bytes, else UTF-8, with the
WHATWG label aliases and undecodable bytes as U+FFFD (``docs/specs/extractors.md``).
"""

from __future__ import annotations

import codecs
import re

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


def codec(label: str) -> str | None:
    """Python's name for a character encoding label; ``None`` if unknown or not a character
    encoding (``charset=zlib``, ``base64`` or ``unicode_escape`` must not make us
    decompress, decode or unescape)."""
    try:
        name = codecs.lookup(label).name
    except (LookupError, ValueError, TypeError):
        return None
    return name if name in _CHARACTER_ENCODINGS else None


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
    return codec(_WHATWG_LABELS.get(label, label))


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
