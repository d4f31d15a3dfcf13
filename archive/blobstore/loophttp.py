"""Keep-alive HTTP/1.1 connections to one S3 endpoint, driven by the caller's event loop.

Why it exists: a memento write on S3 waits for one PutObject. Sent from a worker thread
(urllib3), every write holds a thread for the round trip, and on a busy server the threads,
the event loop and the group commit fight for the GIL after each system call: measured on
PostgreSQL + SeaweedFS, a write's bytes took 0.8 ms of CPU and 15 ms of wall time to go up,
of which the round trip itself is under 1 ms (issue #20). Here the request is written
to a socket the event loop owns and the answer arrives as a callback: no thread, no GIL
hand-over. The async clients at hand cost more than the threads they would save (httpx
2.2 ms, httpcore 1.6 ms of CPU per 4 KiB PUT against urllib3's 0.5 ms, same run), so this
is an :class:`asyncio.Protocol` with httptools (the C parser uvicorn serves with) reading
the answers.

Deliberately small: one request per connection at a time, no redirects, no chunked
uploads, no proxies. The caller (:mod:`archive.blobstore.loopputs`) sends only PutObject
through it and hands anything but a plain answer to the complete synchronous path.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

import certifi
import httptools


class Response:
    """One HTTP answer: status, headers (names lower-case, or case-insensitive) and the
    whole body."""

    __slots__ = ("data", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
        self.status = status
        self.headers = headers
        self.data = data


class ConnectionDropped(ConnectionError):
    """The server closed the connection before its answer was complete."""


class LoopConnections:
    """A pool of keep-alive connections to one ``http(s)://host[:port]``, per event loop."""

    def __init__(
        self,
        endpoint: str,
        *,
        max_idle: int,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the endpoint must be an http(s) URL")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = (
            ssl.create_default_context(cafile=certifi.where()) if parts.scheme == "https" else None
        )
        self._max_idle = max_idle
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        # Tests and the CLI run several loops one after another; a connection belongs to one.
        self._idle: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Connection]] = (
            weakref.WeakKeyDictionary()
        )

    async def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> Response:
        """Send one request and return the whole answer. Raises OSError (refused, reset,
        dropped) or TimeoutError; the answer's status is the caller's to judge.

        A kept-alive connection the server closed meanwhile fails before any byte of the
        answer; the request then goes once more on a new connection."""
        message = _request_bytes(method, target, headers, body)
        idle = self._idle.setdefault(asyncio.get_running_loop(), [])
        while idle:
            connection = idle.pop()
            if not connection.usable:
                continue
            try:
                response = await self._exchange(connection, message)
            except ConnectionDropped as dropped:
                if dropped.args and dropped.args[0] == "before":
                    break  # closed while idle: try a fresh connection
                raise
            self._release(idle, connection)
            return response
        connection = await self._connect()
        response = await self._exchange(connection, message)
        self._release(idle, connection)
        return response

    def close(self) -> None:
        """Close the idle connections of every loop (their loops may be gone: no awaits)."""
        for idle in list(self._idle.values()):
            while idle:
                idle.pop().close()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _, connection = await loop.create_connection(
                _Connection, self._host, self._port, ssl=self._ssl
            )
        return connection

    async def _exchange(self, connection: _Connection, message: bytes) -> Response:
        try:
            async with asyncio.timeout(self._read_timeout):
                return await connection.exchange(message)
        except BaseException:
            connection.close()  # a half-read answer never serves the next request
            raise

    def _release(self, idle: list[_Connection], connection: _Connection) -> None:
        if connection.usable and len(idle) < self._max_idle:
            idle.append(connection)
        else:
            connection.close()


class _Connection(asyncio.Protocol):
    """One connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future[Response] | None = None
        self._received = False  # any byte of the current answer
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._keep_alive = False
        self.usable = False  # connected, idle, and the server did not ask to close

    # -- used by the pool -------------------------------------------------------------

    def exchange(self, message: bytes) -> asyncio.Future[Response]:
        assert self._transport is not None and self._answer is None
        self.usable = False
        self._answer = asyncio.get_running_loop().create_future()
        self._received = False
        self._status, self._headers, self._body = 0, {}, []
        self._transport.write(message)
        return self._answer

    def close(self) -> None:
        self.usable = False
        transport, self._transport = self._transport, None
        if transport is None:
            return
        if self._loop is not None and self._loop.is_closed():
            # Its loop is gone (a test's, the CLI's): a transport cannot close without it,
            # and dropping it lets the collector close the socket.
            return
        transport.close()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self._loop = asyncio.get_running_loop()
        self.usable = True

    def data_received(self, data: bytes) -> None:
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(ConnectionDropped(f"unreadable answer: {error}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        self._fail(ConnectionDropped("after" if self._received else "before"))

    # -- httptools callbacks ------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        answer, self._answer = self._answer, None
        self.usable = self._keep_alive
        if answer is not None and not answer.done():
            answer.set_result(Response(self._status, self._headers, b"".join(self._body)))

    def _fail(self, error: Exception) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)


def _request_bytes(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
    """The request as sent. Header values are Amber's own (signed names, dates, hashes):
    a line break in one would be a bug, never something a client sent."""
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError("header names and values must not contain line breaks")
        lines.append(f"{name}: {value}")
    lines.append(f"content-length: {len(body)}")
    head = "\r\n".join(lines) + "\r\n\r\n"
    return head.encode("latin-1") + body
