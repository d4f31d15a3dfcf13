"""The write path's statements on PostgreSQL: one-statement batch inserts, tenants met once,
and pooled connections pinged only after sitting idle (and replaced when gone)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.exc import OperationalError

from archive.index import Index, engines
from archive.index.schema import blobs, tenants
from archive.mementos import CaptureFacts, Memento, Scope, memento_id

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def make(n: int, tenant: str = "default") -> Memento:
    address = "blake3:" + f"{n:064x}"
    return Memento(
        id=memento_id(tenant, "https://ex.org/", T0, address),
        tenant=tenant,
        uri_r="https://ex.org/",
        urir_key="https://ex.org/",
        captured_at=T0,
        archived_at=datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        content_hash=address,
        blob_version_id=None if n % 2 else f"v{n}",
        media_type="text/plain",
        size=n,
        scope=Scope.DOCUMENT,
        facts=CaptureFacts(tool="http.get", headers={}),
    )


def statements(index: Index) -> list[str]:
    seen: list[str] = []
    event.listen(
        index._writer,
        "before_cursor_execute",
        lambda _c, _cur, statement, *_rest: seen.append(statement),
    )
    return seen


@pytest.mark.postgres
def test_a_batch_inserts_each_table_in_one_statement(postgres_url: str) -> None:
    # (SQLite runs its batch inserts on the driver, unseen by the engine's events.)
    index = Index(postgres_url)
    try:
        with index.write() as connection:
            index.insert_mementos(connection, [make(1)])
        seen = statements(index)
        batch = [make(2), make(3), make(2), make(1)]
        with index.write() as connection:
            outcomes = index.insert_mementos(connection, batch)
        assert [o.created for o in outcomes] == [True, True, False, False]
        inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT")]
        assert sum("INTO mementos" in s for s in inserts) == 1
        assert sum("INTO blobs" in s for s in inserts) == 1
        # The tenant's row was met committed by the first write: no insert of it since.
        assert not any("INTO tenants" in s for s in inserts)
        for m in batch:
            stored = index.get_memento("default", m.id)
            assert stored is not None and stored.same_capture_as(m)
            assert stored.archived_at == m.archived_at and stored.size == m.size
        with index.read() as connection:
            rows = connection.execute(select(blobs.c.address, blobs.c.version_id)).all()
        assert sorted(rows) == sorted(
            (m.content_hash, m.blob_version_id) for m in (make(1), make(2), make(3))
        )
    finally:
        index.close()


def test_a_new_tenant_whose_first_write_rolled_back_is_inserted_again(
    database_url: str,
) -> None:
    index = Index(database_url)
    try:
        write = index.open_write()
        index.insert_mementos(write.connection, [make(1, tenant="acme")])
        write.rollback()
        with index.write() as connection:
            assert index.insert_mementos(connection, [make(2, tenant="acme")])[0].created
        with index.read() as connection:
            names = connection.execute(select(tenants.c.id)).scalars().all()
        assert "acme" in names
    finally:
        index.close()


@pytest.mark.postgres
def test_an_idle_connection_whose_server_session_ended_is_replaced(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = Index(postgres_url)
    try:
        with index.write() as connection:
            pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        with index.read() as connection:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        monkeypatch.setattr(engines, "PING_IDLE_SECONDS", 0.0)  # every pooled one is idle
        with index.write() as connection:
            assert connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() != pid
            assert index.insert_mementos(connection, [make(1)])[0].created
        assert index.get_memento("default", make(1).id) is not None
    finally:
        index.close()


@pytest.mark.postgres
def test_a_connection_used_just_now_is_not_pinged(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = Index(postgres_url)
    try:
        with index.write():
            pass
        pings: list[object] = []
        dialect = index._writer.dialect
        monkeypatch.setattr(dialect, "do_ping", lambda c: pings.append(c) or True)
        statements_seen = statements(index)
        with index.write() as connection:
            connection.exec_driver_sql("SELECT 2")
        assert pings == []
        assert [s for s in statements_seen if "SELECT 1" in s] == []
        monkeypatch.setattr(engines, "PING_IDLE_SECONDS", 0.0)
        with index.write() as connection:  # idle now: checked first, and still works
            assert connection.exec_driver_sql("SELECT 3").scalar_one() == 3
    finally:
        index.close()


@pytest.mark.postgres
def test_blobs_met_by_a_write_are_locked_and_the_ones_to_look_at_reported(
    postgres_url: str,
) -> None:
    index = Index(postgres_url)
    try:
        live, dying, versioned = make(1), make(3), make(2)  # make(2) has a version id
        with index.write() as connection:
            index.insert_mementos(connection, [live, dying, versioned])
            connection.execute(
                blobs.update().where(blobs.c.address == dying.content_hash).values(state="deleting")
            )
        fresh = make(5)
        rows = [
            {
                "address": m.content_hash,
                "size": m.size,
                "version_id": m.blob_version_id,
                "stored_at": m.archived_at,
                "state": "live",
                "lock_legal_hold": 0,
            }
            for m in (fresh, versioned, live, dying, fresh)
        ]
        with index.write() as connection:
            states = index.inserts.insert_blobs_locked(connection, rows)
            assert states is not None
            assert sorted(states) == sorted(
                [
                    (fresh.content_hash, "live", None),
                    (versioned.content_hash, "live", "v2"),
                    (dying.content_hash, "deleting", None),
                ]
            )
            # Every row met is locked until this write ends, the unreported one too.
            with index._reader.connect() as other:
                for m in (live, dying, versioned):
                    with pytest.raises(OperationalError):
                        other.execute(
                            text("SELECT 1 FROM blobs WHERE address = :a FOR UPDATE NOWAIT"),
                            {"a": m.content_hash},
                        )
                    other.rollback()
        with index.read() as connection:
            states_after = dict(connection.execute(select(blobs.c.address, blobs.c.state)).all())
        assert states_after[dying.content_hash] == "deleting"  # read, not changed
        assert states_after[fresh.content_hash] == "live"
    finally:
        index.close()
