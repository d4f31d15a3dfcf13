"""Idempotency-Key races, on both backend pairs: of concurrent writes with one key, one is
stored; another request with that key is refused (409) and leaves nothing stored, however
the writes meet (one group-commit batch on a thread or on the event loop, or two
transactions of two processes), and the same request made twice gets one answer."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from archive import writes
from archive.archive import Archive
from archive.config import Settings
from archive.exceptions import ConfigurationError, IdempotencyConflict, MementoNotFound
from archive.hashing import content_address
from archive.index.schema import idempotency_keys
from archive.mementos import memento_id
from archive.writes import MementoRequest, WriteResult

URI_R = "https://ex.org/raced"
CAPTURED_AT = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
TIMEOUT = 30.0


def request(body: str, uri_r: str = URI_R) -> MementoRequest:
    return MementoRequest(
        uri_r=uri_r, content=body.encode(), content_type="text/plain", captured_at=CAPTURED_AT
    )


def would_be_id(archive: Archive, body: str, uri_r: str = URI_R) -> str:
    """The id a write of ``body`` would store its memento under."""
    key = archive.original(uri_r).key
    return memento_id("default", key, CAPTURED_AT, content_address(body.encode()))


def listed(archive: Archive, uri_r: str = URI_R) -> set[str]:
    """The ids the TimeMap of ``uri_r`` lists."""
    return {m.id for m in archive.timemap("default", uri_r, 1).mementos}


def assert_only_the_winner_stored(
    archive: Archive, outcomes: dict[str, Any], uri_r: str = URI_R
) -> None:
    """One of the bodies ``a`` and ``b`` won the key; the other was refused and left no row."""
    [loser] = [n for n in ("a", "b") if isinstance(outcomes[n], IdempotencyConflict)]
    [winner] = [n for n in ("a", "b") if n != loser]
    assert isinstance(outcomes[winner], WriteResult) and outcomes[winner].created
    assert listed(archive, uri_r) == {outcomes[winner].memento.id}
    with pytest.raises(MementoNotFound):
        archive.get_memento("default", would_be_id(archive, loser, uri_r))
    assert archive.index.stored_response("default", "k").request_hash == winner  # type: ignore[union-attr]
    # The refused request's bytes, published with its batch, are an orphan for `amber gc`.
    later = datetime.now(UTC) + timedelta(minutes=1)
    orphans = archive.retention.collect_orphans(safety_age=timedelta(0), now=later)
    assert orphans == [content_address(loser.encode())]
    assert listed(archive, uri_r) == {outcomes[winner].memento.id}


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, "the writers never got there"
        time.sleep(0.01)


def test_racing_writes_in_one_thread_batch(archive: Archive) -> None:
    """Both writes are committed in one batch by the committer thread."""
    committer = archive.writes.committer
    real_commit = committer._commit_batch
    gate, batches = threading.Event(), []

    def gated(batch: Any) -> Any:
        batches.append(len(batch))
        assert gate.wait(TIMEOUT)
        return real_commit(batch)

    committer._commit_batch = gated  # type: ignore[method-assign]
    outcomes: dict[str, Any] = {}

    def write(name: str, body: str, key: str | None) -> None:
        try:
            outcomes[name] = archive.write_memento(
                request(body, URI_R if key else "https://ex.org/other"),
                idempotency_key=key,
                request_hash=body,
            )
        except Exception as error:
            outcomes[name] = error

    threads = [threading.Thread(target=write, args=("blocker", "blocker", None))]
    threads[0].start()
    wait_for(lambda: bool(batches))  # held at the gate: the next writes queue behind it
    threads += [threading.Thread(target=write, args=(n, n, "k")) for n in ("a", "b")]
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: committer._queue.qsize() == 2)
    gate.set()
    for thread in threads:
        thread.join(TIMEOUT)
    assert batches[:2] == [1, 2]  # the two racing writes were one batch
    assert_only_the_winner_stored(archive, outcomes)


def test_racing_writes_on_the_event_loop(archive: Archive) -> None:
    """Two writes awaited together (the HTTP server's case): on a local store with SQLite
    they are committed by the event loop in one batch."""

    async def race() -> list[Any]:
        return await asyncio.gather(
            *(
                archive.write_memento_async(request(n), idempotency_key="k", request_hash=n)
                for n in ("a", "b")
            ),
            return_exceptions=True,
        )

    outcomes = dict(zip(("a", "b"), asyncio.run(race()), strict=True))
    assert_only_the_winner_stored(archive, outcomes)


def test_racing_writes_of_two_processes(settings: Settings) -> None:
    """Two index writers (two replicas, or a server and the CLI) whose transactions overlap:
    the second waits for the first's claim of the key, then sees it and stores nothing."""
    first, second = Archive.open(settings), Archive.open(settings)
    try:
        inserted, release, second_committing = threading.Event(), threading.Event(), []
        real_insert = first.writes._insert_batch
        real_commit = second.writes.committer._commit_batch

        def held(connection: Any, batch: Any) -> Any:
            results = real_insert(connection, batch)
            inserted.set()
            assert release.wait(TIMEOUT)  # rows inserted, not committed
            return results

        def committing(batch: Any) -> Any:
            second_committing.append(len(batch))
            return real_commit(batch)

        first.writes._insert_batch = held  # type: ignore[method-assign]
        second.writes.committer._commit_batch = committing  # type: ignore[method-assign]
        outcomes: dict[str, Any] = {}

        def write(archive: Archive, name: str) -> None:
            try:
                outcomes[name] = archive.write_memento(
                    request(name), idempotency_key="k", request_hash=name
                )
            except Exception as error:
                outcomes[name] = error

        a = threading.Thread(target=write, args=(first, "a"))
        a.start()
        assert inserted.wait(TIMEOUT)
        b = threading.Thread(target=write, args=(second, "b"))
        b.start()
        wait_for(lambda: bool(second_committing))  # past its replay check: it races
        time.sleep(0.3)  # into its wait for the first's transaction
        release.set()
        a.join(TIMEOUT)
        b.join(TIMEOUT)
        assert_only_the_winner_stored(second, outcomes)
        assert outcomes["a"].memento.id in listed(first)
    finally:
        first.close()
        second.close()


def test_the_same_request_twice_in_one_batch_gets_one_answer(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry racing its own first attempt is answered with the first attempt's memento.
    Without captured_at the server's clock decides, so the two can name two mementos: here
    the clock moves a second between them."""
    start, ticks = datetime.now(UTC), iter(range(1000))
    monkeypatch.setattr(
        writes,
        "utc_now",
        lambda: start.replace(microsecond=0) + timedelta(seconds=next(ticks)),
    )

    async def race() -> list[Any]:
        same = MementoRequest(uri_r=URI_R, content=b"once", content_type="text/plain")
        return await asyncio.gather(
            *(
                archive.write_memento_async(same, idempotency_key="k", request_hash="same")
                for _ in range(2)
            ),
            return_exceptions=True,
        )

    first, retry = asyncio.run(race())
    assert isinstance(first, WriteResult) and isinstance(retry, WriteResult)
    assert first.memento.id == retry.memento.id
    assert listed(archive) == {first.memento.id}


def race_over_http(client: Any, uri_r: str, key: str) -> dict[str, Any]:
    """Two requests with one key and different bodies, sent at once; their answers by body."""
    barrier = threading.Barrier(2)
    answers: dict[str, Any] = {}

    def post(body: str) -> None:
        barrier.wait(TIMEOUT)
        answers[body] = client.post(
            "/api/v1/mementos",
            json={"uri_r": uri_r, "content": body, "content_type": "text/plain"},
            headers={"Idempotency-Key": key},
        )

    threads = [threading.Thread(target=post, args=(body,)) for body in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    return answers


def test_racing_requests_over_http(client: Any) -> None:
    """What a client sees: one 201 and one 409, and the TimeMap lists only the 201."""
    for number in range(5):
        uri_r = f"https://ex.org/raced/{number}"
        answers = race_over_http(client, uri_r, f"key-{number}")
        statuses = sorted(answer.status_code for answer in answers.values())
        assert statuses == [201, 409], {b: a.text for b, a in answers.items()}
        [won] = [a.json() for a in answers.values() if a.status_code == 201]
        timemap = client.get(f"/timemap/json/{uri_r}").json()
        assert [m["id"] for m in timemap["mementos"]["list"]] == [won["id"]]


def _age_answers(archive: Archive, hours: float) -> None:
    """Move every recorded answer ``hours`` into the past."""
    with archive.index.write() as connection:
        connection.execute(
            update(idempotency_keys).values(created_at=datetime.now(UTC) - timedelta(hours=hours))
        )


def test_an_answer_is_replayed_until_its_ttl_then_the_key_is_free(archive: Archive) -> None:
    """AMBER_IDEMPOTENCY_TTL_HOURS (default 24): within it a reused key is replayed or
    refused; after it the key is free, and the next write with it is stored and answered."""
    first = archive.write_memento(request("a"), idempotency_key="k", request_hash="a")
    assert first.created
    _age_answers(archive, 23)
    with pytest.raises(IdempotencyConflict):
        archive.write_memento(request("b"), idempotency_key="k", request_hash="b")
    assert listed(archive) == {first.memento.id}

    _age_answers(archive, 25)
    assert archive.index.stored_response("default", "k") is None
    second = archive.write_memento(request("b"), idempotency_key="k", request_hash="b")
    assert second.created and second.memento.id == would_be_id(archive, "b")
    assert listed(archive) == {first.memento.id, second.memento.id}
    assert archive.index.stored_response("default", "k").request_hash == "b"  # type: ignore[union-attr]
    # The new answer is fresh: the same key with yet another body is refused again.
    with pytest.raises(IdempotencyConflict):
        archive.write_memento(request("c"), idempotency_key="k", request_hash="c")


def test_expired_answers_are_forgotten(archive: Archive) -> None:
    archive.write_memento(request("a"), idempotency_key="old", request_hash="a")
    _age_answers(archive, 25)
    archive.write_memento(request("b"), idempotency_key="new", request_hash="b")
    with archive.index.write() as connection:
        assert archive.index.idempotency.forget(connection, datetime.now(UTC)) == 1
        left = connection.execute(select(idempotency_keys.c.key)).scalars().all()
    assert left == ["new"]


def test_the_ttl_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="AMBER_IDEMPOTENCY_TTL_HOURS"):
        Settings(idempotency_ttl_hours=0)
