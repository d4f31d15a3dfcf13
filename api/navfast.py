"""TimeGates and TimeMaps as plain ASGI, served before FastAPI's stack.

Why: after the URI-M, they are what auditors and Memento clients ask most, and measured
in process FastAPI's routing, dependency solving, response validation and middleware cost
several times the work itself, once the work is a timeline remembered in memory
(:meth:`archive.archive.Archive.navigate`). They answer exactly as the documented routes in
:mod:`api.timetravel`, whose rendering they share (tests/test_navigation.py holds them
equal): the same authorisation, errors, read audit and bytes.

Rendered answers are remembered too, on SQLite, per tenant and URI-R as requested (and
TimeMap page, or chosen memento), until the next memento written or deleted in any process
(:meth:`archive.index.changes.Changes.cache_until_timemaps_change`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from fastapi import Response
from starlette import types as asgi

from api.auth import READERS, record_read
from api.models import TimeMapOut
from api.readroute import ReadRoute
from api.timetravel import (
    accept_datetime_of,
    timegate_response,
    timemap_json_out,
    timemap_link_response,
)
from api.urls import (
    TIMEGATE_PREFIX,
    TIMEMAP_JSON_PREFIX,
    TIMEMAP_LINK_PREFIX,
    raw_uri_r_of,
)
from archive.access.keys import Principal
from archive.archive import Archive
from archive.index.signals import ReadCache

_READERS = frozenset(READERS)
_PREFIXES = (TIMEGATE_PREFIX, TIMEMAP_LINK_PREFIX, TIMEMAP_JSON_PREFIX)
# Read audit actions by prefix (archive/access/audit.py READ_ACTIONS).
_ACTIONS = {
    TIMEGATE_PREFIX: "timegate.read",
    TIMEMAP_LINK_PREFIX: "timemap.link",
    TIMEMAP_JSON_PREFIX: "timemap.json",
}


def navigation_prefix(scope: asgi.Scope) -> str | None:
    """The prefix of a GET or HEAD of a TimeGate or TimeMap, else None."""
    if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or scope.get("root_path"):
        return None
    path: str = scope["path"]
    for prefix in _PREFIXES:
        if path.startswith(prefix):
            return prefix
    return None


class Answer(NamedTuple):
    """A rendered answer, as ASGI sends it."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    @classmethod
    def of(cls, response: Response) -> Answer:
        return cls(response.status_code, tuple(response.raw_headers), bytes(response.body))

    def weight(self) -> int:
        """About the bytes it holds in memory, with its key."""
        return (
            _ANSWER_OVERHEAD
            + len(self.body)
            + sum(len(name) + len(value) for name, value in self.headers)
        )


# Objects behind a remembered Answer beyond its bytes (the tuples, the bytes objects' headers,
# the key with its URI-R and the cache entry).
_ANSWER_OVERHEAD = 700


class NavigationRoute(ReadRoute[tuple[str, str, str, str], Answer]):
    """TimeGate and TimeMaps (both formats, every page), GET and HEAD, as plain ASGI."""

    # Its memory: (tenant, prefix, URI-R as requested, page or chosen memento id) -> rendered
    # answer, until the next memento written or deleted in any process.

    def new_memory(self, archive: Archive) -> ReadCache[tuple[str, str, str, str], Answer]:
        return archive.index.changes.cache_until_timemaps_change(
            Answer.weight, budget=archive.settings.timemap_cache_mb * 1024 * 1024 // 2
        )

    roles = _READERS
    header = b"accept-datetime"

    async def reply(
        self, principal: Principal, scope: asgi.Scope, accept_datetime: str | None
    ) -> Answer:
        prefix = navigation_prefix(scope)
        assert prefix is not None, "only TimeGate and TimeMap requests come here"
        return await self.answer(principal, scope, prefix, accept_datetime)

    async def answer(
        self, principal: Principal, scope: asgi.Scope, prefix: str, accept_datetime: str | None
    ) -> Answer:
        """The answer to an authorised principal's request, its read audited."""
        archive, answers, urls = self.archive, self.memory, self.urls
        assert archive is not None and answers is not None, "the app has not started"
        tenant = principal.tenant
        uri_r, page = raw_uri_r_of(scope, prefix)
        # Read before the index (or the timeline remembered from it): an answer rendered from
        # a read that raced a change is never remembered past that change.
        generation = answers.generation()
        render: Callable[[], Awaitable[Response]]
        if prefix == TIMEGATE_PREFIX:
            target = accept_datetime_of(accept_datetime)
            found = await archive.navigate_async(tenant, uri_r, target)
            key = (tenant, prefix, uri_r, found.chosen.id)

            async def render() -> Response:
                return timegate_response(uri_r, found, urls)

        else:
            key = (tenant, prefix, uri_r, str(page))

            async def render() -> Response:
                view = await archive.timemap_view_async(tenant, uri_r, page)
                if prefix == TIMEMAP_LINK_PREFIX:
                    return timemap_link_response(uri_r, view, urls)
                return _json_response(timemap_json_out(uri_r, view, urls))

        answer = answers.get(key)
        if answer is None:
            answer = Answer.of(await render())
            answers.put(generation, key, answer)
        record_read(archive.read_audit, principal, _ACTIONS[prefix], uri_r)
        return answer


def _json_response(model: TimeMapOut) -> Response:
    """The model as FastAPI renders a route's ``response_model``: compact JSON."""
    return Response(content=model.model_dump_json(), media_type="application/json")
