"""The URI-M and the memento write as plain ASGI, served before FastAPI's stack.

Why: they are the hottest requests (auditors and agents resolving citations, agents writing
at citation time), and measured in process FastAPI's routing, dependency solving and
middleware cost several times the work itself (benchmarks/README.md). Both answer exactly
as the documented routes in :mod:`api.mementos` do (tests/test_api.py holds them equal).
A write passes the request budget (:mod:`api.budget`) first, as every request with a body
does; one it lets through that is not plainly well formed is handed to FastAPI.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple

from fastapi import Response
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter
from starlette import types as asgi

from api.auth import record_read
from api.budget import BodyRoute, RequestBudget, replay
from api.errors import amber_error_response, unexpected_error_response
from api.mementos import (
    READER_ROLES,
    WRITE_PATH,
    WRITER_ROLES,
    memento_headers,
    memento_json,
    memento_request,
)
from api.models import MementoIn
from api.readroute import ReadRoute
from api.urls import MEMENTO_PREFIX, Urls
from archive.access.keys import Principal
from archive.archive import Archive
from archive.exceptions import AmberError
from archive.hashing import content_address
from archive.index.signals import ReadCache
from archive.mementos import Memento
from archive.writes import WriteResult


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


class MementoRoute(ReadRoute[tuple[str, str], "ServedMemento"]):
    """The URI-M route as plain ASGI: the same authorisation and answer as the FastAPI route,
    without its routing, dependency solving and middleware layers, and with everything it
    needs in plain attributes (Starlette's ``State`` resolves each through ``__getattr__``).

    Why: it is the hottest route (auditors and agents resolving citations), and measured in
    process those layers cost several times the work itself: the lookup, the read with its
    re-hash and the headers (benchmarks/README.md).
    """

    # Its memory: (tenant, id) -> what answering it needs, until the next deletion in any
    # process.

    def new_memory(self, archive: Archive) -> ReadCache[tuple[str, str], ServedMemento]:
        return archive.index.changes.cache_until_deletion(
            ServedMemento.weight, budget=archive.settings.uri_m_cache_mb * 1024 * 1024
        )

    def served_cache(self) -> ReadCache[tuple[str, str], ServedMemento] | None:
        """The memory of answers (its counters and usage), once started."""
        return self.memory

    roles = READER_ROLES
    header = b"if-none-match"

    async def reply(
        self, principal: Principal, scope: asgi.Scope, if_none_match: str | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        path: str = scope["path"]
        return await self.resolve(
            principal, path[len(MEMENTO_PREFIX) :], scope["method"], if_none_match
        )

    async def resolve(
        self, principal: Principal, memento_id: str, method: str, if_none_match: str | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """``(status, headers, body)`` of a URI-M request by an authorised principal, the
        headers as ASGI sends them."""
        archive = self.archive
        cache = self.memory
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


# The write as the request budget sees it. A body sent without Content-Type is parsed too,
# as this route always has; FastAPI's route would refuse it, so only a valid one is kept.
WRITE_BODY = BodyRoute(
    roles=WRITER_ROLES,
    model=TypeAdapter(MementoIn),
    json_without_content_type=True,
    idempotency_key=True,
)


@dataclass
class WriteRoute:
    """The memento write as plain ASGI, for the same reasons as :class:`MementoRoute`: it is
    what every agent does at citation time, and FastAPI's layers cost more than checking
    and staging the write. With a local store and SQLite, the write is checked and staged
    on the event loop, which then serves other requests while the group commit makes it
    durable: no thread hop per request (Archive.write_memento_async).

    The request budget authorises, reads, parses and validates the request first (and
    refuses it there if it must). Only a well-formed request is served here: anything else
    FastAPI would refuse (an odd Content-Type, a body sent as ``null``)
    is handed, body and all, to the FastAPI route, so every refusal is FastAPI's or the
    budget's, exactly as on every other route.
    """

    budget: RequestBudget
    urls: Urls
    archive: Archive | None = None  # set by start()

    def start(self, archive: Archive) -> None:
        self.archive = archive

    async def serve(
        self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send, fallback: asgi.ASGIApp
    ) -> None:
        if self.archive is not None:  # PostgreSQL: revocations in any replica, first
            await self.archive.index.observe_changes()
        admitted = await self.budget.admit(WRITE_BODY, scope, receive)
        if admitted is None:
            return  # the client left: nobody to answer
        if isinstance(admitted, Response):
            await admitted(scope, receive, send)  # refused
            return
        key = content_type = None
        for name, value in scope["headers"]:
            if name == b"idempotency-key" and key is None:
                key = value.decode("latin-1")
            elif name == b"content-type" and content_type is None:
                content_type = value
        body = admitted.value
        if (
            not isinstance(body, MementoIn)
            or admitted.principal is None
            or not _plain_json(content_type)
        ):
            await fallback(scope, replay(admitted.raw, receive), send)
            return
        try:
            result = await self.written(admitted.principal, body, admitted.raw, key)
            status, headers, content = self.answer(result)
        except AmberError as error:
            await amber_error_response(error, "POST", WRITE_PATH)(scope, receive, send)
            return
        except Exception:
            await unexpected_error_response("POST", WRITE_PATH)(scope, receive, send)
            return
        # Sent as JSONResponse sends it (same bytes, same headers in the same order), without
        # building a Response object per write.
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    async def write(
        self, principal: Principal, body: MementoIn, raw: bytes, idempotency_key: str | None
    ) -> Response:
        """The answer to a checked write request by an authorised principal."""
        result = await self.written(principal, body, raw, idempotency_key)
        rendered = memento_json(result.memento, self.urls)
        return JSONResponse(
            rendered,
            status_code=201 if result.created else 200,
            headers={"Location": rendered["uri_m"]},
        )

    async def written(
        self, principal: Principal, body: MementoIn, raw: bytes, idempotency_key: str | None
    ) -> WriteResult:
        archive = self.archive
        assert archive is not None, "the app has not started"
        return await archive.write_memento_async(
            memento_request(body),
            tenant=principal.tenant,
            idempotency_key=idempotency_key,
            request_hash=content_address(raw) if idempotency_key else None,
        )

    def answer(self, result: WriteResult) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """``(status, headers, body)`` of a write's answer, exactly as :meth:`write`'s
        JSONResponse renders them."""
        rendered = memento_json(result.memento, self.urls)
        content = json.dumps(
            rendered, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
        ).encode("utf-8")
        headers = [
            (b"location", rendered["uri_m"].encode("latin-1")),
            (b"content-length", str(len(content)).encode("latin-1")),
            (b"content-type", b"application/json"),
        ]
        return 201 if result.created else 200, headers, content


def _plain_json(content_type: bytes | None) -> bool:
    """No Content-Type, or ``application/json`` (with parameters): what this route serves."""
    return (
        content_type is None
        or content_type.split(b";", 1)[0].strip().lower() == b"application/json"
    )
