"""The fetch itself: one document through the guard, redirects vetted, body capped.

Only ``http``/``https`` URLs without credentials are accepted (:class:`InvalidURI`).
Redirects are followed here, one hop at a time, each hop through the guarded transport
(:mod:`archive.fetch.transport`); the chain is recorded, and credentials never follow a
redirect to another origin. Bodies are streamed and capped at ``settings.fetch_max_bytes``,
and the whole fetch is bounded in time; all failures surface as :class:`FetchError`
subclasses with messages that name the host, never response content.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from archive.config import Settings
from archive.exceptions import FetchError, FetchRefused, FetchTooLarge, InvalidURI
from archive.fetch.policy import parse_ip
from archive.fetch.transport import guarded_async_client, guarded_client, require_guarded
from archive.mementos import KEPT_HEADERS as MEMENTO_HEADERS

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

# The response headers a memento keeps as facts about its representation: one list, in
# archive.mementos (Set-Cookie above all is dropped: personal data). Content-Length is left
# out because httpx undoes Content-Encoding, so the origin's length describes other bytes.
KEPT_HEADERS = tuple(sorted(MEMENTO_HEADERS - {"content-length"}))

# Request headers that must not follow a redirect to another origin.
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")

# Read timeouts bound each socket read; this bounds the whole fetch (all hops and the body),
# so a server dripping one byte per read timeout cannot hold a worker forever.
TOTAL_DEADLINE_FACTOR = 4

_SCHEMES = ("http", "https")
# What a DNS name looks like once IDNA-encoded (underscores occur in the wild).
_HOSTNAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")


# --------------------------------------------------------------------------------------
# The fetch itself: logic shared by the sync and async loops


@dataclass(frozen=True)
class FetchedDocument:
    url: str  # as requested
    final_url: str  # after redirects
    status: int
    content_type: str | None
    headers: dict[str, str]  # only KEPT_HEADERS, lower-case names
    body: bytes
    redirects: tuple[str, ...]  # every URL a redirect sent us to, in order
    fetched_at: datetime  # aware UTC: when the final response's headers arrived
    elapsed_ms: int


def _parse_target(url: str, error: type[FetchError | InvalidURI]) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise error(f"not a valid URL: {exc}") from exc
    return _check_target(parsed, error)


def _check_target(parsed: httpx.URL, error: type[FetchError | InvalidURI]) -> httpx.URL:
    if parsed.scheme not in _SCHEMES:
        shown = parsed.scheme or "no scheme"
        raise error(f"only http and https URLs are fetched, not {shown!r}")
    if not parsed.host:
        raise error("the URL has no host")
    raw_host = parsed.raw_host.decode("ascii", "replace")
    if parse_ip(raw_host) is None and not _HOSTNAME.fullmatch(raw_host):
        raise error(f"not a valid host name: {raw_host!r}")
    if parsed.userinfo:  # credentials would be sent upstream and end up in the archive
        raise error(f"URLs with credentials are not fetched (host {parsed.host!r})")
    return parsed


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


def _announced_length(response: httpx.Response) -> int | None:
    try:
        return int(response.headers["content-length"])
    except (KeyError, ValueError):
        return None


@dataclass
class _Fetch:
    """State of one fetch across hops; the sync and async loops only do the I/O."""

    requested: str
    current: httpx.URL
    settings: Settings
    headers: dict[str, str]
    hops: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    body: bytearray = field(default_factory=bytearray)
    received_at: datetime | None = None

    @classmethod
    def start(cls, url: str, settings: Settings, headers: Mapping[str, str] | None) -> _Fetch:
        if not isinstance(url, str):
            raise InvalidURI("the URL must be a string")
        return cls(url, _parse_target(url, InvalidURI), settings, dict(headers or {}))

    @property
    def host(self) -> str:
        return self.current.host

    @property
    def requested_host(self) -> str:  # messages name hosts, never paths or query strings
        return httpx.URL(self.requested).host

    def check_deadline(self) -> None:
        limit = self.settings.fetch_timeout_seconds * TOTAL_DEADLINE_FACTOR
        if time.monotonic() - self.started > limit:
            raise FetchError(f"fetching {self.host!r} took longer than {limit:g}s", host=self.host)

    def next_hop(self, response: httpx.Response) -> httpx.URL | None:
        """The redirect target (scheme checked; its address is vetted when we connect to it),
        or ``None`` when ``response`` is the document itself."""
        location = response.headers.get("location")
        if response.status_code not in REDIRECT_STATUSES or not location:
            self.received_at = datetime.now(UTC)
            self.check_announced(response)
            return None
        if len(self.hops) >= self.settings.fetch_max_redirects:
            raise FetchError(
                f"too many redirects (more than {self.settings.fetch_max_redirects}) "
                f"starting from {self.requested_host!r}",
                redirects=len(self.hops),
            )
        try:
            target = self.current.join(location)
        except httpx.InvalidURL as exc:
            raise FetchError(f"{self.host!r} redirected to an invalid URL") from exc
        return _check_target(target, FetchRefused)

    def follow(self, target: httpx.URL) -> None:
        if _origin(target) != _origin(self.current):
            for name in [k for k in self.headers if k.lower() in _CREDENTIAL_HEADERS]:
                del self.headers[name]
        self.hops.append(str(target))
        self.current = target
        self.check_deadline()

    def check_announced(self, response: httpx.Response) -> None:
        announced = _announced_length(response)
        cap = self.settings.fetch_max_bytes
        if announced is not None and announced > cap:
            raise FetchTooLarge(
                f"{self.host!r} announced {announced} bytes, over the {cap}-byte cap",
                host=self.host,
            )

    def take(self, chunk: bytes) -> None:
        cap = self.settings.fetch_max_bytes
        if len(self.body) + len(chunk) > cap:
            raise FetchTooLarge(
                f"the response from {self.host!r} exceeded the {cap}-byte cap", host=self.host
            )
        self.body += chunk
        self.check_deadline()

    def document(self, response: httpx.Response) -> FetchedDocument:
        kept = {name: response.headers[name] for name in KEPT_HEADERS if name in response.headers}
        return FetchedDocument(
            url=self.requested,
            final_url=str(self.current),
            status=response.status_code,
            content_type=response.headers.get("content-type"),
            headers=kept,
            body=bytes(self.body),
            redirects=tuple(self.hops),
            fetched_at=self.received_at or datetime.now(UTC),
            elapsed_ms=round((time.monotonic() - self.started) * 1000),
        )


@contextmanager
def _transport_errors(state: _Fetch) -> Iterator[None]:
    """httpx failures as FetchError, naming the host (never anything from the body)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise FetchError(
            f"timed out fetching {state.host!r} ({type(exc).__name__}, "
            f"limit {state.settings.fetch_timeout_seconds:g}s)",
            host=state.host,
        ) from exc
    except (httpx.HTTPError, httpx.StreamError) as exc:
        raise FetchError(
            f"fetching {state.host!r} failed: {type(exc).__name__}: {exc}", host=state.host
        ) from exc


def fetch(
    url: str,
    settings: Settings,
    *,
    headers: Mapping[str, str] | None = None,
    client: httpx.Client | None = None,
) -> FetchedDocument:
    """GET ``url`` through the guard, following vetted redirects; the body capped in size."""
    state = _Fetch.start(url, settings, headers)
    if client is not None:
        require_guarded(client)
        return _fetch_with(client, state)
    with guarded_client(settings) as own:
        return _fetch_with(own, state)


def _fetch_with(client: httpx.Client, state: _Fetch) -> FetchedDocument:
    while True:
        with _transport_errors(state):
            request = client.build_request("GET", state.current, headers=state.headers)
            response = client.send(request, stream=True)
            try:
                target = state.next_hop(response)
                if target is None:
                    for chunk in response.iter_bytes():
                        state.take(chunk)
                    return state.document(response)
            finally:
                response.close()
        state.follow(target)


async def fetch_async(
    url: str,
    settings: Settings,
    *,
    headers: Mapping[str, str] | None = None,
    client: httpx.AsyncClient | None = None,
) -> FetchedDocument:
    """The async :func:`fetch`; pass a shared :func:`guarded_async_client` as ``client``."""
    state = _Fetch.start(url, settings, headers)
    if client is not None:
        require_guarded(client)
        return await _fetch_with_async(client, state)
    async with guarded_async_client(settings) as own:
        return await _fetch_with_async(own, state)


async def _fetch_with_async(client: httpx.AsyncClient, state: _Fetch) -> FetchedDocument:
    while True:
        with _transport_errors(state):
            request = client.build_request("GET", state.current, headers=state.headers)
            response = await client.send(request, stream=True)
            try:
                target = state.next_hop(response)
                if target is None:
                    async for chunk in response.aiter_bytes():
                        state.take(chunk)
                    return state.document(response)
            finally:
                await response.aclose()
        state.follow(target)
