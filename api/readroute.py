"""What the plain-ASGI read routes (:mod:`api.fastpath`, :mod:`api.navfast`) hold from the
lifespan's start to its close: the archive they serve and a memory of their answers.

One close per start: a test may run two lifespans on one app, and an app may be given its
archive at creation and started again by its lifespan; the memory is made once and closed
by the last close.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from api.auth import Gatekeeper
from api.urls import Urls
from archive.archive import Archive
from archive.index.signals import ReadCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class StartedRoute(Generic[K, V]):
    """A route whose answers are remembered in a :class:`ReadCache` made by
    :meth:`new_memory`, from :meth:`start` until the matching :meth:`close`."""

    gatekeeper: Gatekeeper
    urls: Urls
    archive: Archive | None = None  # set by start()
    memory: ReadCache[K, V] | None = None
    _starts: int = 0  # lifespans that started this route and have not closed it

    def new_memory(self, archive: Archive) -> ReadCache[K, V]:
        """The route's memory of answers for ``archive``."""
        raise NotImplementedError(f"{type(self).__name__} remembers nothing")

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
