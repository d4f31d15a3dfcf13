"""Writing mementos, their metadata, and the URI-M itself (the captured bytes): the
resource's FastAPI routes and how a memento is shown. The two hottest requests, a URI-M and
a write, are normally served before FastAPI by :mod:`api.fastpath`; the routes here document
them and answer what the fast path hands over."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from api.auth import READERS, audit_read, require
from api.budget import BudgetedRoute
from api.deps import get_and_head, get_archive, get_urls, idempotency_key
from api.models import ERROR_RESPONSES, MementoIn, MementoOut, decode_content
from api.urls import MEMENTO_PREFIX, TIMEGATE_PREFIX, TIMEMAP_JSON_PREFIX, TIMEMAP_LINK_PREFIX, Urls
from archive.access.keys import Principal, Role
from archive.archive import Archive
from archive.dates import parse_rfc3339, to_rfc1123, to_rfc3339
from archive.mementos import CaptureFacts, Memento, Scope, served_media_type
from archive.uri import to_ascii_uri
from archive.writes import MementoRequest

if TYPE_CHECKING:
    from api.fastpath import MementoRoute, WriteRoute


router = APIRouter(route_class=BudgetedRoute)
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
        "content_type": served_media_type(memento.media_type),
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


def memento_request(body: MementoIn) -> MementoRequest:
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
        # Printable ASCII (served_media_type), whatever an older version stored.
        (b"content-type", served_media_type(memento.media_type).encode("ascii")),
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
