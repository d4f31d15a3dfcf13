"""One suite for every blob store backend (local, moto, SeaweedFS): the interface contract."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fixtures_s3 import S3Bucket, s3_settings_for

from archive.blobstore import open_blob_store
from archive.blobstore.local import LocalBlobStore
from archive.blobstore.s3 import S3BlobStore
from archive.exceptions import BlobNotFound, IntegrityError, InvalidAddress
from archive.hashing import content_address

UNKNOWN = "blake3:" + "0" * 64
BAD_ADDRESSES = [
    "blake3:../../etc",
    "blake3:../../etc/passwd" + "a" * 40,
    "blake3:" + "A" * 64,
    "sha256:" + "a" * 64,
    "blake3:" + "%2F" * 21 + "a",
    "blake3:" + "a" * 63,
    "blake3:" + "a" * 65,
    "blake3:" + "a" * 64 + "\n",
    "blake3:" + "a" * 62 + "/a",
    "",
]


def corrupt(store: Any, address: str, replacement: bytes) -> None:
    """Replace the stored bytes behind the store's back (no conditional write)."""
    if isinstance(store, LocalBlobStore):
        store.path_for(address).write_bytes(replacement)
    else:
        store.client.put_object(Bucket=store.bucket, Key=store.key_for(address), Body=replacement)


# -- the contract, for every backend ----------------------------------------------------


def test_put_returns_blake3_address_and_size(blob_store: Any) -> None:
    data = b"<html>evidence</html>"
    stored = blob_store.put(data)
    assert stored.address == content_address(data)
    assert stored.address.startswith("blake3:") and len(stored.address) == 7 + 64
    assert stored.size == len(data)
    assert stored.created is True


def test_put_is_idempotent(blob_store: Any) -> None:
    first = blob_store.put(b"same bytes")
    second = blob_store.put(b"same bytes")
    assert second.address == first.address
    assert second.size == first.size
    assert second.created is False
    assert second.version_id == first.version_id  # the existing version, not a new one
    assert list(blob_store.addresses()) == [first.address]


def test_get_round_trips(blob_store: Any) -> None:
    data = bytes(range(256)) * 17
    stored = blob_store.put(data)
    assert blob_store.get(stored.address) == data
    assert blob_store.exists(stored.address)


def test_large_blob_round_trips(blob_store: Any) -> None:
    data = os.urandom(5 * 1024 * 1024 + 3)  # past the multithreaded-hash and chunk sizes
    stored = blob_store.put(data)
    assert blob_store.get(stored.address) == data


def test_empty_blob(blob_store: Any) -> None:
    stored = blob_store.put(b"")
    assert stored.size == 0
    assert blob_store.get(stored.address) == b""
    assert blob_store.put(b"").created is False


def test_get_unknown_raises_blob_not_found(blob_store: Any) -> None:
    with pytest.raises(BlobNotFound):
        blob_store.get(UNKNOWN)
    assert blob_store.exists(UNKNOWN) is False


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_malformed_addresses_are_refused(blob_store: Any, address: str) -> None:
    for operation in (blob_store.get, blob_store.exists, blob_store.delete):
        with pytest.raises(InvalidAddress):
            operation(address)


def test_corrupted_bytes_raise_integrity_error(blob_store: Any) -> None:
    data = b"the original capture"
    stored = blob_store.put(data)
    corrupt(blob_store, stored.address, b"the tampered capture")
    with pytest.raises(IntegrityError):
        blob_store.get(stored.address)


def test_truncated_stored_bytes_raise_integrity_error(blob_store: Any) -> None:
    stored = blob_store.put(b"a longer original capture")
    corrupt(blob_store, stored.address, b"a longer")
    with pytest.raises(IntegrityError):
        blob_store.get(stored.address)


def test_delete_then_not_exists(blob_store: Any) -> None:
    stored = blob_store.put(b"to be deleted")
    blob_store.delete(stored.address, stored.version_id)
    assert blob_store.exists(stored.address) is False
    with pytest.raises(BlobNotFound):
        blob_store.get(stored.address)
    assert list(blob_store.addresses()) == []
    blob_store.delete(stored.address, stored.version_id)  # deleting what is gone is fine


def test_put_after_delete_stores_again(blob_store: Any) -> None:
    stored = blob_store.put(b"back again")
    blob_store.delete(stored.address, stored.version_id)
    again = blob_store.put(b"back again")
    assert again.created is True
    assert blob_store.get(again.address) == b"back again"


def test_addresses_lists_what_was_put(blob_store: Any) -> None:
    expected = {blob_store.put(f"blob {i}".encode()).address for i in range(7)}
    listed = list(blob_store.addresses())
    assert len(listed) == len(expected)
    assert set(listed) == expected


def test_concurrent_puts_of_the_same_bytes(blob_store: Any) -> None:
    data = b"everyone archives the same page at once" * 100
    threads = 4  # SeaweedFS serialises conditional PUTs to one key (~1 s each): keep it small
    barrier = threading.Barrier(threads)

    def put() -> Any:
        barrier.wait()
        return blob_store.put(data)

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(lambda _: put(), range(threads)))
    assert {r.address for r in results} == {content_address(data)}
    assert sum(r.created for r in results) >= 1
    assert list(blob_store.addresses()) == [content_address(data)]
    assert blob_store.get(content_address(data)) == data
    if isinstance(blob_store, S3BlobStore):
        assert len(_versions(blob_store, content_address(data))) == 1


# -- local directory specifics ----------------------------------------------------------


def test_stage_many_then_publish_stores_each_in_order(blob_store: Any) -> None:
    before = blob_store.put(b"stored earlier")
    batch = [
        b"first of the batch",
        b"stored earlier",
        b"second of the batch",
        b"first of the batch",
    ]
    staged = blob_store.stage_many(batch)
    blob_store.publish(staged)
    stored = [one.blob for one in staged]
    assert [s.address for s in stored] == [content_address(data) for data in batch]
    assert [s.size for s in stored] == [len(data) for data in batch]
    # Identical new bytes twice in one batch: exactly one of them is the one that stored them
    # (which one is a race on a store that uploads concurrently).
    assert [stored[0].created, stored[3].created].count(True) == 1
    assert (stored[1].created, stored[2].created) == (False, True)
    assert stored[1].address == before.address
    for data, blob in zip(batch, stored, strict=True):
        assert blob_store.get(blob.address, blob.version_id) == data
    assert blob_store.stage_many([]) == []


def _all_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_local_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    for i in range(5):
        store.put(f"blob {i}".encode())
    store.put(b"blob 0")
    assert not [p for p in _all_files(tmp_path) if p.name.startswith(".tmp-")]
    assert len(_all_files(tmp_path)) == 5


def test_local_publish_syncs_twice_per_batch(tmp_path: Path, monkeypatch: Any) -> None:
    """Bytes made durable before any name appears, then the names: two syncs in all."""
    from archive.blobstore import local

    events: list[str] = []
    real_replace = os.replace

    def syncfs(fd: int) -> int:
        events.append("sync")
        return 0

    def replace(source: Any, target: Any) -> None:
        events.append("rename")
        real_replace(source, target)

    monkeypatch.setattr(local, "_SYNCFS", syncfs)
    monkeypatch.setattr(local.os, "replace", replace)
    store = LocalBlobStore(tmp_path)
    store.publish(store.stage_many([f"passage {i}".encode() for i in range(10)]))
    assert events == ["sync"] + ["rename"] * 10 + ["sync"]


def test_local_publish_without_syncfs_fsyncs_each_file_and_directory(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from archive.blobstore import local

    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(local, "_SYNCFS", None)
    monkeypatch.setattr(local.os, "fsync", fsync)
    store = LocalBlobStore(tmp_path)
    staged = store.stage_many([b"one passage", b"another passage"])
    store.publish(staged)
    for blob in (one.blob for one in staged):
        path = store.path_for(blob.address)
        # the temp file's bytes (its name then), and the directory after the rename
        assert any(Path(name).parent == path.parent and ".tmp-" in name for name in synced)
        assert str(path.parent) in synced


def test_local_publish_failure_leaves_nothing_half_done(tmp_path: Path, monkeypatch: Any) -> None:
    from archive.blobstore import local
    from archive.exceptions import StorageError

    calls = 0
    real_replace = os.replace

    def failing_replace(source: Any, target: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(local.os, "replace", failing_replace)
    store = LocalBlobStore(tmp_path)
    with pytest.raises(StorageError):
        store.publish(store.stage_many([b"lands", b"fails", b"never tried"]))
    assert not [p for p in _all_files(tmp_path) if p.name.startswith(".tmp-")]
    assert store.get(content_address(b"lands")) == b"lands"  # complete and valid, or absent
    assert not store.exists(content_address(b"fails"))
    assert not store.exists(content_address(b"never tried"))


def test_local_bytes_discarded_by_a_failed_publish_are_never_published_later(
    tmp_path: Path,
) -> None:
    """The group commit retries each request of a failed batch alone: a retried publish of
    discarded bytes must fail, not let rows point at a blob that was never stored."""
    from archive.exceptions import StorageError

    store = LocalBlobStore(tmp_path)
    taken, neighbour = store.stage_many([b"its temp file vanishes", b"its neighbour"])
    os.unlink(taken.pending.temp_name)  # e.g. removed by hand, or a disk error
    with pytest.raises(StorageError):
        store.publish([taken, neighbour])
    for alone in (neighbour, taken):
        with pytest.raises(StorageError):
            store.publish([alone])
    assert not store.exists(taken.blob.address) and not store.exists(neighbour.blob.address)
    assert not [p for p in _all_files(tmp_path) if p.name.startswith(".tmp-")]


def test_local_new_store_has_one_level_of_shards(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    stored = store.put(b"one level")
    digest = stored.address.split(":", 1)[1]
    assert store.path_for(stored.address) == tmp_path / "blobs" / digest[:2] / digest
    assert store.path_for(stored.address).is_file()
    assert LocalBlobStore(tmp_path / "blobs").shard_levels == 1  # reopened: still one


def test_local_store_of_an_earlier_version_keeps_its_two_levels(tmp_path: Path) -> None:
    old_bytes, new_bytes = b"stored by an earlier version", b"stored after the upgrade"
    old = content_address(old_bytes).split(":", 1)[1]
    legacy = tmp_path / "blobs" / old[:2] / old[2:4] / old
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(old_bytes)
    store = LocalBlobStore(tmp_path / "blobs")
    assert store.shard_levels == 2
    assert store.get(content_address(old_bytes)) == old_bytes
    assert store.put(old_bytes).created is False
    added = store.put(new_bytes)
    digest = added.address.split(":", 1)[1]
    assert (tmp_path / "blobs" / digest[:2] / digest[2:4] / digest).is_file()
    assert sorted(store.addresses()) == sorted([content_address(old_bytes), added.address])


def test_local_leftover_temp_file_is_ignored(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    data = b"interrupted write"
    address = content_address(data)
    directory = store.path_for(address).parent
    directory.mkdir(parents=True)
    (directory / ".tmp-crashed").write_bytes(data[:5])  # what a crash mid-write leaves
    assert list(store.addresses()) == []
    assert store.exists(address) is False
    stored = store.put(data)
    assert stored.created is True
    assert store.get(address) == data
    assert list(store.addresses()) == [address]


# -- S3 specifics -----------------------------------------------------------------------


def _versions(store: S3BlobStore, address: str) -> list[dict[str, Any]]:
    key = store.key_for(address)
    listing = store.client.list_object_versions(Bucket=store.bucket, Prefix=key)
    return [v for v in listing.get("Versions", []) if v["Key"] == key]


@pytest.mark.parametrize("prefix", ["", "tenant-a", "deep/er/prefix/"])
def test_s3_key_layout(s3_bucket: S3Bucket, prefix: str) -> None:
    store = s3_bucket.store(prefix=prefix)
    stored = store.put(b"layout")
    digest = stored.address.removeprefix("blake3:")
    base = prefix.strip("/")
    expected = f"{base + '/' if base else ''}blobs/{digest[:2]}/{digest[2:4]}/{digest}"
    keys = [o["Key"] for o in s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name)["Contents"]]
    assert keys == [expected]


def test_s3_put_sends_sha256_checksum(s3_bucket: S3Bucket) -> None:
    store = s3_bucket.store()
    seen: list[str | None] = []
    store.client.meta.events.register(
        "before-send.s3.PutObject",
        lambda request, **_: seen.append(request.headers.get("x-amz-checksum-sha256")),
    )
    store.put(b"checked in transit")
    assert seen and all(seen)


def test_s3_addresses_ignores_foreign_keys_and_other_prefixes(s3_bucket: S3Bucket) -> None:
    store = s3_bucket.store(prefix="mine")
    other = s3_bucket.store(prefix="other")
    stored = store.put(b"mine")
    other.put(b"not mine")
    digest = stored.address.removeprefix("blake3:")
    for stray in ("mine/blobs/README", f"mine/blobs/00/00/{digest}", "mine/blobs/zz/zz/x"):
        s3_bucket.client.put_object(Bucket=s3_bucket.name, Key=stray, Body=b"x")
    assert list(store.addresses()) == [stored.address]


def test_s3_addresses_paginates(moto_bucket: S3Bucket) -> None:
    store = moto_bucket.store()
    expected = {store.put(f"page {i}".encode()).address for i in range(5)}
    calls: list[int] = []

    def small_pages(params: dict[str, Any], **_: Any) -> None:
        calls.append(1)
        params["MaxKeys"] = 2

    moto_bucket.client.meta.events.register("provide-client-params.s3.ListObjectsV2", small_pages)
    assert set(store.addresses()) == expected
    assert len(calls) == 3


def test_s3_unversioned_bucket_has_no_version_ids(moto_bucket: S3Bucket) -> None:
    stored = moto_bucket.store().put(b"plain")
    assert stored.version_id is None


@pytest.mark.seaweedfs
def test_s3_versioned_bucket_records_and_uses_version_ids(seaweedfs_bucket: S3Bucket) -> None:
    store = seaweedfs_bucket.store()
    stored = store.put(b"versioned evidence")
    assert stored.version_id
    assert store.put(b"versioned evidence").version_id == stored.version_id

    # A versionless delete would only add a delete marker (evidence hidden, not deleted).
    with pytest.raises(ValueError, match="version_id"):
        store.delete(stored.address)
    assert store.exists(stored.address) is True
    assert store.get(stored.address, version_id=stored.version_id) == b"versioned evidence"

    store.delete(stored.address, version_id=stored.version_id)  # gone for good
    with pytest.raises(BlobNotFound):
        store.get(stored.address, version_id=stored.version_id)
    assert _versions(store, stored.address) == []


@pytest.mark.seaweedfs
def test_s3_get_verifies_the_requested_version(seaweedfs_bucket: S3Bucket) -> None:
    store = seaweedfs_bucket.store()
    stored = store.put(b"first version")
    corrupt(store, stored.address, b"tampered later")
    assert store.get(stored.address, version_id=stored.version_id) == b"first version"
    with pytest.raises(IntegrityError):
        store.get(stored.address)


@pytest.mark.seaweedfs
def test_open_blob_store_from_settings(seaweedfs_settings: Any) -> None:
    store = open_blob_store(seaweedfs_settings)
    prefix = seaweedfs_settings.blob_store.split("/", 3)[3]
    try:
        assert isinstance(store, S3BlobStore)
        stored = store.put(b"configured by environment")
        assert store.get(stored.address) == b"configured by environment"
        assert store.key_for(stored.address).startswith(f"{prefix}/blobs/")
    finally:
        store.close()


def test_open_blob_store_from_settings_moto(
    moto_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_blob_store(s3_settings_for(None, moto_bucket.name, monkeypatch, prefix=""))
    try:
        assert isinstance(store, S3BlobStore)
        stored = store.put(b"no prefix")
        assert store.key_for(stored.address).startswith("blobs/")
        assert store.get(stored.address) == b"no prefix"
    finally:
        store.close()


@pytest.mark.parametrize(
    ("sse", "kms_key", "expected"),
    [
        ("AES256", None, {"ServerSideEncryption": "AES256"}),
        (
            "aws:kms",
            "alias/amber",
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/amber"},
        ),
    ],
)
def test_server_side_encryption_on_every_put(
    moto_bucket: Any, sse: str, kms_key: str | None, expected: dict[str, str]
) -> None:
    """Every blob write asks for SSE; the stored object reports it (moto records it)."""
    from archive.blobstore.s3_client import encryption_params

    params = encryption_params(sse, kms_key)
    assert params == expected
    sent: list[dict[str, Any]] = []
    moto_bucket.client.meta.events.register(
        "provide-client-params.s3.PutObject", lambda params, **_: sent.append(dict(params))
    )
    store = moto_bucket.store(encryption=params)
    stored = store.put(b"encrypted at rest")
    assert all(call.get("ServerSideEncryption") == sse for call in sent) and sent
    head = moto_bucket.client.head_object(
        Bucket=moto_bucket.name, Key=store.key_for(stored.address)
    )
    assert head["ServerSideEncryption"] == sse
