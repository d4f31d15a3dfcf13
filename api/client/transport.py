"""Running a call: credentials, retries, and the server's answer read or mapped to an error.

Every call is idempotent — GET/PUT by nature, and every POST carries an ``Idempotency-Key``
(a uuid4 per logical call, reused by each of its retries; the body bytes are serialised
once) — so connection errors, timeouts, 429 and 503 are retried a bounded number of times
with exponential backoff and jitter, honouring ``Retry-After``. The sync and async clients
share all of it; only their I/O differs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Generic, TypeVar

import httpx

from api.client.errors import (
    AmberClientError,
    AmberConnectionError,
    AuthError,
    CitationRejected,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
)
from api.client.models import CitationError
from api.client.wire import USER_AGENT

T = TypeVar("T")


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
        # float(): an int power is typed loosely (a negative exponent would give a float).
        growth = float(2**attempt)
        backoff = min(self.max_backoff, self.backoff * growth) * random.uniform(0.5, 1.5)
        return max(backoff, retry_after or 0.0)


_RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One logical API call: how to build its request and how to read its answer."""

    method: str
    url: str
    parse: Callable[[httpx.Response], T]
    ok: frozenset[int] = frozenset({200})
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = True


class Transport:
    """What both clients share to run a call: credentials and default headers, the retry
    policy, and reading the answer."""

    def __init__(
        self, api_key: str | None, retry: RetryPolicy, headers: Mapping[str, str] | None
    ) -> None:
        self.retry = retry
        self.headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def request(self, http: httpx.Client | httpx.AsyncClient, call: Call[T]) -> httpx.Request:
        return http.build_request(
            call.method, call.url, content=call.body, headers={**self.headers, **call.headers}
        )

    def delay_after_error(self, call: Call[T], attempt: int, error: Exception) -> float:
        retryable = call.idempotent and isinstance(error, _RETRYABLE_ERRORS)
        delay = self.retry.delay(attempt) if retryable else None
        if delay is None:
            raise AmberConnectionError(
                f"{call.method} {call.url}: {type(error).__name__}: {error}"
                f" (after {attempt + 1} attempt(s))"
            ) from error
        return delay

    def delay_after_response(
        self, call: Call[T], attempt: int, response: httpx.Response
    ) -> float | None:
        if not call.idempotent or response.status_code not in self.retry.retry_statuses:
            return None
        return self.retry.delay(attempt, retry_after(response))

    @staticmethod
    def finish(call: Call[T], response: httpx.Response) -> T:
        if response.status_code in call.ok:
            return call.parse(response)
        raise error_from(response)


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


def error_from(response: httpx.Response) -> AmberClientError:
    """The error a refusal means (the server's ``{"error": {code, message, detail}}``)."""
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
    return kind(message, status=status, code=code, detail=detail, retry_after=retry_after(response))


def retry_after(response: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds from now (delay-seconds or an HTTP date)."""
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
