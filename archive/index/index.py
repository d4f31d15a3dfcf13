"""The index: mementos and their bookkeeping, over SQLAlchemy Core.

SQLite (embedded default) and PostgreSQL (production, several replicas) run the same
queries and the same test suite. PostgreSQL uses ``INSERT … ON CONFLICT DO NOTHING`` so
concurrent replicas writing the same memento agree on one row; how each engine takes its
write lock is in :mod:`archive.index.engines`.

What each write tells other processes and replicas (change signals, generation rows) is
:mod:`archive.index.changes`; :attr:`Index.changes` is that of this index.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    and_,
    bindparam,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from archive.blobstore.base import StoredBlob
from archive.dates import utc_now
from archive.exceptions import ConfigurationError, IdempotencyConflict, StorageError
from archive.index.changes import Changes
from archive.index.engines import (
    OpenWrite,
    checkpoint_truncate,
    create_private_database,
    driver_url,
    lock_against_sweeps,
    postgres_engine,
    sqlite_engine,
    sqlite_path_of,
)
from archive.index.generations import SharedGenerations
from archive.index.idempotency import IdempotencyKeys
from archive.index.inserts import RowInserter
from archive.index.migrations import migrate
from archive.index.navigation import Neighbours, TimeTravel
from archive.index.prepared import Lookups
from archive.index.recorded import RecordedSettings
from archive.index.roundtrips import commit_with_deferred, expect_deferred
from archive.index.rows import (
    StoredResponse,
    WriteOutcome,
    as_inserted,
    memento_from,
    memento_row,
    stored_response_from,
    with_version,
)
from archive.index.schema import blobs, idempotency_keys, mementos
from archive.index.timeline import Timeline, TimelineReader
from archive.log.sequencer import PENDING as _LOG_PENDING
from archive.log.sequencer import LeafSequencer
from archive.mementos import Memento

DEFAULT_TENANT = "default"


class Index:
    def __init__(
        self,
        url: str,
        *,
        durable: bool = True,
        grace: timedelta = timedelta(days=14),
        idempotency_ttl: timedelta = timedelta(hours=24),
        evidence_log: bool = False,
    ) -> None:
        self.url = driver_url(url)
        # Sequences a leaf of the evidence log (archive/log) in every transaction that writes
        # a memento, a citation or a tombstone; None when the archive keeps no log.
        self.log = LeafSequencer() if evidence_log else None
        self.grace = grace  # expiry of a memento nobody cites: archived_at + grace
        self.dialect = self.url.split(":", 1)[0].split("+", 1)[0]
        if self.dialect == "sqlite":
            if ":memory:" in self.url or self.url in ("sqlite://", "sqlite:///"):
                raise ConfigurationError("the SQLite index needs a file (sqlite:///path)")
            Path(sqlite_path_of(self.url)).parent.mkdir(parents=True, exist_ok=True)
            create_private_database(sqlite_path_of(self.url))
            self._writer = sqlite_engine(self.url, durable=durable, immediate=True)
            self._reader = sqlite_engine(self.url, durable=durable, immediate=False)
        elif self.dialect == "postgresql":
            self._writer = postgres_engine(self.url, pool_size=5, max_overflow=5)
            self._reader = postgres_engine(self.url, pool_size=10, max_overflow=10, autocommit=True)
        else:
            raise ConfigurationError("AMBER_DATABASE_URL must be sqlite:/// or postgresql://")
        migrate(self._writer)
        # What every write tells the other processes (SQLite) or replicas (PostgreSQL).
        self.changes = Changes(
            self.sqlite_path,
            SharedGenerations(self._reader) if self.dialect == "postgresql" else None,
        )
        self.inserts = RowInserter(self._writer, self.dialect)
        self.recorded = RecordedSettings(self._writer, self._reader, self.dialect)
        self.idempotency = IdempotencyKeys(self.inserts, self.dialect, idempotency_ttl)
        self.lookups = Lookups(
            self._reader, sqlite_path_of(self.url) if self.dialect == "sqlite" else None
        )
        self._memento_by_id = self.lookups.prepare(
            select(mementos).where(
                mementos.c.tenant == bindparam("tenant"), mementos.c.id == bindparam("id")
            )
        )
        if self.dialect == "sqlite":
            ids = func.json_each(bindparam("ids", type_=Text)).table_valued("value")
            self._mementos_by_ids = self.lookups.prepare(
                select(mementos).where(mementos.c.id.in_(select(ids.c.value)))
            )
            # Only blobs whose version a write must look at: being deleted, or versioned.
            self._blob_states_by_address = self.lookups.prepare(
                select(blobs.c.address, blobs.c.state, blobs.c.version_id).where(
                    blobs.c.address.in_(select(ids.c.value)),
                    (blobs.c.state != literal_column("'live'")) | blobs.c.version_id.is_not(None),
                )
            )
        self.time_travel = TimeTravel(self.lookups)
        self.timelines = TimelineReader(self.lookups)
        # Every write with an Idempotency-Key (the SDK sends one) checks for a first answer.
        self._response_by_key = self.lookups.prepare(
            select(idempotency_keys).where(
                idempotency_keys.c.tenant == bindparam("tenant"),
                idempotency_keys.c.key == bindparam("key"),
            )
        )

    @property
    def sqlite_path(self) -> str | None:
        """The SQLite database file; None on PostgreSQL."""
        return sqlite_path_of(self.url) if self.dialect == "sqlite" else None

    @property
    def reads_in_process(self) -> bool:
        """True when a point lookup is a local file read (SQLite), not a network round trip."""
        return self.dialect == "sqlite"

    def close(self) -> None:
        self.changes.close()
        self.lookups.close()
        self._writer.dispose()
        self._reader.dispose()

    @contextmanager
    def write(self, *, exclusive: bool = False) -> Iterator[Connection]:
        """A write transaction. SQLite has one writer at a time (``BEGIN IMMEDIATE``).

        PostgreSQL runs writers concurrently, at READ COMMITTED: there every write holds a
        shared transaction-level advisory lock, and ``exclusive`` ones (retention's
        deletions and retention changes) hold it alone. A sweep then never evaluates and deletes while a citation,
        hold or extension that reaches the same memento commits beside it unseen; writers
        still run beside each other. Taken first, so every later statement of the
        transaction sees what the other side committed.

        Only exclusive writes may delete mementos (see :meth:`Changes.cache_until_deletion`).
        """
        # Deletions happen only in exclusive writes: they tell every process to forget the
        # live mementos it remembers, whatever they delete.
        with (
            ExitStack() as after_end,  # outermost: runs once the transaction has ended
            self.changes.before_write(exclusive=exclusive),
            self._writer.begin() as connection,
        ):
            lock_against_sweeps(connection, self.dialect, exclusive=exclusive)
            self._begin_write(connection, after_end, exclusive=exclusive)
            yield connection
            self._before_commit(connection)

    def _begin_write(
        self, connection: Connection, after_end: ExitStack, *, exclusive: bool
    ) -> None:
        """First under the write lock: the evidence log's leaves wait for the commit
        (:meth:`_before_commit`), and the write becomes the changes it is
        (:meth:`Changes.begin_write`). ``after_end`` runs once it has ended."""
        after_end.callback(connection.info.pop, _LOG_PENDING, None)
        expect_deferred(connection, after_end)
        if self.log is not None:
            self.log.defer(connection)  # leaves sequenced by _before_commit
        self.changes.begin_write(connection, after_end, exclusive=exclusive)

    def _before_commit(self, connection: Connection) -> None:
        """Moves the TimeMaps generation of a write that inserted mementos (PostgreSQL), then
        sequences the write's evidence-log leaves, as late as it can: those rows stay locked,
        and concurrent writers wait, only until the commit, not through the whole
        transaction. Always in this order (exclusive writes bump TimeMaps earlier), so no
        writer waits for one row while holding the other.

        On PostgreSQL both go out with the COMMIT, in one round trip
        (:mod:`archive.index.roundtrips`): the transaction has ended when this returns."""
        self.changes.before_commit(connection)
        if self.log is not None:
            self.log.flush(connection)
        commit_with_deferred(connection)

    async def observe_changes(self) -> None:
        """What every request awaits before answering from memory: :meth:`Changes.observe`."""
        await self.changes.observe()

    def observe_changes_now(self) -> None:
        """:meth:`observe_changes` in a worker thread (its own read, not shared)."""
        self.changes.observe_now()

    def open_write(self) -> OpenWrite:
        """A (non-exclusive) :meth:`write` transaction as an object: begun by this call (which
        may wait for the write lock) and ended by its ``commit`` or ``rollback`` (which wait
        for the disk), so an event loop can wait for each in a thread and run the statements
        in between itself."""
        connection = self._writer.connect()
        try:
            transaction = connection.begin()
            lock_against_sweeps(connection, self.dialect, exclusive=False)
        except BaseException:
            connection.close()
            raise
        write = OpenWrite(connection, transaction, before_commit=self._before_commit)
        self._begin_write(connection, write.after_end, exclusive=False)
        return write

    def scrub(self) -> bool:
        """Leave no copy of deleted text in the index's files that SQLite could still read:
        with ``secure_delete`` on (every connection), freed cells and pages are zeros in the
        database file once the WAL is checkpointed into it and truncated. True when done
        (always on PostgreSQL, where this is an operator's job: docs/design.md §7.3); False
        when a reader kept the WAL, which the next complete checkpoint then empties."""
        if self.dialect != "sqlite":
            return True
        return checkpoint_truncate(self._writer)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self._reader.connect() as connection:
            yield connection

    # -- writes ---------------------------------------------------------------------------

    def insert_mementos(
        self,
        connection: Connection,
        batch: Sequence[Memento],
        revive: Callable[[str], StoredBlob] | None = None,
        contents: Mapping[str, bytes] | None = None,
    ) -> list[WriteOutcome]:
        """Insert what is new; report existing rows. Call inside :meth:`write`.

        ``contents`` (bytes by address) lets the evidence log attest each new memento's
        SHA-256; with a log it must hold every new memento's bytes.

        ``revive(address)`` re-stores a blob's bytes: it is called, under the write lock,
        for a blob a retention sweep has started deleting, so the write never acknowledges
        a memento whose bytes the sweep is about to remove (DESIGN.md invariant 2 and 5).
        """
        if not batch:
            return []
        self.changes.timemaps_change(connection)
        self.inserts.ensure_tenants(connection, {m.tenant for m in batch})
        blob_rows = [
            {
                "address": m.content_hash,
                "size": m.size,
                "version_id": m.blob_version_id,
                "stored_at": m.archived_at,
                "state": "live",
                "lock_legal_hold": 0,
            }
            for m in batch
        ]
        # PostgreSQL: inserted and locked in one statement, which also reads their states.
        states = self.inserts.insert_blobs_locked(connection, blob_rows)
        if states is None:
            self.inserts.insert_ignoring(connection, blobs, blob_rows, conflict=["address"])
        # The version each memento records is the one current under the lock, not the one
        # the writer's put saw before it: a sweep may have deleted that version since and
        # another writer re-stored the bytes as a new one.
        versions = self._current_versions(
            connection, {m.content_hash for m in batch}, revive, states
        )
        versioned = {m.id: with_version(m, versions) for m in batch}
        rows = {i: self._memento_row(m) for i, m in versioned.items()}
        inserted = self.inserts.insert_ignoring(
            connection,
            mementos,
            list(rows.values()),
            conflict=["id"],
            returning=mementos.c.id,
        )
        # What we inserted is known; only rows that were there before are read back.
        stored = {
            i: as_inserted(m, rows[i]["expires_at"]) for i, m in versioned.items() if i in inserted
        }
        if self.log is not None:
            self.log.log_mementos(connection, list(stored.values()), contents or {})
        earlier = [i for i in rows if i not in inserted]
        if earlier:
            stored.update((m.id, m) for m in self._load_ids(connection, earlier))
        outcomes, first_seen = [], set()
        for m in batch:
            created = m.id in inserted and m.id not in first_seen
            first_seen.add(m.id)
            outcomes.append(WriteOutcome(memento=stored[m.id], created=created))
        return outcomes

    def _current_versions(
        self,
        connection: Connection,
        addresses: set[str],
        revive: Callable[[str], StoredBlob] | None,
        states: list[tuple[Any, ...]] | None = None,
    ) -> dict[str, str | None]:
        """Each blob's current version, re-storing (under the write lock) those a retention
        sweep has marked or finished deleting. ``states``: the blobs' states, when read
        already (RowInserter.insert_blobs_locked)."""
        # A blob not listed is live and unversioned (its row was inserted or kept just now).
        versions: dict[str, str | None] = dict.fromkeys(addresses)
        if states is None:
            states = self._blob_states(connection, sorted(addresses))
        for address, state, version_id in states:
            if state == "live":
                versions[address] = version_id
                continue
            if revive is None:
                raise StorageError(
                    "blob is being deleted by retention; retry the write", address=address
                )
            stored = revive(address)
            # A new version carries none of the old one's lock: start the lock bookkeeping over.
            connection.execute(
                update(blobs)
                .where(blobs.c.address == address)
                .values(
                    state="live",
                    version_id=stored.version_id,
                    size=stored.size,
                    lock_until=stored.retain_until,
                    lock_legal_hold=0,
                )
            )
            versions[address] = stored.version_id
        return versions

    def _blob_states(self, connection: Connection, addresses: list[str]) -> list[tuple[Any, ...]]:
        """(address, state, version_id) of these blobs, inside the write transaction; on
        SQLite only those not live or versioned."""
        if self.dialect == "sqlite":
            # Every write batch asks: one prepared statement on the driver, as for mementos.
            # SQLite took the write lock at BEGIN IMMEDIATE, so no row lock is needed.
            rows = self.lookups.all_on(
                connection.connection.dbapi_connection,
                self._blob_states_by_address,
                ids=json.dumps(addresses),
            )
            return [tuple(row) for row in rows]
        query = (
            select(blobs.c.address, blobs.c.state, blobs.c.version_id)
            .where(blobs.c.address.in_(addresses))
            .with_for_update()
        )  # serialises with the sweep's per-blob deletion
        return [tuple(row) for row in connection.execute(query).all()]

    def extend_expiry(
        self, connection: Connection, tenant: str, memento_ids: Sequence[str], until: datetime
    ) -> int:
        """Make these mementos live at least until ``until`` (never shortens)."""
        if not memento_ids:
            return 0
        result = connection.execute(
            update(mementos)
            .where(
                mementos.c.tenant == tenant,
                mementos.c.id.in_(sorted(set(memento_ids))),
                mementos.c.deleted_at.is_(None),
                (mementos.c.expires_at.is_(None)) | (mementos.c.expires_at < until),
            )
            .values(expires_at=until)
        )
        return int(result.rowcount or 0)

    def _memento_row(self, m: Memento) -> dict[str, Any]:
        row = memento_row(m)
        row["expires_at"] = m.expires_at or m.archived_at + self.grace
        row["legal_hold"] = 0
        row["deleted_at"] = row["deletion_reason"] = None
        return row

    def remember_response(
        self,
        connection: Connection,
        tenant: str,
        key: str,
        response: StoredResponse,
        now: datetime,
    ) -> StoredResponse:
        """Record the first answer for ``key``; if one exists already, return that one."""
        [recorded] = self.idempotency.claim(connection, [(tenant, key, response)], now)
        return response if recorded is None else recorded

    # -- reads ----------------------------------------------------------------------------

    def get_memento(self, tenant: str, memento_id: str) -> Memento | None:
        row = self.lookups.first(self._memento_by_id, tenant=tenant, id=memento_id)
        return None if row is None else memento_from(row)

    def timeline(self, tenant: str, urir_key: str) -> Timeline | None:
        """The URI-R's live mementos in TimeMap order, or None when there are too many to
        read whole (see :mod:`archive.index.timeline`)."""
        return self.timelines.read(tenant, urir_key)

    def stored_response(self, tenant: str, key: str) -> StoredResponse | None:
        """The first answer recorded for ``key``, unless it is older than the TTL (the key
        is then free again: see :mod:`archive.index.idempotency`)."""
        row = self.lookups.first(self._response_by_key, tenant=tenant, key=key)
        if row is None or row.created_at < utc_now() - self.idempotency.ttl:
            return None
        return stored_response_from(row)

    def check_idempotency(self, tenant: str, key: str, request_hash: str) -> StoredResponse | None:
        stored = self.stored_response(tenant, key)
        if stored is not None and stored.request_hash != request_hash:
            raise IdempotencyConflict(
                "this Idempotency-Key was already used for a different request"
            )
        return stored

    def neighbours(self, tenant: str, urir_key: str, target: datetime | None) -> Neighbours | None:
        """Choose the memento nearest ``target`` (latest when None) and its neighbours."""
        return self.time_travel.neighbours(tenant, urir_key, target)

    def list_mementos(
        self, tenant: str, urir_key: str, *, offset: int, limit: int
    ) -> list[Memento]:
        return self.time_travel.list_mementos(tenant, urir_key, offset=offset, limit=limit)

    def count_mementos(self, tenant: str, urir_key: str) -> int:
        return self.time_travel.count_mementos(tenant, urir_key)

    def all_memento_blobs(self) -> list[tuple[str, str, str | None]]:
        """(memento id, content hash, version id) for every live memento: for integrity checks.

        Tombstoned mementos are left out: their bytes were deleted on purpose (expiry or
        erasure), so a missing blob there is the promise kept, not damage.
        """
        with self.read() as connection:
            rows = connection.execute(
                select(mementos.c.id, mementos.c.content_hash, mementos.c.blob_version_id).where(
                    mementos.c.deleted_at.is_(None)
                )
            )
            return [(r.id, r.content_hash, r.blob_version_id) for r in rows]

    def load_mementos(
        self, connection: Connection, tenant: str, ids: Sequence[str]
    ) -> list[Memento]:
        if not ids:
            return []
        return self._load(
            connection, and_(mementos.c.tenant == tenant, mementos.c.id.in_(list(set(ids))))
        )

    def deleted_among(self, connection: Connection, ids: Collection[str]) -> set[str]:
        """Which of these mementos are tombstoned. Inside :meth:`write`, this sees every
        deletion committed so far (PostgreSQL: none can be in progress, see :meth:`write`)."""
        if not ids:
            return set()
        return set(
            connection.execute(
                select(mementos.c.id).where(
                    mementos.c.id.in_(sorted(ids)), mementos.c.deleted_at.is_not(None)
                )
            ).scalars()
        )

    def _load_ids(self, connection: Connection, ids: list[str]) -> list[Memento]:
        if self.dialect == "sqlite":  # the writer's hot path: one prepared statement, any count
            rows = self.lookups.all_on(
                connection.connection.dbapi_connection, self._mementos_by_ids, ids=json.dumps(ids)
            )
            return [memento_from(row) for row in rows]
        return self._load(connection, mementos.c.id.in_(ids))

    def _load(self, connection: Connection, where: ColumnElement[bool]) -> list[Memento]:
        return [memento_from(row) for row in connection.execute(select(mementos).where(where))]
