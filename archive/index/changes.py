"""Changes: how a write to the index tells every process and replica that what they
remember from it — live mementos, TimeMaps, verified keys, text derived from captured
bytes — may no longer be true.

Two carriers, one per backend: on SQLite a signal file each process maps
(:mod:`archive.index.signals`), moved around the change's commit; on PostgreSQL a
generation row each replica reads once per request (:mod:`archive.index.generations`),
moved inside the change's own transaction. :class:`Changes` owns both for one index and
says, for each kind of write, which to move and when:

* exclusive writes (the only ones that may delete mementos) are deletions and TimeMaps
  changes, for their whole transaction;
* a write that inserts mementos is a TimeMaps change from its first insert until it has
  ended; on PostgreSQL its generation row moves just before the commit, so concurrent
  writers wait on that row only briefly;
* an erasure's commit is wrapped in :meth:`Changes.erasing`; a revocation announces itself
  (:mod:`archive.access.keys`).

Every writer takes the deletion signal before the write lock and the TimeMaps signal
after it: all in that order, so none waits for one while holding a later one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

from sqlalchemy import Connection

from archive.exceptions import ConfigurationError
from archive.index.generations import DELETIONS, REVOCATIONS, TIMEMAPS, SharedGenerations
from archive.index.signals import ReadCache

# What a write transaction keeps in connection.info while it runs.
_AFTER_END = "amber.after_end"  # what must happen once it has ended (an ExitStack)
_ANNOUNCED = "amber.timemaps_announced"
_BUMP_AT_COMMIT = "amber.timemaps_bump_at_commit"
_EXCLUSIVE = "amber.exclusive"


class Changes:
    """The change signals (SQLite file ``database``) or generation rows (``generations``,
    PostgreSQL) of one index; None for the one the backend lacks."""

    def __init__(self, database: str | None, generations: SharedGenerations | None) -> None:
        self.database = database
        # PostgreSQL: what replicas remember is valid while these rows stand.
        self.generations = generations
        # Signals this process only moves (a budget of 0: it remembers nothing itself).
        # Every deletion commits through the first, so what any process remembers of live
        # mementos (cache_until_deletion) is forgotten at once.
        self._deletions: ReadCache[Any, Any] = ReadCache(database, DELETIONS, budget=0)
        # Every erasure: each process then forgets the text it derived from captured bytes
        # (extractions, prepared text; see TextMemory).
        self._erasures: ReadCache[Any, Any] = ReadCache(database, "erasures", budget=0)
        # Every change to which mementos a URI-R has (a new memento, any deletion): what any
        # process remembers of TimeMaps and TimeGates is forgotten at once.
        self._timemaps: ReadCache[Any, Any] = ReadCache(database, TIMEMAPS, budget=0)

    def close(self) -> None:
        self._erasures.close()
        self._deletions.close()
        self._timemaps.close()

    # -- around write transactions ----------------------------------------------------------

    def before_write(self, *, exclusive: bool) -> AbstractContextManager[None]:
        """Entered before the write lock: an exclusive write is a deletion (SQLite signal)."""
        return self._deletions.changing() if exclusive else nullcontext()

    def begin_write(self, connection: Connection, after_end: ExitStack, *, exclusive: bool) -> None:
        """Called under the write lock, first in the transaction. ``after_end`` runs once it
        has ended, committed or not."""
        connection.info[_AFTER_END] = after_end
        for key in (_AFTER_END, _ANNOUNCED, _BUMP_AT_COMMIT, _EXCLUSIVE):
            after_end.callback(connection.info.pop, key, None)
        if exclusive:
            connection.info[_EXCLUSIVE] = True
            self.announce(connection, DELETIONS)
            self.timemaps_change(connection)

    def before_commit(self, connection: Connection) -> None:
        """Moves the TimeMaps generation of a write that inserted mementos (PostgreSQL) as
        late as it can, with the COMMIT: the row stays locked, and concurrent writers wait,
        only while the server commits, not through the whole transaction."""
        if connection.info.pop(_BUMP_AT_COMMIT, False) and self.generations is not None:
            self.generations.bump_at_commit(connection, TIMEMAPS)

    def announce(self, connection: Connection, kind: str) -> None:
        """On PostgreSQL, make this write transaction a change of ``kind`` (DELETIONS,
        REVOCATIONS, TIMEMAPS) for every replica, from its commit on; on SQLite the change's
        signal says so instead (ReadCache.changing)."""
        if self.generations is not None:
            self.generations.bump(connection, kind)

    def timemaps_change(self, connection: Connection) -> None:
        """Make this write transaction, from now until it has ended, a change of TimeMaps
        for every process (see :meth:`cache_until_timemaps_change`). Entered under the write
        lock (SQLite takes it at BEGIN IMMEDIATE), after the deletion signal's."""
        if connection.info.get(_ANNOUNCED):
            return
        after_end: ExitStack | None = connection.info.get(_AFTER_END)
        if after_end is None:
            raise ConfigurationError("mementos are inserted only inside Index.write or open_write")
        after_end.enter_context(self._timemaps.changing())
        connection.info[_ANNOUNCED] = True
        if self.generations is not None:
            if connection.info.get(_EXCLUSIVE):
                self.announce(connection, TIMEMAPS)
            else:
                connection.info[_BUMP_AT_COMMIT] = True

    # -- erasures ---------------------------------------------------------------------------

    def erasing(self) -> AbstractContextManager[None]:
        """Wrap an erasure's commit: every process on this index (SQLite) then forgets the
        text it derived from captured bytes at its next use of it (:meth:`erasure_generation`)."""
        return self._erasures.changing()

    def erasure_generation(self) -> int | None:
        """Moves after every erasure committed by any process on this SQLite index; None while
        one commits, and always without a signal (see :attr:`erasures_signalled`)."""
        return self._erasures.generation()

    @property
    def erasures_signalled(self) -> bool:
        """Whether :meth:`erasure_generation` tells anything: False on PostgreSQL."""
        return self._erasures.signalled

    # -- reading under a generation ---------------------------------------------------------

    async def observe(self) -> None:
        """Read, for the current request, what changed in any replica (PostgreSQL: one
        shared statement; nothing to do on SQLite, whose signals are memory reads). A
        request that skips this is never answered from memory on PostgreSQL."""
        if self.generations is not None:
            await self.generations.observe()

    def observe_now(self) -> None:
        """:meth:`observe` in a worker thread (its own read, not shared)."""
        if self.generations is not None:
            self.generations.observe_now()

    def cache_until(
        self, kind: str, budget: int, weigh: Callable[[Any], int] | None = None
    ) -> ReadCache[Any, Any]:
        """A cache at most ``budget`` heavy (by ``weigh``; 1 a value by default), emptied by
        the next change of ``kind`` committed in any process (on PostgreSQL, used only by
        requests that :meth:`observe`)."""
        if weigh is None:
            return ReadCache(self.database, kind, budget=budget, shared=self.generations)
        return ReadCache(self.database, kind, budget=budget, weigh=weigh, shared=self.generations)

    def cache_until_deletion(self, weigh: Callable[[Any], int], budget: int) -> ReadCache[Any, Any]:
        """What is derived from live mementos, forgotten at the next deletion."""
        return self.cache_until(DELETIONS, budget, weigh)

    def cache_until_timemaps_change(
        self, weigh: Callable[[Any], int], budget: int
    ) -> ReadCache[Any, Any]:
        """What is derived from URI-Rs' sets of live mementos (TimeMaps, TimeGate choices),
        forgotten at the next memento inserted or deleted."""
        return self.cache_until(TIMEMAPS, budget, weigh)

    def cache_until_revocation(self, budget: int) -> ReadCache[Any, Any]:
        """What is derived from API keys (verified principals), forgotten at the next
        revocation."""
        return self.cache_until(REVOCATIONS, budget)
