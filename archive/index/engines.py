"""The index's database engines: URLs, SQLite's pragmas and its single writer, and the
write transaction as an object.

SQLite (embedded default) runs in WAL mode with a busy timeout; writes open with
``BEGIN IMMEDIATE`` on a dedicated single-connection engine, so there is one writer at a time
and it never deadlocks upgrading a read lock. PostgreSQL runs writers concurrently; there
every write holds a transaction-level advisory lock (:data:`RETENTION_LOCK`) that retention's
deletions take alone.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, RootTransaction, create_engine, event
from sqlalchemy.exc import DisconnectionError

from archive.index.roundtrips import execute_first

log = logging.getLogger(__name__)

# The advisory lock key writers share and retention's deletions take alone (PostgreSQL);
# any constant unlikely to collide with another application's keys in the same database.
RETENTION_LOCK = 0x616D626572_01  # "amber", 1

# A pooled PostgreSQL connection idle longer than this is pinged before it is used again.
PING_IDLE_SECONDS = 1.0
_IDLE_SINCE = "amber.idle_since"


def lock_against_sweeps(connection: Connection, dialect: str, *, exclusive: bool) -> None:
    """On PostgreSQL, the shared (or, for ``exclusive`` writes, sole) advisory lock that keeps
    a retention sweep from deleting beside a write that reaches the same memento."""
    if dialect == "postgresql":
        function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        # With the transaction's BEGIN, in one round trip.
        execute_first(connection, f"SELECT {function}({RETENTION_LOCK})")


@dataclass
class OpenWrite:
    """A write transaction from :meth:`Index.open_write`; ``commit`` or ``rollback`` once."""

    connection: Connection
    transaction: RootTransaction
    # What must happen once the transaction has ended (settling a change signal, see
    # Index.insert_mementos), whether it committed or not.
    after_end: ExitStack = field(default_factory=ExitStack)
    # What the transaction must still do just before its commit (Index._before_commit).
    before_commit: Callable[[Connection], None] | None = None

    def commit(self) -> None:
        with self.after_end:
            try:
                if self.before_commit is not None:
                    self.before_commit(self.connection)
                self.transaction.commit()
            finally:
                self.connection.close()

    def rollback(self) -> None:
        with self.after_end:
            try:
                self.transaction.rollback()
            finally:
                self.connection.close()


def driver_url(url: str) -> str:
    # Plain postgresql:// in AMBER_DATABASE_URL means psycopg 3, the driver we ship.
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def postgres_engine(
    url: str, *, pool_size: int, max_overflow: int, autocommit: bool = False
) -> Engine:
    """A PostgreSQL engine whose pool pings a connection only when it sat idle a while.

    ``pool_pre_ping`` pays a round trip at every checkout: one more per write batch and per
    resolve, for a server that went away seconds ago at most. A connection used within the
    last :data:`PING_IDLE_SECONDS` is handed out as it is; should the server have gone
    meanwhile, the statement fails, the pool drops every connection it holds, and the group
    commit retries the batch's writes one by one on new ones (nothing is acknowledged).

    ``autocommit``: for the readers. At READ COMMITTED every statement reads its own
    snapshot whether or not a transaction surrounds it, so a read gains nothing from one,
    and without it a point look-up is one round trip instead of three (BEGIN, the SELECT,
    and the ROLLBACK that returns the connection to the pool)."""
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        **({"isolation_level": "AUTOCOMMIT"} if autocommit else {}),
    )

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)  # None: just connected (info is per connection)
        if idle_since is None or time.monotonic() - idle_since < PING_IDLE_SECONDS:
            return
        try:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute("SELECT 1")
            finally:
                cursor.close()
            dbapi_connection.rollback()
        except Exception as error:  # the pool then connects anew and tries again
            raise DisconnectionError("pooled connection is gone") from error

    return engine


def sqlite_path_of(url: str) -> str:
    return url.split("///", 1)[1].split("?", 1)[0]


def create_private_database(path: str) -> None:
    """Create the SQLite database file, empty, readable and writable by its owner only, when
    it does not exist yet: it holds quotes, labels and key digests. SQLite gives the
    ``-wal``, ``-shm`` and ``-journal`` files it makes beside it the database file's mode,
    and the change signals take it too, so they are private as well.

    An existing file keeps its mode (an operator may have chosen one, say for a backup
    group); a world-readable one is reported once, so it can be tightened by hand."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        mode = os.stat(path).st_mode
        if mode & stat.S_IROTH:
            log.warning(
                "the index %s is readable by every user of this machine (mode %03o); "
                "'chmod 600' it (and its -wal and -shm files) unless that is intended",
                path,
                stat.S_IMODE(mode),
            )
        return
    os.close(descriptor)  # an empty file is an empty SQLite database


def sqlite_engine(url: str, *, durable: bool, immediate: bool) -> Engine:
    if immediate:
        # One connection, one writer: BEGIN IMMEDIATE takes the write lock up front.
        engine = create_engine(url, pool_size=1, max_overflow=0, pool_timeout=60)
    else:
        # As many connections as the API has worker threads: an overflow connection is
        # opened and closed per checkout, which under load costs more than the query.
        engine = create_engine(url, pool_size=48, max_overflow=16, pool_timeout=60)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        if immediate:  # WAL is a property of the database file: the writer sets it once
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
        # Deleted and rewritten cells, and freed pages, are overwritten with zeros, so text
        # an erasure or a sweep removes does not linger in free space (only the WAL then
        # holds it, until the checkpoint that follows an erasure: checkpoint_truncate).
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def checkpoint_truncate(engine: Engine) -> bool:
    """Copy every WAL frame into the database file and truncate the WAL to zero bytes, on the
    writer's own connection (so no write is in progress). Waits, up to the busy timeout, for
    readers still using older frames. True when the WAL is empty now; False when a reader
    kept it (the frames stay until the next complete checkpoint)."""
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        try:
            busy, _frames, _copied = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            cursor.close()
    finally:
        connection.close()
    return not busy
