"""What the plain-ASGI read routes (:mod:`api.fastpath`'s URI-M, :mod:`api.navfast`'s
TimeGates and TimeMaps) share: the frame of every request, and what they hold from the
lifespan's start to its close.

Every request: the changes made in any replica observed first (PostgreSQL), the caller
authorised from its key or browser session, then the route's own answer; an Amber error
answered as the documented route answers it, anything else as a bounded 500.

From start to close: the archive served and a memory of answers. One close per start: a
test may run two lifespans on one app, and an app may be given its archive at creation
and started again by its lifespan; the memory is made once and closed by the last close.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from starlette import types as asgi

from api.auth import Gatekeeper
from api.browser import error_or_sign_in, session_id_of
from api.errors import unexpected_error_response
from api.urls import Urls
from archive.access.keys import Principal, Role
from archive.archive import Archive
from archive.exceptions import AmberError
from archive.index.signals import ReadCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# (status, headers as ASGI sends them, body)
Reply = tuple[int, Sequence[tuple[bytes, bytes]], bytes]


@dataclass
class ReadRoute(Generic[K, V]):
    """A read route as plain ASGI whose answers are remembered in a :class:`ReadCache` made
    by :meth:`new_memory`, from :meth:`start` until the matching :meth:`close`."""

    # Who may read, and the one request header the route reads besides Authorization.
    roles: ClassVar[frozenset[Role]]
    header: ClassVar[bytes]

    gatekeeper: Gatekeeper
    urls: Urls
    archive: Archive | None = None  # set by start()
    memory: ReadCache[K, V] | None = None
    _starts: int = 0  # lifespans that started this route and have not closed it

    def new_memory(self, archive: Archive) -> ReadCache[K, V]:
        """The route's memory of answers for ``archive``."""
        raise NotImplementedError(f"{type(self).__name__} remembers nothing")

    async def reply(self, principal: Principal, scope: asgi.Scope, header: str | None) -> Reply:
        """The answer to an authorised principal's request (``header``: the route's header)."""
        raise NotImplementedError(f"{type(self).__name__} answers nothing")

    def start(self, archive: Archive) -> None:
        self._starts += 1
        if self.archive is archive and self.memory is not None:
            return  # given at creation (tests) and started again by the lifespan
        self.archive = archive
        self.memory = self.new_memory(archive)

    def close(self) -> None:
        self._starts = max(0, self._starts - 1)
        if self._starts == 0 and self.memory is not None:
            self.memory.close()
            self.memory = None

    async def serve(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        wanted = self.header
        authorization = header = None
        for name, value in scope["headers"]:
            if name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == wanted and header is None:
                header = value.decode("latin-1")
        try:
            if self.archive is not None:  # PostgreSQL: what changed in any replica, first
                await self.archive.index.observe_changes()
            principal = await self.gatekeeper.authorize_request(
                authorization, session_id_of(scope) if authorization is None else None, self.roles
            )
            status, headers, body = await self.reply(principal, scope, header)
        except AmberError as error:
            await error_or_sign_in(error, scope)(scope, receive, send)
            return
        except Exception:
            await unexpected_error_response(scope["method"], scope["path"])(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
