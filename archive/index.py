"""The index: mementos and their bookkeeping, over SQLAlchemy Core.

SQLite (embedded default) runs in WAL mode with a busy timeout; writes open with
``BEGIN IMMEDIATE`` on a dedicated single-connection engine, so there is one writer at a time
and it never deadlocks upgrading a read lock. PostgreSQL (production, several replicas)
uses ``INSERT … ON CONFLICT DO NOTHING`` so concurrent replicas writing the same memento
agree on one row. Both run the same queries and the same test suite.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Integer,
    RootTransaction,
    Row,
    Text,
    and_,
    bindparam,
    create_engine,
    event,
    func,
    literal_column,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql

from archive.blobstore.base import StoredBlob
from archive.dates import utc_now
from archive.exceptions import ConfigurationError, IdempotencyConflict, StorageError
from archive.mementos import CaptureFacts, Memento, Scope
from archive.migrations import migrate
from archive.prepared import BatchInsert, Lookups, PreparedLookup, PreparedWrite
from archive.schema import UTCDateTime, blobs, idempotency_keys, mementos, tenants
from archive.signals import ReadCache

DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Neighbours:
    """A chosen memento and the TimeGate's navigation around it (RFC 7089 §4.1)."""

    chosen: Memento
    first: Memento
    last: Memento
    prev: Memento | None
    next: Memento | None


@dataclass(frozen=True)
class StoredResponse:
    """The first answer to an ``Idempotency-Key``, replayed for retries."""

    request_hash: str
    status_code: int
    body: dict[str, Any]


@dataclass(frozen=True)
class WriteOutcome:
    memento: Memento  # the row as stored (the existing one when created is False)
    created: bool


# One memento's expiry extended to a date (never shortened): executemany'd per batch.
_EXTEND_EACH = (
    update(mementos)
    .where(
        mementos.c.tenant == bindparam("reach_tenant"),
        mementos.c.id == bindparam("reach_id"),
        mementos.c.deleted_at.is_(None),
        (mementos.c.expires_at.is_(None)) | (mementos.c.expires_at < bindparam("reach_until")),
    )
    .values(expires_at=bindparam("reach_until"))
)


def _live_of(tenant: Any, urir_key: Any) -> Any:
    # Deleted mementos (tombstones) leave TimeMaps and TimeGates; their URI-M answers 410.
    return and_(
        mementos.c.tenant == tenant,
        mementos.c.urir_key == urir_key,
        mementos.c.deleted_at.is_(None),
    )


def _live_of_bound() -> Any:
    """:func:`_live_of` with the tenant and URI-R key as bind parameters."""
    return _live_of(bindparam("tenant"), bindparam("urir_key"))


def _nearest(
    probe: Callable[..., Memento | None], target: datetime, first: Memento, last: Memento
) -> Memento:
    if target <= first.captured_at:
        return first
    if target >= last.captured_at:
        # Several mementos may share the last datetime: take the first of them in order.
        return _first_at(probe, last.captured_at)
    before = probe("at_or_before", moment=target)
    after = probe("after", moment=target)
    assert before is not None and after is not None
    if after.captured_at - target < target - before.captured_at:
        return after
    return _first_at(probe, before.captured_at)


def _first_at(probe: Callable[..., Memento | None], moment: datetime) -> Memento:
    found = probe("at", moment=moment)
    assert found is not None
    return found


def _neighbour_probes(lookups: Lookups) -> dict[str, PreparedLookup]:
    """The TimeGate's look-ups (:meth:`Index.neighbours`), each the first live memento of a
    URI-R in TimeMap order from some point: compiled once, since SQLAlchemy's execution
    machinery cost ~10x the indexed query itself (mementos_by_original)."""
    live = _live_of_bound()
    moment = bindparam("moment", type_=UTCDateTime())
    at = tuple_(
        bindparam("at_time", type_=UTCDateTime()),
        bindparam("at_scope", type_=Text()),
        bindparam("at_id", type_=Text()),
    )
    wheres_and_orders = {
        "first": ((), _order_ascending()),
        "last": ((), _order_descending()),
        "at": ((mementos.c.captured_at == moment,), _order_ascending()),
        "at_or_before": ((mementos.c.captured_at <= moment,), _order_descending()),
        "after": ((mementos.c.captured_at > moment,), _order_ascending()),
        "before_position": ((_position() < at,), _order_descending()),
        "after_position": ((_position() > at,), _order_ascending()),
    }
    return {
        name: lookups.prepare(select(mementos).where(live, *wheres).order_by(*order).limit(1))
        for name, (wheres, order) in wheres_and_orders.items()
    }


def _order_ascending() -> tuple[Any, ...]:
    # The TimeMap order: datetime, then documents before passages, then id (Contracts).
    return (mementos.c.captured_at.asc(), mementos.c.scope.asc(), mementos.c.id.asc())


def _order_descending() -> tuple[Any, ...]:
    return (mementos.c.captured_at.desc(), mementos.c.scope.desc(), mementos.c.id.desc())


def _position() -> Any:
    return tuple_(mementos.c.captured_at, mementos.c.scope, mementos.c.id)


# The advisory lock key writers share and retention's deletions take alone (PostgreSQL);
# any constant unlikely to collide with another application's keys in the same database.
_RETENTION_LOCK = 0x616D626572_01  # "amber", 1


@dataclass
class OpenWrite:
    """A write transaction from :meth:`Index.open_write`; ``commit`` or ``rollback`` once."""

    connection: Connection
    transaction: RootTransaction

    def commit(self) -> None:
        try:
            self.transaction.commit()
        finally:
            self.connection.close()

    def rollback(self) -> None:
        try:
            self.transaction.rollback()
        finally:
            self.connection.close()


class Index:
    def __init__(
        self, url: str, *, durable: bool = True, grace: timedelta = timedelta(days=14)
    ) -> None:
        self.url = _driver_url(url)
        self.grace = grace  # expiry of a memento nobody cites: archived_at + grace
        self.dialect = self.url.split(":", 1)[0].split("+", 1)[0]
        if self.dialect == "sqlite":
            if ":memory:" in self.url or self.url in ("sqlite://", "sqlite:///"):
                raise ConfigurationError("the SQLite index needs a file (sqlite:///path)")
            Path(_sqlite_path(self.url)).parent.mkdir(parents=True, exist_ok=True)
            self._writer = _sqlite_engine(self.url, durable=durable, immediate=True)
            self._reader = _sqlite_engine(self.url, durable=durable, immediate=False)
        elif self.dialect == "postgresql":
            self._writer = create_engine(self.url, pool_size=5, max_overflow=5, pool_pre_ping=True)
            self._reader = create_engine(
                self.url, pool_size=10, max_overflow=10, pool_pre_ping=True
            )
        else:
            raise ConfigurationError("AMBER_DATABASE_URL must be sqlite:/// or postgresql://")
        migrate(self._writer)
        self._inserts: dict[tuple[Any, ...], BatchInsert] = {}
        self._extend_each = PreparedWrite(_EXTEND_EACH, self._writer)
        self.lookups = Lookups(
            self._reader, _sqlite_path(self.url) if self.dialect == "sqlite" else None
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
        self._deletions: ReadCache[Any, Any] = ReadCache(self.sqlite_path, "deletions", budget=0)
        self._probes = _neighbour_probes(self.lookups)
        # A TimeMap's size and pages, compiled once for the same reason.
        self._timemap_size = self.lookups.prepare(
            select(func.count().label("mementos")).where(_live_of_bound())
        )
        self._timemap_page = self.lookups.prepare(
            select(mementos)
            .where(_live_of_bound())
            .order_by(*_order_ascending())
            .offset(bindparam("offset", type_=Integer()))
            .limit(bindparam("limit", type_=Integer()))
        )
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
        return _sqlite_path(self.url) if self.dialect == "sqlite" else None

    @property
    def reads_in_process(self) -> bool:
        """True when a point lookup is a local file read (SQLite), not a network round trip."""
        return self.dialect == "sqlite"

    def close(self) -> None:
        self._deletions.close()
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
            self._deletions.changing() if exclusive else nullcontext(),
            self._writer.begin() as connection,
        ):
            self._lock_against_sweeps(connection, exclusive=exclusive)
            yield connection

    def _lock_against_sweeps(self, connection: Connection, *, exclusive: bool) -> None:
        """On PostgreSQL, the transaction-level advisory lock :meth:`write` describes."""
        if self.dialect == "postgresql":
            function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
            connection.exec_driver_sql(f"SELECT {function}({_RETENTION_LOCK})")

    def open_write(self) -> OpenWrite:
        """A (non-exclusive) :meth:`write` transaction as an object: begun by this call (which
        may wait for the write lock) and ended by its ``commit`` or ``rollback`` (which wait
        for the disk), so an event loop can wait for each in a thread and run the statements
        in between itself."""
        connection = self._writer.connect()
        try:
            transaction = connection.begin()
            self._lock_against_sweeps(connection, exclusive=False)
        except BaseException:
            connection.close()
            raise
        return OpenWrite(connection, transaction)

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
    ) -> list[WriteOutcome]:
        """Insert what is new; report existing rows. Call inside :meth:`write`.

        ``revive(address)`` re-stores a blob's bytes: it is called, under the write lock,
        for a blob a retention sweep has started deleting, so the write never acknowledges
        a memento whose bytes the sweep is about to remove (DESIGN.md invariant 2 and 5).
        """
        if not batch:
            return []
        self.ensure_tenants(connection, {m.tenant for m in batch})
        self.insert_ignoring(
            connection,
            blobs,
            [
                {
                    "address": m.content_hash,
                    "size": m.size,
                    "version_id": m.blob_version_id,
                    "stored_at": m.archived_at,
                    "state": "live",
                    "lock_legal_hold": 0,
                }
                for m in batch
            ],
            conflict=["address"],
        )
        # The version each memento records is the one current under the lock, not the one
        # the writer's put saw before it: a sweep may have deleted that version since and
        # another writer re-stored the bytes as a new one.
        versions = self._current_versions(connection, {m.content_hash for m in batch}, revive)
        rows = {m.id: self._memento_row(_with_version(m, versions)) for m in batch}
        inserted = self.insert_ignoring(
            connection,
            mementos,
            list(rows.values()),
            conflict=["id"],
            returning=mementos.c.id,
        )
        # What we inserted is known; only rows that were there before are read back.
        stored = {i: _memento_from(RowView(row)) for i, row in rows.items() if i in inserted}
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
    ) -> dict[str, str | None]:
        """Each blob's current version, re-storing (under the write lock) those a retention
        sweep has marked or finished deleting."""
        # A blob not listed is live and unversioned (its row was inserted or kept just now).
        versions: dict[str, str | None] = dict.fromkeys(addresses)
        for address, state, version_id in self._blob_states(connection, sorted(addresses)):
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

    def extend_expiries(
        self, connection: Connection, reaches: Sequence[tuple[str, str, datetime]]
    ) -> None:
        """Many ``(tenant, memento id, until)`` extensions as one executemany (never shortens)."""
        if not reaches:
            return
        rows = [
            {"reach_tenant": t, "reach_id": i, "reach_until": u} for t, i, u in sorted(set(reaches))
        ]
        if self.dialect == "sqlite":
            self._extend_each.run_many(connection.connection.dbapi_connection, rows)
        else:
            connection.execute(_EXTEND_EACH, rows)

    def _memento_row(self, m: Memento) -> dict[str, Any]:
        row = _memento_row(m)
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
        self.insert_ignoring(
            connection,
            idempotency_keys,
            [
                {
                    "tenant": tenant,
                    "key": key,
                    "request_hash": response.request_hash,
                    "status_code": response.status_code,
                    "response_json": json.dumps(response.body, separators=(",", ":")),
                    "created_at": now,
                }
            ],
            conflict=["tenant", "key"],
        )
        stored = self._stored_response(connection, tenant, key)
        assert stored is not None  # inserted or already there, inside this transaction
        return stored

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
        table: Any,
        rows: list[dict[str, Any]],
        *,
        conflict: list[str],
        returning: Any = None,
    ) -> set[Any]:
        if not rows:
            return set()
        if self.dialect == "sqlite":
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
        self, table: Any, conflict: list[str], keys: list[str], key: str | None
    ) -> BatchInsert:
        cache_key = (table.name, tuple(conflict), tuple(keys), key)
        prepared = self._inserts.get(cache_key)
        if prepared is None:
            prepared = self._inserts[cache_key] = BatchInsert(
                table, conflict, keys, self._writer, key
            )
        return prepared

    # -- reads ----------------------------------------------------------------------------

    def get_memento(self, tenant: str, memento_id: str) -> Memento | None:
        row = self.lookups.first(self._memento_by_id, tenant=tenant, id=memento_id)
        return None if row is None else _memento_from(row)

    def cache_until_deletion(self, weigh: Callable[[Any], int], budget: int) -> ReadCache[Any, Any]:
        """A cache of what is derived from live mementos, at most ``budget`` heavy (by
        ``weigh``), emptied by the next deletion committed in any process (nothing is
        remembered on PostgreSQL)."""
        return ReadCache(self.sqlite_path, "deletions", budget=budget, weigh=weigh)

    def stored_response(self, tenant: str, key: str) -> StoredResponse | None:
        row = self.lookups.first(self._response_by_key, tenant=tenant, key=key)
        return None if row is None else _stored_response_from(row)

    def check_idempotency(self, tenant: str, key: str, request_hash: str) -> StoredResponse | None:
        stored = self.stored_response(tenant, key)
        if stored is not None and stored.request_hash != request_hash:
            raise IdempotencyConflict(
                "this Idempotency-Key was already used for a different request"
            )
        return stored

    def neighbours(self, tenant: str, urir_key: str, target: datetime | None) -> Neighbours | None:
        """Choose the memento nearest ``target`` (latest when None) and its neighbours."""
        with self.lookups.snapshot() as first_row:

            def probe(name: str, **values: Any) -> Memento | None:
                row = first_row(self._probes[name], tenant=tenant, urir_key=urir_key, **values)
                return None if row is None else _memento_from(row)

            first = probe("first")
            if first is None:
                return None
            last = probe("last")
            assert last is not None
            if target is None:
                chosen = _first_at(probe, last.captured_at)
            else:
                chosen = _nearest(probe, target, first, last)
            at = {"at_time": chosen.captured_at, "at_scope": chosen.scope.value, "at_id": chosen.id}
            prev = probe("before_position", **at)
            nxt = probe("after_position", **at)
        return Neighbours(chosen=chosen, first=first, last=last, prev=prev, next=nxt)

    def list_mementos(
        self, tenant: str, urir_key: str, *, offset: int, limit: int
    ) -> list[Memento]:
        rows = self.lookups.all(
            self._timemap_page, tenant=tenant, urir_key=urir_key, offset=offset, limit=limit
        )
        return [_memento_from(row) for row in rows]

    def count_mementos(self, tenant: str, urir_key: str) -> int:
        row = self.lookups.first(self._timemap_size, tenant=tenant, urir_key=urir_key)
        assert row is not None  # COUNT(*) always answers one row
        return int(row.mementos)

    def all_memento_blobs(self) -> list[tuple[str, str, str | None]]:
        """(memento id, content hash, version id) for every memento: for integrity checks."""
        with self.read() as connection:
            rows = connection.execute(
                select(mementos.c.id, mementos.c.content_hash, mementos.c.blob_version_id)
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
            return [_memento_from(row) for row in rows]
        return self._load(connection, mementos.c.id.in_(ids))

    def _load(self, connection: Connection, where: Any) -> list[Memento]:
        return [_memento_from(row) for row in connection.execute(select(mementos).where(where))]

    def _stored_response(
        self, connection: Connection, tenant: str, key: str
    ) -> StoredResponse | None:
        row = connection.execute(
            select(idempotency_keys).where(
                idempotency_keys.c.tenant == tenant, idempotency_keys.c.key == key
            )
        ).first()
        return None if row is None else _stored_response_from(row)


def _stored_response_from(row: Any) -> StoredResponse:
    return StoredResponse(
        request_hash=row.request_hash,
        status_code=row.status_code,
        body=json.loads(row.response_json),
    )


def _driver_url(url: str) -> str:
    # Plain postgresql:// in AMBER_DATABASE_URL means psycopg 3, the driver we ship.
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_path(url: str) -> str:
    return url.split("///", 1)[1].split("?", 1)[0]


def _sqlite_engine(url: str, *, durable: bool, immediate: bool) -> Engine:
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
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _with_version(m: Memento, versions: dict[str, str | None]) -> Memento:
    current = versions[m.content_hash]
    return m if current == m.blob_version_id else replace(m, blob_version_id=current)


def _memento_row(m: Memento) -> dict[str, Any]:
    return {
        "id": m.id,
        "tenant": m.tenant,
        "uri_r": m.uri_r,
        "urir_key": m.urir_key,
        "captured_at": m.captured_at,
        "archived_at": m.archived_at,
        "content_hash": m.content_hash,
        "blob_version_id": m.blob_version_id,
        "media_type": m.media_type,
        "size": m.size,
        "scope": m.scope.value,
        "tool": m.facts.tool,
        "final_url": m.facts.final_url,
        "http_status": m.facts.http_status,
        "headers_json": m.facts.headers_json(),
    }


class RowView:
    """A row dict as written, read like a fetched row (attributes, UTC datetimes)."""

    def __getattr__(self, name: str) -> Any:  # for type checkers: columns are attributes
        raise AttributeError(name)

    def __init__(self, row: dict[str, Any]) -> None:
        self.__dict__.update(
            (name, value.astimezone(UTC) if isinstance(value, datetime) else value)
            for name, value in row.items()
        )


def _headers_from(text: str) -> dict[str, str]:
    # Most captures record no response headers (every passage): skip the JSON decoder.
    return {} if text == "{}" else dict(json.loads(text))


def _memento_from(row: Row[Any] | RowView) -> Memento:
    return Memento(
        id=row.id,
        tenant=row.tenant,
        uri_r=row.uri_r,
        urir_key=row.urir_key,
        captured_at=row.captured_at,
        archived_at=row.archived_at,
        content_hash=row.content_hash,
        blob_version_id=row.blob_version_id,
        media_type=row.media_type,
        size=row.size,
        scope=Scope(row.scope),
        facts=CaptureFacts(
            tool=row.tool,
            final_url=row.final_url,
            http_status=row.http_status,
            headers=_headers_from(row.headers_json),
        ),
        expires_at=row.expires_at,
        deleted_at=row.deleted_at,
        deletion_reason=row.deletion_reason,
        legal_hold=bool(row.legal_hold),
    )
