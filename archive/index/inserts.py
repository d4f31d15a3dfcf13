"""Inserting rows that may already be there (``INSERT … ON CONFLICT DO NOTHING``).

On SQLite a whole batch is one statement run on the driver (:class:`BatchInsert` says why).
On PostgreSQL too (:class:`UnnestInsert`): the batch's values travel as one array per column
and ``RETURNING`` reports only the rows really inserted, so concurrent replicas agree on one
row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Connection, Engine, Table
from sqlalchemy.dialects import postgresql

from archive.dates import utc_now
from archive.index.prepared import BatchInsert
from archive.index.schema import blobs, tenants


class RowInserter:
    """Conflict-ignoring inserts on the writer engine, their SQLite statements compiled once."""

    def __init__(self, writer: Engine, dialect: str) -> None:
        self._writer = writer
        self._dialect = dialect
        self._prepared: dict[tuple[Any, ...], BatchInsert] = {}
        self._unnest: dict[tuple[Any, ...], UnnestInsert | None] = {}
        # Tenants whose row another transaction had committed when a write met it: nothing
        # deletes a tenant, so their row is there for every later write (one statement less
        # per write batch).
        self._known_tenants: set[str] = set()

    def ensure_tenants(self, connection: Connection, names: set[str]) -> None:
        missing = names - self._known_tenants
        if not missing:
            return
        inserted = self.insert_ignoring(
            connection,
            tenants,
            [{"id": n, "created_at": utc_now()} for n in sorted(missing)],
            conflict=["id"],
            returning=tenants.c.id,
        )
        # A row this transaction inserted is not known until it commits: the next write
        # meets it (or inserts it again, if this one rolled back).
        self._known_tenants.update(missing - inserted)

    def insert_ignoring(
        self,
        connection: Connection,
        table: Table,
        rows: list[dict[str, Any]],
        *,
        conflict: list[str],
        returning: Column[Any] | None = None,
    ) -> set[Any]:
        if not rows:
            return set()
        if self._dialect == "sqlite":
            # One statement for the batch, on the driver (prepared.BatchInsert says why).
            insert = self._batch_insert(
                table, conflict, list(rows[0]), None if returning is None else returning.key
            )
            return insert.run(connection.connection.dbapi_connection, rows)
        key = None if returning is None else returning.key
        unnest = self._unnest_insert(table, conflict, list(rows[0]), key)
        if unnest is not None:
            return unnest.run(connection, rows)
        statement = postgresql.insert(table).on_conflict_do_nothing(index_elements=conflict)
        if returning is None:
            connection.execute(statement, rows)
            return set()
        # SQLAlchemy's "insertmanyvalues" runs this as batched multi-row INSERT … RETURNING
        # on psycopg: only rows really inserted come back.
        result = connection.execute(statement.returning(returning), rows)
        return set(result.scalars().all())

    def insert_blobs_locked(
        self, connection: Connection, rows: list[dict[str, Any]]
    ) -> list[tuple[Any, ...]] | None:
        """PostgreSQL: insert the blob rows that are new and lock those already there, in one
        statement; ``(address, state, version_id)`` of every blob a write must look at (new,
        being deleted, or versioned; one that is not listed is live and unversioned), as
        :meth:`Index._blob_states` reads them under ``FOR UPDATE``. None on SQLite, whose
        write lock already keeps sweeps out.

        ``ON CONFLICT DO UPDATE`` locks every row it meets, updated or not, and sees its
        latest committed version; only the rows the write must look at are "updated" (to
        what they hold), so that ``RETURNING`` reports them. Rows are taken in address order,
        as the ``FOR UPDATE`` read took them, so concurrent writers never deadlock."""
        if self._dialect != "postgresql":
            return None
        first = {row["address"]: row for row in reversed(rows)}  # one per address: the first
        offered = [first[address] for address in sorted(first)]
        unnest = self._unnest_insert(blobs, ["address"], list(offered[0]), None)
        if unnest is None:
            return None
        result = connection.exec_driver_sql(unnest.locking_sql, unnest.arrays(offered))
        return [tuple(row) for row in result.all()]

    def _unnest_insert(
        self, table: Table, conflict: list[str], keys: list[str], key: str | None
    ) -> UnnestInsert | None:
        cache_key = (table.name, tuple(conflict), tuple(keys), key)
        if cache_key not in self._unnest:
            self._unnest[cache_key] = UnnestInsert.of(table, conflict, keys, self._writer, key)
        return self._unnest[cache_key]

    def _batch_insert(
        self, table: Table, conflict: list[str], keys: list[str], key: str | None
    ) -> BatchInsert:
        cache_key = (table.name, tuple(conflict), tuple(keys), key)
        prepared = self._prepared.get(cache_key)
        if prepared is None:
            prepared = self._prepared[cache_key] = BatchInsert(
                table, conflict, keys, self._writer, key
            )
        return prepared


class UnnestInsert:
    """``INSERT … SELECT * FROM unnest(…) ON CONFLICT DO NOTHING`` on PostgreSQL: a whole batch
    in one statement whose text is the same for any number of rows, written once and run as
    driver SQL.

    Through Core, the same insert cost a write batch more Python than its round trip
    (compiling the cache key, "insertmanyvalues" rendering a statement per batch size,
    wrapping the result); and a text that changes with the batch size is parsed and planned
    anew by the server, where one text is prepared by psycopg after a few runs. The values
    are bound as Core binds them (each column type's bind processor: a datetime as naive
    UTC), cast to the column's type."""

    def __init__(self, sql: str, keys: list[str], processors: list[Any], key: str | None) -> None:
        self.sql = sql
        self._keys = keys
        self._processors = processors
        self._key = key

    @classmethod
    def of(
        cls, table: Table, conflict: list[str], keys: list[str], engine: Engine, key: str | None
    ) -> UnnestInsert | None:
        """The insert of rows holding exactly ``keys``; None when Core must fill in a
        column's default (a column with one that the rows leave out)."""
        if any(c.default is not None and c.key not in keys for c in table.columns):
            return None
        dialect = engine.dialect
        quote = dialect.identifier_preparer.quote
        columns = [table.c[k] for k in keys]
        # %b: each array travels in binary, element by element; as text, psycopg quotes
        # every element through a regular expression (most of a small batch's dump time).
        arrays = ", ".join(f"%b::{c.type.compile(dialect=dialect)}[]" for c in columns)
        sql = (
            f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
            f"({', '.join(quote(c.name) for c in columns)}) SELECT * FROM unnest({arrays}) "
            f"ON CONFLICT ({', '.join(quote(table.c[k].name) for k in conflict)}) DO NOTHING"
        )
        if key is not None:
            sql += f" RETURNING {quote(table.c[key].name)}"
        processors = [c.type.dialect_impl(dialect).bind_processor(dialect) for c in columns]
        return cls(sql, keys, processors, key)

    @property
    def locking_sql(self) -> str:
        """The blobs' insert, as :meth:`RowInserter.insert_blobs_locked` runs it."""
        head = self.sql.removesuffix(" DO NOTHING")
        return (
            f"{head} DO UPDATE SET state = blobs.state"
            " WHERE blobs.state <> 'live' OR blobs.version_id IS NOT NULL"
            " RETURNING blobs.address, blobs.state, blobs.version_id"
        )

    def arrays(self, rows: list[dict[str, Any]]) -> tuple[list[Any], ...]:
        """The rows' values, one array per column, bound as Core binds them."""
        arrays: list[list[Any]] = []
        for name, process in zip(self._keys, self._processors, strict=True):
            values = [row[name] for row in rows]
            if process is not None:
                values = [None if v is None else process(v) for v in values]
            arrays.append(values)
        return tuple(arrays)

    def run(self, connection: Connection, rows: list[dict[str, Any]]) -> set[Any]:
        """Insert ``rows``; the ``key`` values of the rows really inserted (none without).
        Run as driver SQL: no compiling, and a driver error still reaches the caller as
        SQLAlchemy's (a lost connection invalidates the pool, as for any statement)."""
        result = connection.exec_driver_sql(self.sql, self.arrays(rows))
        if self._key is None:
            result.close()
            return set()
        return set(result.scalars().all())
