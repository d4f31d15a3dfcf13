"""PostgreSQL write transactions in fewer round trips, with psycopg's pipeline mode.

A write batch used to wait for the server seven times: BEGIN, the advisory lock, the blob
and memento inserts, the TimeMaps generation, the evidence-log leaves, COMMIT. Each wait is
a network round trip, and on a busy server also a wait for the GIL before the committing
thread runs again (docs/design.md §8.2). Two groups need no answer in between:

- BEGIN and the advisory lock go out together (:func:`execute_first`); the server still
  runs them in order, so every later statement's snapshot is taken after the lock is held.
- Statements whose answers nobody reads, queued by :func:`defer_to_commit` once the write
  has begun (:func:`expect_deferred`), go out with the COMMIT itself
  (:func:`commit_with_deferred`). For the generation and log-counter rows that every
  writer updates, this also means they are locked for one message's work on the server,
  not for three round trips: concurrent writers (other workers, other hosts) wait less.

Where the driver has no pipeline mode (libpq older than 14), the same statements run one
by one, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any, cast

import psycopg
from psycopg.pq import ExecStatus, TransactionStatus
from sqlalchemy import Connection

Parameters = Sequence[Any] | Mapping[str, Any] | None

# connection.info: the statements a write transaction sends with its COMMIT.
_DEFERRED = "amber.deferred_to_commit"


def _pipelines(connection: Connection) -> psycopg.Connection[Any] | None:
    """The psycopg connection under ``connection``, when it can pipeline."""
    if connection.dialect.name != "postgresql" or not psycopg.Pipeline.is_supported():
        return None
    return _psycopg(connection)


def _psycopg(connection: Connection) -> psycopg.Connection[Any]:
    return cast("psycopg.Connection[Any]", connection.connection.dbapi_connection)


def execute_first(connection: Connection, sql: str) -> None:
    """Run a transaction's first statement, whose answer nobody reads, in the round trip
    that begins the transaction. ``sql`` is a constant: it must hold no user input."""
    raw = _pipelines(connection)
    if raw is None or not _begins_plainly(raw):
        connection.exec_driver_sql(sql)
        return
    # psycopg sends its own BEGIN and waits for it before the first statement, pipeline or
    # not; one simple query with both begins the transaction exactly as psycopg would
    # (it reads the transaction's state back from libpq). libpq waits with the GIL released.
    with raw.lock:
        result = raw.pgconn.exec_(b"BEGIN; " + sql.encode())
    if result.status != ExecStatus.TUPLES_OK:
        # The server's own error, as psycopg raises it for any statement. A connection that
        # is gone is dropped from the pool by the rollback that follows.
        raise psycopg.errors.error_from_result(result, encoding=raw.info.encoding)


def _begins_plainly(raw: psycopg.Connection[Any]) -> bool:
    """Whether psycopg would begin a transaction on ``raw`` with a bare BEGIN now."""
    return (
        not raw.autocommit
        and raw.pgconn.transaction_status == TransactionStatus.IDLE
        and raw.isolation_level is None
        and raw.read_only is None
        and raw.deferrable is None
    )


def expect_deferred(connection: Connection, after_end: ExitStack) -> None:
    """From now until the transaction ends (``after_end``), :func:`defer_to_commit` queues
    statements for :func:`commit_with_deferred` (PostgreSQL only)."""
    if _pipelines(connection) is None:
        return
    connection.info[_DEFERRED] = []
    after_end.callback(connection.info.pop, _DEFERRED, None)


def defer_to_commit(connection: Connection, sql: str, parameters: Parameters = None) -> None:
    """Run ``sql`` in this transaction, at the latest with its COMMIT: queued when the write
    expects deferred statements, else now. Its answer is never read; its errors fail the
    commit, so the transaction rolls back as if it had failed here."""
    deferred: list[tuple[str, Parameters]] | None = connection.info.get(_DEFERRED)
    if deferred is None:
        connection.exec_driver_sql(sql, parameters)
    else:
        deferred.append((sql, parameters))


def commit_with_deferred(connection: Connection) -> None:
    """Send the queued statements and COMMIT in one round trip, when any are queued. The
    transaction has then ended on the server; SQLAlchemy's own commit that follows finds
    nothing left to do (psycopg sends nothing for an idle connection)."""
    deferred: list[tuple[str, Parameters]] | None = connection.info.get(_DEFERRED)
    if not deferred:
        return
    raw = _psycopg(connection)
    connection.info[_DEFERRED] = []
    # COMMIT as one more statement, not psycopg's commit(): that one syncs the pipeline,
    # and leaving the pipeline syncs again, two round trips where one does.
    with raw.pipeline(), raw.cursor() as cursor:
        for sql, parameters in deferred:
            cursor.execute(sql, parameters)
        cursor.execute("COMMIT")
