"""A write batch on PostgreSQL waits for the server four times (archive/index/roundtrips.py):
BEGIN with the advisory lock, the blob insert, the memento insert, and the TimeMaps
generation, the evidence-log leaves and COMMIT together. Counted on the wire, with libpq's
own trace of what the client sends."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, event, func, select, text

from archive import Archive
from archive.config import Settings
from archive.index import Index, engines
from archive.index.engines import driver_url, lock_against_sweeps
from archive.index.roundtrips import defer_to_commit
from archive.index.schema import change_generations, log_leaves, mementos
from archive.writes import MementoRequest, PendingWrite

pytestmark = pytest.mark.postgres


@pytest.fixture()
def archive(postgres_url: str, tmp_path: Path) -> Iterator[Archive]:
    opened = Archive.open(
        Settings(data_dir=tmp_path / "data", database_url=postgres_url, public_base_url="http://x")
    )
    yield opened
    opened.close()


def request(n: int) -> MementoRequest:
    return MementoRequest(
        uri_r=f"https://example.org/{n}", content=b"passage %d" % n, content_type="text/plain"
    )


def pending(archive: Archive, n: int) -> PendingWrite:
    staged = archive.writes.prepare(request(n), "default", None, None)
    assert isinstance(staged, PendingWrite)
    return staged


def sent_by_writer(index: Index) -> Iterator[list[tuple[str, str]]]:
    """What the writer's connections send while the generator is suspended."""
    return sent_on(index._writer)


def sent_by_readers(index: Index) -> Iterator[list[tuple[str, str]]]:
    return sent_on(index._reader)


def sent_on(engine: Engine) -> Iterator[list[tuple[str, str]]]:
    """What ``engine``'s connections send while the generator is suspended: (message
    type, its first argument) for each frontend message of libpq's trace, including the
    pool's reset of a connection it takes back (which runs before the checkin event)."""
    trace = tempfile.TemporaryFile(mode="w+")

    def start(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        dbapi_connection.pgconn.trace(trace.fileno())

    def stop(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.pgconn.untrace()

    event.listen(engine, "checkout", start)
    event.listen(engine, "checkin", stop)
    sent: list[tuple[str, str]] = []
    try:
        yield sent
    finally:
        event.remove(engine, "checkout", start)
        event.remove(engine, "checkin", stop)
    trace.seek(0)
    for line in trace:
        fields = line.rstrip("\n").split("\t")
        if len(fields) >= 4 and fields[1] == "F":
            sent.append((fields[3], fields[4] if len(fields) > 4 else ""))
    trace.close()


def waits(sent: list[tuple[str, str]]) -> int:
    """Round trips: a simple Query, or a Sync that ends extended-protocol messages."""
    return sum(kind in ("Query", "Sync") for kind, _ in sent)


def generation(index: Index, kind: str) -> int:
    with index.read() as connection:
        return int(
            connection.execute(
                select(change_generations.c.generation).where(change_generations.c.kind == kind)
            ).scalar_one()
        )


def test_a_write_batch_waits_for_the_server_four_times(archive: Archive) -> None:
    writes = archive.writes
    writes._commit_batch([pending(archive, 0)])  # the tenant is known from now on
    batch = [pending(archive, n) for n in (1, 2, 3)]
    before = generation(archive.index, "timemaps")
    tracing = sent_by_writer(archive.index)
    sent = next(tracing)
    results = writes._commit_batch(batch)
    next(tracing, None)
    assert all(not isinstance(r, BaseException) and r.created for r in results)
    assert waits(sent) == 4, sent
    # The first message begins the transaction and takes the lock together ...
    assert sent[0][0] == "Query" and "BEGIN" in sent[0][1] and "advisory" in sent[0][1]
    # ... and the last one commits, after the generation and the leaves.
    parsed = [text for kind, text in sent if kind == "Parse"]
    assert "change_generations" in parsed[-3] and "log_counters" in parsed[-2]
    assert "COMMIT" in parsed[-1]
    assert sent[-1][0] in ("Sync", "Flush")
    # All of it committed: the rows, one generation step, one leaf per memento.
    assert generation(archive.index, "timemaps") == before + 1
    with archive.index.read() as connection:
        assert connection.execute(select(func.count()).select_from(mementos)).scalar_one() == 4
        assert connection.execute(select(func.count()).select_from(log_leaves)).scalar_one() == 4


def test_a_deferred_statement_that_fails_rolls_the_whole_write_back(archive: Archive) -> None:
    index = archive.index
    writes = archive.writes
    write = pending(archive, 1)
    before = generation(index, "timemaps")
    with pytest.raises(psycopg.errors.DivisionByZero):
        with index.write() as connection:
            writes._insert_batch(connection, [write])
            defer_to_commit(connection, "SELECT 1 / 0")
    with index.read() as connection:
        assert connection.execute(select(func.count()).select_from(mementos)).scalar_one() == 0
        assert connection.execute(select(func.count()).select_from(log_leaves)).scalar_one() == 0
    assert generation(index, "timemaps") == before
    # The pooled connection is fine afterwards: the same write commits.
    result = writes._commit_batch([write])[0]
    assert not isinstance(result, BaseException) and result.created
    assert generation(index, "timemaps") == before + 1


def test_a_first_statement_that_fails_raises_the_servers_error(
    archive: Archive, postgres_url: str
) -> None:
    # A write that cannot take the lock while a sweep holds it alone: with a lock timeout,
    # the server's own error surfaces, and the connection serves the next transaction.
    other = create_engine(driver_url(postgres_url))
    try:
        with other.connect() as connection:
            connection.exec_driver_sql("SET lock_timeout = '50ms'")
            connection.commit()
            with archive.index.write(exclusive=True):
                with pytest.raises(psycopg.errors.LockNotAvailable, match="lock timeout"):
                    with connection.begin():
                        lock_against_sweeps(connection, "postgresql", exclusive=False)
            with connection.begin():
                lock_against_sweeps(connection, "postgresql", exclusive=False)
                assert connection.exec_driver_sql("SELECT 1").scalar_one() == 1
    finally:
        other.dispose()


def test_a_write_on_a_connection_whose_session_ended_fails_and_the_next_one_reconnects(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Used just now, so not pinged: BEGIN with the lock is the first to meet the lost
    # session. That write fails; the pool drops the connection, and the next write commits.
    monkeypatch.setattr(engines, "PING_IDLE_SECONDS", 3600.0)
    writes = archive.writes
    writes._commit_batch([pending(archive, 0)])
    with archive.index._writer.connect() as connection:
        pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        connection.rollback()
    with archive.index.read() as connection:
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    lost = pending(archive, 1)
    with pytest.raises(Exception, match="terminat|closed|lost|server"):
        with archive.index.write() as connection:
            writes._insert_batch(connection, [lost])
    result = writes._commit_batch([lost])[0]
    assert not isinstance(result, BaseException) and result.created
    with archive.index._writer.connect() as connection:
        assert connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() != pid


def test_a_look_up_and_a_generation_read_are_one_round_trip_each(archive: Archive) -> None:
    # Readers run in autocommit: no BEGIN before the SELECT, no ROLLBACK after it.
    stored = archive.writes._commit_batch([pending(archive, 0)])[0]
    assert not isinstance(stored, BaseException)
    generations = archive.index.changes.generations
    assert generations is not None
    tracing = sent_by_readers(archive.index)
    sent = next(tracing)
    found = archive.index.get_memento("default", stored.memento.id)
    read = generations.read()
    next(tracing, None)
    assert found is not None and found.id == stored.memento.id
    assert read["timemaps"] >= 1
    assert waits(sent) == 2, sent
    assert not any("BEGIN" in text or "ROLLBACK" in text for _, text in sent)
