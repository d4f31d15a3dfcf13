"""PostgreSQL's change generations (archive/index/generations.py): a change's transaction
moves its row, visible at its commit; requests read the rows once, sharing the read."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator

import pytest

from archive.index import Index
from archive.index.generations import (
    DELETIONS,
    REVOCATIONS,
    TIMEMAPS,
    Generations,
    SharedGenerations,
)
from archive.index.signals import ReadCache

pytestmark = pytest.mark.postgres


@pytest.fixture()
def two_indexes(postgres_url: str) -> Iterator[tuple[Index, Index]]:
    first, second = Index(postgres_url), Index(postgres_url)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def _seen(index: Index) -> Generations:
    """What a new request on ``index`` reads (in a context of its own, as a request has)."""
    generations = index.changes.generations
    assert generations is not None

    def read() -> Generations:
        index.observe_changes_now()
        return {kind: generations.seen(kind) or 0 for kind in (DELETIONS, REVOCATIONS, TIMEMAPS)}

    return contextvars.Context().run(read)


def test_a_change_is_seen_by_another_index_only_once_committed(
    two_indexes: tuple[Index, Index],
) -> None:
    first, second = two_indexes
    start = _seen(second)
    with first.write(exclusive=True):  # what every deletion commits in
        assert _seen(second) == start, "not before the commit"
    after = _seen(second)
    assert after[DELETIONS] == start[DELETIONS] + 1
    assert after[TIMEMAPS] == start[TIMEMAPS] + 1
    assert after[REVOCATIONS] == start[REVOCATIONS]

    with first.write() as connection:  # what every revocation commits in
        first.changes.announce(connection, REVOCATIONS)
    assert _seen(second)[REVOCATIONS] == start[REVOCATIONS] + 1


def test_a_rolled_back_change_moves_nothing(two_indexes: tuple[Index, Index]) -> None:
    first, second = two_indexes
    start = _seen(second)
    with pytest.raises(RuntimeError), first.write(exclusive=True):
        raise RuntimeError("the change failed")
    assert _seen(second) == start


def test_a_request_that_read_no_generation_is_never_answered_from_memory(
    two_indexes: tuple[Index, Index],
) -> None:
    first, _ = two_indexes
    cache: ReadCache[str, str] = first.changes.cache_until_deletion(len, budget=1000)

    def in_a_request(observe: bool) -> str | None:
        if observe:
            first.observe_changes_now()
        found = cache.get("key")
        if found is None:
            cache.put(cache.generation(), "key", "value")
        return found

    assert contextvars.Context().run(in_a_request, True) is None  # read, remembered
    assert contextvars.Context().run(in_a_request, True) == "value"
    assert contextvars.Context().run(in_a_request, False) is None
    with first.write(exclusive=True):
        pass
    assert contextvars.Context().run(in_a_request, True) is None  # forgotten
    cache.close()


def test_concurrent_requests_share_reads_and_each_read_starts_after_its_requests(
    two_indexes: tuple[Index, Index],
) -> None:
    first, _ = two_indexes
    generations = first.changes.generations
    assert generations is not None
    started: list[float] = []
    real_read = generations.read
    in_read = threading.Lock()

    def slow_read() -> Generations:
        with in_read:  # the shared reader never runs two reads at once
            started.append(time.monotonic())
            time.sleep(0.05)
            return real_read()

    generations.read = slow_read  # type: ignore[method-assign]

    async def request() -> tuple[float, int | None]:
        asked = time.monotonic()
        await generations.observe()
        return asked, SharedGenerations.seen(DELETIONS)

    async def many() -> list[tuple[float, int | None]]:
        first_wave = [asyncio.create_task(request()) for _ in range(20)]
        await asyncio.sleep(0.02)  # during the first read
        second_wave = [asyncio.create_task(request()) for _ in range(20)]
        return await asyncio.gather(*first_wave, *second_wave)

    answers = asyncio.run(many())
    assert all(seen is not None for _, seen in answers)
    assert len(started) == 2, "forty requests, two reads"
    # Every request was served by a read that started after it asked.
    assert all(asked <= started[0] for asked, _ in answers[:20])
    assert all(started[0] < asked <= started[1] for asked, _ in answers[20:])


def test_a_failed_read_means_no_memory_for_the_requests_it_served(
    two_indexes: tuple[Index, Index],
) -> None:
    first, _ = two_indexes
    generations = first.changes.generations
    assert generations is not None

    def broken() -> Generations:
        raise OSError("the database went away")

    generations.read = broken  # type: ignore[method-assign]

    async def request() -> int | None:
        await generations.observe()
        return SharedGenerations.seen(DELETIONS)

    assert asyncio.run(request()) is None
