"""Change generations on PostgreSQL: what lets every replica remember what it read — live
mementos, their bytes, verified keys, timelines — and never act on something changed since.

SQLite's processes share a machine, so a change is signalled by a file they all map
(:mod:`archive.index.signals`). Replicas on PostgreSQL share only the database: there each
kind of change (``deletions``, ``revocations``, ``timemaps``) has a row in
``change_generations``, and the change's own transaction moves it (:meth:`bump`). The row
and the change become visible together, at the commit.

Each request reads the rows once, before anything it may answer from memory
(:meth:`SharedGenerations.observe`), and is answered from memory only what was read from
the index under the generations it saw. A request that starts after a change committed,
in any replica, therefore sees the new generation, and reads the index again: the same
guarantee the SQLite signal gives. The read is one small statement, and requests arriving
together share one (whichever read starts after a request began serves it): under load
a replica reads the rows once per round trip, not once per request.

Why not LISTEN/NOTIFY: a notification arrives some time after the commit, so a replica
could still answer from memory after the change was acknowledged elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextvars import ContextVar
from weakref import WeakKeyDictionary

import anyio
from sqlalchemy import Connection, Engine, select

from archive.index.roundtrips import defer_to_commit
from archive.index.schema import change_generations

log = logging.getLogger(__name__)

DELETIONS = "deletions"
REVOCATIONS = "revocations"
TIMEMAPS = "timemaps"

# The generations the current request read, by kind: what it may answer from memory under.
# A context variable, so each request (and the worker threads it hands work to, which
# anyio gives a copy of its context) sees only what it read itself. A task a request
# spawns inherits it too: one that outlives the request must observe again before it
# answers from memory (none does today).
_SEEN: ContextVar[dict[str, int] | None] = ContextVar("amber_change_generations", default=None)

Generations = dict[str, int]

_BUMP = "UPDATE change_generations SET generation = generation + 1 WHERE kind = %s"


class SharedGenerations:
    """The ``change_generations`` rows of one PostgreSQL index."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._query = select(change_generations.c.kind, change_generations.c.generation)
        # One coalescing reader per event loop (a server has one; tests may run several).
        self._readers: WeakKeyDictionary[asyncio.AbstractEventLoop, _SharedRead] = (
            WeakKeyDictionary()
        )
        self.reads = 0  # statements run since this process began

    def read(self) -> Generations:
        """The generations now: one statement."""
        with self._engine.connect() as connection:
            rows = connection.execute(self._query).all()
        self.reads += 1
        return {row.kind: int(row.generation) for row in rows}

    async def observe(self) -> None:
        """Read the generations (sharing the read with concurrent requests: one that started
        after this call) and make them what this request may answer from memory under."""
        loop = asyncio.get_running_loop()
        reader = self._readers.get(loop)
        if reader is None:
            reader = self._readers[loop] = _SharedRead(self.read)
        _SEEN.set(await reader.join())

    def observe_now(self) -> None:
        """:meth:`observe` without an event loop (a worker thread, the CLI)."""
        _SEEN.set(self.read())

    @staticmethod
    def seen(kind: str) -> int | None:
        """The generation of ``kind`` the current request read; None when it read none."""
        values = _SEEN.get()
        return None if values is None else values.get(kind)

    @staticmethod
    def bump(connection: Connection, kind: str) -> None:
        """Move ``kind``'s generation inside the change's transaction: visible with it."""
        connection.exec_driver_sql(_BUMP, (kind,))

    @staticmethod
    def bump_at_commit(connection: Connection, kind: str) -> None:
        """:meth:`bump`, sent with the transaction's COMMIT (roundtrips.defer_to_commit): the
        row every writer moves stays locked only while the server commits."""
        defer_to_commit(connection, _BUMP, (kind,))


class _SharedRead:
    """Reads for the requests waiting on one event loop: each read serves every request that
    was waiting when it started; requests arriving during it wait for the next one."""

    def __init__(self, read: Callable[[], Generations]) -> None:
        self._read = read
        self._waiting: list[asyncio.Future[Generations | None]] = []
        self._task: asyncio.Task[None] | None = None

    async def join(self) -> Generations | None:
        future: asyncio.Future[Generations | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve())
        return await future

    async def _serve(self) -> None:
        try:
            while self._waiting:
                waiting, self._waiting = self._waiting, []
                values: Generations | None
                try:
                    values = await anyio.to_thread.run_sync(self._read)
                except Exception as error:  # the request then reads the index, which says why
                    log.warning("cannot read the change generations: %s", type(error).__name__)
                    values = None
                for future in waiting:
                    if not future.done():
                        future.set_result(values)
        finally:
            self._task = None
