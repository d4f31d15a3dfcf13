"""The sweep's mechanics: reasons kept on tombstones, deletions redone after a crash, batched
directory syncs, and query plans whose cost follows what expired (not the archive size)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select

from archive.archive import Archive
from archive.blobstore import local as local_store
from archive.blobstore.local import LocalBlobStore
from archive.citations import CitationRequest, QuoteRequest
from archive.config import Settings
from archive.dates import utc_now
from archive.index.schema import blobs, citations, mementos
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

FILLER = b" Lorem ipsum filler so that a passage (quote plus context) is not the whole page." * 8


class Killed(Exception):
    """Stands for kill -9 right after the store removed the bytes."""


@pytest.fixture()
def sqlite_archive(tmp_path: Path) -> Iterator[Archive]:
    """The embedded default alone (local store + SQLite), for checks of SQLite itself."""
    opened = Archive.open(Settings(data_dir=tmp_path / "amber-data"))
    yield opened
    opened.close()


def capture(archive: Archive, content: bytes, uri: str = "https://ex.org/a") -> Any:
    return archive.write_memento(
        MementoRequest(
            uri_r=uri,
            content=content,
            content_type="text/plain",
            facts=CaptureFacts(tool="http.get"),
        ),
        tenant="default",
    ).memento


def blob_state(archive: Archive, address: str) -> str:
    with archive.index.read() as connection:
        state: str = connection.execute(
            select(blobs.c.state).where(blobs.c.address == address)
        ).scalar_one()
    return state


def test_tombstones_say_which_transcripts_kept_the_evidence_and_keep_no_text(
    archive: Archive,
) -> None:
    document = capture(archive, b"The rate is four percent." + FILLER)
    archive.transcripts.put("default", "short", "P1D", {})
    archive.transcripts.put("default", "shorter", "P1D", {})
    citation = archive.citations.cite(
        "default",
        "short",
        [CitationRequest(quote=QuoteRequest("four percent"), memento_id=document.id)],
    ).citations[0]
    archive.citations.cite(
        "default",
        "shorter",
        [CitationRequest(quote=QuoteRequest("The rate"), memento_id=document.id)],
    )
    uncited = capture(archive, b"nobody cites this", uri="https://ex.org/uncited")
    report = archive.retention.sweep(now=utc_now() + timedelta(days=30))
    assert {document.id, citation.passage.id, uncited.id} <= set(report.deleted_ids)
    with archive.index.read() as connection:
        reasons = {
            row.id: json.loads(row.deletion_reason)
            for row in connection.execute(
                select(mementos.c.id, mementos.c.deletion_reason).where(
                    mementos.c.deleted_at.is_not(None)
                )
            )
        }
        selectors = connection.execute(select(citations.c.selector_json)).scalars().all()
    assert reasons[document.id]["policy"] == "transcripts"
    assert reasons[document.id]["transcripts"] == ["short:P1D", "shorter:P1D"]
    assert reasons[citation.passage.id]["transcripts"] == ["short:P1D"]
    assert reasons[uncited.id]["policy"] == "uncited-grace"
    assert selectors == [None, None]


def test_a_deletion_lost_in_a_crash_is_redone_by_the_next_sweep(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    memento = capture(archive, b"bytes whose deletion is interrupted")
    store, real_delete = archive.blobs, archive.blobs.delete

    def delete_then_die(address: str, version_id: str | None = None) -> None:
        real_delete(address, version_id)
        raise Killed()

    monkeypatch.setattr(store, "delete", delete_then_die)
    with pytest.raises(Killed):
        archive.retention.sweep(now=memento.archived_at + timedelta(days=30))
    monkeypatch.setattr(store, "delete", real_delete)
    # The bytes are gone but nothing recorded it: the blob is still "deleting".
    assert blob_state(archive, memento.content_hash) == "deleting"
    synced: list[Path] = []
    if isinstance(store, LocalBlobStore):
        real_sync = local_store._fsync_directory
        monkeypatch.setattr(
            local_store,
            "_fsync_directory",
            lambda directory: (synced.append(directory), real_sync(directory)),
        )
    again = archive.retention.sweep(now=memento.archived_at + timedelta(days=30))
    assert again.blobs_deleted == 1 and again.mementos_deleted == 0
    assert blob_state(archive, memento.content_hash) == "deleted"
    if isinstance(store, LocalBlobStore):
        # The killed sweep's unlink may not have been durable: the rerun syncs it regardless.
        assert store.path_for(memento.content_hash).parent in synced


def test_batched_deletes_sync_each_directory_once_after_the_unlinks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    stored = [store.put(f"blob {n}".encode()) for n in range(6)]
    synced: list[Path] = []
    monkeypatch.setattr(local_store, "_fsync_directory", synced.append)
    with store.batched_deletes():
        for blob in stored[:3]:
            store.delete(blob.address)
            assert not store.exists(blob.address)
        assert synced == []  # nothing synced while the batch runs
    assert sorted(synced) == sorted({store.path_for(b.address).parent for b in stored[:3]})
    synced.clear()
    with pytest.raises(Killed), store.batched_deletes():
        store.delete(stored[3].address)
        raise Killed()
    assert synced == [store.path_for(stored[3].address).parent]  # synced on the way out too
    synced.clear()
    store.delete(stored[4].address)  # outside a batch: synced at once
    assert synced == [store.path_for(stored[4].address).parent]


# Full scans of these tables would make a sweep's cost grow with the archive.
_BIG_TABLES = ("mementos", "blobs", "citations", "drift_checks", "transcripts")
# Partial indexes holding only what is due / dying: scanning them is proportional to that.
_DUE_ONLY = ("mementos_due", "blobs_deleting")


def test_sweep_statements_never_scan_the_archive(sqlite_archive: Archive) -> None:
    archive = sqlite_archive  # SQLite's own query plans and settings: embedded default only
    archive.transcripts.put("default", "t", "P1D", {})
    for n in range(4):
        document = capture(
            archive,
            f"Document {n} says the rate is four percent.".encode() + FILLER,
            uri=f"https://ex.org/{n}",
        )
        archive.citations.cite(
            "default",
            "t",
            [CitationRequest(quote=QuoteRequest("four percent"), memento_id=document.id)],
        )
    held = capture(archive, b"held evidence", uri="https://ex.org/held")
    archive.retention.set_memento_hold("default", held.id, True, "case 7", "admin")
    statements: dict[str, Any] = {}

    def record(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool
    ) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "INSERT")):
            statements.setdefault(statement, parameters[0] if many else parameters)

    engines = (archive.index._writer, archive.index._reader)
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        report = archive.retention.sweep(now=utc_now() + timedelta(days=30), batch_size=2)
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)
    assert report.mementos_deleted == 8 and report.held == 1 and report.blobs_deleted == 8
    assert statements
    with archive.index.read() as connection:
        for statement, parameters in statements.items():
            plan = [
                row[3]
                for row in connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
            ]
            for step in plan:
                scanned = re.match(r"SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?", step)
                if scanned and scanned.group(1) in _BIG_TABLES:
                    assert scanned.group(2) in _DUE_ONLY, f"{step} in: {statement}"


def test_sweep_leaves_the_connection_settings_as_it_found_them(sqlite_archive: Archive) -> None:
    archive = sqlite_archive  # SQLite's own query plans and settings: embedded default only
    capture(archive, b"expiring soon")
    with archive.index.write() as connection:
        before = connection.exec_driver_sql("PRAGMA mmap_size").scalar()
    archive.retention.sweep(now=utc_now() + timedelta(days=30))
    with archive.index.write() as connection:
        assert connection.exec_driver_sql("PRAGMA mmap_size").scalar() == before
