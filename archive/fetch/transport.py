"""The guarded transport: resolve once, vet every address, connect only to a vetted one.

The check happens at *connect time*, inside an httpcore network backend
(:class:`GuardedBackend` / :class:`AsyncGuardedBackend`): the host is resolved once, every
address it resolves to is classified (:mod:`archive.fetch.policy`), and the socket is opened
to one of those checked addresses — never to the name again — so DNS rebinding between
"check" and "connect" has nothing to exploit. The URL keeps the hostname, so the ``Host``
header and TLS SNI / certificate checks still use the name. Environment proxies are ignored
(a proxy would be the address we connect to, and it would resolve the real target itself).

:func:`guarded_client` / :func:`guarded_async_client` build pooled httpx clients on this
transport; a guarded client used directly refuses blocked destinations, but does not
follow redirects or cap bodies (that is :mod:`archive.fetch.fetcher`'s part).

:func:`resolve` is the one seam for DNS: it is looked up in this module at every connect,
so tests replace ``archive.fetch.transport.resolve`` to simulate DNS answers.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TypedDict, TypeVar

import anyio
import httpcore
import httpx

from archive.config import Settings
from archive.exceptions import FetchError, FetchRefused
from archive.fetch.policy import AllowList, IPAddress, parse_ip

# What httpcore's backends accept as socket options (``httpcore._backends.base``).
SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class _PoolOptions(TypedDict):
    max_connections: int
    max_keepalive_connections: int
    keepalive_expiry: float


class _ClientOptions(TypedDict):
    timeout: httpx.Timeout
    headers: dict[str, str]
    follow_redirects: bool
    trust_env: bool


# --------------------------------------------------------------------------------------
# Resolution


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, in resolver order, without duplicates.

    Module-level on purpose, the hook for DNS: :func:`_lookup` looks it up here at every
    connect, so replacing ``archive.fetch.transport.resolve`` simulates DNS answers (tests).
    """
    literal = parse_ip(host)
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
    literal = parse_ip(host)
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
    literal = parse_ip(host)
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
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self._allow.vet(host, port, _resolve_sync(host, port, timeout))
        options = list(socket_options or ())
        return _connect_first(
            addresses,
            lambda ip: self._inner.connect_tcp(ip, port, timeout, local_address, options),
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
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
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = self._allow.vet(host, port, await _resolve_async(host, port, timeout))
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
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise FetchRefused("outbound fetches never use unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# --------------------------------------------------------------------------------------
# Guarded httpx clients


def _pool_options() -> _PoolOptions:
    # httpx's own defaults (httpx.Limits()), restated because we build the pool ourselves.
    return {"max_connections": 100, "max_keepalive_connections": 20, "keepalive_expiry": 5.0}


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process, shared by every guarded client: building one
    loads the CA bundle (measured ~30 ms), which a one-off fetch (``amber capture``, MCP's
    ``fetch_evidence``) would otherwise pay each time. SSLContext is safe to share."""
    return httpx.create_ssl_context(trust_env=False)


class _GuardedTransport(httpx.HTTPTransport):
    def __init__(self, allow: AllowList) -> None:
        ssl_context = _tls_context()
        super().__init__(verify=ssl_context, trust_env=False)
        # httpx has no public hook for the network backend, so the pool it just built is
        # replaced by one that connects through the guard.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context, network_backend=GuardedBackend(allow), **_pool_options()
        )


class _AsyncGuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, allow: AllowList) -> None:
        ssl_context = _tls_context()
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            network_backend=AsyncGuardedBackend(allow),
            **_pool_options(),
        )


# Clients built here; fetch() refuses any other client rather than fetch unguarded.
_GUARDED: weakref.WeakSet[httpx.Client | httpx.AsyncClient] = weakref.WeakSet()


def _client_options(settings: Settings) -> _ClientOptions:
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


def require_guarded(client: httpx.Client | httpx.AsyncClient) -> None:
    """Refuse a client not built here: a fetch must never go out unguarded."""
    if client not in _GUARDED:
        raise TypeError("pass a client made by guarded_client() / guarded_async_client()")
