"""Writing mementos, their metadata, and the URI-M itself (the captured bytes)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, NamedTuple

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette import types as asgi

from api.auth import READERS, Gatekeeper, audit_read, bearer_token, record_read, require
from api.deps import (
    IDEMPOTENCY_KEY,
    get_and_head,
    get_archive,
    get_urls,
    idempotency_key,
)
from api.errors import amber_error_response, unexpected_error_response
from api.middleware import reject_too_large
from api.models import ERROR_RESPONSES, MementoIn, MementoOut, decode_content
from api.urls import MEMENTO_PREFIX, TIMEGATE_PREFIX, TIMEMAP_JSON_PREFIX, TIMEMAP_LINK_PREFIX, Urls
from archive.archive import Archive, MementoRequest
from archive.dates import parse_rfc3339, to_rfc1123, to_rfc3339
from archive.exceptions import AmberError
from archive.hashing import content_address
from archive.keys import Principal, Role
from archive.mementos import CaptureFacts, Memento, Scope
from archive.signals import ReadCache
from archive.uri import to_ascii_uri

router = APIRouter()
WRITE_PATH = "/api/v1/mementos"
WRITER_ROLES = frozenset({Role.AGENT})
READER_ROLES = frozenset(READERS)
writers = require(*WRITER_ROLES)
readers = require(*READERS)

# Evidence is tenant-private and can expire (retention), so shared caches must not keep it
# and browsers only briefly.
CACHE_CONTROL = "private, max-age=300"


def memento_json(memento: Memento, urls: Urls) -> dict[str, Any]:
    """A memento as the API shows it (:class:`MementoOut`), as plain JSON values."""
    facts = memento.facts
    return {
        "id": memento.id,
        "uri_r": memento.uri_r,
        "uri_m": urls.memento(memento.id),
        "memento_datetime": to_rfc3339(memento.captured_at),
        "archived_at": to_rfc3339(memento.archived_at),
        "content_hash": memento.content_hash,
        "content_type": memento.media_type,
        "size": memento.size,
        "scope": memento.scope.value,
        "capture": {
            "tool": facts.tool,
            "final_url": facts.final_url,
            "http_status": facts.http_status,
            "headers": dict(facts.headers),
        },
        "timegate": urls.timegate(memento.uri_r),
        "timemap": urls.timemap_link(memento.uri_r),
        "timemap_json": urls.timemap_json(memento.uri_r),
    }


def render_memento(memento: Memento, urls: Urls) -> MementoOut:
    return MementoOut.model_validate(memento_json(memento, urls))


def _memento_request(body: MementoIn) -> MementoRequest:
    return MementoRequest(
        uri_r=body.uri_r,
        content=decode_content(body.content, body.content_base64),
        content_type=body.content_type,
        captured_at=parse_rfc3339(body.captured_at) if body.captured_at is not None else None,
        scope=Scope(body.scope),
        facts=CaptureFacts(
            tool=body.tool,
            final_url=body.final_url,
            http_status=body.http_status,
            headers=body.headers,
        ),
    )


@router.post(
    WRITE_PATH,
    response_model=MementoOut,
    status_code=201,
    responses={
        200: {"model": MementoOut, "description": "Already stored: the same memento."},
        409: ERROR_RESPONSES[400] | {"description": "Idempotency-Key reused or facts differ."},
        **ERROR_RESPONSES,
    },
    summary="Write a memento",
)
async def create_memento(
    body: MementoIn,
    request: Request,
    principal: Annotated[Principal, Depends(writers)],
    idempotency_key: Annotated[str | None, Depends(idempotency_key)],
) -> Response:
    """Store a captured document (or passage). 201 when new, 200 with the same body when
    this exact capture was already stored. With ``Idempotency-Key``, a retried request
    returns the first answer instead of writing again."""
    # Documents the route; requests normally reach WriteRoute.serve first (app.py).
    route: WriteRoute = request.app.write_route
    return await route.write(principal, body, await request.body(), idempotency_key)


@get_and_head(
    router,
    "/api/v1/mementos/{memento_id}",
    response_model=MementoOut,
    responses=ERROR_RESPONSES,
    summary="A memento's metadata",
)
def memento_metadata(
    memento_id: str,
    request: Request,
    archive: Annotated[Archive, Depends(get_archive)],
    urls: Annotated[Urls, Depends(get_urls)],
    principal: Annotated[Principal, Depends(readers)],
) -> MementoOut:
    memento = archive.get_memento(principal.tenant, memento_id)
    audit_read(request, principal, "memento.metadata", memento.id)
    return render_memento(memento, urls)


# The headers every URI-M answer shares, encoded once: each answer's tuple refers to these.
_SHARED_HEADERS = (
    (b"cache-control", CACHE_CONTROL.encode("ascii")),
    # Captured pages are untrusted: never let them run script on our origin.
    (b"content-security-policy", b"sandbox"),
    (b"x-content-type-options", b"nosniff"),
)


def memento_headers(memento: Memento, urls: Urls) -> tuple[tuple[bytes, bytes], ...]:
    """The headers of every answer with this memento's bytes, as ASGI sends them
    (Content-Length aside). Content-Type comes first: a 304 sends all the others."""
    when = to_rfc1123(memento.captured_at)
    return (
        (b"content-type", memento.media_type.encode("latin-1")),
        (b"memento-datetime", when.encode("ascii")),
        (b"link", memento_link_header(memento, urls, when).encode("ascii")),
        (b"etag", etag_for(memento.content_hash).encode("ascii")),
        *_SHARED_HEADERS,
    )


def memento_link_header(memento: Memento, urls: Urls, when: str) -> str:
    """The URI-M's Link header: exactly what ``link_header`` renders for its five links
    (a test holds them equal), without building and rendering five ``Link`` objects.

    Why by hand: rendering it the general way cost about as much as reading and re-hashing
    the 4 KiB it describes, on every URI-M answer not remembered. It stays as safe: the
    URI-R and the base URL are made ASCII by ``to_ascii_uri`` (character by character, so
    their concatenation is too), the paths and rels are constants, the id is hex and
    ``when`` is RFC 1123 (printable ASCII, no quotes).
    """
    uri_r = to_ascii_uri(memento.uri_r)
    base = urls.ascii_base
    return (
        f'<{uri_r}>; rel="original", '
        f'<{base}{TIMEGATE_PREFIX}{uri_r}>; rel="timegate", '
        f'<{base}{TIMEMAP_LINK_PREFIX}{uri_r}>; rel="timemap"; type="application/link-format", '
        f'<{base}{TIMEMAP_JSON_PREFIX}{uri_r}>; rel="timemap"; type="application/json", '
        f'<{base}{MEMENTO_PREFIX}{memento.id}>; rel="memento"; datetime="{when}"'
    )


def etag_for(content_hash: str) -> str:
    return '"' + content_hash.replace(":", "-") + '"'


@get_and_head(
    router,
    MEMENTO_PREFIX + "{memento_id}",
    response_class=Response,
    responses={
        200: {
            "description": "The captured bytes, verified against their hash.",
            "content": {"*/*": {}},
        },
        304: {"description": "Not modified (If-None-Match matched the ETag)."},
        **ERROR_RESPONSES,
    },
    summary="A memento (URI-M): the captured bytes",
)
async def memento_content(
    memento_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(readers)],
) -> Response:
    # Documents the route; requests normally reach MementoRoute.serve first (app.py).
    route: MementoRoute = request.app.memento_route
    status, headers, body = await route.resolve(
        principal, memento_id, request.method, request.headers.get("if-none-match")
    )
    response = Response(content=body, status_code=status)
    response.raw_headers = headers
    return response


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
        record_read(archive, principal, "memento.content", memento_id)
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
            _memento_request(body),
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
