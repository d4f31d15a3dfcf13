"""Wire models: what the HTTP API accepts and returns (and what /openapi.json describes)."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from archive.exceptions import InvalidContent


def decode_content(
    content: str | None, content_base64: str | None, field: str = "content"
) -> bytes:
    """The body bytes from exactly one of ``content`` (text, stored UTF-8) and base64."""
    if content_base64 is not None:
        try:
            return base64.b64decode(content_base64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidContent(f"{field}_base64 is not valid base64") from None
    assert content is not None
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidContent(f"{field} is not valid Unicode text (lone surrogates)") from None


def _encodable(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid Unicode text (lone surrogate)") from None
    return value


# JSON can carry lone surrogates ("\ud800"), which no UTF-8 column, log line or answer can
# hold. Pydantic refuses them in plain string fields but not in dict keys and values.
UnicodeText = Annotated[str, AfterValidator(_encodable)]
TextMap = dict[UnicodeText, UnicodeText]


class MementoIn(BaseModel):
    """A document (or passage) as the capturing tool received it."""

    model_config = ConfigDict(extra="forbid")

    uri_r: str = Field(
        max_length=8192, description="Absolute http(s) URL, or kb:… for internal documents."
    )
    content: str | None = Field(
        default=None, description="The body as text (stored UTF-8 encoded)."
    )
    content_base64: str | None = Field(
        default=None, description="The body as fetched, base64: use it when byte identity matters."
    )
    content_type: str = Field(
        max_length=255, description="Media type, e.g. 'text/html; charset=utf-8'."
    )
    captured_at: str | None = Field(
        default=None,
        description="RFC 3339; when the tool fetched it (the Memento-Datetime). Default: now.",
    )
    scope: Literal["document", "passage"] = "document"
    tool: str | None = Field(
        default=None, max_length=200, description="Capturing tool, e.g. http.get."
    )
    final_url: str | None = Field(default=None, max_length=8192, description="URL after redirects.")
    http_status: int | None = Field(default=None, ge=100, le=599)
    headers: TextMap = Field(
        default_factory=dict,
        max_length=100,
        description="Response headers; only capture-relevant ones (etag, last-modified, …) are kept.",
    )

    @model_validator(mode="after")
    def _one_content(self) -> MementoIn:
        if (self.content is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of 'content' and 'content_base64'")
        return self


class CaptureFactsOut(BaseModel):
    tool: str | None
    final_url: str | None
    http_status: int | None
    headers: dict[str, str]


class MementoOut(BaseModel):
    id: str
    uri_r: str
    uri_m: str
    memento_datetime: str = Field(description="RFC 3339, UTC: the capture's claimed time.")
    archived_at: str = Field(description="RFC 3339, UTC: when Amber received it.")
    content_hash: str = Field(description="blake3:<64 hex> of the stored bytes.")
    content_type: str
    size: int
    scope: Literal["document", "passage"]
    capture: CaptureFactsOut
    timegate: str
    timemap: str
    timemap_json: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    detail: dict[str, object]


class ErrorOut(BaseModel):
    error: ErrorDetail


class TimeMapEntry(BaseModel):
    datetime: str
    uri: str
    id: str
    scope: Literal["document", "passage"]
    content_hash: str
    content_type: str


class TimeMapBoundary(BaseModel):
    datetime: str
    uri: str


class TimeMapMementos(BaseModel):
    first: TimeMapBoundary
    last: TimeMapBoundary
    list: list[TimeMapEntry]


class TimeMapUris(BaseModel):
    link_format: str
    json_format: str


class TimeMapPageLink(BaseModel):
    uri: str
    page: int


class TimeMapPages(BaseModel):
    page: int
    page_size: int
    total_pages: int
    total_mementos: int
    prev: TimeMapPageLink | None
    next: TimeMapPageLink | None


class TimeMapOut(BaseModel):
    """The mementoweb JSON TimeMap format, plus paging in ``pages``."""

    original_uri: str
    timegate_uri: str
    timemap_uri: TimeMapUris
    mementos: TimeMapMementos
    pages: TimeMapPages


ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorOut, "description": "Malformed input; nothing was stored."},
    401: {"model": ErrorOut, "description": "Missing, malformed, unknown or revoked API key."},
    403: {"model": ErrorOut, "description": "The key's role may not do this."},
    404: {"model": ErrorOut, "description": "Not found (or not visible to this tenant)."},
    413: {"model": ErrorOut, "description": "Body over the size limit."},
    422: {"model": ErrorOut, "description": "Body does not match the schema."},
    429: {"model": ErrorOut, "description": "Rate limit for this key exceeded; see Retry-After."},
}
