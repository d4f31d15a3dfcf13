"""Statements on the request hot path, compiled once and run on raw DB-API connections.

Resolving a URI-M or checking an API key is one primary-key SELECT. Through SQLAlchemy's
execution machinery (pool checkout, reset-on-return rollback, cache key, execution context,
result wrapping) that costs a few hundred microseconds of Python; the query itself takes ten.
A :class:`PreparedLookup` is compiled once from an ordinary Core ``select`` for the engine's
dialect and runs straight on the driver's cursor, applying the column types' own result
processors, so it hands back exactly the values a Core query would.

SQLite: each thread keeps its own read-only connection (a point SELECT in WAL mode never
waits for the writer). PostgreSQL: connections come from the engine's pool as usual.

:class:`PreparedWrite` does the same for the SQLite writer's statements (``INSERT … ON CONFLICT
DO NOTHING`` row by row, whose rowcount says whether it was inserted; executemany of an
UPDATE) inside the writer's transaction. :class:`BatchInsert` inserts a whole batch of rows
in one statement.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    Column,
    Engine,
    Select,
    Table,
    Text,
    bindparam,
    func,
    select,
)
from sqlalchemy.dialects import sqlite


class PreparedLookup:
    """One ``select`` compiled for one dialect, with its bind order, its bind and result
    processors, and the values of its literal binds (a ``LIMIT 1``)."""

    def __init__(self, statement: Select[Any], engine: Engine) -> None:
        dialect = engine.dialect
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        # qmark/format paramstyles bind by position; named/pyformat ones take the mapping.
        self._positions: tuple[str, ...] | None = (
            tuple(compiled.positiontup or ()) if compiled.positional else None
        )
        # Binds given a value in the statement (LIMIT's), and binds whose type converts
        # what it binds (a datetime to SQLite's text, or to naive UTC): applied as Core would.
        self._defaults = {
            name: bind.value for name, bind in compiled.binds.items() if not bind.required
        }
        self._bind_processors = {
            name: process
            for name, bind in compiled.binds.items()
            if (process := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }
        columns = list(statement.selected_columns)
        row_type = namedtuple("LookupRow", [c.key for c in columns])  # type: ignore[misc]
        self._make_row: Callable[[Any], Any] = row_type._make
        # dialect_impl: the type as this dialect runs it (e.g. SQLite's DATETIME text format).
        processors = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns]
        # Only the columns that have one (on SQLite, a memento's four datetimes of nineteen).
        self._processors: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
            (position, process)
            for position, process in enumerate(processors)
            if process is not None
        )

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...] | Mapping[str, Any]:
        if self._defaults or self._bind_processors:
            values = self._processed(values)
        if self._positions is None:
            return values
        return tuple(map(values.__getitem__, self._positions))

    def _processed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        processed = {**self._defaults, **values}
        for name, process in self._bind_processors.items():
            processed[name] = process(processed[name])
        return processed

    def row(self, raw: tuple[Any, ...]) -> Any:
        if not self._processors:
            return self._make_row(raw)
        values = list(raw)
        for position, process in self._processors:
            values[position] = process(values[position])
        return self._make_row(values)


class Lookups:
    def __init__(self, engine: Engine, sqlite_path: str | None) -> None:
        self._engine = engine
        self._sqlite_path = sqlite_path
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()

    def prepare(self, statement: Select[Any]) -> PreparedLookup:
        return PreparedLookup(statement, self._engine)

    def first(self, lookup: PreparedLookup, **values: Any) -> Any | None:
        """The first row of ``lookup`` for these bind values, or None."""
        if self._sqlite_path is not None:  # the hot path (URI-Ms, keys): no context manager
            return _first_on(self._sqlite(), lookup, values)
        with self._connection() as connection:
            return _first_on(connection, lookup, values)

    def all(self, lookup: PreparedLookup, **values: Any) -> list[Any]:
        """Every row of ``lookup`` for these bind values."""
        with self._connection() as connection:
            return self.all_on(connection, lookup, **values)

    @contextmanager
    def snapshot(self) -> Iterator[Callable[..., Any | None]]:
        """:meth:`first` for several lookups that must agree with each other: on SQLite one
        read transaction (a single snapshot of the WAL), on PostgreSQL one connection and
        transaction, as a Core read with :meth:`Index.read` would have."""
        with self._connection() as connection:
            if self._sqlite_path is None:
                yield functools.partial(_first_of, connection)
                return
            connection.execute("BEGIN")
            try:
                yield functools.partial(_first_of, connection)
            finally:
                connection.execute("COMMIT")  # a read: ends the snapshot, writes nothing

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A driver connection to read on: this thread's (SQLite), or one from the pool."""
        if self._sqlite_path is not None:
            yield self._sqlite()
            return
        connection = self._engine.raw_connection()
        try:
            yield connection
        finally:
            connection.close()  # back to the pool, which rolls the read back

    def all_on(self, dbapi_connection: Any, lookup: PreparedLookup, **values: Any) -> list[Any]:
        """Every row of ``lookup`` on a given driver connection (e.g. inside the writer's
        open transaction, to see its own uncommitted rows)."""
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(lookup.sql, lookup.parameters(values))
            return [lookup.row(raw) for raw in cursor.fetchall()]
        finally:
            cursor.close()

    def close(self) -> None:
        with self._opened_lock:
            for connection in self._opened:
                connection.close()
            self._opened.clear()

    def _sqlite(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            assert self._sqlite_path is not None
            # Autocommit: each SELECT is its own short read transaction, so a thread's
            # connection never pins an old snapshot of the WAL between requests.
            connection = sqlite3.connect(
                self._sqlite_path, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA busy_timeout=30000")
            connection.execute("PRAGMA query_only=ON")
            with self._opened_lock:
                self._opened.append(connection)
            self._local.connection = connection
        return connection


def _first_on(
    dbapi_connection: Any, lookup: PreparedLookup, values: Mapping[str, Any]
) -> Any | None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(lookup.sql, lookup.parameters(values))
        raw = cursor.fetchone()
    finally:
        cursor.close()
    return None if raw is None else lookup.row(raw)


def _first_of(dbapi_connection: Any, lookup: PreparedLookup, **values: Any) -> Any | None:
    return _first_on(dbapi_connection, lookup, values)


class PreparedWrite:
    """One INSERT/UPDATE compiled for SQLite, run on the driver under an open transaction.

    It runs on the DB-API connection of an open SQLAlchemy transaction (so it commits or
    rolls back with it), applying the bind types' processors as Core would.
    """

    def __init__(
        self, statement: Any, engine: Engine, column_keys: list[str] | None = None
    ) -> None:
        dialect = engine.dialect
        compiled = statement.compile(dialect=dialect, column_keys=column_keys)
        self.sql = compiled.string
        self._binds: list[tuple[str, Callable[[Any], Any] | None]] = [
            (name, compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect))
            for name in compiled.positiontup or ()
        ]

    def _parameters(self, row: Mapping[str, Any]) -> list[Any]:
        return [
            row[name] if process is None else process(row[name]) for name, process in self._binds
        ]

    def run_each(
        self, dbapi_connection: Any, rows: list[dict[str, Any]], key: str | None
    ) -> set[Any]:
        """Execute once per row; the ``key`` values of rows that changed something (for
        ``INSERT … ON CONFLICT DO NOTHING``: the rows really inserted)."""
        cursor = dbapi_connection.cursor()
        changed: set[Any] = set()
        try:
            for row in rows:
                cursor.execute(self.sql, self._parameters(row))
                if key is not None and cursor.rowcount == 1:
                    changed.add(row[key])
        finally:
            cursor.close()
        return changed

    def run_many(self, dbapi_connection: Any, rows: list[dict[str, Any]]) -> None:
        dbapi_connection.executemany(self.sql, [self._parameters(row) for row in rows])


class BatchInsert:
    """``INSERT … ON CONFLICT DO NOTHING`` of a whole batch of rows: one ``executemany`` on
    the driver, which binds and steps every row in C.

    Why not one statement reading the rows from a JSON array (``json_each``), as an
    earlier version did: SQLite's ``json_extract`` of every column of every row cost about
    three times the insert itself (a memento row: ~72 against ~26 µs of CPU, measured on
    the embedded default). The driver lets go of the GIL around each row's step: cheap when
    no other thread wants it meanwhile, which is how the memento write runs it (on the
    event loop while the disk thread is idle; see ``MementoWriter._commit_batch_async``).
    The values travel as bound parameters, NUL included.

    With ``key``, the rows whose ``key`` was new are reported: the keys already there are
    read first, in one statement; that is exact because the caller holds SQLite's write
    lock (``BEGIN IMMEDIATE``). Keys holding NUL (which ``json_each`` cannot carry) are
    found row by row instead.
    """

    def __init__(
        self,
        table: Table,
        conflict: list[str],
        keys: list[str],
        engine: Engine,
        key: str | None = None,
    ) -> None:
        dialect = engine.dialect
        self._key = key
        self._row_by_row = PreparedWrite(
            sqlite.insert(table).on_conflict_do_nothing(index_elements=conflict), engine, keys
        )
        self._existing: str | None = None
        if key is not None:
            rows = func.json_each(bindparam("rows", type_=Text)).table_valued("value")
            column: Column[Any] = table.c[key]
            self._existing = (
                select(column)
                .where(column.in_(select(rows.c.value)))
                .compile(dialect=dialect)
                .string
            )

    def run(self, dbapi_connection: Any, rows: list[dict[str, Any]]) -> set[Any]:
        """Insert ``rows`` (each with exactly the keys given at creation); the ``key`` values
        of the rows really inserted (an empty set without ``key``)."""
        key = self._key
        if key is None or self._existing is None:
            self._row_by_row.run_many(dbapi_connection, rows)
            return set()
        offered = [row[key] for row in rows]
        encoded = json.dumps(offered, ensure_ascii=False)
        if "\\u0000" in encoded:
            return self._row_by_row.run_each(dbapi_connection, rows, key)
        existing = {found for (found,) in dbapi_connection.execute(self._existing, (encoded,))}
        self._row_by_row.run_many(dbapi_connection, rows)
        return set(offered) - existing
