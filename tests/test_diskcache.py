"""The bounded local disk cache of blob bytes (archive/blobstore/diskcache.py), on SeaweedFS:
served from disk once read, bounded and least recently used first, surviving a restart,
re-hashed (a damaged entry is dropped and read again), and emptied by deletions made here
or by any other process (the deletions generation, on SQLite and on PostgreSQL)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from fixtures_s3 import S3Bucket

from api.app import create_app
from archive.archive import Archive
from archive.blobstore.diskcache import DiskCachedBlobStore, with_disk_cache
from archive.blobstore.local import LocalBlobStore
from archive.blobstore.s3 import S3BlobStore
from archive.config import Settings
from archive.exceptions import ConfigurationError
from archive.hashing import content_address
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

pytestmark = pytest.mark.seaweedfs


class Generation:
    """A deletions generation the test moves by hand."""

    def __init__(self) -> None:
        self.value: int | None = 1

    def __call__(self) -> int | None:
        return self.value


@pytest.fixture()
def remote(seaweedfs_bucket: S3Bucket) -> Iterator[S3BlobStore]:
    store = seaweedfs_bucket.store(f"disk-{secrets.token_hex(4)}")
    yield store
    store.close()


def _cache(
    remote: S3BlobStore, directory: Path, generation: Generation, budget: int = 1 << 20
) -> DiskCachedBlobStore:
    return DiskCachedBlobStore(remote, directory, budget, generation)


def _entries(cache: DiskCachedBlobStore) -> set[str]:
    """The addresses of the entries on disk."""
    return {f"blake3:{p.name}" for p in cache.directory.iterdir() if p.name != "generation"}


def _file(cache: DiskCachedBlobStore, address: str) -> Path:
    return cache.directory / address.removeprefix("blake3:")


def test_bytes_read_once_are_served_from_disk_even_after_a_restart(
    remote: S3BlobStore, tmp_path: Path
) -> None:
    data = b"remembered " + secrets.token_bytes(64)
    stored = remote.put(data)
    generation = Generation()
    cache = _cache(remote, tmp_path, generation)
    assert cache.get(stored.address) == data and (cache.hits, cache.misses) == (0, 1)
    assert cache.get(stored.address) == data and cache.hits == 1
    assert _entries(cache) == {stored.address}
    cache._slot_lock.close()  # the process ends (the store itself stays open for the next)

    remote.delete(stored.address, stored.version_id)  # behind the cache: only disk has it
    again = _cache(remote, tmp_path, generation)
    assert again.directory == cache.directory  # the same slot, taken back
    assert again.get(stored.address) == data and again.hits == 1 and again.misses == 0
    again._slot_lock.close()


def test_a_damaged_entry_is_dropped_and_read_again_from_the_store(
    remote: S3BlobStore, tmp_path: Path
) -> None:
    data = b"the true bytes " + secrets.token_bytes(64)
    stored = remote.put(data)
    cache = _cache(remote, tmp_path, Generation())
    assert cache.get(stored.address) == data
    entry = _file(cache, stored.address)
    entry.write_bytes(b"the wrong bytes" + secrets.token_bytes(64))

    assert cache.get(stored.address) == data  # never the damaged bytes
    assert cache.dropped == 1 and cache.misses == 2
    assert entry.read_bytes() == data  # written again, whole
    assert cache.get(stored.address) == data and cache.hits == 1
    cache._slot_lock.close()


def test_the_cache_stays_within_its_budget_dropping_the_least_recently_read(
    remote: S3BlobStore, tmp_path: Path
) -> None:
    blobs = [remote.put(bytes([n]) * 1000) for n in range(4)]
    cache = _cache(remote, tmp_path, Generation(), budget=3000)
    first, second, third, fourth = (b.address for b in blobs)
    for address in (first, second, third, first):  # the first read again: the second is oldest
        cache.get(address)
    cache.get(fourth)
    assert _entries(cache) == {first, third, fourth}
    assert cache.usage() == (3, 3000, 3000)
    too_big = remote.put(secrets.token_bytes(3001))
    cache.get(too_big.address)
    assert too_big.address not in _entries(cache)
    cache._slot_lock.close()


def test_a_deletion_anywhere_empties_the_cache_at_its_next_read(
    remote: S3BlobStore, tmp_path: Path
) -> None:
    kept, other = remote.put(b"kept " + secrets.token_bytes(32)), remote.put(b"other")
    generation = Generation()
    cache = _cache(remote, tmp_path, generation)
    cache.get(kept.address)
    assert _entries(cache) == {kept.address}

    generation.value = None  # a deletion committing: neither read nor written
    cache.get(kept.address)
    cache.get(other.address)
    assert cache.hits == 0 and _entries(cache) == {kept.address}

    generation.value = 2  # it committed, in some process: which bytes went is unknown here
    cache.get(other.address)
    assert _entries(cache) == {other.address}
    cache._slot_lock.close()

    generation.value = 3  # and one while the server was down
    restarted = _cache(remote, tmp_path, generation)
    assert restarted.get(other.address) == b"other" and restarted.hits == 0
    restarted._slot_lock.close()


def test_deletes_and_erasures_through_the_cache_drop_their_entry_at_once(
    remote: S3BlobStore, tmp_path: Path
) -> None:
    deleted, erased = remote.put(b"deleted " + secrets.token_bytes(8)), remote.put(b"erased")
    cache = _cache(remote, tmp_path, Generation())
    cache.get(deleted.address)
    cache.get(erased.address)
    cache.delete(deleted.address, deleted.version_id)
    cache.erase(erased.address, erased.version_id, "test")
    assert _entries(cache) == set() and cache.usage()[:2] == (0, 0)
    assert not remote.exists(deleted.address) and not remote.exists(erased.address)
    cache._slot_lock.close()


def test_a_local_store_is_never_cached(tmp_path: Path) -> None:
    local = LocalBlobStore(str(tmp_path / "blobs"))
    with pytest.raises(ConfigurationError):
        DiskCachedBlobStore(local, tmp_path / "cache", 1 << 20, Generation())
    settings = Settings(data_dir=tmp_path, blob_disk_cache_mb=8)
    archive = Archive.open(settings)
    try:
        assert archive.blobs is not None and not isinstance(archive.blobs, DiskCachedBlobStore)
    finally:
        archive.close()
    local.close()


def test_an_erasure_in_one_process_empties_anothers_disk_cache(
    seaweedfs_settings: Settings, database_url: str, tmp_path: Path
) -> None:
    """Two Archive objects on one index and one bucket stand for two processes (SQLite:
    the deletions signal file; PostgreSQL: the generation row); the reader's cache holds
    the bytes until the eraser's erasure, and none of them after its next read."""
    settings = seaweedfs_settings.with_overrides(
        data_dir=tmp_path / "data", database_url=database_url, blob_disk_cache_mb=8
    )
    eraser, reader = Archive.open(settings), Archive.open(settings)
    try:
        assert isinstance(reader.blobs, DiskCachedBlobStore)
        assert with_disk_cache(settings, reader.blobs, reader.index) is not None
        text = b"erased from every disk " + secrets.token_bytes(16)
        erased = eraser.write_memento(
            MementoRequest("https://ex.org/e", text, "text/plain", facts=CaptureFacts())
        ).memento
        kept = eraser.write_memento(
            MementoRequest("https://ex.org/k", b"kept bytes", "text/plain", facts=CaptureFacts())
        ).memento
        assert reader.read_content(erased) == text
        assert reader.read_content(erased) == text and reader.blobs.hits == 1
        address = content_address(text)
        assert _file(reader.blobs, address).exists()

        eraser.retention.erase("default", erased.id, "takedown", "admin")
        assert reader.read_content(kept) == b"kept bytes"  # its next read
        assert not _file(reader.blobs, address).exists()
        with TestClient(create_app(settings, archive=reader, auth=False)) as client:
            figures = client.get("/metrics").text.splitlines()
        assert "amber_blob_disk_cache_hits_total 1" in figures
        assert "amber_blob_disk_cache_misses_total 2" in figures
        assert "amber_blob_disk_cache_entries 1" in figures  # the kept bytes only
    finally:
        eraser.close()
        reader.close()
