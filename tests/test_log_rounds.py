"""The evidence log's costs, as behaviour on both index backends: leaves are sequenced at the
commit of their transaction, a background round that finds nothing due writes nothing,
integration waits for the checkpoint it serves, and the self-audit reads in batches."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from archive.archive import Archive
from archive.config import Settings
from archive.dates import utc_now
from archive.exceptions import LogMismatch
from archive.log import audit as audit_module
from archive.log.audit import audit
from archive.log.statements import tombstone_statement
from archive.writes import MementoRequest

CAPTURED = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)


@pytest.fixture()
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "amber-data",
        database_url=database_url,
        public_base_url="http://testserver",
        durability="relaxed",
        log_checkpoint_interval=3600.0,  # only forced checkpoints, unless a test says so
    )


@pytest.fixture()
def archive(settings: Settings) -> Iterator[Archive]:
    opened = Archive.open(settings)
    yield opened
    opened.close()


def write(archive: Archive, n: int, prefix: str = "p") -> list[Any]:
    return [
        archive.write_memento(
            MementoRequest(
                uri_r=f"https://example.org/{prefix}{i}",
                content=f"bytes of {prefix}{i}".encode(),
                content_type="text/plain",
                captured_at=CAPTURED,
            )
        ).memento
        for i in range(n)
    ]


def scalar(archive: Archive, statement: str) -> Any:
    with archive.index.read() as connection:
        return connection.execute(text(statement)).scalar()


def counter(archive: Archive, name: str) -> int:
    return int(scalar(archive, f"SELECT value FROM log_counters WHERE name = '{name}'"))


def test_leaves_wait_in_their_transaction_and_are_sequenced_at_its_commit(
    archive: Archive,
) -> None:
    write(archive, 1)
    assert archive.index.log is not None
    stone = tombstone_statement("a" * 32, "default", utc_now(), "expiry", None)
    with archive.index.write() as connection:
        archive.index.log.append(connection, [stone])
        # Not yet: the counter's row is untouched (unlocked) until the commit.
        inside = connection.execute(text("SELECT count(*) FROM log_leaves")).scalar()
        value = connection.execute(
            text("SELECT value FROM log_counters WHERE name = 'sequenced'")
        ).scalar()
        assert (inside, value) == (1, 1)
    assert counter(archive, "sequenced") == 2
    assert scalar(archive, "SELECT subject FROM log_leaves WHERE idx = 1") == "a" * 32


def test_a_transaction_that_fails_at_its_end_sequences_nothing(archive: Archive) -> None:
    write(archive, 1)
    assert archive.index.log is not None
    stone = tombstone_statement("b" * 32, "default", utc_now(), "expiry", None)
    with pytest.raises(RuntimeError), archive.index.write() as connection:
        archive.index.log.append(connection, [stone])
        raise RuntimeError("the write fails after its leaves were appended")
    assert counter(archive, "sequenced") == 1
    assert scalar(archive, "SELECT count(*) FROM log_leaves") == 1
    write(archive, 1, prefix="q")  # the next leaf takes the next index: no gap
    assert scalar(archive, "SELECT max(idx) FROM log_leaves") == 1


def _statements(archive: Archive) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {"reader": [], "writer": []}
    for name, engine in (("reader", archive.index._reader), ("writer", archive.index._writer)):

        def record(*args: Any, name: str = name) -> None:
            seen[name].append(str(args[2]))

        event.listen(engine, "before_cursor_execute", record)
    return seen


def test_a_round_with_nothing_due_reads_one_statement_and_writes_nothing(
    archive: Archive,
) -> None:
    write(archive, 3)
    evidence = archive.evidence_log()
    assert evidence.step(force=True) is not None
    seen = _statements(archive)
    assert evidence._round(force=False) is False  # idle: the rounds slow down
    assert seen["writer"] == []
    assert len([s for s in seen["reader"] if s != "BEGIN"]) == 1
    write(archive, 1, prefix="q")  # pending, but the next checkpoint is an hour away
    seen["writer"].clear()
    assert evidence._round(force=False) is True  # pending: the rounds keep their pace
    assert seen["writer"] == []
    assert counter(archive, "integrated") == 3


def test_integration_waits_for_the_checkpoint_it_serves(settings: Settings) -> None:
    archive = Archive.open(settings.with_overrides(log_checkpoint_interval=0.3))
    try:
        write(archive, 2)
        evidence = archive.evidence_log()
        first = evidence.step()  # the first checkpoint is due at once
        assert first is not None and first.size == 2
        write(archive, 2, prefix="q")
        assert evidence.step() == first  # signed just now: not due, nothing integrated
        assert counter(archive, "integrated") == 2
        due = utc_now() + timedelta(seconds=0.35)
        while utc_now() < due:
            pass
        second = evidence.step()
        assert second is not None and second.size == 4
        assert counter(archive, "integrated") == 4
    finally:
        archive.close()


def test_the_self_audit_reads_in_batches_and_checks_every_batch(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit_module, "BATCH", 3)
    mementos = write(archive, 8)
    archive.retention.sweep(now=utc_now() + timedelta(days=30))  # 8 tombstones too
    evidence = archive.evidence_log()
    evidence.step(force=True)
    write(archive, 2, prefix="q")
    evidence.step(force=True)  # checkpoints at 16 and 18: several batches of each
    report = audit(archive.index, evidence.signer.vkey())
    assert (report.leaves, report.mementos, report.tombstones) == (18, 10, 8)
    last = sorted(m.id for m in mementos)[-1]  # in the last batch of mementos
    with archive.index.write() as connection:
        for table in ("log_leaves", "log_checkpoints"):
            if archive.index.dialect == "sqlite":
                for kind in ("update", "delete"):
                    connection.execute(text(f"DROP TRIGGER {table}_no_{kind}"))
            else:
                connection.execute(text(f"DROP TRIGGER {table}_append_only ON {table}"))
        connection.execute(
            text("UPDATE mementos SET uri_r = 'https://evil.example/' WHERE id = :id"),
            {"id": last},
        )
    with pytest.raises(LogMismatch, match=f"memento {last}: uri_r"):
        audit(archive.index, evidence.signer.vkey())


def test_the_self_audit_finds_a_leaf_that_attests_no_row(archive: Archive) -> None:
    [memento] = write(archive, 1)
    assert archive.index.log is not None
    stone = tombstone_statement(memento.id, "default", utc_now(), "expiry", None)
    with archive.index.write() as connection:  # a tombstone for a memento not deleted
        archive.index.log.append(connection, [stone])
    evidence = archive.evidence_log()
    evidence.step(force=True)
    with pytest.raises(LogMismatch, match=f"leaf 1 attests tombstone {memento.id}"):
        audit(archive.index, evidence.signer.vkey())
