"""The index: mementos and their bookkeeping, over SQLAlchemy Core.

SQLite (embedded default) and PostgreSQL (production, several replicas) run the same
queries and the same test suite. PostgreSQL uses ``INSERT … ON CONFLICT DO NOTHING`` so
concurrent replicas writing the same memento agree on one row; how each engine takes its
write lock is in :mod:`archive.index.engines`.

Over 500 lines only because the change signals (SQLite files) and generation rows
(PostgreSQL) for deletions, erasures, revocations and timemaps, and the evidence log's hook,
were merged here; the signals belong in their own module next, split with a full test run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Table,
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
from archive.index.generations import DELETIONS, TIMEMAPS, SharedGenerations
from archive.index.idempotency import IdempotencyKeys
from archive.index.inserts import RowInserter
from archive.index.migrations import migrate
from archive.index.navigation import Neighbours, TimeTravel
from archive.index.prepared import Lookups
from archive.index.recorded import RecordedSettings
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
from archive.index.signals import ReadCache
from archive.index.timeline import Timeline, TimelineReader
from archive.log.sequencer import PENDING as _LOG_PENDING
from archive.log.sequencer import LeafSequencer
from archive.mementos import Memento

DEFAULT_TENANT = "default"
# Where a write transaction keeps what must happen once it has ended (connection.info).
_AFTER_END = "amber.after_end"
_ANNOUNCED = "amber.timemaps_announced"
_BUMP_AT_COMMIT = "amber.timemaps_bump_at_commit"
_EXCLUSIVE = "amber.exclusive"


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
            self._reader = postgres_engine(self.url, pool_size=10, max_overflow=10)
        else:
            raise ConfigurationError("AMBER_DATABASE_URL must be sqlite:/// or postgresql://")
        migrate(self._writer)
        # PostgreSQL: what replicas remember is valid while these rows stand (generations.py).
        self.generations = SharedGenerations(self._reader) if self.dialect == "postgresql" else None
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
        # Every deletion commits through this signal's changing(), so that what any process
        # remembers of live mementos (cache_until_deletion) is forgotten at once. A budget
        # of 0: it remembers nothing itself.
        self._deletions: ReadCache[Any, Any] = ReadCache(self.sqlite_path, DELETIONS, budget=0)
        # Every erasure commits through this one too: each process then forgets the text it
        # derived from captured bytes (extractions, prepared text; see TextMemory).
        self._erasures: ReadCache[Any, Any] = ReadCache(self.sqlite_path, "erasures", budget=0)
        # Every change to which mementos a URI-R has — a new memento, any deletion — commits
        # through this signal, so that what any process remembers of TimeMaps and TimeGates
        # (cache_until_timemaps_change) is forgotten at once.
        self._timemaps: ReadCache[Any, Any] = ReadCache(self.sqlite_path, TIMEMAPS, budget=0)
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
        self._erasures.close()
        self._deletions.close()
        self._timemaps.close()
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

        Only exclusive writes may delete mementos (see :meth:`cache_until_deletion`).
        """
        # Deletions happen only in exclusive writes: they tell every process to forget the
        # live mementos it remembers, whatever they delete.
        with (
            ExitStack() as after_end,  # outermost: runs once the transaction has ended
            self._deletions.changing() if exclusive else nullcontext(),
            self._writer.begin() as connection,
        ):
            lock_against_sweeps(connection, self.dialect, exclusive=exclusive)
            self._track_end(connection, after_end)
            if exclusive:
                connection.info[_EXCLUSIVE] = True
                self.announce(connection, DELETIONS)
                self._announce_timemaps_change(connection)
            yield connection
            self._before_commit(connection)

    def _track_end(self, connection: Connection, after_end: ExitStack) -> None:
        connection.info[_AFTER_END] = after_end
        after_end.callback(connection.info.pop, _AFTER_END, None)
        after_end.callback(connection.info.pop, _ANNOUNCED, None)
        after_end.callback(connection.info.pop, _BUMP_AT_COMMIT, None)
        after_end.callback(connection.info.pop, _EXCLUSIVE, None)
        after_end.callback(connection.info.pop, _LOG_PENDING, None)
        if self.log is not None:
            self.log.defer(connection)  # leaves sequenced by _before_commit

    def announce(self, connection: Connection, kind: str) -> None:
        """On PostgreSQL, make this write transaction a change of ``kind`` (DELETIONS,
        REVOCATIONS, TIMEMAPS) for every replica, from its commit on (generations.py); on
        SQLite the change's signal says so instead (ReadCache.changing)."""
        if self.generations is not None:
            self.generations.bump(connection, kind)

    def _before_commit(self, connection: Connection) -> None:
        """Moves the TimeMaps generation of a write that inserted mementos (PostgreSQL), and
        sequences the write's evidence-log leaves, as late as it can: those rows stay locked,
        and concurrent writers wait, only until the commit, not through the whole
        transaction. Always in this order (exclusive writes bump TimeMaps earlier), so no
        writer waits for one row while holding the other."""
        if connection.info.pop(_BUMP_AT_COMMIT, False):
            self.announce(connection, TIMEMAPS)
        if self.log is not None:
            self.log.flush(connection)

    async def observe_changes(self) -> None:
        """Read, for the current request, what changed in any replica (PostgreSQL: one
        shared statement; nothing to do on SQLite, whose signals are memory reads). A
        request that skips this is never answered from memory on PostgreSQL."""
        if self.generations is not None:
            await self.generations.observe()

    def observe_changes_now(self) -> None:
        """:meth:`observe_changes` in a worker thread (its own read, not shared)."""
        if self.generations is not None:
            self.generations.observe_now()

    def _announce_timemaps_change(self, connection: Connection) -> None:
        """Make this write transaction, from now until it has ended, a change of TimeMaps
        for every process (see :meth:`cache_until_timemaps_change`).

        Entered under the write lock (SQLite takes it at BEGIN IMMEDIATE), after the
        deletion signal's: every writer takes the three in this order, so none waits for
        one while holding a later one."""
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
        self._track_end(connection, write.after_end)
        return write

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
        self._announce_timemaps_change(connection)
        self.ensure_tenants(connection, {m.tenant for m in batch})
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
            self.insert_ignoring(connection, blobs, blob_rows, conflict=["address"])
        # The version each memento records is the one current under the lock, not the one
        # the writer's put saw before it: a sweep may have deleted that version since and
        # another writer re-stored the bytes as a new one.
        versions = self._current_versions(
            connection, {m.content_hash for m in batch}, revive, states
        )
        versioned = {m.id: with_version(m, versions) for m in batch}
        rows = {i: self._memento_row(m) for i, m in versioned.items()}
        inserted = self.insert_ignoring(
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

    def ensure_tenants(self, connection: Connection, names: set[str]) -> None:
        self.inserts.ensure_tenants(connection, names)

    def insert_ignoring(
        self,
        connection: Connection,
        table: Table,
        rows: list[dict[str, Any]],
        *,
        conflict: list[str],
        returning: Column[Any] | None = None,
    ) -> set[Any]:
        """Insert the rows that do not conflict; the ``returning`` values of those inserted."""
        return self.inserts.insert_ignoring(
            connection, table, rows, conflict=conflict, returning=returning
        )

    # -- reads ----------------------------------------------------------------------------

    def get_memento(self, tenant: str, memento_id: str) -> Memento | None:
        row = self.lookups.first(self._memento_by_id, tenant=tenant, id=memento_id)
        return None if row is None else memento_from(row)

    def cache_until_deletion(self, weigh: Callable[[Any], int], budget: int) -> ReadCache[Any, Any]:
        """A cache of what is derived from live mementos, at most ``budget`` heavy (by
        ``weigh``), emptied by the next deletion committed in any process (on PostgreSQL,
        used only by requests that :meth:`observe_changes`)."""
        return ReadCache(
            self.sqlite_path, DELETIONS, budget=budget, weigh=weigh, shared=self.generations
        )

    def cache_until_timemaps_change(
        self, weigh: Callable[[Any], int], budget: int
    ) -> ReadCache[Any, Any]:
        """A cache of what is derived from URI-Rs' sets of live mementos (TimeMaps, TimeGate
        choices), at most ``budget`` heavy, emptied by the next memento inserted or deleted
        in any process (on PostgreSQL, used only by requests that :meth:`observe_changes`)."""
        return ReadCache(
            self.sqlite_path, TIMEMAPS, budget=budget, weigh=weigh, shared=self.generations
        )

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
