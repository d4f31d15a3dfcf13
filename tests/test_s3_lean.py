"""The lean S3 data path (archive/blobstore/s3_lean.py) under the fault-injection suite.

The same faults as test_s3_faults.py (which injects them into botocore), injected at the
lean client's HTTP seam (``LeanS3.send``) in front of real servers: moto in server mode
(``ThreadedMotoServer``, unversioned; moto's in-process mock only patches botocore) and
SeaweedFS (versioned, Object Lock, verifies signatures).

- ``before``: answer instead of the server, or raise a transport error; nothing is sent.
- ``after``: the request *did* reach the server; change what the client sees (a 500
  instead of 200, a timeout, a body cut short).
"""

from __future__ import annotations

import base64
import hashlib
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.credentials import Credentials
from fixtures_s3 import (
    FAST_RETRY,
    REGION,
    S3Bucket,
    lean_client,
)
from urllib3.exceptions import NewConnectionError, ProtocolError, ReadTimeoutError

from archive.blobstore.base import StoredBlob
from archive.blobstore.s3 import S3BlobStore
from archive.blobstore.s3_client import is_transient
from archive.blobstore.s3_lean import LeanS3, Response, TruncatedBody
from archive.exceptions import IntegrityError, StorageError
from archive.hashing import content_address

DATA = b"<html><body>the page as the agent saw it</body></html>" * 50
Before = Callable[[], Response]  # answers instead of the server, or raises
After = Callable[[Response], Response]  # rewrites (or raises on) the server's answer


# -- servers and stores -----------------------------------------------------------------


def lean_store(bucket: S3Bucket, **options: Any) -> S3BlobStore:
    lean = options.pop("lean", None) or lean_client(bucket)
    return S3BlobStore(bucket.client, bucket.name, "amber-test", lean=lean, **FAST_RETRY, **options)


class Faults:
    """Scripted faults per HTTP method at the lean client's seam; ``calls`` counts
    attempts, ``sends`` the requests that reached the server."""

    def __init__(self, lean: LeanS3) -> None:
        self.calls: Counter[str] = Counter()
        self.sends: Counter[str] = Counter()
        self._before: dict[str, Iterator[Before | None]] = {}
        self._after: dict[str, Iterator[After | None]] = {}
        self._send = lean.send
        lean.send = self._faulty_send

    def before(self, method: str, actions: Iterable[Before | None]) -> None:
        self._before[method] = iter(actions)

    def after(self, method: str, actions: Iterable[After | None]) -> None:
        self._after[method] = iter(actions)

    def _faulty_send(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> Response:
        self.calls[method] += 1
        action = next(self._before.get(method, iter(())), None)
        if action is not None:
            return action()
        self.sends[method] += 1
        response = self._send(method, url, headers, body)
        rewrite = next(self._after.get(method, iter(())), None)
        return rewrite(response) if rewrite is not None else response


def answer(status: int, code: str) -> Before:
    xml = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
    return lambda: Response(status, {"content-length": str(len(xml))}, xml)


def fail_with(make: Callable[[], BaseException]) -> Before:
    def act() -> Response:
        raise make()

    return act


def report_as(status: int, code: str) -> After:
    xml = f"<Error><Code>{code}</Code></Error>".encode()
    return lambda response: Response(status, {}, xml) if response.status < 300 else response


def time_out(response: Response) -> Response:
    raise ReadTimeoutError(None, "injected", "Read timed out.")  # type: ignore[arg-type]


def cut_to(keep: int) -> After:
    """The body cut to ``keep`` bytes, Content-Length as the server announced it."""
    return lambda response: Response(response.status, response.headers, response.data[:keep])


def refused() -> BaseException:
    return NewConnectionError(None, "injected: connection refused")  # type: ignore[arg-type]


def broken() -> BaseException:
    return ProtocolError("Connection aborted.", ConnectionResetError("injected"))


def timed_out() -> BaseException:
    return ReadTimeoutError(None, "injected", "Read timed out.")  # type: ignore[arg-type]


def always(action: Any) -> Iterator[Any]:
    while True:
        yield action


@pytest.fixture()
def faulty(s3_server_bucket: S3Bucket) -> tuple[S3BlobStore, Faults]:
    lean = lean_client(s3_server_bucket)
    return lean_store(s3_server_bucket, lean=lean), Faults(lean)


def stored_versions(bucket: S3Bucket, key: str) -> list[str]:
    listing = bucket.client.list_object_versions(Bucket=bucket.name, Prefix=key)
    return [v.get("VersionId") for v in listing.get("Versions", []) if v["Key"] == key]


def assert_stored_once(bucket: S3Bucket, store: S3BlobStore) -> None:
    key = store.key_for(content_address(DATA))
    assert len(stored_versions(bucket, key)) == 1
    assert [o["Key"] for o in bucket.client.list_objects_v2(Bucket=bucket.name)["Contents"]] == [
        key
    ]
    assert S3BlobStore(bucket.client, bucket.name, store.prefix).get(content_address(DATA)) == DATA


def assert_nothing_stored(bucket: S3Bucket) -> None:
    assert bucket.client.list_objects_v2(Bucket=bucket.name).get("KeyCount", 0) == 0


# -- the plain operations ---------------------------------------------------------------


def test_put_get_head_round_trip_matches_botocore(s3_server_bucket: S3Bucket) -> None:
    store = lean_store(s3_server_bucket)
    stored = store.put(DATA)
    assert stored.created is True
    assert store.get(stored.address, stored.version_id) == DATA
    assert store.exists(stored.address) is True
    # What botocore sees of the object the lean client stored: same bytes, same checksum.
    head = s3_server_bucket.client.head_object(
        Bucket=s3_server_bucket.name, Key=store.key_for(stored.address), ChecksumMode="ENABLED"
    )
    assert head["ContentLength"] == len(DATA)
    checksum = base64.b64encode(hashlib.sha256(DATA).digest()).decode()
    assert head.get("ChecksumSHA256") in (None, checksum)  # moto's server may not echo it
    assert head.get("VersionId") == stored.version_id
    again = store.put(DATA)  # the conditional create: 412, confirmed by HEAD
    assert again.created is False and again.version_id == stored.version_id
    assert_stored_once(s3_server_bucket, store)


def test_missing_object_is_blob_not_found(s3_server_bucket: S3Bucket) -> None:
    from archive.exceptions import BlobNotFound

    store = lean_store(s3_server_bucket)
    with pytest.raises(BlobNotFound):
        store.get(content_address(b"never stored"))
    assert store.exists(content_address(b"never stored")) is False


@pytest.mark.seaweedfs
def test_wrong_secret_is_refused_and_not_retried(seaweedfs_bucket: S3Bucket) -> None:
    """SeaweedFS checks the signature: a wrong one is refused for good, nothing stored."""
    lean = lean_client(seaweedfs_bucket, secret="not-the-secret")
    faults = Faults(lean)
    store = lean_store(seaweedfs_bucket, lean=lean)
    with pytest.raises(StorageError, match="SignatureDoesNotMatch|AccessDenied"):
        store.put(DATA)
    assert faults.calls["PUT"] == 1
    assert_nothing_stored(seaweedfs_bucket)


@pytest.mark.seaweedfs
def test_put_locks_the_new_version(seaweedfs_bucket: S3Bucket) -> None:
    store = lean_store(seaweedfs_bucket, lock_mode="GOVERNANCE")
    until = datetime.now(UTC) + timedelta(days=2, microseconds=1)
    stored = store.put(DATA, retain_until=until)
    expected = until.replace(microsecond=0) + timedelta(seconds=1)
    assert stored.retain_until == expected
    assert store.retention_of(stored.address, stored.version_id) == (expected, False)
    # Put again with a later date: 412, then the lock is extended, never shortened.
    later = expected + timedelta(days=1)
    assert store.put(DATA, retain_until=later).retain_until == later
    assert store.put(DATA, retain_until=expected).retain_until == later


# -- PUT faults -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        answer(503, "SlowDown"),
        answer(503, "ServiceUnavailable"),
        answer(500, "InternalError"),
        answer(429, "TooManyRequests"),
        answer(409, "ConditionalRequestConflict"),
        fail_with(refused),
        fail_with(broken),
        fail_with(timed_out),
    ],
    ids=["slowdown", "503", "500", "429", "409-conflict", "refused", "closed", "timeout"],
)
def test_put_retries_transient_failure_then_succeeds_once(
    faulty: tuple[S3BlobStore, Faults], s3_server_bucket: S3Bucket, fault: Before
) -> None:
    store, faults = faulty
    faults.before("PUT", [fault, fault])
    assert store.put(DATA).created is True
    assert faults.calls["PUT"] == 3 and faults.sends["PUT"] == 1
    assert_stored_once(s3_server_bucket, store)


def test_put_persistent_500_raises_storage_error_and_stores_nothing(
    faulty: tuple[S3BlobStore, Faults], s3_server_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.before("PUT", always(answer(500, "InternalError")))
    with pytest.raises(StorageError, match=r"PUT failed after 4 attempt\(s\): InternalError"):
        store.put(DATA)
    assert faults.calls["PUT"] == store.attempts
    assert_nothing_stored(s3_server_bucket)


def test_put_stored_but_answered_500_succeeds_exactly_once(
    faulty: tuple[S3BlobStore, Faults], s3_server_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.after("PUT", [report_as(500, "InternalError")])
    stored = store.put(DATA)
    # The retry met the stored object (412, nothing overwritten) and HEAD confirmed it.
    assert faults.sends["PUT"] == 2 and faults.sends["HEAD"] == 1
    assert stored.created is False
    assert_stored_once(s3_server_bucket, store)
    if s3_server_bucket.versioned:
        key = store.key_for(stored.address)
        assert stored.version_id == stored_versions(s3_server_bucket, key)[0]


def test_put_stored_but_timed_out_succeeds_exactly_once(
    faulty: tuple[S3BlobStore, Faults], s3_server_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.after("PUT", [time_out])
    assert store.put(DATA).created is False
    assert_stored_once(s3_server_bucket, store)


def test_put_head_failing_after_412_is_retried(
    faulty: tuple[S3BlobStore, Faults], s3_server_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.after("PUT", [report_as(500, "InternalError")])
    faults.before("HEAD", [answer(503, "SlowDown")])
    assert store.put(DATA).created is False
    assert faults.calls["PUT"] == 3 and faults.calls["HEAD"] == 2
    assert_stored_once(s3_server_bucket, store)


def test_put_412_for_an_object_that_vanished_is_retried(
    faulty: tuple[S3BlobStore, Faults], s3_server_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.before("PUT", [answer(412, "PreconditionFailed")])  # HEAD will find nothing
    assert store.put(DATA).created is True
    assert faults.calls["PUT"] == 2
    assert_stored_once(s3_server_bucket, store)


def test_put_412_with_different_stored_size_is_an_integrity_error(
    s3_server_bucket: S3Bucket,
) -> None:
    store = lean_store(s3_server_bucket)
    key = store.key_for(content_address(DATA))
    s3_server_bucket.client.put_object(Bucket=s3_server_bucket.name, Key=key, Body=DATA[:-1])
    with pytest.raises(IntegrityError):
        store.put(DATA)
    assert len(stored_versions(s3_server_bucket, key)) == 1  # nothing overwritten


@pytest.mark.seaweedfs
def test_put_412_with_different_stored_checksum_is_an_integrity_error(
    seaweedfs_bucket: S3Bucket,
) -> None:
    store = lean_store(seaweedfs_bucket)
    key = store.key_for(content_address(DATA))
    other = DATA[:-1] + b"!"  # same length, so only the checksum tells them apart
    checksum = base64.b64encode(hashlib.sha256(other).digest()).decode()
    seaweedfs_bucket.client.put_object(
        Bucket=seaweedfs_bucket.name, Key=key, Body=other, ChecksumSHA256=checksum
    )
    with pytest.raises(IntegrityError):
        store.put(DATA)


@pytest.mark.seaweedfs
def test_body_changed_in_transit_is_refused(seaweedfs_bucket: S3Bucket) -> None:
    """Bytes that are not the ones hashed never get stored: refused, not retried."""
    lean = lean_client(seaweedfs_bucket)
    send = lean.send
    lean.send = lambda method, url, headers, body: send(
        method, url, headers, body[:-1] + b"?" if body else body
    )
    store = lean_store(seaweedfs_bucket, lean=lean)
    with pytest.raises(StorageError):
        store.put(DATA)
    assert_nothing_stored(seaweedfs_bucket)


def test_put_non_transient_error_is_not_retried(faulty: tuple[S3BlobStore, Faults]) -> None:
    store, faults = faulty
    faults.before("PUT", always(answer(403, "AccessDenied")))
    with pytest.raises(StorageError, match="AccessDenied"):
        store.put(DATA)
    assert faults.calls["PUT"] == 1


# -- GET faults -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [cut_to(100), cut_to(0)],
    ids=["truncated", "empty"],
)
def test_get_body_cut_short_is_read_again(faulty: tuple[S3BlobStore, Faults], fault: After) -> None:
    store, faults = faulty
    address = store.put(DATA).address
    faults.after("GET", [fault, fault])
    assert store.get(address) == DATA
    assert faults.calls["GET"] == 3


def test_get_persistent_truncation_raises_storage_error(
    faulty: tuple[S3BlobStore, Faults],
) -> None:
    store, faults = faulty
    address = store.put(DATA).address
    faults.after("GET", always(cut_to(len(DATA) - 1)))
    with pytest.raises(StorageError, match="GET failed after 4 attempt"):
        store.get(address)  # never the short bytes
    assert faults.calls["GET"] == store.attempts


@pytest.mark.parametrize(
    "fault",
    [
        answer(503, "SlowDown"),
        answer(500, "InternalError"),
        fail_with(refused),
        fail_with(broken),
        fail_with(timed_out),
    ],
    ids=["slowdown", "500", "refused", "broken", "timeout"],
)
def test_get_transient_failure_is_retried(
    faulty: tuple[S3BlobStore, Faults], fault: Before
) -> None:
    store, faults = faulty
    address = store.put(DATA).address
    faults.before("GET", [fault])
    assert store.get(address) == DATA
    assert faults.calls["GET"] == 2


def test_get_persistent_503_raises_storage_error(faulty: tuple[S3BlobStore, Faults]) -> None:
    store, faults = faulty
    address = store.put(DATA).address
    faults.before("GET", always(answer(503, "SlowDown")))
    with pytest.raises(StorageError, match="SlowDown"):
        store.get(address)


def test_transport_error_messages_do_not_leak_blob_bytes(
    faulty: tuple[S3BlobStore, Faults], caplog: pytest.LogCaptureFixture
) -> None:
    store, faults = faulty
    faults.before("PUT", always(answer(503, "SlowDown")))
    with pytest.raises(StorageError) as raised:
        store.put(DATA)
    assert "agent saw it" not in str(raised.value)
    assert "agent saw it" not in caplog.text


# -- the real transport: a server that hangs up mid-body --------------------------------


def test_real_short_body_is_caught_by_the_transport() -> None:
    """A server announcing 100 bytes and closing after 10: urllib3 raises, the error is
    transient (re-read), and no short bytes are returned."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    lean = LeanS3(
        f"http://127.0.0.1:{port}",
        REGION,
        "bucket",
        Credentials("key", "secret"),
        pool_size=1,
        connect_timeout=5.0,
        read_timeout=5.0,
    )
    try:
        with pytest.raises(Exception) as raised:
            lean.get_object("blobs/aa/bb/key", None)
        assert is_transient(raised.value)
        assert not isinstance(raised.value, TruncatedBody)  # urllib3 caught it first
    finally:
        lean.close()
        thread.join(timeout=5)
        listener.close()


def test_from_settings_picks_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    from archive.config import Settings
    from archive.exceptions import ConfigurationError

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings = Settings(blob_store="s3://bucket/p", s3_endpoint_url="http://127.0.0.1:9")
    lean = S3BlobStore.from_settings(bucket="bucket", prefix="p", settings=settings)
    assert lean.lean is not None
    lean.close()
    plain = S3BlobStore.from_settings(
        bucket="bucket",
        prefix="p",
        settings=Settings(
            blob_store="s3://bucket/p", s3_endpoint_url="http://127.0.0.1:9", s3_client="botocore"
        ),
    )
    assert plain.lean is None
    plain.close()
    with pytest.raises(ConfigurationError, match="AMBER_S3_CLIENT"):
        Settings(blob_store="s3://bucket/p", s3_client="curl")


def test_identical_concurrent_puts_share_one_upload_and_never_back_off(
    s3_server_bucket: S3Bucket,
) -> None:
    putters = 8
    slept: list[float] = []
    lean = lean_client(s3_server_bucket)
    faults = Faults(lean)
    store = lean_store(s3_server_bucket, lean=lean, sleep=slept.append)
    started = threading.Barrier(putters)

    def put() -> StoredBlob:
        started.wait()
        return store.put(DATA)

    try:
        with ThreadPoolExecutor(putters) as pool:
            stored = list(pool.map(lambda _: put(), range(putters)))
        assert slept == [], "no put waited out a conflict"
        assert {s.address for s in stored} == {content_address(DATA)}
        assert sum(s.created for s in stored) == 1
        assert faults.sends["PUT"] < putters, "concurrent identical puts shared an upload"
        assert_stored_once(s3_server_bucket, store)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("sse", "kms_key"), [("AES256", None), ("aws:kms", "alias/amber")], ids=["sse-s3", "sse-kms"]
)
def test_server_side_encryption_on_every_put(
    moto_server_bucket: S3Bucket, sse: str, kms_key: str | None
) -> None:
    """The lean PUT asks for SSE as boto3 would; moto's server records what it was asked."""
    from archive.blobstore.s3_client import encryption_params

    store = lean_store(moto_server_bucket, encryption=encryption_params(sse, kms_key))
    stored = store.put(DATA)
    head = moto_server_bucket.client.head_object(
        Bucket=moto_server_bucket.name, Key=store.key_for(stored.address)
    )
    assert head["ServerSideEncryption"] == sse
    if kms_key is not None:
        assert head["SSEKMSKeyId"].endswith(kms_key)
