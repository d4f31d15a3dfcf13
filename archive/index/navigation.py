"""Time travel over the index: the TimeGate's choice of a memento and its neighbours, in
TimeMap order (datetime, then documents before passages, then id)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Integer, Text, and_, bindparam, func, select, tuple_
from sqlalchemy.sql.elements import BindParameter, ColumnElement, Tuple, UnaryExpression

from archive.index.prepared import Lookups, PreparedLookup
from archive.index.rows import memento_from
from archive.index.schema import UTCDateTime, mementos
from archive.mementos import Memento, Scope


class Navigable(Protocol):
    """What TimeGates and TimeMaps show of a memento: a :class:`Memento`, or the lighter
    :class:`archive.index.timeline.Entry`."""

    @property
    def id(self) -> str: ...
    @property
    def captured_at(self) -> datetime: ...
    @property
    def scope(self) -> Scope: ...
    @property
    def content_hash(self) -> str: ...
    @property
    def media_type(self) -> str: ...


@dataclass(frozen=True)
class Neighbours:
    """A chosen memento and the TimeGate's navigation around it (RFC 7089 §4.1)."""

    chosen: Navigable
    first: Navigable
    last: Navigable
    prev: Navigable | None
    next: Navigable | None


def live_of(
    tenant: str | BindParameter[str], urir_key: str | BindParameter[str]
) -> ColumnElement[bool]:
    # Deleted mementos (tombstones) leave TimeMaps and TimeGates; their URI-M answers 410.
    return and_(
        mementos.c.tenant == tenant,
        mementos.c.urir_key == urir_key,
        mementos.c.deleted_at.is_(None),
    )


def live_of_bound() -> ColumnElement[bool]:
    """:func:`live_of` with the tenant and URI-R key as bind parameters."""
    return live_of(bindparam("tenant"), bindparam("urir_key"))


def nearest(
    probe: Callable[..., Memento | None], target: datetime, first: Memento, last: Memento
) -> Memento:
    if target <= first.captured_at:
        return first
    if target >= last.captured_at:
        # Several mementos may share the last datetime: take the first of them in order.
        return first_at(probe, last.captured_at)
    before = probe("at_or_before", moment=target)
    after = probe("after", moment=target)
    assert before is not None and after is not None
    if after.captured_at - target < target - before.captured_at:
        return after
    return first_at(probe, before.captured_at)


def first_at(probe: Callable[..., Memento | None], moment: datetime) -> Memento:
    found = probe("at", moment=moment)
    assert found is not None
    return found


def neighbour_probes(lookups: Lookups) -> dict[str, PreparedLookup]:
    """The TimeGate's look-ups (:meth:`Index.neighbours`), each the first live memento of a
    URI-R in TimeMap order from some point: compiled once, since SQLAlchemy's execution
    machinery cost ~10x the indexed query itself (mementos_by_original)."""
    live = live_of_bound()
    moment = bindparam("moment", type_=UTCDateTime())
    at = tuple_(
        bindparam("at_time", type_=UTCDateTime()),
        bindparam("at_scope", type_=Text()),
        bindparam("at_id", type_=Text()),
    )
    wheres_and_orders = {
        "first": ((), order_ascending()),
        "last": ((), order_descending()),
        "at": ((mementos.c.captured_at == moment,), order_ascending()),
        "at_or_before": ((mementos.c.captured_at <= moment,), order_descending()),
        "after": ((mementos.c.captured_at > moment,), order_ascending()),
        "before_position": ((position() < at,), order_descending()),
        "after_position": ((position() > at,), order_ascending()),
    }
    return {
        name: lookups.prepare(select(mementos).where(live, *wheres).order_by(*order).limit(1))
        for name, (wheres, order) in wheres_and_orders.items()
    }


def order_ascending() -> tuple[UnaryExpression[Any], ...]:
    # The TimeMap order: datetime, then documents before passages, then id (Contracts).
    return (mementos.c.captured_at.asc(), mementos.c.scope.asc(), mementos.c.id.asc())


def order_descending() -> tuple[UnaryExpression[Any], ...]:
    return (mementos.c.captured_at.desc(), mementos.c.scope.desc(), mementos.c.id.desc())


def position() -> Tuple:
    return tuple_(mementos.c.captured_at, mementos.c.scope, mementos.c.id)


class TimeTravel:
    """The TimeGate's and TimeMap's look-ups, compiled once: SQLAlchemy's execution machinery
    cost about ten times the indexed query itself."""

    def __init__(self, lookups: Lookups) -> None:
        self._lookups = lookups
        self._probes = neighbour_probes(lookups)
        # A TimeMap's size and pages, compiled once for the same reason.
        self._timemap_size = lookups.prepare(
            select(func.count().label("mementos")).where(live_of_bound())
        )
        self._timemap_page = lookups.prepare(
            select(mementos)
            .where(live_of_bound())
            .order_by(*order_ascending())
            .offset(bindparam("offset", type_=Integer()))
            .limit(bindparam("limit", type_=Integer()))
        )

    def neighbours(self, tenant: str, urir_key: str, target: datetime | None) -> Neighbours | None:
        """Choose the memento nearest ``target`` (latest when None) and its neighbours."""
        with self._lookups.snapshot() as first_row:

            def probe(name: str, **values: Any) -> Memento | None:
                row = first_row(self._probes[name], tenant=tenant, urir_key=urir_key, **values)
                return None if row is None else memento_from(row)

            first = probe("first")
            if first is None:
                return None
            last = probe("last")
            assert last is not None
            if target is None:
                chosen = first_at(probe, last.captured_at)
            else:
                chosen = nearest(probe, target, first, last)
            at = {"at_time": chosen.captured_at, "at_scope": chosen.scope.value, "at_id": chosen.id}
            prev = probe("before_position", **at)
            nxt = probe("after_position", **at)
        return Neighbours(chosen=chosen, first=first, last=last, prev=prev, next=nxt)

    def list_mementos(
        self, tenant: str, urir_key: str, *, offset: int, limit: int
    ) -> list[Memento]:
        rows = self._lookups.all(
            self._timemap_page, tenant=tenant, urir_key=urir_key, offset=offset, limit=limit
        )
        return [memento_from(row) for row in rows]

    def count_mementos(self, tenant: str, urir_key: str) -> int:
        row = self._lookups.first(self._timemap_size, tenant=tenant, urir_key=urir_key)
        assert row is not None  # COUNT(*) always answers one row
        return int(row.mementos)
