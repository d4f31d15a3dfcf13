"""Identical bytes put concurrently by one process go up once (archive/blobstore/s3.py).

S3 servers may answer concurrent conditional creates of one key with 409
ConditionalRequestConflict (SeaweedFS does); each loser then waited out a retry backoff.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fixtures_s3 import S3Bucket

from archive.blobstore.base import StoredBlob
from archive.hashing import content_address

PUTTERS = 8


def test_identical_concurrent_puts_share_one_upload_and_never_back_off(
    s3_bucket: S3Bucket,
) -> None:
    slept: list[float] = []
    store = s3_bucket.store(sleep=slept.append)
    data = b"the same bytes, put by every thread at once\n" * 100
    calls: list[dict[str, Any]] = []
    put_object = store.client.put_object
    started = threading.Barrier(PUTTERS)
    first_call = threading.Event()

    def counting_put(**params: Any) -> Any:
        calls.append(params)
        first_call.set()
        return put_object(**params)

    store.client = _Wrapped(store.client, counting_put)

    def put() -> StoredBlob:
        started.wait()
        return store.put(data)

    try:
        with ThreadPoolExecutor(PUTTERS) as pool:
            stored = list(pool.map(lambda _: put(), range(PUTTERS)))
        assert slept == [], "no put waited out a conflict"
        assert {s.address for s in stored} == {content_address(data)}
        assert sum(s.created for s in stored) <= 1
        assert len(calls) < PUTTERS, "concurrent identical puts shared an upload"
        assert store.get(content_address(data)) == data
    finally:
        store.close()


def test_a_put_after_a_failed_identical_one_tries_for_itself(s3_bucket: S3Bucket) -> None:
    store = s3_bucket.store()
    data = b"the leader fails, the follower stores\n"
    leader_inside, release = threading.Event(), threading.Event()
    put_object = store.client.put_object
    calls = 0

    def failing_first(**params: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            leader_inside.set()
            release.wait(10)
            raise RuntimeError("the leader's own failure")
        return put_object(**params)

    store.client = _Wrapped(store.client, failing_first)
    try:
        with ThreadPoolExecutor(2) as pool:
            leader = pool.submit(store.put, data)
            assert leader_inside.wait(10)
            follower = pool.submit(store.put, data)
            release.set()
            errors = [f.exception() for f in (leader, follower)]
        assert isinstance(errors[0], RuntimeError)
        assert errors[1] is None and follower.result().address == content_address(data)
        assert store.get(content_address(data)) == data
    finally:
        store.close()


class _Wrapped:
    """The client with ``put_object`` replaced; everything else passed through."""

    def __init__(self, client: Any, put_object: Any) -> None:
        self._client = client
        self.put_object = put_object

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
