"""Mementos: one captured representation of a URI-R at a Memento-Datetime.

A memento is immutable once written. Its id is derived, not allocated (DESIGN.md
"Contracts"): BLAKE3 over tenant, lookup key, Memento-Datetime and content hash, so the same
capture written twice is the same memento, and no two tenants can ever share an id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

import blake3

from archive.dates import to_rfc3339
from archive.exceptions import InvalidAddress, InvalidContent, InvalidDatetime

ID_LENGTH = 32  # hex characters: 128 bits
_ID = re.compile(rf"[0-9a-f]{{{ID_LENGTH}}}")
# A media type goes out verbatim in the URI-M's Content-Type header, so it must be
# header-safe: printable ASCII only. Whitespace between parameters is RFC 9110's OWS
# (spaces and tabs), never ``\s``, which also takes CR, LF, VT, the ASCII separators and
# Unicode spaces (U+0085, U+00A0, U+2028); a quoted value holds printable ASCII only.
_MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+\-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+\-]{0,126}"
    r"([ \t]*;[ \t]*[A-Za-z0-9!#$&^_.+\-]+=(\"[\x20\x21\x23-\x5b\x5d-\x7e]*\"|[A-Za-z0-9!#$&^_.+\-]+))*"
)
MAX_MEDIA_TYPE = 255
# What a URI-M is served as when its stored media type is not one check_media_type accepts
# (stored by a version whose check was looser): bytes, never the raw value in a header.
FALLBACK_MEDIA_TYPE = "application/octet-stream"
# Response headers worth keeping as capture facts: they identify the representation and
# make conditional re-fetches (drift) possible. Anything else is dropped, not stored.
KEPT_HEADERS = frozenset(
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
MAX_HEADER_VALUE = 2048
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # what a tool name may not hold
MAX_TOOL_NAME = 200
# Clocks of agents and server are never perfectly in step; a capture stamped this far
# "in the future" is accepted as the client's claim rather than refused.
CLOCK_SKEW = timedelta(seconds=5)
EARLIEST_CAPTURE = datetime(1990, 1, 1).astimezone()


class Scope(StrEnum):
    """Whether a memento holds a whole document or a cited passage with its context."""

    DOCUMENT = "document"
    PASSAGE = "passage"


@dataclass(frozen=True)
class CaptureFacts:
    """What the capturing tool reports about the fetch. Claims, recorded as such."""

    tool: str | None = None
    final_url: str | None = None
    http_status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def headers_json(self) -> str:
        if not self.headers:
            return "{}"  # most captures (every passage): no encoder per row
        return json.dumps(dict(sorted(self.headers.items())), separators=(",", ":"))


@dataclass(frozen=True)
class Memento:
    """One captured representation of a URI-R at a Memento-Datetime: where its bytes are,
    what they are, the capture facts, and its retention state. Immutable once written."""

    id: str
    tenant: str
    uri_r: str
    urir_key: str
    captured_at: datetime  # the Memento-Datetime: the client's claim of when it fetched
    archived_at: datetime  # server receipt time; grace periods count from here
    content_hash: str
    blob_version_id: str | None
    media_type: str
    size: int
    scope: Scope
    facts: CaptureFacts
    # Lifecycle, set by the index (retention): not part of the capture.
    expires_at: datetime | None = None
    deleted_at: datetime | None = None
    deletion_reason: str | None = None
    legal_hold: bool = False

    def same_capture_as(self, other: Memento) -> bool:
        """True when ``other`` records the same capture (``archived_at`` aside)."""
        return (
            self.id == other.id
            and self.uri_r == other.uri_r
            and self.media_type == other.media_type
            and self.scope == other.scope
            and self.facts.tool == other.facts.tool
            and self.facts.final_url == other.facts.final_url
            and self.facts.http_status == other.facts.http_status
            and dict(self.facts.headers) == dict(other.facts.headers)
        )


def memento_id(tenant: str, urir_key: str, captured_at: datetime, content_hash: str) -> str:
    material = "\n".join((tenant, urir_key, to_rfc3339(captured_at), content_hash))
    return blake3.blake3(material.encode("utf-8")).hexdigest()[:ID_LENGTH]


def check_memento_id(value: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidAddress(f"memento id must be {ID_LENGTH} lowercase hex characters")
    return value


def check_media_type(value: str) -> str:
    """Refuse anything that is not a plain ``type/subtype; k=v`` in printable ASCII (it is
    echoed in headers); spaces and tabs around it are dropped, nothing else is."""
    stripped = value.strip(" \t") if isinstance(value, str) else ""
    if len(stripped) > MAX_MEDIA_TYPE or not _MEDIA_TYPE.fullmatch(stripped):
        raise InvalidContent(
            "content_type must be a media type such as 'text/html; charset=utf-8', "
            "in printable ASCII without control characters"
        )
    return stripped


def served_media_type(stored: str) -> str:
    """The media type to show for a stored one: itself when :func:`check_media_type` would
    store it as it is, else :data:`FALLBACK_MEDIA_TYPE`. Older versions stored values with
    control characters or non-ASCII spaces; those must never reach a header (or a client
    that copies them into one)."""
    if len(stored) <= MAX_MEDIA_TYPE and _MEDIA_TYPE.fullmatch(stored):
        return stored
    return FALLBACK_MEDIA_TYPE


def check_tool(value: str | None) -> str | None:
    """The capturing tool's name (``http.get``): printable text, as every index can store."""
    if value is not None and (len(value) > MAX_TOOL_NAME or _CONTROL.search(value)):
        raise InvalidContent(
            f"tool must be at most {MAX_TOOL_NAME} characters, without control characters"
        )
    return value


def select_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Keep the capture-relevant headers, lower-cased, with values that are safe to store."""
    kept = {}
    for name, value in headers.items():
        lname = str(name).lower()
        if lname not in KEPT_HEADERS:
            continue
        text = str(value)
        if len(text) > MAX_HEADER_VALUE or any(ord(c) < 0x20 and c != "\t" for c in text):
            raise InvalidContent(f"capture header {lname!r} is too long or has control characters")
        kept[lname] = text
    return kept


def check_captured_at(claimed: datetime | None, archived_at: datetime) -> datetime:
    """The Memento-Datetime for a claimed capture time: the claim, checked and truncated to
    the second; the server's receipt time when there is no claim."""
    if claimed is None:
        return archived_at.replace(microsecond=0)
    if claimed.tzinfo is None:
        raise InvalidDatetime("captured_at must carry a timezone offset")
    if claimed > archived_at + CLOCK_SKEW:
        raise InvalidDatetime("captured_at is in the future")
    if claimed < EARLIEST_CAPTURE:
        raise InvalidDatetime("captured_at is before 1990")
    # Memento-Datetime has one-second resolution (RFC 1123); keep exactly what we serve.
    return claimed.replace(microsecond=0)
