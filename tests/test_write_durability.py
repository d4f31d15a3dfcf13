"""Group commit and blob durability: bytes are durable before any row points at them, and
concurrent writes share the store's durability work."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from archive.archive import Archive
from archive.blobstore.local import LocalBlobStore
from archive.citations import CitationRequest, QuoteRequest
from archive.config import Settings
from archive.exceptions import StorageError
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

TIMEOUT = 10.0  # generous upper bound for anything that should happen "soon"


def request(content: bytes, uri: str = "https://ex.org/w") -> MementoRequest:
    return MementoRequest(
        uri_r=uri, content=content, content_type="text/plain", facts=CaptureFacts(tool="http.get")
    )


def test_blobs_are_published_before_the_rows_commit(archive: Archive, monkeypatch: Any) -> None:
    order: list[str] = []
    real_publish, real_write = archive.blobs.publish, archive.index.write

    def publish(staged: Any) -> None:
        order.append("publish")
        real_publish(staged)

    def write() -> Any:
        order.append("rows")
        return real_write()

    monkeypatch.setattr(archive.blobs, "publish", publish)
    monkeypatch.setattr(archive.index, "write", write)
    written = archive.write_memento(request(b"durable first"))
    assert order[:2] == ["publish", "rows"]
    assert archive.read_content(written.memento) == b"durable first"


def test_a_write_whose_bytes_cannot_be_made_durable_is_not_acknowledged(
    archive: Archive, monkeypatch: Any
) -> None:
    def failing_publish(staged: Any) -> None:
        raise StorageError("disk full")

    monkeypatch.setattr(archive.blobs, "publish", failing_publish)
    with pytest.raises(StorageError):
        archive.write_memento(request(b"never acknowledged"))
    assert archive.index.all_memento_blobs() == []


def test_concurrent_writes_share_a_publish(archive: Archive, monkeypatch: Any) -> None:
    batches: list[int] = []
    real_publish = archive.blobs.publish
    first = threading.Event()

    def slow_publish(staged: Any) -> None:
        batches.append(len(staged))
        if not first.is_set():
            first.set()
            time.sleep(0.2)  # the others queue up behind the first commit meanwhile
        real_publish(staged)

    monkeypatch.setattr(archive.blobs, "publish", slow_publish)
    contents = [f"concurrent write {i}".encode() for i in range(16)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        written = list(pool.map(lambda c: archive.write_memento(request(c)), contents))
    assert sum(batches) == 16
    assert len(batches) < 16  # some writes were made durable together
    for content, result in zip(contents, written, strict=True):
        assert archive.read_content(result.memento) == content
    if isinstance(archive.blobs, LocalBlobStore):  # S3 stored each object in stage()
        assert not list(archive.blobs.root.rglob(".tmp-*"))


def test_a_write_failing_before_its_commit_leaves_no_staged_bytes(
    archive: Archive, monkeypatch: Any
) -> None:
    """Staged passage and memento bytes whose write fails before the group commit (here the
    committer refuses, as when the server is shutting down) are removed at once: captured
    text nothing refers to must not wait for ``amber gc`` and this process's exit."""
    archive.transcripts.put("default", "t-failing", "P1Y", {})
    document = archive.write_memento(
        MementoRequest(
            uri_r="https://ex.org/policy",
            content=b"<p>Staff may carry over five days of leave.</p>",
            content_type="text/html",
            facts=CaptureFacts(tool="http.get"),
        )
    ).memento

    def refusing_submit(item: Any) -> Any:
        raise RuntimeError("committer is closed")

    monkeypatch.setattr(archive.writes.committer, "submit", refusing_submit)
    monkeypatch.setattr(archive.citations.committer, "submit", refusing_submit)
    with pytest.raises(RuntimeError):
        archive.write_memento(request(b"never committed"))
    with pytest.raises(RuntimeError):
        archive.citations.cite(
            "default",
            "t-failing",
            [CitationRequest(quote=QuoteRequest("carry over five days"), memento_id=document.id)],
        )
    assert [memento_id for memento_id, _, _ in archive.index.all_memento_blobs()] == [document.id]
    if isinstance(archive.blobs, LocalBlobStore):  # S3 stored each object in stage(): gc's orphans
        assert not list(archive.blobs.root.rglob(".tmp-*"))
        assert sorted(archive.blobs.addresses()) == [document.content_hash]


# -- writes from an event loop (Archive.write_memento_async; local store and SQLite) --------


@pytest.fixture()
def local_archive(tmp_path: Path) -> Iterator[Archive]:
    """The embedded default: the only pair whose writes are committed from the event loop."""
    opened = Archive.open(Settings(data_dir=tmp_path / "amber-data"))
    assert opened.writes.stages_on_loop(1)
    yield opened
    opened.close()


def test_loop_write_syncs_bytes_then_names_then_commits_rows(
    local_archive: Archive, monkeypatch: Any
) -> None:
    archive = local_archive
    blobs = archive.blobs
    assert isinstance(blobs, LocalBlobStore)
    order: list[str] = []
    for step in ("_sync_bytes", "_sync_names"):
        real = getattr(blobs, step)
        monkeypatch.setattr(
            blobs,
            step,
            lambda pending, real=real, step=step: (order.append(step), real(pending))[1],
        )
    real_open = archive.index.open_write

    def open_write() -> Any:
        write = real_open()
        real_commit = write.commit
        write.commit = lambda: (order.append("commit"), real_commit())[1]  # type: ignore[method-assign]
        return write

    monkeypatch.setattr(archive.index, "open_write", open_write)

    async def scenario() -> list[Any]:
        return list(
            await asyncio.gather(
                *(
                    archive.write_memento_async(request(f"from the loop {i}".encode()))
                    for i in range(8)
                )
            )
        )

    written = asyncio.run(scenario())
    assert order and order[:3] == ["_sync_bytes", "_sync_names", "commit"]
    assert len(order) < 3 * 8  # batched: fewer syncs and commits than writes
    for i, result in enumerate(written):
        assert archive.read_content(result.memento) == f"from the loop {i}".encode()
    assert not list(blobs.root.rglob(".tmp-*"))


def test_loop_write_that_cannot_commit_is_not_acknowledged_and_leaves_nothing(
    local_archive: Archive, monkeypatch: Any
) -> None:
    archive = local_archive
    real_open = archive.index.open_write

    def open_write() -> Any:
        write = real_open()
        real_rollback = write.rollback

        def refuse() -> None:
            real_rollback()
            raise StorageError("disk full at commit")

        write.commit = refuse  # type: ignore[method-assign]
        return write

    monkeypatch.setattr(archive.index, "open_write", open_write)
    with pytest.raises(StorageError):
        asyncio.run(archive.write_memento_async(request(b"never acknowledged either")))
    assert archive.index.all_memento_blobs() == []
    monkeypatch.setattr(archive.index, "open_write", real_open)
    again = asyncio.run(archive.write_memento_async(request(b"never acknowledged either")))
    assert again.created is True  # the writer connection went back: the next write works


def test_loop_closing_mid_batch_ends_the_write_it_opened(
    local_archive: Archive, monkeypatch: Any
) -> None:
    """The loop shuts down while a batch waits for the disk: the batch is not committed, and
    the index write its disk step opens meanwhile is ended, so later writes still work."""
    archive = local_archive
    blobs = archive.blobs
    assert isinstance(blobs, LocalBlobStore)
    entered, release = threading.Event(), threading.Event()
    real_sync_names = blobs._sync_names

    def held_sync_names(pending: Any) -> None:
        entered.set()
        assert release.wait(TIMEOUT)
        real_sync_names(pending)

    monkeypatch.setattr(blobs, "_sync_names", held_sync_names)

    async def cut_short() -> None:
        writing = asyncio.ensure_future(archive.write_memento_async(request(b"cut short")))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        assert not writing.done()
        # Returning now: asyncio.run cancels the waiting write and the batch, closes the loop.

    asyncio.run(cut_short())
    monkeypatch.setattr(blobs, "_sync_names", real_sync_names)
    release.set()  # the disk step goes on: names durable, index write opened, then ended

    async def later() -> Any:
        return await asyncio.wait_for(
            archive.write_memento_async(request(b"written later")), TIMEOUT
        )

    written = asyncio.run(later())
    assert archive.read_content(written.memento) == b"written later"
    assert [
        m.id
        for m in archive.index.list_mementos(
            "default", written.memento.urir_key, offset=0, limit=10
        )
    ] == [written.memento.id]  # the cut-short batch committed nothing
