"""TimeGate and TimeMaps (RFC 7089), with the URI-R raw at the end of the path."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

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
from archive.archive import Archive
from archive.dates import parse_rfc1123, to_rfc1123
from archive.index import Neighbours
from archive.index.navigation import Navigable
from archive.index.timeline import TimeMapView
from archive.links import Link, link, link_format, link_header
from archive.mementos import served_media_type

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


def _rels(neighbours: Neighbours) -> list[tuple[Navigable, str]]:
    """Each distinct memento the TimeGate names, with its combined relation types."""
    named: dict[str, tuple[Navigable, list[str]]] = {}
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


def timegate_response(uri_r: str, found: Neighbours, urls: Urls) -> Response:
    """The TimeGate's 302 to the chosen memento (shared with :mod:`api.navfast`)."""
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


def accept_datetime_of(header: str | None) -> datetime | None:
    """The TimeGate's target: strict RFC 1123 (400 otherwise), None (latest) when absent."""
    return parse_rfc1123(header) if header is not None else None


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
    # Served by api.navfast ahead of FastAPI; this route documents it (and answers when
    # mounted under a root path).
    uri_r, _ = raw_uri_r(request, TIMEGATE_PREFIX)
    target = accept_datetime_of(request.headers.get("accept-datetime"))
    found = await archive.navigate_async(principal.tenant, uri_r, target)
    audit_read(request, principal, "timegate.read", uri_r)
    return timegate_response(uri_r, found, urls)


def timemap_link_response(uri_r: str, view: TimeMapView, urls: Urls) -> Response:
    """A link-format TimeMap page (shared with :mod:`api.navfast`)."""
    items = view.entries
    links: list[Link] = [
        link(uri_r, "original"),
        link(
            urls.timemap_link(uri_r, view.page),
            "self",
            type="application/link-format",
            **{
                "from": to_rfc1123(items[0].captured_at),
                "until": to_rfc1123(items[-1].captured_at),
            },
        ),
        link(urls.timegate(uri_r), "timegate"),
    ]
    if view.page > 1:
        links.append(
            link(urls.timemap_link(uri_r, view.page - 1), "prev", type="application/link-format")
        )
    if view.page < view.pages:
        links.append(
            link(urls.timemap_link(uri_r, view.page + 1), "next", type="application/link-format")
        )
    first_id, last_id = view.first.id, view.last.id
    for memento in items:
        rels = [r for r, i in (("first", first_id), ("last", last_id)) if i == memento.id]
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
    uri_r, page = raw_uri_r(request, TIMEMAP_LINK_PREFIX)
    view = await archive.timemap_view_async(principal.tenant, uri_r, page)
    audit_read(request, principal, "timemap.link", uri_r)
    return timemap_link_response(uri_r, view, urls)


def timemap_json_out(uri_r: str, view: TimeMapView, urls: Urls) -> TimeMapOut:
    """A mementoweb JSON TimeMap page (shared with :mod:`api.navfast`)."""

    def boundary(memento: Navigable) -> TimeMapBoundary:
        return TimeMapBoundary(
            datetime=to_rfc1123(memento.captured_at), uri=urls.memento(memento.id)
        )

    def page_link(number: int) -> TimeMapPageLink | None:
        if 1 <= number <= view.pages and number != view.page:
            return TimeMapPageLink(uri=urls.timemap_json(uri_r, number), page=number)
        return None

    return TimeMapOut(
        original_uri=uri_r,
        timegate_uri=urls.timegate(uri_r),
        timemap_uri=TimeMapUris(
            link_format=urls.timemap_link(uri_r, view.page),
            json_format=urls.timemap_json(uri_r, view.page),
        ),
        mementos=TimeMapMementos(
            first=boundary(view.first),
            last=boundary(view.last),
            # Built without validation (the values are strings of the right shape): FastAPI's
            # route validates the model it returns anyway, and api.navfast serialises it as is.
            list=[
                TimeMapEntry.model_construct(
                    datetime=to_rfc1123(m.captured_at),
                    uri=urls.memento(m.id),
                    id=m.id,
                    scope=m.scope.value,
                    content_hash=m.content_hash,
                    content_type=served_media_type(m.media_type),
                )
                for m in view.entries
            ],
        ),
        pages=TimeMapPages(
            page=view.page,
            page_size=view.page_size,
            total_pages=view.pages,
            total_mementos=view.total,
            prev=page_link(view.page - 1),
            next=page_link(view.page + 1),
        ),
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
    uri_r, page = raw_uri_r(request, TIMEMAP_JSON_PREFIX)
    view = await archive.timemap_view_async(principal.tenant, uri_r, page)
    audit_read(request, principal, "timemap.json", uri_r)
    return timemap_json_out(uri_r, view, urls)
