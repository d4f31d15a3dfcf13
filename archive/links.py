"""Link headers and link-format documents (RFC 8288, RFC 6690), written safely.

Every URI is ASCII-encoded before it goes between ``<`` and ``>``, and attribute values are
quoted strings with ``"`` and ``\\`` escaped, so no input — however hostile — can end a link
early, add a parameter, or inject a header line.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from typing import NamedTuple
from urllib.parse import quote

from archive.uri import to_ascii_uri

_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~]+")
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")
# Attribute names already checked to be tokens (a handful, on every response's headers).
_CHECKED_NAMES: set[str] = set()


class Link(NamedTuple):
    # A named tuple, not a dataclass: several are built for every response's headers.
    uri: str
    rel: str
    attributes: tuple[tuple[str, str], ...] = ()

    def render(self) -> str:
        rendered = f"<{to_ascii_uri(self.uri)}>; rel={_quote(self.rel)}"
        for name, value in self.attributes:
            if name not in _CHECKED_NAMES:
                if not _TOKEN.fullmatch(name):
                    raise ValueError(f"link attribute name {name!r} is not a token")
                _CHECKED_NAMES.add(name)
            rendered += f"; {name}={_quote(value)}"
        return rendered


def link(uri: str, rel: str, **attributes: str | None) -> Link:
    if not attributes:
        return Link(uri, rel)
    return Link(uri, rel, tuple([(k, v) for k, v in attributes.items() if v is not None]))


def link_header(links: list[Link]) -> str:
    """One ``Link`` header value: links separated by ``, `` on a single line."""
    return ", ".join(item.render() for item in links)


def link_format(links: list[Link]) -> str:
    """An ``application/link-format`` body: one link per line, comma-separated."""
    return ",\n".join(item.render() for item in links) + "\n"


def _quote(value: str) -> str:
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'  # the common case: nothing to replace or escape
    # Only printable ASCII belongs in a header value; replace rather than fail the response.
    cleaned = _NOT_PRINTABLE_ASCII.sub(" ", value)
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'


def robust_link(
    uri_r: str,
    uri_m: str,
    version_date: datetime,
    *,
    text: str | None = None,
    extra: dict[str, str] | None = None,
) -> str:
    """A Robust Link (robustlinks.mementoweb.org): the original in ``href`` plus the memento.

    Every attribute value is HTML-escaped, so no URI-R can break out of the tag.
    """
    attributes = {
        "href": uri_r,
        "data-originalurl": uri_r,
        "data-versionurl": uri_m,
        "data-versiondate": version_date.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **(extra or {}),
    }
    rendered = " ".join(
        f'{name}="{html.escape(value, quote=True)}"' for name, value in attributes.items()
    )
    return f"<a {rendered}>{html.escape(text if text is not None else uri_r)}</a>"


# Besides letters, digits and "._~" (always kept by quote()): the fragment-safe punctuation.
_FRAGMENT_SAFE_PUNCTUATION = "!$'()*+;=:@/?"
_FRAGMENT_WORDS = 6  # words kept at each end of a long quote (textStart,textEnd)
_BLOCK_BREAK = re.compile(r"[\n\r\t\f\v\u2028\u2029]")  # between blocks and cells of extracted text


def text_fragment_url(uri_r: str, exact: str, prefix: str = "", suffix: str = "") -> str:
    """``uri_r#:~:text=[prefix-,]start[,end][,-suffix]`` (WICG Scroll to Text Fragment).

    '-', ',' and '&' are syntax inside the directive, so they are always percent-encoded
    along with everything outside the fragment-safe set. Long quotes use start,end. A
    browser looks for each term within one block of the page, so a quote across blocks
    (line breaks and tab-separated cells in the extracted text) becomes start,end from its
    first and last block, and context words are taken only from the quote's own blocks.
    """
    base = uri_r.split("#", 1)[0]
    blocks = [words for words in (block.split() for block in _BLOCK_BREAK.split(exact)) if words]
    if not blocks:
        return base
    first, last = blocks[0], blocks[-1]
    if len(blocks) == 1 and len(first) <= 2 * _FRAGMENT_WORDS:
        body = _encode_fragment(" ".join(first))
    else:
        body = (
            _encode_fragment(" ".join(first[:_FRAGMENT_WORDS]))
            + ","
            + _encode_fragment(" ".join(last[-_FRAGMENT_WORDS:]))
        )
    before = _BLOCK_BREAK.split(prefix)[-1].split()[-1:]
    after = _BLOCK_BREAK.split(suffix)[0].split()[:1]
    if before:
        body = _encode_fragment(before[0]) + "-," + body
    if after:
        body = body + ",-" + _encode_fragment(after[0])
    return f"{to_ascii_uri(base)}#:~:text={body}"


def _encode_fragment(text: str) -> str:
    # quote() always keeps "-" (an unreserved character), but here it is directive syntax.
    return quote(text, safe=_FRAGMENT_SAFE_PUNCTUATION).replace("-", "%2D")
