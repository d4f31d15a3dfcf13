"""The outbound fetch guard: every HTTP request Amber makes to the outside goes through here.

Amber fetches URLs that agents and users hand it, so a fetch is a classic SSRF vector: a URL
(or a redirect, or a DNS answer) pointing at ``127.0.0.1``, a private network or a cloud
metadata endpoint would let a caller read what only the server can reach.

How the guard works:

- Only ``http``/``https`` URLs without credentials are accepted (:class:`InvalidURI`).
- The check happens at *connect time*, inside an httpcore network backend
  (:class:`GuardedBackend` / :class:`AsyncGuardedBackend`): the host is resolved once, every
  address it resolves to is classified, and the socket is opened to one of those checked
  addresses — never to the name again — so DNS rebinding between "check" and "connect" has
  nothing to exploit. The URL keeps the hostname, so the ``Host`` header and TLS SNI /
  certificate checks still use the name.
- Redirects are followed here, one hop at a time, each hop through the same backend; the
  chain is recorded. Environment proxies are ignored (a proxy would be the address we
  connect to, and it would resolve the real target itself).
- ``settings.fetch_allow`` opens hostnames (exact, case-insensitive) or CIDRs / single
  addresses. Cloud metadata addresses open only when listed as that exact address: allowing
  ``169.254.0.0/16`` or an internal hostname must not quietly expose instance credentials.
- Bodies are streamed and capped at ``settings.fetch_max_bytes``; all failures surface as
  :class:`FetchError` subclasses with messages that name the host, never response content.

Use :func:`fetch` / :func:`fetch_async` for one document, or :func:`guarded_client` /
:func:`guarded_async_client` for a pooled client shared across many fetches (pass it as
``client=``). A guarded client used directly refuses blocked destinations the same way, but
does not follow redirects or cap bodies — that is what ``fetch`` adds.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
import httpcore
import httpx

from archive.config import Settings
from archive.exceptions import FetchError, FetchRefused, FetchTooLarge, InvalidURI

__all__ = [
    "KEPT_HEADERS",
    "AllowList",
    "AsyncGuardedBackend",
    "FetchedDocument",
    "GuardedBackend",
    "blocked_reason",
    "fetch",
    "fetch_async",
    "guarded_async_client",
    "guarded_client",
    "is_metadata",
    "resolve",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

# Response headers that are facts about the captured representation. Everything else
# (Set-Cookie above all: personal data) is dropped.
KEPT_HEADERS = (
    "content-type",
    "content-language",
    "content-location",
    "content-disposition",
    "etag",
    "last-modified",
    "date",
    "expires",
    "age",
    "cache-control",
    "link",
    "memento-datetime",
    "x-robots-tag",
)

# Request headers that must not follow a redirect to another origin.
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")

# Read timeouts bound each socket read; this bounds the whole fetch (all hops and the body),
# so a server dripping one byte per read timeout cannot hold a worker forever.
TOTAL_DEADLINE_FACTOR = 4

_SCHEMES = ("http", "https")
# What a DNS name looks like once IDNA-encoded (underscores occur in the wild).
_HOSTNAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")


# --------------------------------------------------------------------------------------
# Address policy


def _net(cidr: str) -> IPNetwork:
    return ipaddress.ip_network(cidr)


_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
    )
)

# Most specific first: the first match names the reason.
_BLOCKED: tuple[tuple[IPNetwork, str], ...] = tuple(
    (_net(cidr), reason)
    for cidr, reason in (
        ("0.0.0.0/32", "unspecified address"),
        ("0.0.0.0/8", "'this network' (reserved; reaches the local host on Linux)"),
        ("127.0.0.0/8", "loopback"),
        ("10.0.0.0/8", "private network (RFC 1918)"),
        ("172.16.0.0/12", "private network (RFC 1918)"),
        ("192.168.0.0/16", "private network (RFC 1918)"),
        ("100.64.0.0/10", "shared/CGNAT address space (RFC 6598)"),
        ("169.254.0.0/16", "link-local"),
        ("192.0.0.0/24", "IETF protocol assignments (reserved)"),
        ("192.0.2.0/24", "documentation range (reserved)"),
        ("198.51.100.0/24", "documentation range (reserved)"),
        ("203.0.113.0/24", "documentation range (reserved)"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("198.18.0.0/15", "benchmarking range (reserved)"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved (class E)"),
        ("::/128", "unspecified address"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible IPv6 (deprecated)"),
        ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
        ("100::/64", "discard-only (reserved)"),
        ("2001::/32", "Teredo tunnel (hides an IPv4 address)"),
        ("2001:db8::/32", "documentation range (reserved)"),
        ("2001::/23", "IETF protocol assignments (reserved)"),
        ("3fff::/20", "documentation range (reserved)"),
        ("fc00::/7", "private network (unique local, fc00::/7)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)

_GLOBAL_UNICAST_V6 = _net("2000::/3")
_NAT64 = _net("64:ff9b::/96")


def _plain(ip: IPAddress) -> IPAddress:
    """``ip`` without an IPv6 scope id, so set membership and equality work."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        return ipaddress.IPv6Address(int(ip))
    return ip


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form really reaches (mapped, NAT64, 6to4), if any."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _effective(ip: IPAddress) -> IPAddress:
    return _plain(_embedded_v4(ip) or ip)


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def is_metadata(address: str | IPAddress) -> bool:
    ip = _parse_ip(address) if isinstance(address, str) else address
    return ip is not None and _effective(ip) in _METADATA


def blocked_reason(address: str | IPAddress) -> str | None:
    """Why ``address`` must not be fetched by default, or ``None`` if it is public."""
    ip = _parse_ip(address) if isinstance(address, str) else address
    if ip is None:
        raise ValueError(f"not an IP address: {address!r}")
    ip = _plain(ip)
    inner = _embedded_v4(ip)
    if inner is not None:
        reason = blocked_reason(inner)
        return None if reason is None else f"{reason}, embedded in IPv6 {ip}"
    if ip in _METADATA:
        return "cloud metadata endpoint"
    for network, reason in _BLOCKED:
        if ip.version == network.version and ip in network:
            return reason
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        return "reserved (outside IPv6 global unicast 2000::/3)"
    if not ip.is_global:  # belt and braces: whatever the stdlib also knows is not public
        return "not globally routable"
    return None


def _normalize_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


@dataclass(frozen=True)
class AllowList:
    """``AMBER_FETCH_ALLOW``: hostnames, and CIDRs or single addresses, that may be private."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> AllowList:
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in (e.strip() for e in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                hosts.add(_normalize_host(entry))
        return cls(frozenset(hosts), tuple(networks))

    def _covers(self, ip: IPAddress, *, exact: bool = False) -> bool:
        candidates = {_plain(ip), _effective(ip)}
        return any(
            c.version == net.version and c in net and (not exact or net.num_addresses == 1)
            for net in self.networks
            for c in candidates
        )

    def permits(self, host: str, ip: IPAddress) -> bool:
        if is_metadata(ip):  # only an entry naming this very address opens it
            return self._covers(ip, exact=True)
        return _normalize_host(host) in self.hosts or self._covers(ip)

    def vet(self, host: str, addresses: Sequence[IPAddress]) -> list[IPAddress]:
        """All of ``addresses`` if each is public or allowed; else :class:`FetchRefused`.

        One bad answer refuses the whole name: a name that mixes public and private
        addresses is exactly what a rebinding attack looks like.
        """
        if not addresses:
            raise FetchError(f"{host!r} did not resolve to any address", host=host)
        for ip in addresses:
            reason = blocked_reason(ip)
            if reason is not None and not self.permits(host, ip):
                raise FetchRefused(
                    _refusal(host, ip, reason), host=host, address=str(ip), reason=reason
                )
        return list(addresses)


def _refusal(host: str, ip: IPAddress, reason: str) -> str:
    where = f"{host!r}" if _parse_ip(host) is not None else f"{host!r} (resolves to {ip})"
    hint = (
        "metadata endpoints open only when AMBER_FETCH_ALLOW lists that exact address"
        if is_metadata(ip)
        else "add the host or a CIDR to AMBER_FETCH_ALLOW if this is intended"
    )
    return f"refused to fetch {where}: {reason}; {hint}"


# --------------------------------------------------------------------------------------
# Resolution


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, in resolver order, without duplicates.

    Module-level on purpose: tests replace it to simulate DNS answers.
    """
    literal = _parse_ip(host)
    if literal is not None:
        return [literal]
    found: list[IPAddress] = []
    for family, _type, _proto, _name, sockaddr in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM
    ):
        if family in (socket.AF_INET, socket.AF_INET6):
            ip = ipaddress.ip_address(str(sockaddr[0]))
            if ip not in found:
                found.append(ip)
    return found


def _lookup(host: str, port: int) -> list[IPAddress]:
    """Call the (possibly replaced) module-level :func:`resolve`, with errors as FetchError."""
    try:
        return resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise FetchError(f"cannot resolve {host!r}: {exc}", host=host) from exc


def _dns_timeout(host: str, timeout: float | None) -> FetchError:
    return FetchError(f"DNS lookup for {host!r} timed out after {timeout}s", host=host)


def _resolve_sync(host: str, port: int, timeout: float | None) -> list[IPAddress]:
    literal = _parse_ip(host)
    if literal is not None:
        return [literal]
    # getaddrinfo has no timeout of its own: run it in a daemon thread and stop waiting.
    outcome: list[list[IPAddress] | FetchError] = []

    def work() -> None:
        try:
            outcome.append(_lookup(host, port))
        except FetchError as exc:  # handed to the caller's thread below
            outcome.append(exc)

    worker = threading.Thread(target=work, name="amber-dns", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise _dns_timeout(host, timeout)
    if isinstance(outcome[0], FetchError):
        raise outcome[0]
    return outcome[0]


async def _resolve_async(host: str, port: int, timeout: float | None) -> list[IPAddress]:
    literal = _parse_ip(host)
    if literal is not None:
        return [literal]
    try:
        with anyio.fail_after(timeout):
            return await anyio.to_thread.run_sync(_lookup, host, port, abandon_on_cancel=True)
    except TimeoutError as exc:
        raise _dns_timeout(host, timeout) from exc


# --------------------------------------------------------------------------------------
# Network backends: resolve, vet, connect to the vetted address


_Stream = TypeVar("_Stream")


def _connect_first(addresses: Sequence[IPAddress], connect: Callable[[str], _Stream]) -> _Stream:
    """Try the vetted addresses in order; the last connect error wins if all fail."""
    failure: Exception | None = None
    for ip in addresses:
        try:
            return connect(str(ip))
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            failure = exc
    assert failure is not None  # vet() never returns an empty list
    raise failure


class GuardedBackend(httpcore.NetworkBackend):
    """A sync httpcore backend that connects only to addresses the allowlist policy passed."""

    def __init__(self, allow: AllowList, inner: httpcore.NetworkBackend | None = None) -> None:
        self._allow = allow
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self._allow.vet(host, _resolve_sync(host, port, timeout))
        options = list(socket_options or ())
        return _connect_first(
            addresses,
            lambda ip: self._inner.connect_tcp(ip, port, timeout, local_address, options),
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise FetchRefused("outbound fetches never use unix sockets")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AsyncGuardedBackend(httpcore.AsyncNetworkBackend):
    """The async twin of :class:`GuardedBackend` (anyio: works under asyncio and trio)."""

    def __init__(self, allow: AllowList, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._allow = allow
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = self._allow.vet(host, await _resolve_async(host, port, timeout))
        options = list(socket_options or ())
        failure: Exception | None = None
        for ip in addresses:  # same policy as _connect_first, awaited
            try:
                return await self._inner.connect_tcp(str(ip), port, timeout, local_address, options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise FetchRefused("outbound fetches never use unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# --------------------------------------------------------------------------------------
# Guarded httpx clients


def _pool_options() -> dict[str, Any]:
    # httpx's own defaults (httpx.Limits()), restated because we build the pool ourselves.
    return {"max_connections": 100, "max_keepalive_connections": 20, "keepalive_expiry": 5.0}


class _GuardedTransport(httpx.HTTPTransport):
    def __init__(self, allow: AllowList) -> None:
        ssl_context = httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=ssl_context, trust_env=False)
        # httpx has no public hook for the network backend, so the pool it just built is
        # replaced by one that connects through the guard.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context, network_backend=GuardedBackend(allow), **_pool_options()
        )


class _AsyncGuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, allow: AllowList) -> None:
        ssl_context = httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            network_backend=AsyncGuardedBackend(allow),
            **_pool_options(),
        )


# Clients built here; fetch() refuses any other client rather than fetch unguarded.
_GUARDED: weakref.WeakSet[httpx.Client | httpx.AsyncClient] = weakref.WeakSet()


def _client_options(settings: Settings) -> dict[str, Any]:
    return {
        "timeout": httpx.Timeout(settings.fetch_timeout_seconds),
        "headers": {"User-Agent": settings.user_agent},
        "follow_redirects": False,  # fetch() follows them, vetting every hop
        "trust_env": False,  # no env proxies: we must connect to the vetted address ourselves
    }


def guarded_client(settings: Settings) -> httpx.Client:
    """A pooled sync client whose every connection goes through the fetch guard."""
    allow = AllowList.from_entries(settings.fetch_allow)
    client = httpx.Client(transport=_GuardedTransport(allow), **_client_options(settings))
    _GUARDED.add(client)
    return client


def guarded_async_client(settings: Settings) -> httpx.AsyncClient:
    """A pooled async client (share it across a job) guarded like :func:`guarded_client`."""
    allow = AllowList.from_entries(settings.fetch_allow)
    client = httpx.AsyncClient(transport=_AsyncGuardedTransport(allow), **_client_options(settings))
    _GUARDED.add(client)
    return client


def _require_guarded(client: httpx.Client | httpx.AsyncClient) -> None:
    if client not in _GUARDED:
        raise TypeError("pass a client made by guarded_client() / guarded_async_client()")


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
    if _parse_ip(raw_host) is None and not _HOSTNAME.fullmatch(raw_host):
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
        _require_guarded(client)
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
        _require_guarded(client)
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
