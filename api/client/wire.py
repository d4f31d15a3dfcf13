"""What the SDK and the server must agree on: the paths it calls, the server's values it
copies, and how it puts bytes and datetimes on the wire.

The SDK installs and runs without the server (it never imports ``archive`` or a web
framework), so the server's values it needs are copies; tests/test_client_package.py holds
each equal to the server's own.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import quote as url_quote

import blake3

USER_AGENT = "amber-client/0.1 (+httpx)"

# The server's routes (api/urls.py, api/mementos.py, api/transcripts.py).
MEMENTOS_PATH = "/api/v1/mementos"
TRANSCRIPTS_PATH = "/api/v1/transcripts/"
MEMENTO_PREFIX = "/memento/"
TIMEGATE_PREFIX = "/timegate/"
TIMEMAP_JSON_PREFIX = "/timemap/json/"
CITATIONS_PATH = "/api/v1/citations/"

DEFAULT_EVIDENCE_TOOLS = ("http.get", "kb.read")  # the server's default citations.evidence_sources
SEARCH_TOOL_PREFIX = "search."
MAX_SOURCES_PER_REQUEST = 100  # the server's limit on a request's `sources`; more go inline
# Response headers worth keeping as capture facts (the server keeps the same set and drops
# the rest); sending only these keeps cookies and the like off the wire.
CAPTURE_HEADERS = frozenset(
    {
        "content-type",
        "content-language",
        "content-location",
        "content-length",
        "etag",
        "last-modified",
        "date",
        "cache-control",
        "expires",
        "link",
        "memento-datetime",
        "x-robots-tag",
        "content-disposition",
    }
)
# A URI-M's ETag is its content hash with the colon made a dash (api/mementos.py etag_for).
_ETAG_HASH_PREFIX = "blake3-"


def content_hash(data: bytes) -> str:
    """``blake3:<64 hex>`` — the address Amber gives these bytes."""
    return "blake3:" + blake3.blake3(data).hexdigest()


def content_hash_from_etag(etag: str) -> str | None:
    """The content hash a URI-M's ETag names, or None when it names none."""
    tag = etag.strip().removeprefix("W/").strip('"')
    return tag.replace("-", ":", 1) if tag.startswith(_ETAG_HASH_PREFIX) else None


def rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("datetimes sent to Amber must be timezone-aware")
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def transcript_path(transcript_id: str) -> str:
    return TRANSCRIPTS_PATH + url_quote(transcript_id, safe="")


def memento_id_of(ref: str) -> str:
    """A memento id from an id or a URI-M. Only the id is used: URI-Ms are fetched from this
    client's base URL, so the API key never goes to a host named inside a link."""
    tail = ref.split("#", 1)[0].split("?", 1)[0].rstrip("/")
    if MEMENTO_PREFIX in tail:
        tail = tail.rsplit(MEMENTO_PREFIX, 1)[1]
    return url_quote(tail, safe="")


def content_fields(content: bytes | str) -> dict[str, str]:
    """A body for the wire, byte for byte. Bytes that are UTF-8 go as text: the server stores
    the UTF-8 encoding of ``content``, which is then these very bytes, and text is a quarter
    smaller than base64 and cheaper to read (a page cited inline is decoded on every call).
    Any other bytes (PDFs, legacy charsets) go as base64."""
    if isinstance(content, bytes):
        try:
            return {"content": content.decode("utf-8")}
        except UnicodeDecodeError:
            return {"content_base64": base64.b64encode(content).decode("ascii")}
    return {"content": content}


def capture_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): str(v) for k, v in headers.items() if k.lower() in CAPTURE_HEADERS}


_CHARSET = re.compile(r"charset\s*=\s*\"?([\w.:-]+)", re.IGNORECASE)


def decode_text(data: bytes, content_type: str) -> str:
    """Bytes as text, in the charset ``content_type`` names (UTF-8 otherwise), never failing."""
    found = _CHARSET.search(content_type or "")
    try:
        return data.decode(found.group(1) if found else "utf-8", errors="replace")
    except LookupError:
        return data.decode("utf-8", errors="replace")
