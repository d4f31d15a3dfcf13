"""The URI-M and the memento write as plain ASGI, served before FastAPI's stack.

Why: they are the hottest requests (auditors and agents resolving citations, agents writing
at citation time), and measured in process FastAPI's routing, dependency solving and
middleware cost several times the work itself (benchmarks/README.md). Both answer exactly
as the documented routes in :mod:`api.mementos` do (tests/test_api.py holds them equal),
and a write FastAPI would refuse is handed to FastAPI, so every refusal is FastAPI's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from fastapi import Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette import types as asgi

from api.auth import Gatekeeper, bearer_token, record_read
from api.deps import IDEMPOTENCY_KEY
from api.errors import amber_error_response, unexpected_error_response
from api.mementos import (
    READER_ROLES,
    WRITE_PATH,
    WRITER_ROLES,
    memento_headers,
    memento_json,
    memento_request,
)
from api.middleware import reject_too_large
from api.models import MementoIn
from api.urls import MEMENTO_PREFIX, Urls
from archive.access.keys import Principal
from archive.archive import Archive
from archive.exceptions import AmberError
from archive.hashing import content_address
from archive.index.signals import ReadCache
from archive.mementos import Memento


def is_memento_write(scope: asgi.Scope) -> bool:
    """Whether an ASGI request is a memento write (``POST /api/v1/mementos``)."""
    return (
        scope["type"] == "http"
        and scope["method"] == "POST"
        and scope["path"] == WRITE_PATH
        and not scope.get("root_path")
    )


def is_memento_content(scope: asgi.Scope) -> bool:
    """Whether an ASGI request is a GET or HEAD of a URI-M (``/memento/<id>``)."""
    if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or scope.get("root_path"):
        return False
    path: str = scope["path"]
    memento_id = path.removeprefix(MEMENTO_PREFIX)
    return memento_id != path and memento_id != "" and "/" not in memento_id


@dataclass
class MementoRoute:
    """The URI-M route as plain ASGI: the same authorisation and answer as the FastAPI route,
    without its routing, dependency solving and middleware layers, and with everything it
    needs in plain attributes (Starlette's ``State`` resolves each through ``__getattr__``).

    Why: it is the hottest route (auditors and agents resolving citations), and measured in
    process those layers cost several times the work itself: the lookup, the read with its
    re-hash and the headers (benchmarks/README.md).
    """

    gatekeeper: Gatekeeper
    urls: Urls
    archive: Archive | None = None  # set by start()
    # (tenant, id) -> what answering it needs, until the next deletion in any process.
    _served: ReadCache[tuple[str, str], ServedMemento] | None = None

    def start(self, archive: Archive) -> None:
        if self.archive is archive and self._served is not None:
            return  # given at creation (tests) and started again by the lifespan
        self.archive = archive
        self._served = archive.index.cache_until_deletion(
            ServedMemento.weight, budget=archive.settings.uri_m_cache_mb * 1024 * 1024
        )

    def served_cache(self) -> ReadCache[tuple[str, str], ServedMemento] | None:
        """The memory of answers (its counters and usage), once started."""
        return self._served

    def close(self) -> None:
        if self._served is not None:
            self._served.close()
            self._served = None

    async def serve(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        authorization = if_none_match = None
        for name, value in scope["headers"]:
            if name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"if-none-match" and if_none_match is None:
                if_none_match = value.decode("latin-1")
        try:
            principal = await self.gatekeeper.authorize(bearer_token(authorization), READER_ROLES)
            status, headers, body = await self.resolve(
                principal, path[len(MEMENTO_PREFIX) :], method, if_none_match
            )
        except AmberError as error:
            await amber_error_response(error, method, path)(scope, receive, send)
            return
        except Exception:
            await unexpected_error_response(method, path)(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def resolve(
        self, principal: Principal, memento_id: str, method: str, if_none_match: str | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """``(status, headers, body)`` of a URI-M request by an authorised principal, the
        headers as ASGI sends them."""
        archive = self.archive
        cache = self._served
        assert archive is not None and cache is not None, "the app has not started"
        served = await cache.get_or_load_async(
            (principal.tenant, memento_id),
            lambda: self._look_up(archive, principal.tenant, memento_id),
        )
        record_read(archive.read_audit, principal, "memento.content", memento_id)
        if if_none_match and _matches(if_none_match, served.etag()):
            return 304, list(served.headers[1:]), b""
        # HEAD re-hashes the bytes too: it must not advertise evidence that fails to verify.
        data = await archive.read_blob_async(
            served.content_hash, served.blob_version_id, size=served.size
        )
        return (
            200,
            [*served.headers, (b"content-length", str(len(data)).encode("ascii"))],
            b"" if method == "HEAD" else data,
        )

    async def _look_up(self, archive: Archive, tenant: str, memento_id: str) -> ServedMemento:
        return ServedMemento.of(await archive.get_memento_async(tenant, memento_id), self.urls)


class ServedMemento(NamedTuple):
    """What answering a live memento's URI-M needs, remembered by :class:`MementoRoute`
    until the next deletion committed in any process: where its bytes are, and its
    headers. All fixed at capture; expiry and legal hold, which change, are not here.

    Kept small on purpose (~1.4 KB, against ~3.2 KB for the memento and its headers as
    dictionaries): the same memory then remembers twice as many mementos.
    """

    content_hash: str
    blob_version_id: str | None
    size: int
    headers: tuple[tuple[bytes, bytes], ...]  # memento_headers

    @classmethod
    def of(cls, memento: Memento, urls: Urls) -> ServedMemento:
        return cls(
            memento.content_hash,
            memento.blob_version_id,
            memento.size,
            memento_headers(memento, urls),
        )

    def etag(self) -> str:
        return next(value for name, value in self.headers if name == b"etag").decode("ascii")

    def weight(self) -> int:
        """About the bytes it holds, with its place in the cache (measured: ~1.4 KB)."""
        return (
            _SERVED_OVERHEAD + len(self.content_hash) + sum(len(value) for _, value in self.headers)
        )


# Objects and containers of a remembered ServedMemento beyond its text (tracemalloc: the
# named tuple, the header tuples, the bytes objects, the key and its cache entry).
_SERVED_OVERHEAD = 800


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    candidates = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in candidates or etag in candidates


@dataclass
class WriteRoute:
    """The memento write as plain ASGI, for the same reasons as :class:`MementoRoute`: it is
    what every agent does at citation time, and FastAPI's layers cost more than checking
    and staging the write. With a local store and SQLite, the write is checked and staged
    on the event loop, which then serves other requests while the group commit makes it
    durable: no thread hop per request (Archive.write_memento_async).

    Only well-formed requests are served here: anything FastAPI would refuse (malformed
    JSON, a body that does not match :class:`MementoIn`, an odd Content-Type or
    Idempotency-Key) is handed, body and all, to the FastAPI route, so every refusal is
    exactly FastAPI's.
    """

    gatekeeper: Gatekeeper
    urls: Urls
    max_body_bytes: int
    archive: Archive | None = None  # set by start()

    def start(self, archive: Archive) -> None:
        self.archive = archive

    async def serve(
        self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send, fallback: asgi.ASGIApp
    ) -> None:
        authorization = key = content_type = None
        for name, value in scope["headers"]:
            if name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"idempotency-key" and key is None:
                key = value.decode("latin-1")
            elif name == b"content-type" and content_type is None:
                content_type = value
            elif name == b"content-length" and _too_large(value, self.max_body_bytes):
                await reject_too_large(send)
                return
        raw = await _read_body(receive, self.max_body_bytes)
        if raw is _Unread.TOO_LARGE:
            await reject_too_large(send)
            return
        if raw is _Unread.DISCONNECTED:
            return  # nobody is left to answer
        body = _well_formed(raw, content_type, key)
        if body is None:
            await fallback(scope, _replay(raw, receive), send)
            return
        try:
            principal = await self.gatekeeper.authorize(bearer_token(authorization), WRITER_ROLES)
            response = await self.write(principal, body, raw, key)
        except AmberError as error:
            response = amber_error_response(error, "POST", WRITE_PATH)
        except Exception:
            response = unexpected_error_response("POST", WRITE_PATH)
        await response(scope, receive, send)

    async def write(
        self, principal: Principal, body: MementoIn, raw: bytes, idempotency_key: str | None
    ) -> Response:
        """The answer to a checked write request by an authorised principal."""
        archive = self.archive
        assert archive is not None, "the app has not started"
        result = await archive.write_memento_async(
            memento_request(body),
            tenant=principal.tenant,
            idempotency_key=idempotency_key,
            request_hash=content_address(raw) if idempotency_key else None,
        )
        rendered = memento_json(result.memento, self.urls)
        return JSONResponse(
            rendered,
            status_code=201 if result.created else 200,
            headers={"Location": rendered["uri_m"]},
        )


class _Unread(Enum):
    TOO_LARGE = "over the body size limit"
    DISCONNECTED = "the client left before sending it all"


def _too_large(content_length: bytes, limit: int) -> bool:
    try:
        return int(content_length) > limit
    except ValueError:
        return False  # as BodySizeLimit: the bytes actually read are counted below


async def _read_body(receive: asgi.Receive, limit: int) -> bytes | _Unread:
    """The request body, or why it was not read."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return _Unread.DISCONNECTED
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return _Unread.TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _well_formed(raw: bytes, content_type: bytes | None, key: str | None) -> MementoIn | None:
    """The request body as :class:`MementoIn` when FastAPI would accept the request as it
    stands; None when FastAPI should answer it."""
    if (
        content_type is not None
        and content_type.split(b";", 1)[0].strip().lower() != b"application/json"
    ):
        return None
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        return None
    try:
        # json.loads, then validation: exactly what FastAPI does with a JSON body.
        return MementoIn.model_validate(json.loads(raw))
    except (ValueError, RecursionError, ValidationError):  # ValueError: JSON, UTF-8 errors
        return None


def _replay(raw: bytes, receive: asgi.Receive) -> asgi.Receive:
    """A ``receive`` that hands the already-read body over again, then defers to the real one."""
    replayed = False

    async def replay() -> asgi.Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return replay
