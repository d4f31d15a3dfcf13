"""TimeGate and TimeMaps (RFC 7089), with the URI-R raw at the end of the path."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from api.auth import READERS, audit_read, require
from api.deps import get_and_head, get_archive, get_urls
from api.models import (
    ERROR_RESPONSES,
    TimeMapBoundary,
    TimeMapEntry,
    TimeMapMementos,
    TimeMapOut,
    TimeMapPageLink,
    TimeMapPages,
    TimeMapUris,
)
from api.urls import TIMEGATE_PREFIX, TIMEMAP_JSON_PREFIX, TIMEMAP_LINK_PREFIX, Urls, raw_uri_r
from archive.access.keys import Principal
from archive.archive import Archive, TimeMapPage
from archive.dates import parse_rfc1123, to_rfc1123
from archive.index import Neighbours
from archive.links import Link, link, link_format, link_header
from archive.mementos import Memento, served_media_type

router = APIRouter()
readers = require(*READERS)

RAW_URI_R_NOTE = (
    "The URI-R follows the prefix raw, exactly as it would be sent to the origin, query "
    "string included: `/timegate/https://example.org/a?b=1`. It is rebuilt from the raw "
    "path and query, so `%2F` stays `%2F`. A fully percent-encoded URI-R is decoded once."
)
_URI_R_PARAM = {
    "name": "uri_r",
    "in": "path",
    "required": True,
    "description": RAW_URI_R_NOTE,
    "schema": {"type": "string"},
}
_TIMEGATE_PARAMS = [
    _URI_R_PARAM,
    {
        "name": "Accept-Datetime",
        "in": "header",
        "required": False,
        "description": "RFC 1123 GMT, e.g. 'Wed, 01 May 2024 12:00:00 GMT'. Default: latest.",
        "schema": {"type": "string"},
    },
]


def _rels(neighbours: Neighbours) -> list[tuple[Memento, str]]:
    """Each distinct memento the TimeGate names, with its combined relation types."""
    named: dict[str, tuple[Memento, list[str]]] = {}
    for memento, rel in (
        (neighbours.first, "first"),
        (neighbours.prev, "prev"),
        (neighbours.chosen, ""),
        (neighbours.next, "next"),
        (neighbours.last, "last"),
    ):
        if memento is None:
            continue
        entry = named.setdefault(memento.id, (memento, []))
        if rel:
            entry[1].append(rel)
    ordered = sorted(named.values(), key=lambda e: (e[0].captured_at, e[0].scope.value, e[0].id))
    return [(m, " ".join([*rels, "memento"])) for m, rels in ordered]


@get_and_head(
    router,
    TIMEGATE_PREFIX + "{uri_r:path}",
    status_code=302,
    response_class=Response,
    responses={302: {"description": "Redirect to the chosen memento (URI-M)."}, **ERROR_RESPONSES},
    openapi_extra={"parameters": _TIMEGATE_PARAMS},
    summary="TimeGate (RFC 7089 pattern 2.1)",
)
async def timegate(
    request: Request,
    archive: Annotated[Archive, Depends(get_archive)],
    urls: Annotated[Urls, Depends(get_urls)],
    principal: Annotated[Principal, Depends(readers)],
) -> Response:
    uri_r, _ = raw_uri_r(request, TIMEGATE_PREFIX)
    accept = request.headers.get("accept-datetime")
    target = parse_rfc1123(accept) if accept is not None else None
    found = await run_in_threadpool(archive.timegate, principal.tenant, uri_r, target)
    audit_read(request, principal, "timegate.read", uri_r)
    links = [
        link(uri_r, "original"),
        link(urls.timemap_link(uri_r), "timemap", type="application/link-format"),
        link(urls.timemap_json(uri_r), "timemap", type="application/json"),
    ]
    links += [
        link(urls.memento(m.id), rel, datetime=to_rfc1123(m.captured_at)) for m, rel in _rels(found)
    ]
    return Response(
        status_code=302,
        headers={
            "Location": urls.memento(found.chosen.id),
            "Vary": "accept-datetime",
            "Link": link_header(links),
            "Cache-Control": "private, no-cache",
        },
    )


async def _timemap_page(
    request: Request, prefix: str, archive: Archive, tenant: str
) -> tuple[str, TimeMapPage, Neighbours]:
    uri_r, page = raw_uri_r(request, prefix)
    found = await run_in_threadpool(archive.timemap, tenant, uri_r, page)
    bounds = await run_in_threadpool(archive.timegate, tenant, uri_r, None)
    return uri_r, found, bounds


@get_and_head(
    router,
    TIMEMAP_LINK_PREFIX + "{uri_r:path}",
    response_class=Response,
    responses={200: {"content": {"application/link-format": {}}}, **ERROR_RESPONSES},
    openapi_extra={"parameters": [_URI_R_PARAM]},
    summary="TimeMap in link-format (paged: /timemap/link/page/N/<URI-R>)",
)
async def timemap_link(
    request: Request,
    archive: Annotated[Archive, Depends(get_archive)],
    urls: Annotated[Urls, Depends(get_urls)],
    principal: Annotated[Principal, Depends(readers)],
) -> Response:
    uri_r, page, bounds = await _timemap_page(
        request, TIMEMAP_LINK_PREFIX, archive, principal.tenant
    )
    audit_read(request, principal, "timemap.link", uri_r)
    items = page.mementos
    links: list[Link] = [
        link(uri_r, "original"),
        link(
            urls.timemap_link(uri_r, page.page),
            "self",
            type="application/link-format",
            **{
                "from": to_rfc1123(items[0].captured_at),
                "until": to_rfc1123(items[-1].captured_at),
            },
        ),
        link(urls.timegate(uri_r), "timegate"),
    ]
    if page.page > 1:
        links.append(
            link(urls.timemap_link(uri_r, page.page - 1), "prev", type="application/link-format")
        )
    if page.page < page.pages:
        links.append(
            link(urls.timemap_link(uri_r, page.page + 1), "next", type="application/link-format")
        )
    for memento in items:
        rels = [
            r for r, m in (("first", bounds.first), ("last", bounds.last)) if m.id == memento.id
        ]
        links.append(
            link(
                urls.memento(memento.id),
                " ".join([*rels, "memento"]),
                datetime=to_rfc1123(memento.captured_at),
            )
        )
    return Response(
        content=link_format(links),
        media_type="application/link-format",
        headers={"Cache-Control": "private, no-cache"},
    )


@get_and_head(
    router,
    TIMEMAP_JSON_PREFIX + "{uri_r:path}",
    response_model=TimeMapOut,
    responses=ERROR_RESPONSES,
    openapi_extra={"parameters": [_URI_R_PARAM]},
    summary="TimeMap in mementoweb JSON (paged: /timemap/json/page/N/<URI-R>)",
)
async def timemap_json(
    request: Request,
    archive: Annotated[Archive, Depends(get_archive)],
    urls: Annotated[Urls, Depends(get_urls)],
    principal: Annotated[Principal, Depends(readers)],
) -> TimeMapOut:
    uri_r, page, bounds = await _timemap_page(
        request, TIMEMAP_JSON_PREFIX, archive, principal.tenant
    )
    audit_read(request, principal, "timemap.json", uri_r)

    def boundary(memento: Memento) -> TimeMapBoundary:
        return TimeMapBoundary(
            datetime=to_rfc1123(memento.captured_at), uri=urls.memento(memento.id)
        )

    def page_link(number: int) -> TimeMapPageLink | None:
        if 1 <= number <= page.pages and number != page.page:
            return TimeMapPageLink(uri=urls.timemap_json(uri_r, number), page=number)
        return None

    return TimeMapOut(
        original_uri=uri_r,
        timegate_uri=urls.timegate(uri_r),
        timemap_uri=TimeMapUris(
            link_format=urls.timemap_link(uri_r, page.page),
            json_format=urls.timemap_json(uri_r, page.page),
        ),
        mementos=TimeMapMementos(
            first=boundary(bounds.first),
            last=boundary(bounds.last),
            list=[
                TimeMapEntry(
                    datetime=to_rfc1123(m.captured_at),
                    uri=urls.memento(m.id),
                    id=m.id,
                    scope=m.scope.value,
                    content_hash=m.content_hash,
                    content_type=served_media_type(m.media_type),
                )
                for m in page.mementos
            ],
        ),
        pages=TimeMapPages(
            page=page.page,
            page_size=page.page_size,
            total_pages=page.pages,
            total_mementos=page.total,
            prev=page_link(page.page - 1),
            next=page_link(page.page + 1),
        ),
    )
