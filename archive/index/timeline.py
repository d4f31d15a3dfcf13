"""A URI-R's live mementos in TimeMap order, read in one statement: what TimeGates and
TimeMaps are answered from.

Why: a TimeGate took five to seven indexed look-ups and a TimeMap of 100 mementos loaded
100 full memento rows (capture facts, headers as JSON, retention state), plus a count and
the TimeGate's look-ups again for its first and last; each cost several times a URI-M. One
statement reads the few columns they show (:class:`Entry`), and the choice of a memento is
a binary search in memory. A timeline this small is what processes on SQLite remember
(:meth:`archive.archive.Archive.timeline`); a URI-R with more mementos than
:data:`TIMELINE_MAX_ENTRIES` is answered by the indexed look-ups of
:class:`archive.index.navigation.TimeTravel` instead, so no request ever reads an unbounded
list.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import select

from archive.index.navigation import Neighbours, live_of_bound, order_ascending
from archive.index.prepared import Lookups
from archive.index.schema import mementos
from archive.mementos import Scope

# A longer timeline is not read whole (TimeTravel's look-ups answer instead): reading it
# would cost more per request than the look-ups, and remembering it more memory than it saves.
TIMELINE_MAX_ENTRIES = 1000

# Objects behind one remembered entry beyond its text (tracemalloc: the tuple, the datetime,
# the strings' headers), and behind a timeline and its key.
_ENTRY_OVERHEAD = 330
_TIMELINE_OVERHEAD = 600


class Entry(NamedTuple):
    """One live memento as TimeGates and TimeMaps show it."""

    captured_at: datetime
    scope: Scope
    id: str
    content_hash: str
    media_type: str


@dataclass(frozen=True)
class TimeMapView:
    """One page of a URI-R's TimeMap, with the first and last memento of the whole TimeMap."""

    entries: list[Any]  # Navigable: Entry, or Memento from TimeTravel's look-ups
    page: int
    page_size: int
    total: int
    first: Any
    last: Any

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))


@dataclass(frozen=True)
class Timeline:
    """A URI-R's live mementos in TimeMap order: datetime, then documents before passages,
    then id. :meth:`neighbours` and :meth:`page` need at least one."""

    entries: tuple[Entry, ...]
    times: tuple[datetime, ...]  # entries' datetimes, for bisection

    @classmethod
    def of(cls, entries: list[Entry]) -> Timeline:
        return cls(tuple(entries), tuple(e.captured_at for e in entries))

    def weight(self) -> int:
        """About the bytes it holds in memory."""
        return _TIMELINE_OVERHEAD + sum(
            _ENTRY_OVERHEAD + len(e.id) + len(e.content_hash) + len(e.media_type)
            for e in self.entries
        )

    def neighbours(self, target: datetime | None) -> Neighbours:
        """The memento nearest ``target`` (latest when None) and its neighbours: exactly
        :meth:`archive.index.navigation.TimeTravel.neighbours`' choice (ties: the earlier,
        then the first at that datetime in TimeMap order, so a document before a passage)."""
        entries, times = self.entries, self.times
        first, last = entries[0], entries[-1]
        if target is None or target >= last.captured_at:
            chosen = bisect_left(times, last.captured_at)
        elif target <= first.captured_at:
            chosen = 0
        else:
            after = bisect_right(times, target)  # the first strictly after target
            before_time = times[after - 1]
            if times[after] - target < target - before_time:
                chosen = after
            else:
                chosen = bisect_left(times, before_time)
        return Neighbours(
            chosen=entries[chosen],
            first=first,
            last=last,
            prev=entries[chosen - 1] if chosen > 0 else None,
            next=entries[chosen + 1] if chosen + 1 < len(entries) else None,
        )

    def page(self, page: int, page_size: int) -> TimeMapView | None:
        """Page ``page`` (from 1), or None when it is past the last one."""
        start = (page - 1) * page_size
        if page != 1 and start >= len(self.entries):
            return None
        return TimeMapView(
            entries=list(self.entries[start : start + page_size]),
            page=page,
            page_size=page_size,
            total=len(self.entries),
            first=self.entries[0],
            last=self.entries[-1],
        )


class TimelineReader:
    """Reads a URI-R's :class:`Timeline` in one statement, compiled once."""

    def __init__(self, lookups: Lookups, *, max_entries: int = TIMELINE_MAX_ENTRIES) -> None:
        self._lookups = lookups
        self._max_entries = max_entries
        self._statement = lookups.prepare(
            select(
                mementos.c.captured_at,
                mementos.c.scope,
                mementos.c.id,
                mementos.c.content_hash,
                mementos.c.media_type,
            )
            .where(live_of_bound())
            .order_by(*order_ascending())
            .limit(max_entries + 1)
        )

    def read(self, tenant: str, urir_key: str) -> Timeline | None:
        """The URI-R's timeline; None when it has more than ``max_entries`` mementos. One
        with no live memento has no entries."""
        rows = self._lookups.all(self._statement, tenant=tenant, urir_key=urir_key)
        if len(rows) > self._max_entries:
            return None
        return Timeline.of(
            [
                Entry(row.captured_at, Scope(row.scope), row.id, row.content_hash, row.media_type)
                for row in rows
            ]
        )
