"""Group commit and blob durability: bytes are durable before any row points at them, and
concurrent writes share the store's durability work."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from archive.archive import Archive, MementoRequest
from archive.blobstore.local import LocalBlobStore
from archive.citations import CitationRequest, QuoteRequest
from archive.exceptions import StorageError
from archive.mementos import CaptureFacts


def request(content: bytes, uri: str = "https://ex.org/w") -> MementoRequest:
    return MementoRequest(uri_r=uri, content=content, content_type="text/plain",
                          facts=CaptureFacts(tool="http.get"))


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


def test_a_write_failing_before_its_commit_leaves_no_staged_bytes(archive: Archive, monkeypatch: Any) -> None:
    """Staged passage and memento bytes whose write fails before the group commit (here the
    committer refuses, as when the server is shutting down) are removed at once: captured
    text nothing refers to must not wait for ``amber gc`` and this process's exit."""
    archive.transcripts.put("default", "t-failing", "P1Y", {})
    document = archive.write_memento(MementoRequest(
        uri_r="https://ex.org/policy", content=b"<p>Staff may carry over five days of leave.</p>",
        content_type="text/html", facts=CaptureFacts(tool="http.get"))).memento

    def refusing_submit(item: Any) -> Any:
        raise RuntimeError("committer is closed")

    monkeypatch.setattr(archive._committer, "submit", refusing_submit)
    monkeypatch.setattr(archive.citations._committer, "submit", refusing_submit)
    with pytest.raises(RuntimeError):
        archive.write_memento(request(b"never committed"))
    with pytest.raises(RuntimeError):
        archive.citations.cite("default", "t-failing", [CitationRequest(
            quote=QuoteRequest("carry over five days"), memento_id=document.id)])
    assert [memento_id for memento_id, _, _ in archive.index.all_memento_blobs()] == [document.id]
    if isinstance(archive.blobs, LocalBlobStore):  # S3 stored each object in stage(): gc's orphans
        assert not list(archive.blobs.root.rglob(".tmp-*"))
        assert sorted(archive.blobs.addresses()) == [document.content_hash]
