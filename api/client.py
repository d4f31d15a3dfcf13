"""Amber's Python SDK: the HTTP client agents and auditors use, and evidence capture for agents.

Two layers, both on httpx, each in a sync and an async flavour that share every line of
request building, retrying policy and response parsing (only the I/O differs):

**Low level** — :class:`AmberClient` / :class:`AsyncAmberClient`::

    with AmberClient("http://127.0.0.1:8000", api_key) as amber:
        amber.put_transcript("conv-42", retention="regulated", labels={"agent": "hr-bot"})
        memento = amber.write_memento("https://example.org/", b"<p>hi</p>", "text/html")
        result = amber.cite("conv-42", [{"memento_id": memento.id, "quote": {"exact": "hi"}}])
        amber.fetch_memento(result.citations[0].uri_m).content   # the passage, re-hashed

**Agent level** — an :class:`EvidenceLocker` wraps the agent's tools and keeps what they
returned (raw body bytes, content hash, URI, title, tool, fetch time) under a ``source_id``
that the model cites; :meth:`AmberClient.cite_answer` sends an :class:`Answer`'s citations
with their captured sources inline and returns a :class:`CitedAnswer` with URI-Ms and
Robust Links::

    locker = EvidenceLocker()
    http_get = locker.wrap_tool("http.get", my_fetch)      # returns a Source (.source_id)
    search = locker.wrap_tool("search.web", my_search)     # Sources flagged is_evidence=False
    ...
    answer = Answer("Leave is 16 weeks.", [Claim(page.source_id, "sixteen weeks")])
    cited = amber.cite_answer("conv-42", answer, locker, run_id="run-7")
    print(cited.render_markdown())

Policy, and who decides what:

- **The server is the authority** on every citation: allowed tools (search results are
  never evidence unless the server says so), whether the quote is in the document, limits.
  The SDK refuses only what it alone can know: a ``source_id`` that no wrapped tool
  captured (reason ``unknown_evidence``, nothing is sent) and, with ``required=True``
  (the default, as the server's ``citations.required``), an answer without citations
  (reason ``no_citations``). Citing a search result is therefore *sent* and answered by the
  server's ``disallowed_tool`` rejection, so a server configured with
  ``allow_search_results_as_evidence`` is obeyed, not second-guessed.
- ``mode="fail_closed"`` (default) raises :class:`CitationRejected` carrying every
  per-citation error; ``mode="degrade"`` returns the answer rewritten to the safe form
  (``"I cannot cite this reliably."`` plus the reasons) instead. Either way nothing was
  stored. ``keep_valid=True`` stores the valid citations and drops only the invalid ones
  (server ``fail_closed: false``); the answer then fails only when none is valid.
- After a success the SDK checks that the server's ``document_hash`` of every citation is
  the BLAKE3 of the bytes the tool returned (:class:`EvidenceIntegrityError` otherwise).

Retries: every call is idempotent — GET/PUT by nature, and every POST carries an
``Idempotency-Key`` (a uuid4 per logical call, reused by each of its retries; the body
bytes are serialised once) — so connection errors, timeouts, 429 and 503 are retried a
bounded number of times with exponential backoff and jitter, honouring ``Retry-After``.
Other errors raise at once, mapped to one exception hierarchy rooted at
:class:`AmberClientError`.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import html
import inspect
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote as url_quote

import blake3
import httpx

__all__ = [
    "SAFE_ANSWER",
    "AmberClient",
    "AmberClientError",
    "AmberConnectionError",
    "Answer",
    "AsyncAmberClient",
    "AuthError",
    "CitationError",
    "CitationRecord",
    "CitationRejected",
    "CiteResult",
    "CitedAnswer",
    "Claim",
    "ConflictError",
    "EvidenceIntegrityError",
    "EvidenceLocker",
    "InvalidRequestError",
    "MementoContent",
    "MementoInfo",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RetryPolicy",
    "SearchHit",
    "ServerError",
    "ServiceUnavailableError",
    "Source",
    "TimeGateResult",
    "ToolResult",
    "Transcript",
    "content_hash",
    "safe_answer",
]

T = TypeVar("T")
Mode = Literal["fail_closed", "degrade"]

SAFE_ANSWER = "I cannot cite this reliably."
USER_AGENT = "amber-client/0.1 (+httpx)"
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


def content_hash(data: bytes) -> str:
    """``blake3:<64 hex>`` — the address Amber gives these bytes."""
    return "blake3:" + blake3.blake3(data).hexdigest()


def _rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("datetimes sent to Amber must be timezone-aware")
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


class AmberClientError(Exception):
    """Anything the SDK raises. ``status`` (HTTP) and ``code`` (Amber's error code) are set
    when the server answered."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        detail: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.detail: Mapping[str, Any] = dict(detail or {})
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"HTTP {self.status} {self.code}: " if self.status is not None else ""
        return where + self.message


class AmberConnectionError(AmberClientError):
    """The server could not be reached (or the answer was lost), even after the retries."""


class InvalidRequestError(AmberClientError):
    """400, or 422 for a request that does not match the schema."""


class CitationRejected(InvalidRequestError):
    """One or more citations are invalid, and nothing was stored.

    ``errors`` holds one :class:`CitationError` per failed citation (``index`` into the
    citations as given; ``None`` for answer-level reasons such as ``no_citations``);
    ``safe_text`` is the degrade-mode rewrite of the answer when one was involved.
    """

    def __init__(
        self,
        message: str,
        errors: Sequence[CitationError],
        *,
        safe_text: str | None = None,
        status: int | None = None,
        code: str | None = "citations_rejected",
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, status=status, code=code, detail=detail)
        self.errors: tuple[CitationError, ...] = tuple(errors)
        self.safe_text = safe_text

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(e.reason for e in self.errors)

    def __str__(self) -> str:
        listed = "; ".join(e.describe() for e in self.errors)
        return f"{super().__str__()} ({listed})" if listed else super().__str__()


class AuthError(AmberClientError):
    """401: no key, or a key the server does not accept."""


class PermissionDeniedError(AuthError):
    """403: the key's role (or tenant) may not do this."""


class NotFoundError(AmberClientError):
    """404: no such transcript, memento or URI-R."""


class ConflictError(AmberClientError):
    """409: an Idempotency-Key reused for another request, other facts for one capture, or a
    retention that would be shortened."""


class PayloadTooLargeError(AmberClientError):
    """413."""


class RateLimitedError(AmberClientError):
    """429 after the retries; ``retry_after`` says when to come back."""


class ServiceUnavailableError(AmberClientError):
    """503 (storage unavailable) after the retries; ``retry_after`` when the server said."""


class ServerError(AmberClientError):
    """Any other 5xx."""


class EvidenceIntegrityError(AmberClientError):
    """Bytes do not hash to the address they are filed under (client-side check)."""


_ERROR_BY_STATUS: Mapping[int, type[AmberClientError]] = {
    400: InvalidRequestError,
    401: AuthError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: InvalidRequestError,
    429: RateLimitedError,
    503: ServiceUnavailableError,
}


def _error_from(response: httpx.Response) -> AmberClientError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    code = error.get("code") if isinstance(error.get("code"), str) else None
    message = str(error.get("message") or response.reason_phrase or "request failed")
    detail = error.get("detail") if isinstance(error.get("detail"), dict) else {}
    status = response.status_code
    if status == 422 and isinstance(body, dict) and isinstance(body.get("errors"), list):
        errors = [CitationError.from_json(e) for e in body["errors"] if isinstance(e, dict)]
        return CitationRejected(message, errors, status=status, code=code, detail=detail)
    kind = _ERROR_BY_STATUS.get(status, ServerError if status >= 500 else AmberClientError)
    return kind(
        message, status=status, code=code, detail=detail, retry_after=_retry_after(response)
    )


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CitationError:
    """Why one citation (``index``) — or the whole answer (``index=None``) — was refused.

    ``reason`` is the server's (``unknown_evidence``, ``disallowed_tool``,
    ``quote_not_found``, ``quote_too_long``, ``empty_quote``, ``unreadable_document``,
    ``invalid_source``, …) or the SDK's own ``unknown_evidence`` / ``no_citations``.
    """

    index: int | None
    reason: str
    detail: str
    source_id: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CitationError:
        index = data.get("index")
        return cls(
            index if isinstance(index, int) else None,
            str(data.get("reason", "rejected")),
            str(data.get("detail", "")),
        )

    def describe(self) -> str:
        where = "answer" if self.index is None else f"citation {self.index + 1}"
        source = f" (source {self.source_id})" if self.source_id else ""
        return f"{where}{source}: {self.reason}" + (f" — {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class CitationRecord:
    """One stored citation, as the server rendered it: ready to show and to audit."""

    id: str
    uri_m: str  # the passage memento: resolve it for the exact captured words
    uri_r: str
    memento_datetime: datetime
    passage_hash: str
    document_hash: str  # BLAKE3 of the bytes the tool fetched
    document_uri_m: str | None
    quote_hash: str
    robust_link: str  # <a href=URI-R data-versionurl=URI-M data-versiondate=…>
    text_fragment_url: str | None
    selector: tuple[Mapping[str, Any], ...] = field(hash=False)
    extractor: str
    extractor_version: str
    normalisation: str
    match_method: str
    run_id: str | None
    source_ids: tuple[str, ...]
    created_at: datetime
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CitationRecord:
        return cls(
            id=data["id"],
            uri_m=data["uri_m"],
            uri_r=data["uri_r"],
            memento_datetime=datetime.fromisoformat(data["memento_datetime"]),
            passage_hash=data["passage_hash"],
            document_hash=data["document_hash"],
            document_uri_m=data.get("document_uri_m"),
            quote_hash=data["quote_hash"],
            robust_link=data["robust_link"],
            text_fragment_url=data.get("text_fragment_url"),
            selector=tuple(data.get("selector") or ()),
            extractor=data["extractor"],
            extractor_version=data["extractor_version"],
            normalisation=data["normalisation"],
            match_method=data["match_method"],
            run_id=data.get("run_id"),
            source_ids=tuple(data.get("source_ids") or ()),
            created_at=datetime.fromisoformat(data["created_at"]),
            raw=dict(data),
        )

    @property
    def exact(self) -> str | None:
        """The quoted words as matched in the document (None once retention tombstoned them)."""
        for selector in self.selector:
            if selector.get("type") == "TextQuoteSelector":
                return str(selector.get("exact"))
        return None


@dataclass(frozen=True)
class CiteResult:
    citations: tuple[CitationRecord, ...]
    errors: tuple[CitationError, ...]  # non-empty only with fail_closed=False
    created: bool  # the server answered 201 (a replayed Idempotency-Key answers as the first)


@dataclass(frozen=True)
class Transcript:
    id: str
    created_at: datetime
    updated_at: datetime
    retention: str
    retain_until: datetime
    labels: Mapping[str, str] = field(hash=False)
    legal_hold: bool
    citations: tuple[CitationRecord, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Transcript:
        return cls(
            id=data["id"],
            created_at=datetime.fromisoformat(data["created_at"]),
            updated_at=datetime.fromisoformat(data["updated_at"]),
            retention=data["retention"],
            retain_until=datetime.fromisoformat(data["retain_until"]),
            labels=dict(data.get("labels") or {}),
            legal_hold=bool(data.get("legal_hold")),
            citations=tuple(CitationRecord.from_json(c) for c in data.get("citations") or ()),
        )


@dataclass(frozen=True)
class MementoInfo:
    id: str
    uri_r: str
    uri_m: str
    memento_datetime: datetime
    archived_at: datetime
    content_hash: str
    content_type: str
    size: int
    scope: str
    tool: str | None
    final_url: str | None
    http_status: int | None
    headers: Mapping[str, str] = field(hash=False)
    timegate: str
    timemap: str
    timemap_json: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MementoInfo:
        capture = data.get("capture") or {}
        return cls(
            id=data["id"],
            uri_r=data["uri_r"],
            uri_m=data["uri_m"],
            memento_datetime=datetime.fromisoformat(data["memento_datetime"]),
            archived_at=datetime.fromisoformat(data["archived_at"]),
            content_hash=data["content_hash"],
            content_type=data["content_type"],
            size=int(data["size"]),
            scope=data["scope"],
            tool=capture.get("tool"),
            final_url=capture.get("final_url"),
            http_status=capture.get("http_status"),
            headers=dict(capture.get("headers") or {}),
            timegate=data["timegate"],
            timemap=data["timemap"],
            timemap_json=data["timemap_json"],
        )


@dataclass(frozen=True)
class MementoContent:
    """A URI-M's bytes. ``content_hash`` comes from the ETag and was checked against the
    bytes when ``verified``."""

    memento_id: str
    uri_m: str
    content: bytes = field(repr=False)
    content_type: str
    memento_datetime: datetime | None
    content_hash: str | None
    verified: bool
    link: str

    @property
    def text(self) -> str:
        return _decode(self.content, self.content_type)


@dataclass(frozen=True)
class TimeGateResult:
    uri_r: str
    uri_m: str  # the memento the TimeGate chose
    memento_id: str
    link: str  # the TimeGate's Link header (original, timemaps, neighbouring mementos)


# ---------------------------------------------------------------------------------------
# Shared request machinery: a call is described once, then run by the sync or async loop
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries for idempotent calls on connection errors, timeouts, 429 and 503.

    Delay before retry ``n`` (0-based): ``backoff * 2**n`` with ±50 % jitter, capped at
    ``max_backoff``, but never less than the server's ``Retry-After``. A ``Retry-After``
    beyond ``max_retry_after`` is not waited for: the error is raised with it.
    """

    max_retries: int = 3
    backoff: float = 0.25
    max_backoff: float = 8.0
    max_retry_after: float = 30.0
    retry_statuses: frozenset[int] = frozenset({429, 503})

    def delay(self, attempt: int, retry_after: float | None = None) -> float | None:
        if attempt >= self.max_retries:
            return None
        if retry_after is not None and retry_after > self.max_retry_after:
            return None
        backoff = min(self.max_backoff, self.backoff * (2**attempt)) * random.uniform(0.5, 1.5)
        return max(backoff, retry_after or 0.0)


_RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One logical API call: how to build its request and how to read its answer."""

    method: str
    url: str
    parse: Callable[[httpx.Response], T]
    ok: frozenset[int] = frozenset({200})
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = True


class _Core:
    """What both clients share: base URL, credentials, retry policy, and every call."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        retry: RetryPolicy,
        headers: Mapping[str, str] | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry
        self.headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    # -- running ------------------------------------------------------------------------

    def request(self, http: httpx.Client | httpx.AsyncClient, call: _Call[Any]) -> httpx.Request:
        return http.build_request(
            call.method, call.url, content=call.body, headers={**self.headers, **call.headers}
        )

    def delay_after_error(self, call: _Call[Any], attempt: int, error: Exception) -> float:
        retryable = call.idempotent and isinstance(error, _RETRYABLE_ERRORS)
        delay = self.retry.delay(attempt) if retryable else None
        if delay is None:
            raise AmberConnectionError(
                f"{call.method} {call.url}: {type(error).__name__}: {error}"
                f" (after {attempt + 1} attempt(s))"
            ) from error
        return delay

    def delay_after_response(
        self, call: _Call[Any], attempt: int, response: httpx.Response
    ) -> float | None:
        if not call.idempotent or response.status_code not in self.retry.retry_statuses:
            return None
        return self.retry.delay(attempt, _retry_after(response))

    @staticmethod
    def finish(call: _Call[T], response: httpx.Response) -> T:
        if response.status_code in call.ok:
            return call.parse(response)
        raise _error_from(response)

    # -- building -----------------------------------------------------------------------

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
    ) -> _Call[T]:
        # Serialised once: every retry sends the very same bytes (the server keys its
        # idempotency record on the body's hash).
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if method == "POST":
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        return _Call(method, self.url(path), parse, frozenset(ok), body, headers)

    def put_transcript(
        self, transcript_id: str, retention: str | datetime | None, labels: Mapping[str, str] | None
    ) -> _Call[Transcript]:
        payload: dict[str, Any] = {"labels": dict(labels or {})}
        if isinstance(retention, datetime):
            payload["retention"] = {"retain_until": _rfc3339(retention)}
        elif retention is not None:
            payload["retention"] = retention
        return self.json_call(
            "PUT",
            _transcript_path(transcript_id),
            payload,
            _parse_json(Transcript.from_json),
            (200, 201),
        )

    def get_transcript(self, transcript_id: str) -> _Call[Transcript]:
        return _Call(
            "GET", self.url(_transcript_path(transcript_id)), _parse_json(Transcript.from_json)
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
    ) -> _Call[MementoInfo]:
        payload: dict[str, Any] = {
            "uri_r": uri_r,
            "content_type": content_type,
            "scope": scope,
            **_content_fields(content),
        }
        optional = {
            "captured_at": _rfc3339(captured_at) if captured_at else None,
            "tool": tool,
            "final_url": final_url,
            "http_status": http_status,
        }
        payload.update({k: v for k, v in optional.items() if v is not None})
        if headers:
            payload["headers"] = _capture_headers(headers)
        return self.json_call(
            "POST",
            "/api/v1/mementos",
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
    ) -> _Call[CiteResult]:
        payload: dict[str, Any] = {"citations": [dict(c) for c in citations]}
        if sources:
            payload["sources"] = {ref: dict(source) for ref, source in sources.items()}
        if fail_closed is not None:
            payload["fail_closed"] = fail_closed
        if run_id is not None:
            payload["run_id"] = run_id
        return self.json_call(
            "POST",
            _transcript_path(transcript_id) + "/citations",
            payload,
            _parse_cite,
            (200, 201),
            idempotency_key,
        )

    def get_memento(self, ref: str) -> _Call[MementoInfo]:
        return _Call(
            "GET",
            self.url(f"/api/v1/mementos/{_memento_id(ref)}"),
            _parse_json(MementoInfo.from_json),
        )

    def fetch_memento(self, ref: str, verify: bool) -> _Call[MementoContent]:
        memento_id = _memento_id(ref)
        return _Call(
            "GET",
            self.url(f"/memento/{memento_id}"),
            functools.partial(_parse_content, memento_id, verify),
            headers={"Accept": "*/*"},
        )

    def timegate(self, uri_r: str, at: datetime | None) -> _Call[TimeGateResult]:
        headers = {"Accept": "*/*"}
        if at is not None:
            if at.tzinfo is None:
                raise ValueError("the TimeGate datetime must be timezone-aware")
            headers["Accept-Datetime"] = format_datetime(at.astimezone(UTC), usegmt=True)
        # The URI-R goes raw at the end of the path, query string included (DESIGN.md).
        return _Call(
            "GET",
            self.url("/timegate/" + uri_r),
            functools.partial(_parse_timegate, uri_r),
            frozenset({302}),
            headers=headers,
        )


def _transcript_path(transcript_id: str) -> str:
    return "/api/v1/transcripts/" + url_quote(transcript_id, safe="")


def _memento_id(ref: str) -> str:
    """A memento id from an id or a URI-M. Only the id is used: URI-Ms are fetched from this
    client's base URL, so the API key never goes to a host named inside a link."""
    tail = ref.split("#", 1)[0].split("?", 1)[0].rstrip("/")
    if "/memento/" in tail:
        tail = tail.rsplit("/memento/", 1)[1]
    return url_quote(tail, safe="")


def _content_fields(content: bytes | str) -> dict[str, str]:
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


def _capture_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): str(v) for k, v in headers.items() if k.lower() in CAPTURE_HEADERS}


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
    etag = response.headers.get("etag", "").strip().removeprefix("W/").strip('"')
    claimed = etag.replace("-", ":", 1) if etag.startswith("blake3-") else None
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
    return TimeGateResult(uri_r, location, _memento_id(location), response.headers.get("link", ""))


# ---------------------------------------------------------------------------------------
# Evidence capture
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """What a fetching tool returns to the wrapper: the response exactly as received.

    ``body`` is the raw bytes (never re-encoded text: byte identity is what lets the drift
    job say ``identical`` later). Adapters: :meth:`from_httpx`, :meth:`from_mapping`, and
    any object with the same attribute names (e.g. Amber's own ``FetchedDocument``).
    """

    url: str
    body: bytes = field(repr=False)
    content_type: str = "application/octet-stream"
    status: int | None = 200
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    final_url: str | None = None
    title: str | None = None
    fetched_at: datetime | None = None  # default: when the wrapper received it

    def __post_init__(self) -> None:
        if not isinstance(self.body, bytes):
            raise TypeError("ToolResult.body must be bytes (the body as fetched)")
        if self.fetched_at is not None and self.fetched_at.tzinfo is None:
            raise ValueError("ToolResult.fetched_at must be timezone-aware")

    @classmethod
    def from_httpx(cls, response: httpx.Response, *, title: str | None = None) -> ToolResult:
        # The request URL as asked; after redirects httpx's request is the final one.
        first = response.history[0].request.url if response.history else response.request.url
        return cls(
            url=str(first),
            body=response.content,
            content_type=response.headers.get("content-type", "application/octet-stream"),
            status=response.status_code,
            headers=dict(response.headers),
            final_url=str(response.url),
            title=title,
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ToolResult:
        body = data.get("body", data.get("content"))
        if isinstance(body, str):
            body = body.encode("utf-8")
        fetched = data.get("fetched_at")
        return cls(
            url=str(data.get("url") or data.get("uri") or data.get("uri_r")),
            body=body if isinstance(body, bytes) else b"",
            content_type=str(data.get("content_type") or "application/octet-stream"),
            status=data.get("status", data.get("http_status", 200)),
            headers=dict(data.get("headers") or {}),
            final_url=data.get("final_url"),
            title=data.get("title"),
            fetched_at=datetime.fromisoformat(fetched) if isinstance(fetched, str) else fetched,
        )

    @classmethod
    def coerce(cls, output: Any) -> ToolResult:
        if isinstance(output, ToolResult):
            return output
        if isinstance(output, httpx.Response):
            return cls.from_httpx(output)
        if isinstance(output, Mapping):
            return cls.from_mapping(output)
        if hasattr(output, "url") and hasattr(output, "body"):
            return cls.from_mapping(
                {
                    name: getattr(output, name)
                    for name in (
                        "url",
                        "body",
                        "content_type",
                        "status",
                        "headers",
                        "final_url",
                        "title",
                        "fetched_at",
                    )
                    if getattr(output, name, None) is not None
                }
            )
        raise TypeError(
            f"a wrapped fetch tool must return ToolResult, httpx.Response or a mapping with "
            f"url/body/content_type, not {type(output).__name__}"
        )


@dataclass(frozen=True)
class SearchHit:
    """One search result: what a search tool saw, never evidence of what the page says."""

    url: str
    title: str | None = None
    snippet: str = ""

    @classmethod
    def coerce(cls, output: Any) -> SearchHit:
        if isinstance(output, SearchHit):
            return output
        if isinstance(output, ToolResult):
            return cls(output.url, output.title, _decode(output.body, output.content_type))
        if isinstance(output, Mapping):
            return cls(
                str(output.get("url") or output.get("uri")),
                output.get("title"),
                str(output.get("snippet") or output.get("text") or ""),
            )
        raise TypeError(
            f"a wrapped search tool must yield SearchHit or mappings, not {type(output).__name__}"
        )


@dataclass(frozen=True)
class Source:
    """One captured tool output, filed in the locker under ``source_id``.

    The id is bound to the capture: it is derived from the tool, URI, content hash and fetch
    time. ``is_evidence`` is False for search results (and tools outside the locker's
    ``evidence_tools``): a hint for prompts and UIs — the server still decides.
    """

    source_id: str
    tool: str
    uri: str
    content_hash: str
    fetched_at: datetime
    content_type: str
    body: bytes = field(repr=False)
    title: str | None = None
    status: int | None = None
    final_url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    is_evidence: bool = True

    @property
    def text(self) -> str:
        """The body decoded for the model to read (the raw bytes are what gets cited)."""
        return _decode(self.body, self.content_type)

    def for_model(self) -> str:
        """A compact rendering to hand to the model as the tool's output."""
        kind = "" if self.is_evidence else " (search result: NOT citable evidence)"
        head = f"[source_id: {self.source_id}]{kind}\nURL: {self.uri}\n"
        return head + (f"Title: {self.title}\n" if self.title else "") + "\n" + self.text

    def wire_source(self) -> dict[str, Any]:
        """The inline ``source`` of a citation: the bytes as fetched, with the capture facts."""
        wire: dict[str, Any] = {
            "uri_r": self.uri,
            **_content_fields(self.body),
            "content_type": self.content_type,
            "captured_at": _rfc3339(self.fetched_at),
            "tool": self.tool,
        }
        if self.final_url and self.final_url != self.uri:
            wire["final_url"] = self.final_url
        if self.status is not None:
            wire["http_status"] = self.status
        headers = _capture_headers(self.headers)
        if headers:
            wire["headers"] = headers
        return wire


class EvidenceLocker:
    """Keeps every wrapped tool's output, so the agent's citations can point at it.

    ``wrap_tool(name, fn)`` (or ``@locker.tool(name)``) returns a function with ``fn``'s
    parameters (sync or async, as ``fn``) that calls it and records its output:

    - tools whose name starts with ``search.``: ``fn`` returns an iterable of
      :class:`SearchHit` (or mappings with url/title/snippet); each hit is recorded as a
      :class:`Source` with ``is_evidence=False`` and the wrapper returns the tuple;
    - any other tool (``http.get``, ``kb.read``, …): ``fn`` returns a :class:`ToolResult`,
      an ``httpx.Response`` or a mapping; the wrapper returns the recorded :class:`Source`.

    Thread-safe. ``clock`` (default: now, UTC) stamps outputs that carry no fetch time.
    """

    def __init__(
        self,
        *,
        evidence_tools: Iterable[str] = DEFAULT_EVIDENCE_TOOLS,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.evidence_tools = frozenset(evidence_tools)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._sources: dict[str, Source] = {}
        self._lock = threading.Lock()

    # -- wrapping -----------------------------------------------------------------------

    def wrap_tool(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return self.record_output(name, await fn(*args, **kwargs))

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return self.record_output(name, fn(*args, **kwargs))

        return wrapper

    def tool(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of :meth:`wrap_tool`: ``@locker.tool("http.get")``."""
        return functools.partial(self.wrap_tool, name)

    # -- recording ----------------------------------------------------------------------

    def record_output(self, tool: str, output: Any) -> Source | tuple[Source, ...]:
        if tool.startswith(SEARCH_TOOL_PREFIX):
            return self.record_search(tool, output)
        return self.record(tool, ToolResult.coerce(output))

    def record(self, tool: str, result: ToolResult) -> Source:
        body = result.body
        digest = content_hash(body)
        fetched_at = result.fetched_at or self._clock()
        title = result.title if result.title is not None else _html_title(body, result.content_type)
        evidence = tool in self.evidence_tools and not tool.startswith(SEARCH_TOOL_PREFIX)
        source = Source(
            source_id=_source_id("ev" if evidence else "nx", tool, result.url, digest, fetched_at),
            tool=tool,
            uri=result.url,
            content_hash=digest,
            fetched_at=fetched_at,
            content_type=result.content_type,
            body=body,
            title=title,
            status=result.status,
            final_url=result.final_url,
            headers=dict(result.headers),
            is_evidence=evidence,
        )
        return self._file(source)

    def record_search(self, tool: str, hits: Iterable[Any]) -> tuple[Source, ...]:
        fetched_at = self._clock()
        recorded = []
        for hit in map(SearchHit.coerce, hits):
            body = hit.snippet.encode("utf-8")
            digest = content_hash(body)
            recorded.append(
                self._file(
                    Source(
                        source_id=_source_id("sr", tool, hit.url, digest, fetched_at),
                        tool=tool,
                        uri=hit.url,
                        content_hash=digest,
                        fetched_at=fetched_at,
                        content_type="text/plain; charset=utf-8",
                        body=body,
                        title=hit.title,
                        status=None,
                        is_evidence=False,
                    )
                )
            )
        return tuple(recorded)

    def _file(self, source: Source) -> Source:
        with self._lock:
            return self._sources.setdefault(source.source_id, source)

    # -- looking up ---------------------------------------------------------------------

    def get(self, source_id: str) -> Source | None:
        with self._lock:
            return self._sources.get(source_id)

    def __getitem__(self, source_id: str) -> Source:
        found = self.get(source_id)
        if found is None:
            raise KeyError(source_id)
        return found

    def __contains__(self, item: object) -> bool:
        """``source_id in locker`` (or ``source in locker``)."""
        key = item.source_id if isinstance(item, Source) else item
        with self._lock:
            return key in self._sources

    def __iter__(self) -> Iterator[Source]:
        with self._lock:
            return iter(list(self._sources.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._sources)


def _source_id(kind: str, tool: str, uri: str, digest: str, fetched_at: datetime) -> str:
    material = "\n".join((tool, uri, digest, _rfc3339(fetched_at)))
    return f"{kind}_{blake3.blake3(material.encode('utf-8')).hexdigest()[:12]}"


_CHARSET = re.compile(r"charset\s*=\s*\"?([\w.:-]+)", re.IGNORECASE)
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)


def _decode(data: bytes, content_type: str) -> str:
    found = _CHARSET.search(content_type or "")
    try:
        return data.decode(found.group(1) if found else "utf-8", errors="replace")
    except LookupError:
        return data.decode("utf-8", errors="replace")


def _html_title(body: bytes, content_type: str) -> str | None:
    if "html" not in (content_type or "").lower():
        return None
    found = _TITLE.search(body[:65536])
    if not found:
        return None
    title = " ".join(html.unescape(_decode(found.group(1), content_type)).split())
    return title or None


# ---------------------------------------------------------------------------------------
# Answers
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One citation the model made: the words it quotes from a captured source."""

    source_id: str
    quote: str
    prefix: str | None = None
    suffix: str | None = None
    position: int | None = None

    @classmethod
    def coerce(cls, item: Claim | Mapping[str, Any]) -> Claim:
        if isinstance(item, Claim):
            return item
        quote = item.get("quote")
        if isinstance(quote, Mapping):  # the wire shape {"exact", "prefix", …}
            return cls(
                str(item.get("source_id")),
                str(quote.get("exact", "")),
                quote.get("prefix"),
                quote.get("suffix"),
                quote.get("position"),
            )
        return cls(
            str(item.get("source_id")),
            str(quote or ""),
            item.get("prefix"),
            item.get("suffix"),
            item.get("position"),
        )

    def wire_quote(self) -> dict[str, Any]:
        quote: dict[str, Any] = {"exact": self.quote}
        for name in ("prefix", "suffix", "position"):
            if getattr(self, name) is not None:
                quote[name] = getattr(self, name)
        return quote


@dataclass(frozen=True)
class Answer:
    """The model's answer: its text and the citations it makes."""

    text: str
    citations: tuple[Claim, ...] = ()

    def __init__(self, text: str, citations: Iterable[Claim | Mapping[str, Any]] = ()) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "citations", tuple(Claim.coerce(c) for c in citations))

    @classmethod
    def coerce(cls, answer: Answer | Mapping[str, Any]) -> Answer:
        if isinstance(answer, Answer):
            return answer
        return cls(str(answer.get("text", "")), answer.get("citations") or ())


@dataclass(frozen=True)
class CitedAnswer:
    """The answer as it may be shown: cited, or (degrade mode) rewritten to the safe form."""

    text: str  # what to show: the model's text, or SAFE_ANSWER plus reasons when degraded
    citations: tuple[CitationRecord, ...]
    errors: tuple[CitationError, ...]
    degraded: bool
    original_text: str
    transcript_id: str
    run_id: str | None

    @property
    def uri_ms(self) -> tuple[str, ...]:
        return tuple(c.uri_m for c in self.citations)

    @property
    def robust_links(self) -> tuple[str, ...]:
        return tuple(c.robust_link for c in self.citations)

    def render_markdown(self) -> str:
        """The text with numbered sources: quote, capture time, URI-M and original URL."""
        if not self.citations:
            return self.text
        lines = [self.text, "", "Sources:"]
        for number, c in enumerate(self.citations, 1):
            when = c.memento_datetime.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            lines.append(
                f"[{number}] “{c.exact or ''}” — archived {when}: {c.uri_m} (original: {c.uri_r})"
            )
        return "\n".join(lines)

    def render_html(self) -> str:
        """The text and an ordered list of Robust Links (data-versionurl = the URI-M)."""
        items = "".join(
            f"<li><q>{html.escape(c.exact or '')}</q> {c.robust_link}</li>" for c in self.citations
        )
        body = "".join(f"<p>{html.escape(p)}</p>" for p in self.text.split("\n\n"))
        return body + (f'<ol class="amber-sources">{items}</ol>' if items else "")


def safe_answer(errors: Sequence[CitationError]) -> str:
    """The degrade-mode rewrite: :data:`SAFE_ANSWER` and why."""
    return "\n".join([SAFE_ANSWER, *(f"- {e.describe()}" for e in errors)])


@dataclass(frozen=True)
class _AnswerPlan:
    """Everything about citing an answer that is not I/O (shared by both clients)."""

    transcript_id: str
    answer: Answer
    mode: Mode
    required: bool
    keep_valid: bool
    run_id: str | None
    locker: EvidenceLocker
    sent: tuple[int, ...]  # answer citation index of each citation sent, in order
    client_errors: tuple[CitationError, ...]
    call: _Call[CiteResult] | None  # None: decided without asking the server

    @classmethod
    def make(
        cls,
        core: _Core,
        transcript_id: str,
        answer: Answer | Mapping[str, Any],
        locker: EvidenceLocker,
        *,
        mode: Mode,
        required: bool,
        keep_valid: bool,
        run_id: str | None,
        idempotency_key: str | None,
    ) -> _AnswerPlan:
        if mode not in ("fail_closed", "degrade"):
            raise ValueError("mode is 'fail_closed' or 'degrade'")
        answer = Answer.coerce(answer)
        sent, wire, errors = [], [], []
        refs: dict[str, str] = {}  # source_id -> key in `sources`
        shared: dict[str, dict[str, Any]] = {}
        for index, claim in enumerate(answer.citations):
            source = locker.get(claim.source_id)
            if source is None:
                errors.append(
                    CitationError(
                        index,
                        "unknown_evidence",
                        "no wrapped tool captured this source_id",
                        claim.source_id,
                    )
                )
                continue
            sent.append(index)
            # Each captured document travels once, in `sources`, however often it is cited.
            ref = refs.get(source.source_id)
            if ref is None and len(refs) < MAX_SOURCES_PER_REQUEST:
                ref = refs[source.source_id] = f"s{len(refs)}"
                shared[ref] = source.wire_source()
            evidence = {"source_ref": ref} if ref is not None else {"source": source.wire_source()}
            wire.append({**evidence, "source_id": source.source_id, "quote": claim.wire_quote()})
        call = None
        if wire and (keep_valid or not errors):
            call = core.cite(
                transcript_id,
                wire,
                fail_closed=not keep_valid,
                run_id=run_id,
                idempotency_key=idempotency_key,
                sources=shared,
            )
        return cls(
            transcript_id,
            answer,
            mode,
            required,
            keep_valid,
            run_id,
            locker,
            tuple(sent),
            tuple(errors),
            call,
        )

    def conclude(self, outcome: CiteResult | CitationRejected | None) -> CitedAnswer:
        errors = list(self.client_errors)
        citations: tuple[CitationRecord, ...] = ()
        if isinstance(outcome, CitationRejected):
            errors += [self._remap(e) for e in outcome.errors]
        elif outcome is not None:
            errors += [self._remap(e) for e in outcome.errors]
            citations = outcome.citations
            self._check_hashes(citations)
        errors.sort(key=lambda e: -1 if e.index is None else e.index)
        if not self.answer.citations and self.required:
            errors.append(
                CitationError(
                    None, "no_citations", "the answer cites nothing and citations are required"
                )
            )
        failed = (bool(errors) and not self.keep_valid) or (self.required and not citations)
        if not failed:
            return CitedAnswer(
                self.answer.text,
                citations,
                tuple(errors),
                False,
                self.answer.text,
                self.transcript_id,
                self.run_id,
            )
        safe = safe_answer(errors)
        if self.mode == "fail_closed":
            raise CitationRejected(
                f"{len(errors)} citation problem(s); nothing was stored",
                errors,
                safe_text=safe,
                status=outcome.status if isinstance(outcome, CitationRejected) else None,
            )
        return CitedAnswer(
            safe, (), tuple(errors), True, self.answer.text, self.transcript_id, self.run_id
        )

    def _remap(self, error: CitationError) -> CitationError:
        """Server indices count the citations sent; map them back to the answer's."""
        if error.index is None or not 0 <= error.index < len(self.sent):
            return error
        index = self.sent[error.index]
        return CitationError(
            index, error.reason, error.detail, self.answer.citations[index].source_id
        )

    def _check_hashes(self, citations: Sequence[CitationRecord]) -> None:
        for citation in citations:
            for source_id in citation.source_ids:
                source = self.locker.get(source_id)
                if source is not None and source.content_hash != citation.document_hash:
                    raise EvidenceIntegrityError(
                        f"citation {citation.id}: the server hashed the document of {source_id} "
                        f"to {citation.document_hash}, the tool's bytes hash to {source.content_hash}"
                    )


# ---------------------------------------------------------------------------------------
# The clients
# ---------------------------------------------------------------------------------------


class AmberClient:
    """Synchronous client. ``base_url`` is the server's address (e.g. ``http://127.0.0.1:8000``).

    ``http_client`` lets you bring your own ``httpx.Client`` (proxies, TLS, a test
    transport, ``fastapi.testclient.TestClient``); it is then yours to close. Otherwise
    ``timeout`` and ``transport`` configure the one the client makes.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._core = _Core(base_url, api_key, retry or RetryPolicy(), headers)
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(
            timeout=timeout, transport=transport, trust_env=False
        )

    def _run(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.send(
                    self._core.request(self._http, call), follow_redirects=False
                )
            except httpx.TransportError as error:
                delay = self._core.delay_after_error(call, attempt, error)
            else:
                retry_in = self._core.delay_after_response(call, attempt, response)
                if retry_in is None:
                    return self._core.finish(call, response)
                response.close()
                delay = retry_in
            time.sleep(delay)
            attempt += 1

    # -- transcripts and citations ------------------------------------------------------

    def put_transcript(
        self,
        transcript_id: str,
        *,
        retention: str | datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Transcript:
        """Create or update a transcript; ``retention`` a policy name (``"regulated"``), an
        ISO 8601 duration (``"P7Y"``) or an aware datetime (retain until)."""
        return self._run(self._core.put_transcript(transcript_id, retention, labels))

    def get_transcript(self, transcript_id: str) -> Transcript:
        return self._run(self._core.get_transcript(transcript_id))

    def cite(
        self,
        transcript_id: str,
        citations: Sequence[Mapping[str, Any]],
        *,
        fail_closed: bool | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CiteResult:
        """POST citations in the wire shape (``{"memento_id"|"source", "quote", …}``).
        Raises :class:`CitationRejected` on a 422."""
        return self._run(
            self._core.cite(
                transcript_id,
                citations,
                fail_closed=fail_closed,
                run_id=run_id,
                idempotency_key=idempotency_key,
            )
        )

    def cite_answer(
        self,
        transcript_id: str,
        answer: Answer | Mapping[str, Any],
        locker: EvidenceLocker,
        *,
        mode: Mode = "fail_closed",
        required: bool = True,
        keep_valid: bool = False,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CitedAnswer:
        """Cite an answer's claims from the locker's captured sources (see the module doc)."""
        plan = _AnswerPlan.make(
            self._core,
            transcript_id,
            answer,
            locker,
            mode=mode,
            required=required,
            keep_valid=keep_valid,
            run_id=run_id,
            idempotency_key=idempotency_key,
        )
        if plan.call is None:
            return plan.conclude(None)
        try:
            result = self._run(plan.call)
        except CitationRejected as rejected:
            return plan.conclude(rejected)
        return plan.conclude(result)

    verify_citations = cite_answer

    # -- mementos and time travel -------------------------------------------------------

    def write_memento(
        self,
        uri_r: str,
        content: bytes | str,
        content_type: str,
        *,
        captured_at: datetime | None = None,
        scope: str = "document",
        tool: str | None = None,
        final_url: str | None = None,
        http_status: int | None = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> MementoInfo:
        """Store a memento (``bytes`` arrive byte for byte: as text when UTF-8, else base64)."""
        return self._run(
            self._core.write_memento(
                uri_r,
                content,
                content_type,
                captured_at=captured_at,
                scope=scope,
                tool=tool,
                final_url=final_url,
                http_status=http_status,
                headers=headers,
                idempotency_key=idempotency_key,
            )
        )

    def get_memento(self, memento: str) -> MementoInfo:
        """Metadata of a memento, by id or URI-M."""
        return self._run(self._core.get_memento(memento))

    def fetch_memento(self, memento: str, *, verify: bool = True) -> MementoContent:
        """The bytes of a memento (by id or URI-M), re-hashed against its ETag."""
        return self._run(self._core.fetch_memento(memento, verify))

    def timegate(self, uri_r: str, at: datetime | None = None) -> TimeGateResult:
        """The memento of ``uri_r`` nearest to ``at`` (default: the latest)."""
        return self._run(self._core.timegate(uri_r, at))

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> AmberClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncAmberClient:
    """The asyncio twin of :class:`AmberClient`: the same methods, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._core = _Core(base_url, api_key, retry or RetryPolicy(), headers)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(
            timeout=timeout, transport=transport, trust_env=False
        )

    async def _run(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.send(
                    self._core.request(self._http, call), follow_redirects=False
                )
            except httpx.TransportError as error:
                delay = self._core.delay_after_error(call, attempt, error)
            else:
                retry_in = self._core.delay_after_response(call, attempt, response)
                if retry_in is None:
                    return self._core.finish(call, response)
                await response.aclose()
                delay = retry_in
            await asyncio.sleep(delay)
            attempt += 1

    async def put_transcript(
        self,
        transcript_id: str,
        *,
        retention: str | datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Transcript:
        return await self._run(self._core.put_transcript(transcript_id, retention, labels))

    async def get_transcript(self, transcript_id: str) -> Transcript:
        return await self._run(self._core.get_transcript(transcript_id))

    async def cite(
        self,
        transcript_id: str,
        citations: Sequence[Mapping[str, Any]],
        *,
        fail_closed: bool | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CiteResult:
        return await self._run(
            self._core.cite(
                transcript_id,
                citations,
                fail_closed=fail_closed,
                run_id=run_id,
                idempotency_key=idempotency_key,
            )
        )

    async def cite_answer(
        self,
        transcript_id: str,
        answer: Answer | Mapping[str, Any],
        locker: EvidenceLocker,
        *,
        mode: Mode = "fail_closed",
        required: bool = True,
        keep_valid: bool = False,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CitedAnswer:
        plan = _AnswerPlan.make(
            self._core,
            transcript_id,
            answer,
            locker,
            mode=mode,
            required=required,
            keep_valid=keep_valid,
            run_id=run_id,
            idempotency_key=idempotency_key,
        )
        if plan.call is None:
            return plan.conclude(None)
        try:
            result = await self._run(plan.call)
        except CitationRejected as rejected:
            return plan.conclude(rejected)
        return plan.conclude(result)

    verify_citations = cite_answer

    async def write_memento(
        self,
        uri_r: str,
        content: bytes | str,
        content_type: str,
        *,
        captured_at: datetime | None = None,
        scope: str = "document",
        tool: str | None = None,
        final_url: str | None = None,
        http_status: int | None = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> MementoInfo:
        return await self._run(
            self._core.write_memento(
                uri_r,
                content,
                content_type,
                captured_at=captured_at,
                scope=scope,
                tool=tool,
                final_url=final_url,
                http_status=http_status,
                headers=headers,
                idempotency_key=idempotency_key,
            )
        )

    async def get_memento(self, memento: str) -> MementoInfo:
        return await self._run(self._core.get_memento(memento))

    async def fetch_memento(self, memento: str, *, verify: bool = True) -> MementoContent:
        return await self._run(self._core.fetch_memento(memento, verify))

    async def timegate(self, uri_r: str, at: datetime | None = None) -> TimeGateResult:
        return await self._run(self._core.timegate(uri_r, at))

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncAmberClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
