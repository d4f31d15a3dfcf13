"""Fault injection for the S3 blob store: retries end in success or a clear StorageError.

Faults are injected with botocore event hooks on the store's own client:

- ``before-call``: answer instead of the server, or raise a transport error (connection
  refused, timeout); the request is never sent. (``before-send`` would not do: every
  handler of that event runs, so moto would still execute the request.)
- ``before-parse`` / ``after-call``: the request *did* reach the server; change what the
  client sees (break or truncate a GET body mid-stream; turn a 200 into a 500).

Both run against moto (unversioned bucket) and SeaweedFS (real HTTP, versioned bucket).
"""

from __future__ import annotations

import base64
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import (
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from botocore.response import StreamingBody
from fixtures_s3 import S3Bucket
from urllib3.exceptions import ProtocolError
from urllib3.exceptions import ReadTimeoutError as URLLib3ReadTimeoutError

from archive.blobstore.s3 import S3BlobStore
from archive.exceptions import IntegrityError, StorageError
from archive.hashing import content_address

URL = "http://s3.invalid/injected"
DATA = b"<html><body>the page as the agent saw it</body></html>" * 50
OPERATIONS = ("PutObject", "GetObject", "HeadObject", "DeleteObject", "ListObjectsV2")
# A before-call action returns (http response, parsed response) or raises.
CallAction = Callable[[], tuple[AWSResponse, dict[str, Any]]]
ParseAction = Callable[[dict[str, Any]], None]
AfterAction = Callable[[AWSResponse, dict[str, Any]], None]


# -- fault machinery --------------------------------------------------------------------


def answer(status: int, code: str) -> CallAction:
    """Answer with an S3 error; the request is never sent."""

    def act() -> tuple[AWSResponse, dict[str, Any]]:
        parsed = {
            "Error": {"Code": code, "Message": "injected"},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
        }
        return AWSResponse("injected", status, {}, None), parsed

    return act


def fail_with(make: Callable[[], BaseException]) -> CallAction:
    """Raise a transport error instead of sending."""

    def act() -> tuple[AWSResponse, dict[str, Any]]:
        raise make()

    return act


def _error_xml(code: str) -> bytes:
    return f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()


def report_as(status: int, code: str) -> AfterAction:
    """The server handled the request; the client is told ``status`` instead of 2xx."""

    def act(http: AWSResponse, parsed: dict[str, Any]) -> None:
        if http.status_code < 300:
            http.status_code = status
            parsed.clear()
            parsed["Error"] = {"Code": code, "Message": "injected"}
            parsed["ResponseMetadata"] = {"HTTPStatusCode": status, "HTTPHeaders": {}}

    return act


def timeout_after_server_answered(response: dict[str, Any]) -> None:
    raise ReadTimeoutError(endpoint_url="injected")


class _BrokenStream:
    """A body that delivers ``keep`` bytes, then fails (``failure``) or ends early (None)."""

    def __init__(self, inner: Any, keep: int, failure: BaseException | None) -> None:
        self._data = inner.read()
        inner.close()
        self._keep = keep
        self._failure = failure
        self._position = 0

    def read(self, amt: int | None = None) -> bytes:
        remaining = self._keep - self._position
        if remaining <= 0 or (amt is None and self._failure is not None):
            if self._failure is not None:
                raise self._failure
            return b""
        size = remaining if amt is None else min(amt, remaining)
        chunk = self._data[self._position : self._position + size]
        self._position += len(chunk)
        return chunk

    def close(self) -> None:
        return None


def break_body(keep: int, failure: BaseException | None) -> ParseAction:
    """Replace a GET body by one that breaks after ``keep`` bytes (Content-Length intact)."""

    def act(response: dict[str, Any]) -> None:
        if response["status_code"] < 300:
            length = response["headers"].get("content-length")
            response["body"] = StreamingBody(_BrokenStream(response["body"], keep, failure), length)

    return act


def truncated(keep: int) -> ParseAction:
    return break_body(keep, None)


def connection_broken() -> ProtocolError:
    return ProtocolError("Connection broken: IncompleteRead(10 bytes read, 90 more expected)")


def read_timeout() -> URLLib3ReadTimeoutError:
    return URLLib3ReadTimeoutError(None, "injected", "Read timed out.")  # type: ignore[arg-type]


class Faults:
    """Scripted faults per S3 operation; once a script runs out, requests pass through.

    ``calls`` counts API calls (each is one attempt of ours: botocore's retries are off),
    ``sends`` the requests that actually went out.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: Counter[str] = Counter()
        self.sends: Counter[str] = Counter()
        for operation in OPERATIONS:
            # Same event as the scripts, registered first: runs even when a script answers.
            events = client.meta.events
            events.register_first(f"before-call.s3.{operation}", self._count(self.calls))
            events.register_first(f"before-send.s3.{operation}", self._count(self.sends))

    @staticmethod
    def _count(counter: Counter[str]) -> Callable[..., None]:
        def handler(event_name: str, **_: Any) -> None:
            counter[event_name.rsplit(".", 1)[-1]] += 1

        return handler

    def on_call(self, operation: str, actions: Iterable[CallAction | None]) -> None:
        script = iter(actions)

        def handler(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
            action = next(script, None)
            return action() if action else None

        self.client.meta.events.register(f"before-call.s3.{operation}", handler)

    def on_response(self, operation: str, actions: Iterable[ParseAction | None]) -> None:
        script = iter(actions)

        def handler(response_dict: dict[str, Any], **_: Any) -> None:
            action = next(script, None)
            if action:
                action(response_dict)

        self.client.meta.events.register_first(f"before-parse.s3.{operation}", handler)

    def after_call(self, operation: str, actions: Iterable[AfterAction | None]) -> None:
        """Rewrite what the client reports, after the server fully handled the request."""
        script = iter(actions)

        def handler(http_response: AWSResponse, parsed: dict[str, Any], **_: Any) -> None:
            action = next(script, None)
            if action:
                action(http_response, parsed)

        self.client.meta.events.register_first(f"after-call.s3.{operation}", handler)


def always(action: Any) -> Iterator[Any]:
    while True:
        yield action


@pytest.fixture()
def faulty(s3_bucket: S3Bucket) -> tuple[S3BlobStore, Faults]:
    """A store whose own client gets the faults; ``s3_bucket.client`` stays clean."""
    client = s3_bucket.new_client()
    return s3_bucket.store(client=client), Faults(client)


def stored_versions(bucket: S3Bucket, store: S3BlobStore, address: str) -> list[str]:
    """Every stored version (or the one object of an unversioned bucket) at the address."""
    key = store.key_for(address)
    listing = bucket.client.list_object_versions(Bucket=bucket.name, Prefix=key)
    return [v.get("VersionId") for v in listing.get("Versions", []) if v["Key"] == key]


def assert_stored_once(bucket: S3Bucket, store: S3BlobStore) -> None:
    address = content_address(DATA)
    assert len(stored_versions(bucket, store, address)) == 1
    assert [o["Key"] for o in bucket.client.list_objects_v2(Bucket=bucket.name)["Contents"]] == [
        store.key_for(address)
    ]
    assert S3BlobStore(bucket.client, bucket.name, store.prefix).get(address) == DATA


def assert_nothing_stored(bucket: S3Bucket) -> None:
    assert bucket.client.list_objects_v2(Bucket=bucket.name).get("KeyCount", 0) == 0


# -- PUT --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        answer(503, "SlowDown"),
        answer(503, "ServiceUnavailable"),
        answer(500, "InternalError"),
        answer(429, "TooManyRequests"),
        answer(409, "ConditionalRequestConflict"),
        fail_with(lambda: EndpointConnectionError(endpoint_url=URL)),
        fail_with(lambda: ConnectionClosedError(endpoint_url=URL)),
        fail_with(lambda: ReadTimeoutError(endpoint_url=URL)),
    ],
    ids=["slowdown", "503", "500", "429", "409-conflict", "refused", "closed", "timeout"],
)
def test_put_retries_transient_failure_then_succeeds_once(
    faulty: tuple[S3BlobStore, Faults], s3_bucket: S3Bucket, fault: CallAction
) -> None:
    store, faults = faulty
    faults.on_call("PutObject", [fault, fault])
    stored = store.put(DATA)
    assert stored.created is True
    assert faults.calls["PutObject"] == 3
    assert_stored_once(s3_bucket, store)


def test_put_persistent_500_raises_storage_error_and_stores_nothing(
    faulty: tuple[S3BlobStore, Faults], s3_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.on_call("PutObject", always(answer(500, "InternalError")))
    with pytest.raises(StorageError, match=r"PUT failed after 4 attempt\(s\): InternalError"):
        store.put(DATA)
    assert faults.calls["PutObject"] == store.attempts
    assert_nothing_stored(s3_bucket)


def test_put_stored_but_answered_500_succeeds_exactly_once(
    faulty: tuple[S3BlobStore, Faults], s3_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.after_call("PutObject", [report_as(500, "InternalError")])
    stored = store.put(DATA)
    # The retry met the stored object (412) and HEAD confirmed it is our bytes.
    assert faults.calls["PutObject"] == 2 and faults.calls["HeadObject"] == 1
    assert faults.sends == faults.calls  # no hidden retries inside botocore
    assert stored.created is False
    assert_stored_once(s3_bucket, store)
    if s3_bucket.versioned:
        address = content_address(DATA)
        assert stored.version_id == stored_versions(s3_bucket, store, address)[0]


def test_put_stored_but_timed_out_succeeds_exactly_once(
    faulty: tuple[S3BlobStore, Faults], s3_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.on_response("PutObject", [timeout_after_server_answered])
    assert store.put(DATA).created is False
    assert_stored_once(s3_bucket, store)


def test_put_head_failing_after_412_is_retried(
    faulty: tuple[S3BlobStore, Faults], s3_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.after_call("PutObject", [report_as(500, "InternalError")])
    faults.on_call("HeadObject", [answer(503, "SlowDown")])
    assert store.put(DATA).created is False
    assert faults.calls["PutObject"] == 3 and faults.calls["HeadObject"] == 2
    assert_stored_once(s3_bucket, store)


def test_put_412_for_an_object_that_vanished_is_retried(
    faulty: tuple[S3BlobStore, Faults], s3_bucket: S3Bucket
) -> None:
    store, faults = faulty
    faults.on_call("PutObject", [answer(412, "PreconditionFailed")])  # HEAD will find nothing
    stored = store.put(DATA)
    assert stored.created is True
    assert faults.calls["PutObject"] == 2
    assert_stored_once(s3_bucket, store)


def test_put_412_with_different_stored_size_is_an_integrity_error(
    faulty: tuple[S3BlobStore, Faults], s3_bucket: S3Bucket
) -> None:
    store, _ = faulty
    key = store.key_for(content_address(DATA))
    s3_bucket.client.put_object(Bucket=s3_bucket.name, Key=key, Body=DATA[:-1])
    with pytest.raises(IntegrityError):
        store.put(DATA)


@pytest.mark.seaweedfs
def test_put_412_with_different_stored_checksum_is_an_integrity_error(
    seaweedfs_bucket: S3Bucket,
) -> None:
    store = seaweedfs_bucket.store()
    key = store.key_for(content_address(DATA))
    other = DATA[:-1] + b"!"  # same length, so only the checksum tells them apart
    checksum = base64.b64encode(hashlib.sha256(other).digest()).decode()
    seaweedfs_bucket.client.put_object(
        Bucket=seaweedfs_bucket.name, Key=key, Body=other, ChecksumSHA256=checksum
    )
    with pytest.raises(IntegrityError):
        store.put(DATA)


def test_put_non_transient_error_is_not_retried(faulty: tuple[S3BlobStore, Faults]) -> None:
    store, faults = faulty
    faults.on_call("PutObject", always(answer(403, "AccessDenied")))
    with pytest.raises(StorageError, match="AccessDenied"):
        store.put(DATA)
    assert faults.calls["PutObject"] == 1


def test_backoff_grows_and_is_bounded(s3_bucket: S3Bucket) -> None:
    delays: list[float] = []
    client = s3_bucket.new_client()
    faults = Faults(client)
    faults.on_call("PutObject", always(answer(503, "SlowDown")))
    store = S3BlobStore(
        client,
        s3_bucket.name,
        attempts=6,
        backoff_base=0.1,
        backoff_max=0.4,
        sleep=delays.append,
    )
    with pytest.raises(StorageError):
        store.put(DATA)
    assert len(delays) == 5  # one sleep between each of the 6 attempts
    ceilings = [0.1, 0.2, 0.4, 0.4, 0.4]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling


# -- GET --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        truncated(100),
        truncated(0),
        break_body(100, connection_broken()),
        break_body(0, connection_broken()),
        break_body(100, read_timeout()),
    ],
    ids=["truncated", "empty", "connection-broken", "broken-at-start", "read-timeout"],
)
def test_get_body_broken_mid_read_is_read_again(
    faulty: tuple[S3BlobStore, Faults], fault: ParseAction
) -> None:
    store, faults = faulty
    address = store.put(DATA).address
    faults.on_response("GetObject", [fault, fault])
    assert store.get(address) == DATA
    assert faults.calls["GetObject"] == 3


def test_get_persistent_truncation_raises_storage_error(
    faulty: tuple[S3BlobStore, Faults],
) -> None:
    store, faults = faulty
    address = store.put(DATA).address
    faults.on_response("GetObject", always(truncated(len(DATA) - 1)))
    with pytest.raises(StorageError, match="GET failed after 4 attempt"):
        store.get(address)  # never the short bytes
    assert faults.calls["GetObject"] == store.attempts


@pytest.mark.parametrize(
    "fault",
    [
        answer(503, "SlowDown"),
        answer(500, "InternalError"),
        fail_with(lambda: EndpointConnectionError(endpoint_url=URL)),
        fail_with(lambda: ReadTimeoutError(endpoint_url=URL)),
    ],
    ids=["slowdown", "500", "refused", "timeout"],
)
def test_get_transient_failure_is_retried(
    faulty: tuple[S3BlobStore, Faults], fault: CallAction
) -> None:
    store, faults = faulty
    address = store.put(DATA).address
    faults.on_call("GetObject", [fault])
    assert store.get(address) == DATA
    assert faults.calls["GetObject"] == 2


def test_get_persistent_503_raises_storage_error(faulty: tuple[S3BlobStore, Faults]) -> None:
    store, faults = faulty
    address = store.put(DATA).address
    faults.on_call("GetObject", always(answer(503, "SlowDown")))
    with pytest.raises(StorageError, match="SlowDown"):
        store.get(address)


# -- the other operations ---------------------------------------------------------------


def test_exists_delete_and_list_retry(faulty: tuple[S3BlobStore, Faults]) -> None:
    store, faults = faulty
    stored = store.put(DATA)
    address = stored.address
    faults.on_call("HeadObject", [answer(503, "SlowDown")])
    faults.on_call("ListObjectsV2", [fail_with(lambda: ReadTimeoutError(endpoint_url=URL))])
    faults.on_call("DeleteObject", [answer(500, "InternalError")])
    assert store.exists(address) is True
    assert list(store.addresses()) == [address]
    store.delete(address, stored.version_id)
    assert store.exists(address) is False
    assert faults.calls["DeleteObject"] == 2


def test_transport_error_messages_do_not_leak_blob_bytes(
    faulty: tuple[S3BlobStore, Faults], caplog: pytest.LogCaptureFixture
) -> None:
    store, faults = faulty
    faults.on_call("PutObject", always(answer(503, "SlowDown")))
    with pytest.raises(StorageError) as raised:
        store.put(DATA)
    assert b"agent saw it" not in str(raised.value).encode()
    assert "agent saw it" not in caplog.text
