"""Inserting rows that may already be there (``INSERT … ON CONFLICT DO NOTHING``).

On SQLite a whole batch is one statement run on the driver (:class:`BatchInsert` says why);
on PostgreSQL SQLAlchemy's "insertmanyvalues" batches a multi-row insert, and ``RETURNING``
reports only the rows really inserted, so concurrent replicas agree on one row.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Connection, Engine, Table
from sqlalchemy.dialects import postgresql

from archive.dates import utc_now
from archive.index.prepared import BatchInsert
from archive.index.schema import tenants


class RowInserter:
    """Conflict-ignoring inserts on the writer engine, their SQLite statements compiled once."""

    def __init__(self, writer: Engine, dialect: str) -> None:
        self._writer = writer
        self._dialect = dialect
        self._prepared: dict[tuple[Any, ...], BatchInsert] = {}

    def ensure_tenants(self, connection: Connection, names: set[str]) -> None:
        self.insert_ignoring(
            connection,
            tenants,
            [{"id": n, "created_at": utc_now()} for n in sorted(names)],
            conflict=["id"],
        )

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
        statement = postgresql.insert(table).on_conflict_do_nothing(index_elements=conflict)
        if returning is None:
            connection.execute(statement, rows)
            return set()
        # SQLAlchemy's "insertmanyvalues" runs this as batched multi-row INSERT … RETURNING
        # on psycopg: only rows really inserted come back.
        result = connection.execute(statement.returning(returning), rows)
        return set(result.scalars().all())

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
