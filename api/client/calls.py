"""Every API call the clients make, described once: the request (path, body, headers) and
how its answer is read. The sync and async clients only run them (api.client.transport)."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import quote as url_quote

import httpx

from api.client.errors import EvidenceIntegrityError
from api.client.models import (
    CitationError,
    CitationRecord,
    CiteResult,
    MementoContent,
    MementoInfo,
    TimeGateResult,
    Transcript,
)
from api.client.transport import Call
from api.client.wire import (
    CITATIONS_PATH,
    MEMENTO_PREFIX,
    MEMENTOS_PATH,
    TIMEGATE_PREFIX,
    TIMEMAP_JSON_PREFIX,
    capture_headers,
    content_fields,
    content_hash,
    content_hash_from_etag,
    memento_id_of,
    rfc3339,
    transcript_path,
)

T = TypeVar("T")


class Calls:
    """The calls of one server (``base_url``)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def url(self, path: str) -> str:
        return self.base_url + path

    def json_call(
        self,
        method: str,
        path: str,
        payload: Mapping[str, Any],
        parse: Callable[[httpx.Response], T],
        ok: Iterable[int],
        idempotency_key: str | None = None,
    ) -> Call[T]:
        # Serialised once: every retry sends the very same bytes (the server keys its
        # idempotency record on the body's hash).
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if method == "POST":
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        return Call(method, self.url(path), parse, frozenset(ok), body, headers)

    def put_transcript(
        self, transcript_id: str, retention: str | datetime | None, labels: Mapping[str, str] | None
    ) -> Call[Transcript]:
        payload: dict[str, Any] = {"labels": dict(labels or {})}
        if isinstance(retention, datetime):
            payload["retention"] = {"retain_until": rfc3339(retention)}
        elif retention is not None:
            payload["retention"] = retention
        return self.json_call(
            "PUT",
            transcript_path(transcript_id),
            payload,
            _parse_json(Transcript.from_json),
            (200, 201),
        )

    def get_transcript(self, transcript_id: str) -> Call[Transcript]:
        return Call(
            "GET", self.url(transcript_path(transcript_id)), _parse_json(Transcript.from_json)
        )

    def write_memento(
        self,
        uri_r: str,
        content: bytes | str,
        content_type: str,
        *,
        captured_at: datetime | None,
        scope: str,
        tool: str | None,
        final_url: str | None,
        http_status: int | None,
        headers: Mapping[str, str] | None,
        idempotency_key: str | None,
    ) -> Call[MementoInfo]:
        payload: dict[str, Any] = {
            "uri_r": uri_r,
            "content_type": content_type,
            "scope": scope,
            **content_fields(content),
        }
        optional = {
            "captured_at": rfc3339(captured_at) if captured_at else None,
            "tool": tool,
            "final_url": final_url,
            "http_status": http_status,
        }
        payload.update({k: v for k, v in optional.items() if v is not None})
        if headers:
            payload["headers"] = capture_headers(headers)
        return self.json_call(
            "POST",
            MEMENTOS_PATH,
            payload,
            _parse_json(MementoInfo.from_json),
            (200, 201),
            idempotency_key,
        )

    def cite(
        self,
        transcript_id: str,
        citations: Sequence[Mapping[str, Any]],
        *,
        fail_closed: bool | None,
        run_id: str | None,
        idempotency_key: str | None,
        sources: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Call[CiteResult]:
        payload: dict[str, Any] = {"citations": [dict(c) for c in citations]}
        if sources:
            payload["sources"] = {ref: dict(source) for ref, source in sources.items()}
        if fail_closed is not None:
            payload["fail_closed"] = fail_closed
        if run_id is not None:
            payload["run_id"] = run_id
        return self.json_call(
            "POST",
            transcript_path(transcript_id) + "/citations",
            payload,
            _parse_cite,
            (200, 201),
            idempotency_key,
        )

    def get_memento(self, ref: str) -> Call[MementoInfo]:
        return Call(
            "GET",
            self.url(f"{MEMENTOS_PATH}/{memento_id_of(ref)}"),
            _parse_json(MementoInfo.from_json),
        )

    def fetch_memento(self, ref: str, verify: bool) -> Call[MementoContent]:
        memento_id = memento_id_of(ref)
        return Call(
            "GET",
            self.url(MEMENTO_PREFIX + memento_id),
            functools.partial(_parse_content, memento_id, verify),
            headers={"Accept": "*/*"},
        )

    def timegate(self, uri_r: str, at: datetime | None) -> Call[TimeGateResult]:
        headers = {"Accept": "*/*"}
        if at is not None:
            if at.tzinfo is None:
                raise ValueError("the TimeGate datetime must be timezone-aware")
            headers["Accept-Datetime"] = format_datetime(at.astimezone(UTC), usegmt=True)
        # The URI-R goes raw at the end of the path, query string included (DESIGN.md).
        return Call(
            "GET",
            self.url(TIMEGATE_PREFIX + uri_r),
            functools.partial(_parse_timegate, uri_r),
            frozenset({302}),
            headers=headers,
        )

    def timemap(self, uri_r: str) -> Call[dict[str, Any]]:
        # The URI-R goes raw at the end of the path, as for the TimeGate.
        return Call("GET", self.url(TIMEMAP_JSON_PREFIX + uri_r), _parse_json(_json_object))

    def citation_drift(self, citation_id: str) -> Call[dict[str, Any]]:
        path = CITATIONS_PATH + url_quote(citation_id, safe="") + "/drift"
        return Call("GET", self.url(path), _parse_json(_json_object))


def _json_object(data: Mapping[str, Any]) -> dict[str, Any]:
    return dict(data)


def _parse_json(build: Callable[[Mapping[str, Any]], T]) -> Callable[[httpx.Response], T]:
    def parse(response: httpx.Response) -> T:
        return build(response.json())

    return parse


def _parse_cite(response: httpx.Response) -> CiteResult:
    data = response.json()
    return CiteResult(
        tuple(CitationRecord.from_json(c) for c in data.get("citations") or ()),
        tuple(CitationError.from_json(e) for e in data.get("errors") or ()),
        created=response.status_code == 201,
    )


def _parse_content(memento_id: str, verify: bool, response: httpx.Response) -> MementoContent:
    claimed = content_hash_from_etag(response.headers.get("etag", ""))
    if verify and claimed is not None and content_hash(response.content) != claimed:
        raise EvidenceIntegrityError(
            f"memento {memento_id}: bytes do not hash to {claimed}", status=response.status_code
        )
    moment = response.headers.get("memento-datetime")
    return MementoContent(
        memento_id=memento_id,
        uri_m=str(response.request.url),
        content=response.content,
        content_type=response.headers.get("content-type", "application/octet-stream"),
        memento_datetime=parsedate_to_datetime(moment) if moment else None,
        content_hash=claimed,
        verified=verify and claimed is not None,
        link=response.headers.get("link", ""),
    )


def _parse_timegate(uri_r: str, response: httpx.Response) -> TimeGateResult:
    location = response.headers["location"]
    return TimeGateResult(
        uri_r, location, memento_id_of(location), response.headers.get("link", "")
    )
