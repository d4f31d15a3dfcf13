"""The index on SQLite and PostgreSQL: the same tests, both databases."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DataError

from archive.index import Index
from archive.index.migrations import MIGRATIONS, migrate
from archive.index.schema import schema_migrations
from archive.mementos import CaptureFacts, Memento, Scope, memento_id

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def make(
    tenant: str = "default",
    key: str = "https://ex.org/",
    at: datetime = T0,
    content: str = "blake3:" + "a" * 64,
    scope: Scope = Scope.DOCUMENT,
) -> Memento:
    return Memento(
        id=memento_id(tenant, key, at, content),
        tenant=tenant,
        uri_r=key,
        urir_key=key,
        captured_at=at,
        archived_at=datetime.now(UTC),
        content_hash=content,
        blob_version_id=None,
        media_type="text/plain",
        size=1,
        scope=scope,
        facts=CaptureFacts(tool="http.get", headers={"etag": '"x"'}),
    )


def content(n: int) -> str:
    return "blake3:" + f"{n:064x}"


def insert(index: Index, *mementos: Memento) -> list[bool]:
    with index.write() as connection:
        return [o.created for o in index.insert_mementos(connection, list(mementos))]


def test_migrations_are_recorded_and_idempotent(database_url: str) -> None:
    index = Index(database_url)
    try:
        assert migrate(index._writer) == []  # already at the latest version
        with index.read() as connection:
            versions = connection.execute(select(schema_migrations.c.version)).scalars().all()
        assert sorted(versions) == [m.version for m in MIGRATIONS]
    finally:
        index.close()


def test_insert_roundtrip_and_idempotence(database_url: str) -> None:
    index = Index(database_url)
    try:
        memento = make()
        assert insert(index, memento) == [True]
        assert insert(index, memento) == [False]
        assert insert(index, memento, memento) == [False, False]
        stored = index.get_memento("default", memento.id)
        assert stored is not None
        assert stored.captured_at == T0
        assert stored.captured_at.tzinfo is not None
        assert stored.facts == memento.facts
        assert stored.same_capture_as(memento)
    finally:
        index.close()


def test_duplicates_within_one_batch_create_once(database_url: str) -> None:
    index = Index(database_url)
    try:
        memento = make()
        assert insert(index, memento, memento) == [True, False]
    finally:
        index.close()


def test_tenants_never_see_each_other(database_url: str) -> None:
    index = Index(database_url)
    try:
        mine, theirs = make(tenant="a"), make(tenant="b")
        assert mine.id != theirs.id  # same URI-R, time and bytes: still distinct ids
        insert(index, mine, theirs)
        assert index.get_memento("a", theirs.id) is None
        assert index.get_memento("b", theirs.id) is not None
        assert index.count_mementos("a", "https://ex.org/") == 1
        found = index.neighbours("a", "https://ex.org/", None)
        assert found is not None and found.chosen.id == mine.id
    finally:
        index.close()


def test_neighbours_and_ordering(database_url: str) -> None:
    index = Index(database_url)
    try:
        days = [make(at=T0 + timedelta(days=d), content=content(d)) for d in (0, 10, 20)]
        passage = make(at=T0 + timedelta(days=10), content=content(99), scope=Scope.PASSAGE)
        insert(index, *days, passage)
        mid = index.neighbours("default", "https://ex.org/", T0 + timedelta(days=9))
        assert mid is not None
        assert mid.chosen.id == days[1].id  # document preferred over the passage at day 10
        assert mid.prev is not None and mid.prev.id == days[0].id
        assert mid.next is not None and mid.next.id == passage.id
        assert (mid.first.id, mid.last.id) == (days[0].id, days[2].id)
        tie = index.neighbours("default", "https://ex.org/", T0 + timedelta(days=5))
        assert tie is not None and tie.chosen.id == days[0].id  # equidistant → earlier
        listed = index.list_mementos("default", "https://ex.org/", offset=0, limit=10)
        assert [m.id for m in listed] == [days[0].id, days[1].id, passage.id, days[2].id]
        assert index.neighbours("default", "https://other/", None) is None
    finally:
        index.close()


def test_neighbours_read_one_snapshot_of_a_sqlite_index(tmp_path: Any) -> None:
    """The TimeGate's look-ups run in one read transaction: a memento committed meanwhile
    is not half seen (say, as the last but not as the chosen one)."""
    index = Index(f"sqlite:///{tmp_path / 'index.sqlite3'}")
    try:
        early, late = make(content=content(1)), make(at=T0 + timedelta(days=1), content=content(2))
        insert(index, early)
        with index.lookups.snapshot() as first_row:

            def live(memento: Memento) -> Any:
                return first_row(index._memento_by_id, tenant="default", id=memento.id)

            assert live(early) is not None
            insert(index, late)  # committed by the writer while the snapshot is open
            assert live(late) is None
        assert index.get_memento("default", late.id) is not None
        with pytest.raises(RuntimeError), index.lookups.snapshot():
            raise RuntimeError("a failed look-up")
        found = index.neighbours("default", "https://ex.org/", None)  # the snapshot ended
        assert found is not None and found.chosen.id == late.id and found.prev is not None
    finally:
        index.close()


def test_two_index_instances_writing_the_same_memento_agree(database_url: str) -> None:
    """Two replicas (or two processes) racing on one memento: one row, one creator."""
    first, second = Index(database_url), Index(database_url)
    try:
        memento = make()
        results: list[bool] = []
        barrier = threading.Barrier(2)

        def write(index: Index) -> None:
            barrier.wait()
            results.extend(insert(index, memento))

        threads = [threading.Thread(target=write, args=(i,)) for i in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == [False, True]
        assert first.count_mementos("default", "https://ex.org/") == 1
    finally:
        first.close()
        second.close()


def test_a_batch_mixing_new_existing_and_repeated_mementos_reports_each(database_url: str) -> None:
    index = Index(database_url)
    try:
        old, new = make(content=content(1)), make(content=content(2))
        assert insert(index, old) == [True]
        # One statement per table on SQLite (BatchInsert): which rows were new must still
        # be told apart row by row, repeats within the batch included.
        assert insert(index, new, old, new) == [True, False, False]
        assert index.get_memento("default", new.id) is not None
    finally:
        index.close()


def test_text_holding_nul_is_stored_exactly(database_url: str) -> None:
    # SQLite's json_extract stops at NUL, so BatchInsert sends such a batch row by row.
    index = Index(database_url)
    try:
        odd = make(content=content(3))
        odd = Memento(**{**vars(odd), "facts": CaptureFacts(tool="a\x00b", headers={})})
        plain = make(content=content(4))
        if index.dialect == "postgresql":
            # PostgreSQL text cannot hold NUL at all, which is why the archive refuses a
            # capture tool name with control characters (test_api).
            with pytest.raises(DataError):
                insert(index, plain, odd)
            return
        assert insert(index, plain, odd) == [True, True]
        stored = index.get_memento("default", odd.id)
        assert stored is not None and stored.facts.tool == "a\x00b"
    finally:
        index.close()


def test_open_write_commits_or_rolls_back_as_one_transaction(database_url: str) -> None:
    index = Index(database_url)
    try:
        kept, dropped = make(content=content(5)), make(content=content(6))
        write = index.open_write()
        index.insert_mementos(write.connection, [dropped])
        write.rollback()
        assert index.get_memento("default", dropped.id) is None
        write = index.open_write()
        index.insert_mementos(write.connection, [kept])
        write.commit()
        assert index.get_memento("default", kept.id) is not None
        with index.write() as connection:  # the writer connection went back to the pool
            assert index.insert_mementos(connection, [kept])[0].created is False
    finally:
        index.close()


def test_an_inserted_memento_is_answered_as_it_reads_back(database_url: str) -> None:
    """A write answers with the memento it inserted without reading the row back: it must
    equal what a read returns (UTC datetimes, the headers in stored order, expiry set)."""
    index = Index(database_url)
    try:
        offset = timezone(timedelta(hours=2))
        written = replace(
            make(at=datetime(2024, 3, 1, 12, tzinfo=offset), content=content(7)),
            archived_at=datetime.now(offset),
            facts=CaptureFacts(tool="t", http_status=200, headers={"etag": '"e"', "date": "d"}),
        )
        with index.write() as connection:
            [outcome] = index.insert_mementos(connection, [written])
        assert outcome.created
        read = index.get_memento("default", written.id)
        assert read is not None and outcome.memento == read
        assert list(outcome.memento.facts.headers) == list(read.facts.headers) == ["date", "etag"]
        assert outcome.memento.captured_at.utcoffset() == timedelta(0)
    finally:
        index.close()
