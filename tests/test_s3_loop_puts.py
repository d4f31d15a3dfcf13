"""A write's PutObject sent from the event loop (archive/blobstore/loopputs.py), on the
keep-alive connections of archive/blobstore/loophttp.py.

Faults are injected at the lean client's loop seam (``LeanS3.send_async``) in front of real
servers: moto in server mode (``ThreadedMotoServer``, unversioned, no keep-alive) and
SeaweedFS (versioned, Object Lock, keep-alive, verifies signatures). The complete
synchronous path behind it (``S3BlobStore.put``) is watched at its own seam
(``LeanS3.send``): every failure on the loop must end there, and only there.

``LoopConnections`` itself is tested against a tiny scripted HTTP/1.1 server on the test's
own loop (plain asyncio and uvloop), which counts connections and requests.

Async tests run on anyio's pytest runner; async fixtures close stores while that loop still
runs (where a server closes them too).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import socket
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fixtures_s3 import (
    FAST_RETRY,
    REGION,
    S3Bucket,
    lean_client,
    set_aws_env,
)

from archive.archive import Archive
from archive.blobstore.loophttp import ConnectionDropped, LoopConnections, Response
from archive.blobstore.loopputs import LoopPuts
from archive.blobstore.s3 import S3BlobStore
from archive.blobstore.s3_lean import LeanS3
from archive.config import Settings
from archive.exceptions import StorageError
from archive.hashing import content_address
from archive.index import DEFAULT_TENANT
from archive.writes import MementoRequest

pytestmark = pytest.mark.anyio

MARKER = b"quoted-passage-7f3a9c"  # must never reach a log line
DATA = b"<html><body>the page as the agent saw it: " + MARKER + b"</body></html>" * 40
# The event loops LoopConnections must work on: asyncio's own, and uvicorn's uvloop.
LOOPS = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param("asyncio", id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ],
)


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


# -- servers, buckets and stores --------------------------------------------------------


Before = Callable[[], Response]  # answers instead of the server, or raises; nothing sent
After = Callable[[Response], Response]  # the server answered: rewrite it, or raise


class LoopSeam:
    """Scripted faults at ``lean.send_async``: ``calls`` counts attempts, ``sends`` the
    requests that reached the server, ``statuses`` what the server really answered."""

    def __init__(self, lean: LeanS3) -> None:
        self.calls = 0
        self.sends = 0
        self.statuses: list[int] = []
        self.delay = 0.0  # before each real send, so concurrent callers surely overlap
        self._before: Iterator[Before | None] = iter(())
        self._after: Iterator[After | None] = iter(())
        self._send = lean.send_async
        lean.send_async = self._send_async

    def before(self, actions: Iterable[Before | None]) -> None:
        self._before = iter(actions)

    def after(self, actions: Iterable[After | None]) -> None:
        self._after = iter(actions)

    async def _send_async(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> Response:
        assert method == "PUT", "only PutObject goes from the loop"
        self.calls += 1
        action = next(self._before, None)
        if action is not None:
            return action()
        if self.delay:
            await asyncio.sleep(self.delay)
        self.sends += 1
        response = await self._send(method, target, headers, body)
        self.statuses.append(response.status)
        rewrite = next(self._after, None)
        return rewrite(response) if rewrite is not None else response


class SyncSeam:
    """The complete path's seam (``lean.send``): counts requests per method; ``put_fault``
    answers PUTs instead of the server while set."""

    def __init__(self, lean: LeanS3) -> None:
        self.calls: Counter[str] = Counter()
        self.put_faults: Iterator[Before | None] = iter(())
        self._send = lean.send
        lean.send = self._faulty_send

    def _faulty_send(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> Response:
        self.calls[method] += 1
        action = next(self.put_faults, None) if method == "PUT" else None
        if action is not None:
            return action()
        return self._send(method, url, headers, body)


@dataclass
class Rig:
    bucket: S3Bucket
    store: S3BlobStore
    loop: LoopSeam
    sync: SyncSeam

    @property
    def puts(self) -> LoopPuts:
        assert self.store.loop_puts is not None, "the lean client puts from the loop"
        return self.store.loop_puts

    @property
    def key(self) -> str:
        return self.store.key_for(content_address(DATA))

    def versions(self, key: str | None = None) -> list[str | None]:
        key = key or self.key
        listing = self.bucket.client.list_object_versions(Bucket=self.bucket.name, Prefix=key)
        return [v.get("VersionId") for v in listing.get("Versions", []) if v["Key"] == key]

    def assert_stored_once(self, data: bytes = DATA) -> None:
        """Exactly one version of exactly one object, read back by botocore (not the lean
        client under test) with its hash checked."""
        key = self.store.key_for(content_address(data))
        assert len(self.versions(key)) == 1
        listed = self.bucket.client.list_objects_v2(Bucket=self.bucket.name)
        assert [o["Key"] for o in listed.get("Contents", [])] == [key]
        reader = S3BlobStore(self.bucket.client, self.bucket.name, self.store.prefix)
        assert reader.get(content_address(data)) == data

    def assert_nothing_stored(self) -> None:
        listed = self.bucket.client.list_objects_v2(Bucket=self.bucket.name)
        assert listed.get("KeyCount", 0) == 0


def make_rig(bucket: S3Bucket, **options: Any) -> Rig:
    lean = lean_client(bucket)
    loop, sync = LoopSeam(lean), SyncSeam(lean)
    prefix = f"loop-{uuid.uuid4().hex[:8]}"
    store = S3BlobStore(bucket.client, bucket.name, prefix, lean=lean, **{**FAST_RETRY, **options})
    return Rig(bucket, store, loop, sync)


@pytest.fixture()
async def rig(s3_server_bucket: S3Bucket) -> AsyncIterator[Rig]:
    made = make_rig(s3_server_bucket)
    try:
        yield made
    finally:
        made.store.close()  # on the loop that owns its connections


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


def lose_answer(make: Callable[[], BaseException]) -> After:
    def act(response: Response) -> Response:
        assert response.status == 200, "the server stored it"
        raise make()

    return act


def always(action: Any) -> Iterator[Any]:
    while True:
        yield action


# -- 1. the plain put -------------------------------------------------------------------


async def test_a_put_from_the_loop_stores_exactly_the_bytes(rig: Rig) -> None:
    store = rig.store
    assert store.capabilities.loop_puts is True and store.loop_puts is not None
    stored = await store.loop_puts.put(DATA, None)
    assert stored.address == content_address(DATA)
    assert stored.size == len(DATA)
    assert stored.created is True
    assert stored.retain_until is None
    if rig.bucket.versioned:
        assert stored.version_id is not None
        assert stored.version_id == rig.versions()[0]
    else:
        assert stored.version_id is None
    assert store.get(stored.address, stored.version_id) == DATA
    assert (store.loop_puts.on_loop, store.loop_puts.handed_over) == (1, 0)
    assert (rig.loop.calls, rig.loop.statuses) == (1, [200])
    assert rig.sync.calls["PUT"] == 0, "nothing went the complete path"
    rig.assert_stored_once()


async def test_stage_async_puts_from_the_loop(rig: Rig) -> None:
    """The store's own entry point: ``stage_async`` goes through ``loop_puts``."""
    other = b"staged from the loop\n" * 30
    staged = await rig.store.stage_async(other)
    assert staged.blob.address == content_address(other)
    assert staged.blob.created is True
    assert rig.store.loop_puts is not None and rig.puts.on_loop == 1
    assert rig.loop.calls == 1 and rig.sync.calls["PUT"] == 0
    assert rig.store.get(content_address(other)) == other


async def test_puts_on_one_loop_reuse_a_kept_alive_connection(rig: Rig) -> None:
    """Several puts on one loop, one after another: all on the loop, each stored."""
    blobs = [b"blob %d " % n * 50 for n in range(5)]
    for data in blobs:
        assert (await rig.puts.put(data, None)).created is True
    assert rig.loop.statuses == [200] * 5 and rig.sync.calls["PUT"] == 0
    for data in blobs:
        assert rig.store.get(content_address(data)) == data


@pytest.mark.seaweedfs
async def test_a_put_from_the_loop_locks_the_new_version(seaweedfs_bucket: S3Bucket) -> None:
    """The Object Lock headers go with the PutObject sent from the loop."""
    made = make_rig(seaweedfs_bucket, lock_mode="GOVERNANCE")
    try:
        until = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=500_000)
        expected = until.replace(microsecond=0) + timedelta(seconds=1)  # rounded up
        assert made.store.loop_puts is not None
        stored = await made.store.loop_puts.put(DATA, until)
        assert stored.created is True and stored.retain_until == expected
        assert made.loop.statuses == [200] and made.sync.calls["PUT"] == 0
        assert made.store.retention_of(stored.address, stored.version_id) == (expected, False)
        head = seaweedfs_bucket.client.head_object(Bucket=seaweedfs_bucket.name, Key=made.key)
        assert head["ObjectLockMode"] == "GOVERNANCE"
    finally:
        made.store.close()


# -- 2. faults on the loop: handed to the complete path ---------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        answer(503, "SlowDown"),
        answer(500, "InternalError"),
        answer(409, "ConditionalRequestConflict"),
        answer(403, "AccessDenied"),
        fail_with(lambda: ConnectionResetError("injected")),
        fail_with(lambda: ConnectionDropped("before")),
        fail_with(lambda: TimeoutError()),
    ],
    ids=["slowdown", "500", "409", "403", "reset", "dropped", "timeout"],
)
async def test_a_failure_on_the_loop_is_handed_to_the_complete_put(rig: Rig, fault: Before) -> None:
    rig.loop.before([fault])
    stored = await rig.puts.put(DATA, None)
    assert stored.created is True  # the complete path's PutObject stored it
    assert stored.address == content_address(DATA) and stored.size == len(DATA)
    if rig.bucket.versioned:
        assert stored.version_id == rig.versions()[0]
    assert (rig.loop.calls, rig.loop.sends) == (1, 0)  # one try on the loop, no retry there
    assert rig.sync.calls["PUT"] == 1
    assert (rig.puts.on_loop, rig.puts.handed_over) == (0, 1)
    rig.assert_stored_once()


@pytest.mark.parametrize(
    "lost",
    [
        report_as(500, "InternalError"),
        lose_answer(lambda: ConnectionDropped("after")),
        lose_answer(lambda: TimeoutError()),
    ],
    ids=["answered-500", "dropped", "timed-out"],
)
async def test_stored_but_answer_lost_is_confirmed_once(rig: Rig, lost: After) -> None:
    """The loop's PUT stored the object, then its answer was lost: the complete path meets
    a 412, HEAD confirms the object, and nothing is stored twice."""
    rig.loop.after([lost])
    stored = await rig.puts.put(DATA, None)
    assert rig.loop.statuses == [200]  # the server did store it
    assert stored.created is False
    assert rig.sync.calls["PUT"] == 1 and rig.sync.calls["HEAD"] == 1
    if rig.bucket.versioned:
        assert stored.version_id is not None and stored.version_id == rig.versions()[0]
    assert rig.puts.handed_over == 1
    rig.assert_stored_once()


async def test_persistent_500_raises_storage_error_and_stores_nothing(rig: Rig) -> None:
    rig.loop.before(always(answer(500, "InternalError")))
    rig.sync.put_faults = always(answer(500, "InternalError"))
    with pytest.raises(StorageError, match=r"PUT failed after 4 attempt\(s\): InternalError"):
        await rig.puts.put(DATA, None)
    assert rig.loop.calls == 1, "the loop tries once; retries are the complete path's"
    assert rig.sync.calls["PUT"] == rig.store.attempts
    assert (rig.puts.on_loop, rig.puts.handed_over) == (0, 0)
    rig.assert_nothing_stored()


# -- 3. bytes stored already ------------------------------------------------------------


async def test_bytes_stored_already_get_412_on_the_loop_then_confirmed(rig: Rig) -> None:
    puts = rig.store.loop_puts
    assert puts is not None
    first = await puts.put(DATA, None)
    again = await puts.put(DATA, None)
    assert rig.loop.statuses == [200, 412]  # the conditional create refused on the loop
    assert first.created is True and again.created is False
    assert again.address == first.address and again.size == first.size
    assert again.version_id == first.version_id
    assert (puts.on_loop, puts.handed_over) == (1, 1)
    assert rig.sync.calls["HEAD"] == 1  # the complete path confirmed the stored object
    rig.assert_stored_once()


# -- 4. identical puts at once ----------------------------------------------------------


async def test_identical_concurrent_puts_share_one_upload_and_never_back_off(
    s3_server_bucket: S3Bucket,
) -> None:
    putters = 8
    # A real backoff of a second: a put that waited out a conflict would show in the time.
    made = make_rig(s3_server_bucket, attempts=5, backoff_base=1.0, backoff_max=1.0)
    made.loop.delay = 0.05  # every putter arrives while the first upload is in flight
    puts = made.store.loop_puts
    assert puts is not None
    try:
        started = time.perf_counter()
        stored = await asyncio.gather(*(puts.put(DATA, None) for _ in range(putters)))
        elapsed = time.perf_counter() - started
        assert made.loop.calls == 1, "one upload for all of them"
        assert made.sync.calls["PUT"] == 0 and made.sync.calls["HEAD"] == 0
        assert {s.address for s in stored} == {content_address(DATA)}
        assert [s.created for s in stored].count(True) == 1
        assert len({s.version_id for s in stored}) == 1
        assert elapsed < 0.5, f"{elapsed:.2f} s: someone backed off"
        assert (puts.on_loop, puts.handed_over) == (1, 0)
        made.assert_stored_once()
    finally:
        made.store.close()


async def test_a_put_after_a_failed_identical_one_tries_for_itself(rig: Rig) -> None:
    """The first put fails for good (its complete path is refused); the one that waited
    for it stores the bytes itself instead of sharing the failure."""
    puts = rig.store.loop_puts
    assert puts is not None
    rig.loop.delay = 0.05
    rig.loop.before([answer(503, "SlowDown")])
    rig.sync.put_faults = iter([answer(403, "AccessDenied")])  # the first one's, then real
    leader = asyncio.ensure_future(puts.put(DATA, None))
    await asyncio.sleep(0)  # the leader registers its upload
    follower = asyncio.ensure_future(puts.put(DATA, None))
    results = await asyncio.gather(leader, follower, return_exceptions=True)
    assert isinstance(results[0], StorageError) and "AccessDenied" in str(results[0])
    assert not isinstance(results[1], BaseException), results[1]
    assert results[1].created is True
    assert rig.loop.calls == 1 and rig.sync.calls["PUT"] == 2
    assert puts.handed_over == 1  # the follower's; the leader's complete path failed
    rig.assert_stored_once()


async def test_a_cancelled_first_put_does_not_cancel_the_ones_waiting_for_it(
    moto_server_bucket: S3Bucket,
) -> None:
    made = make_rig(moto_server_bucket)
    puts = made.store.loop_puts
    assert puts is not None
    made.loop.delay = 0.2
    try:
        leader = asyncio.ensure_future(puts.put(DATA, None))
        await asyncio.sleep(0.01)
        follower = asyncio.ensure_future(puts.put(DATA, None))
        await asyncio.sleep(0.01)
        leader.cancel()  # say, the leader's client went away
        results = await asyncio.gather(leader, follower, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError)
        assert not isinstance(results[1], BaseException), f"follower got {results[1]!r}"
        assert results[1].address == content_address(DATA)
        made.assert_stored_once()
    finally:
        made.store.close()


# -- 6. captured bytes never logged -----------------------------------------------------


async def test_blob_bytes_never_reach_the_log_during_a_failing_put(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rig.loop.before([fail_with(lambda: ConnectionResetError("injected reset"))])
    rig.sync.put_faults = always(answer(503, "SlowDown"))
    with pytest.raises(StorageError) as raised:
        await rig.puts.put(DATA, None)
    # The log did see the failure: the hand-over (DEBUG) and the retries (WARNING).
    loggers = {r.name for r in caplog.records}
    assert "archive.blobstore.loopputs" in loggers and "archive.blobstore.s3" in loggers
    text = MARKER.decode()
    for record in caplog.records:
        assert text not in record.getMessage()
        assert text not in (record.exc_text or "")
    assert text not in caplog.text
    assert text not in str(raised.value) and text not in repr(raised.value)


# -- 7. the write path of an Archive ----------------------------------------------------


@pytest.fixture(params=["moto-server", pytest.param("seaweedfs", marks=pytest.mark.seaweedfs)])
def s3_archive_settings(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """An Archive on S3 (lean client, the default) with its SQLite index in ``tmp_path``."""
    if request.param == "seaweedfs":
        seaweedfs: Settings = request.getfixturevalue("seaweedfs_settings")
        return seaweedfs.with_overrides(data_dir=tmp_path / "data")
    endpoint: str = request.getfixturevalue("moto_endpoint")
    bucket: S3Bucket = request.getfixturevalue("moto_server_bucket")
    set_aws_env(monkeypatch, "testing", "testing")
    return Settings.from_env(
        {
            "AMBER_DATA_DIR": str(tmp_path / "data"),
            "AMBER_BLOB_STORE": f"s3://{bucket.name}/amber",
            "AMBER_S3_ENDPOINT_URL": endpoint,
            "AMBER_S3_REGION": REGION,
        }
    )


def _page(n: int) -> MementoRequest:
    return MementoRequest(
        f"https://example.org/loop/{n}",
        b"<p>a small page, put from the loop: " + MARKER + b" %d</p>" % n,
        "text/html",
    )


async def test_write_async_puts_on_the_loop_and_the_memento_resolves(
    s3_archive_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    archive = Archive.open(s3_archive_settings)
    try:
        assert isinstance(archive.blobs, S3BlobStore) and archive.blobs.loop_puts is not None
        assert archive.blobs.capabilities.loop_puts is True
        request = _page(1)
        assert archive.writes.puts_on_loop(len(request.content))
        result = await archive.writes.write_async(request)
        assert result.created is True
        assert (archive.blobs.loop_puts.on_loop, archive.blobs.loop_puts.handed_over) == (1, 0)
        memento = await archive.get_memento_async(DEFAULT_TENANT, result.memento.id)
        assert memento.content_hash == content_address(request.content)
        assert memento.size == len(request.content)
        assert archive.read_content(memento) == request.content
        chosen = archive.timegate(DEFAULT_TENANT, request.uri_r, None).chosen
        assert chosen.id == memento.id
        # Concurrent writes of distinct pages: each on the loop, each resolvable.
        others = await asyncio.gather(*(archive.writes.write_async(_page(n)) for n in range(2, 6)))
        assert archive.blobs.loop_puts.on_loop == 5
        for n, written in zip(range(2, 6), others, strict=True):
            stored = archive.get_memento(DEFAULT_TENANT, written.memento.id)
            assert archive.read_content(stored) == _page(n).content
        assert MARKER.decode() not in caplog.text  # captured bytes never logged
    finally:
        archive.close()


async def test_write_async_with_botocore_writes_from_a_thread(
    s3_archive_settings: Settings,
) -> None:
    settings = Settings.from_env(
        {
            "AMBER_DATA_DIR": str(s3_archive_settings.data_dir),
            "AMBER_BLOB_STORE": s3_archive_settings.blob_store,
            "AMBER_S3_ENDPOINT_URL": s3_archive_settings.s3_endpoint_url or "",
            "AMBER_S3_REGION": REGION,
            "AMBER_S3_CLIENT": "botocore",
        }
    )
    archive = Archive.open(settings)
    try:
        assert isinstance(archive.blobs, S3BlobStore)
        assert archive.blobs.lean is None and archive.blobs.loop_puts is None
        assert archive.blobs.capabilities.loop_puts is False
        request = _page(1)
        assert not archive.writes.puts_on_loop(len(request.content))
        result = await archive.writes.write_async(request)
        assert result.created is True
        memento = archive.get_memento(DEFAULT_TENANT, result.memento.id)
        assert archive.read_content(memento) == request.content
    finally:
        archive.close()


# -- 5. LoopConnections against a scripted server ---------------------------------------

# Meets one request: answers (or not) on the writer; True: read the next request.
Action = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


class TinyServer:
    """HTTP/1.1 on 127.0.0.1 that meets each request with the next scripted action
    (``ok`` once the script is done) and records connections, requests, and the
    connections the client closed."""

    def __init__(self, script: Iterable[Action]) -> None:
        self.script = list(script)
        self.connections = 0
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection, head, body)
        self.closed_by_client: set[int] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> TinyServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    def pool(self, **options: Any) -> LoopConnections:
        settings = {"max_idle": 4, "connect_timeout": 2.0, "read_timeout": 2.0, **options}
        return LoopConnections(f"http://127.0.0.1:{self.port}", **settings)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.connections += 1
        number = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                found = re.search(rb"(?im)^content-length: *(\d+)\r$", head)
                body = await reader.readexactly(int(found[1]) if found else 0)
                self.requests.append((number, head, body))
                action = self.script.pop(0) if self.script else ok(b"default")
                if not await action(reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        finally:
            if reader.at_eof():
                self.closed_by_client.add(number)
            writer.close()
            self._handlers.discard(task)


def ok(body: bytes, extra: bytes = b"") -> Action:
    async def act(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = b"HTTP/1.1 200 OK\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body)
        writer.write(head + body)
        await writer.drain()
        return True

    return act


def then_close(action: Action) -> Action:
    """``action``, then the server closes the (idle) connection."""

    async def act(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await action(reader, writer)
        return False

    return act


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Closes without a byte of answer (a kept-alive connection the server timed out)."""
    return False


async def half_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
    await writer.drain()
    return False


def late(body: bytes, delay: float) -> Action:
    """The answer after ``delay`` seconds, unless the client closes the connection first."""

    async def act(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            async with asyncio.timeout(delay):
                if await reader.read(1) == b"":
                    return False  # the client gave up and closed: at_eof, recorded
        except TimeoutError:
            pass
        return await ok(body)(reader, writer)

    return act


HOST = {"host": "127.0.0.1"}


@LOOPS
async def test_keep_alive_reuses_one_connection() -> None:
    async with TinyServer([ok(b"one"), ok(b"two", b"X-Amz-Version-Id: v2\r\n")]) as server:
        pool = server.pool()
        try:
            first = await pool.request("PUT", "/b/k?x=1", {**HOST, "x-test": "1"}, b"body-1")
            second = await pool.request("PUT", "/b/k2", HOST, b"")
        finally:
            pool.close()
    assert (first.status, first.data, second.status, second.data) == (200, b"one", 200, b"two")
    assert first.headers["content-length"] == "3"
    assert second.headers["x-amz-version-id"] == "v2"  # names read lower-case
    assert server.connections == 1
    assert [(n, body) for n, _, body in server.requests] == [(1, b"body-1"), (1, b"")]
    head = server.requests[0][1]
    assert head.startswith(b"PUT /b/k?x=1 HTTP/1.1\r\n")
    assert b"\r\nx-test: 1\r\n" in head and b"\r\ncontent-length: 6\r\n" in head


@LOOPS
async def test_a_connection_the_server_closed_while_idle_is_not_used() -> None:
    async with TinyServer([then_close(ok(b"one")), ok(b"two")]) as server:
        pool = server.pool()
        try:
            assert (await pool.request("PUT", "/a", HOST, b"1")).data == b"one"
            await asyncio.sleep(0.05)  # the close arrives while the connection is idle
            assert (await pool.request("PUT", "/b", HOST, b"2")).data == b"two"
        finally:
            pool.close()
    assert server.connections == 2
    assert [(n, body) for n, _, body in server.requests] == [(1, b"1"), (2, b"2")]


@LOOPS
async def test_a_reused_connection_closed_before_any_answer_is_retried_once() -> None:
    """The race a keep-alive client cannot avoid: the server closes the idle connection
    just as the request goes out. The request goes once more, on a new connection."""
    async with TinyServer([ok(b"one"), hang_up, ok(b"two")]) as server:
        pool = server.pool()
        try:
            assert (await pool.request("PUT", "/a", HOST, b"1")).data == b"one"
            assert (await pool.request("PUT", "/b", HOST, b"2")).data == b"two"
        finally:
            pool.close()
    assert server.connections == 2
    assert [(n, body) for n, _, body in server.requests] == [(1, b"1"), (1, b"2"), (2, b"2")]


@LOOPS
async def test_a_new_connection_closed_before_any_answer_is_not_retried() -> None:
    async with TinyServer([hang_up]) as server:
        pool = server.pool()
        try:
            with pytest.raises(ConnectionDropped):
                await pool.request("PUT", "/a", HOST, b"1")
        finally:
            pool.close()
    assert (server.connections, len(server.requests)) == (1, 1)


@LOOPS
async def test_the_retry_on_a_new_connection_happens_only_once() -> None:
    async with TinyServer([ok(b"one"), hang_up, hang_up, ok(b"never")]) as server:
        pool = server.pool()
        try:
            await pool.request("PUT", "/a", HOST, b"1")
            with pytest.raises(ConnectionDropped):
                await pool.request("PUT", "/b", HOST, b"2")
        finally:
            pool.close()
    assert (server.connections, len(server.requests)) == (2, 3)


@LOOPS
async def test_a_hang_up_mid_answer_raises_and_is_neither_retried_nor_reused() -> None:
    async with TinyServer([ok(b"one"), half_answer, ok(b"three")]) as server:
        pool = server.pool()
        try:
            assert (await pool.request("PUT", "/a", HOST, b"1")).data == b"one"
            with pytest.raises(ConnectionError) as raised:
                await pool.request("PUT", "/b", HOST, b"2")
            assert isinstance(raised.value, ConnectionDropped)
            assert len(server.requests) == 2, "an answer begun is never sent again"
            assert (await pool.request("PUT", "/c", HOST, b"3")).data == b"three"
        finally:
            pool.close()
    assert server.connections == 2
    assert [(n, body) for n, _, body in server.requests] == [(1, b"1"), (1, b"2"), (2, b"3")]


@LOOPS
async def test_an_answer_slower_than_read_timeout_raises_and_is_never_served_later() -> None:
    async with TinyServer([ok(b"one"), late(b"late", 0.6), ok(b"next")]) as server:
        pool = server.pool(read_timeout=0.2)
        try:
            await pool.request("PUT", "/a", HOST, b"1")
            started = time.perf_counter()
            with pytest.raises(TimeoutError):
                await pool.request("PUT", "/b", HOST, b"2")
            assert time.perf_counter() - started < 0.5
            # The connection with the late answer coming is closed, not reused: the next
            # request's answer is its own.
            assert (await pool.request("PUT", "/c", HOST, b"3")).data == b"next"
            for _ in range(50):  # the server notices the client's close within a few ticks
                if 1 in server.closed_by_client:
                    break
                await asyncio.sleep(0.01)
            assert 1 in server.closed_by_client, "the timed-out connection was closed"
        finally:
            pool.close()
    assert server.connections == 2


@LOOPS
async def test_connection_close_from_the_server_is_honoured() -> None:
    async with TinyServer([ok(b"one", b"Connection: close\r\n"), ok(b"two")]) as server:
        pool = server.pool()
        try:
            await pool.request("PUT", "/a", HOST, b"1")
            assert (await pool.request("PUT", "/b", HOST, b"2")).data == b"two"
        finally:
            pool.close()
    assert server.connections == 2


@LOOPS
@pytest.mark.parametrize(
    "headers",
    [
        {"x-amz-meta": "a\r\nx-injected: 1"},
        {"x-amz-meta": "a\nb"},
        {"x-amz-meta": "a\rb"},
        {"x-bad\r\nx-injected": "1"},
    ],
    ids=["crlf-value", "lf-value", "cr-value", "crlf-name"],
)
async def test_line_breaks_in_headers_are_refused_before_anything_is_sent(
    headers: dict[str, str],
) -> None:
    async with TinyServer([ok(b"one"), ok(b"two")]) as server:
        pool = server.pool()
        try:
            with pytest.raises(ValueError, match="line breaks"):
                await pool.request("PUT", "/a", {**HOST, **headers}, b"1")
            assert server.connections == 0, "not even a connection was opened"
            assert (await pool.request("PUT", "/b", HOST, b"2")).data == b"one"
            with pytest.raises(ValueError, match="line breaks"):
                await pool.request("PUT", "/c", {**HOST, **headers}, b"3")
            # Nothing went down the idle connection: it answers the next request cleanly.
            assert (await pool.request("PUT", "/d", HOST, b"4")).data == b"two"
        finally:
            pool.close()
    assert server.connections == 1
    assert [body for _, _, body in server.requests] == [b"2", b"4"]
    assert all(b"injected" not in head for _, head, _ in server.requests)


def test_closing_after_the_loop_is_gone_neither_raises_nor_keeps_the_socket() -> None:
    """Tests and the CLI run a loop, then close the store: the idle connection's loop is
    closed by then. ``close`` must not raise, and the socket must not outlive it for good
    (it is dropped for the collector to close). A keep-alive server (a plain socket in a
    thread) holds the connection open meanwhile."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    saw_close = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        connection, _ = listener.accept()
        accepted.append(connection)
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            if connection.recv(65536) == b"":
                saw_close.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    pool = LoopConnections(
        f"http://127.0.0.1:{port}", max_idle=2, connect_timeout=2.0, read_timeout=2.0
    )
    try:
        assert asyncio.run(pool.request("PUT", "/a", HOST, b"1")).data == b"ok"
        assert not saw_close.is_set(), "kept alive while its loop ran"
        pool.close()  # the loop asyncio.run used is closed now
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # "unclosed transport"
            gc.collect()
        assert saw_close.wait(5), "the idle connection's socket was closed"
    finally:
        for connection in accepted:  # end the server's wait if the socket stayed open
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        thread.join(timeout=5)
        listener.close()
