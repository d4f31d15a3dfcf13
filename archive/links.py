"""Link headers and link-format documents (RFC 8288, RFC 6690), written safely.

Every URI is ASCII-encoded before it goes between ``<`` and ``>``, and attribute values are
quoted strings with ``"`` and ``\\`` escaped, so no input — however hostile — can end a link
early, add a parameter, or inject a header line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from archive.uri import to_ascii_uri

_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~]+")


@dataclass(frozen=True)
class Link:
    uri: str
    rel: str
    attributes: tuple[tuple[str, str], ...] = field(default=())

    def render(self) -> str:
        parts = [f"<{to_ascii_uri(self.uri)}>", f"rel={_quote(self.rel)}"]
        for name, value in self.attributes:
            if not _TOKEN.fullmatch(name):
                raise ValueError(f"link attribute name {name!r} is not a token")
            parts.append(f"{name}={_quote(value)}")
        return "; ".join(parts)


def link(uri: str, rel: str, **attributes: str | None) -> Link:
    return Link(uri, rel, tuple((k, v) for k, v in attributes.items() if v is not None))


def link_header(links: list[Link]) -> str:
    """One ``Link`` header value: links separated by ``, `` on a single line."""
    return ", ".join(item.render() for item in links)


def link_format(links: list[Link]) -> str:
    """An ``application/link-format`` body: one link per line, comma-separated."""
    return ",\n".join(item.render() for item in links) + "\n"


def _quote(value: str) -> str:
    # Only printable ASCII belongs in a header value; replace rather than fail the response.
    cleaned = "".join(ch if " " <= ch < "\x7f" else " " for ch in value)
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'
