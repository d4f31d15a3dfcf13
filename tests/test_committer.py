"""archive.committer.GroupCommitter: batching, per-item failure isolation, draining on close."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from archive import committer as committer_module
from archive.committer import GroupCommitter, LoopGroupCommitter

TIMEOUT = 10.0  # generous upper bound for anything that should happen "soon"


class Recorder:
    """A commit_batch that records each call and can be held on its first call."""

    def __init__(self, result: Callable[[object], object] = lambda item: ("ok", item)) -> None:
        self.calls: list[list[object]] = []
        self.lock = threading.Lock()
        self.entered_first = threading.Event()
        self.release_first = threading.Event()
        self.release_first.set()
        self.result = result

    def hold_first(self) -> None:
        self.release_first.clear()

    def __call__(self, items: Sequence[object]) -> list[object]:
        with self.lock:
            self.calls.append(list(items))
            first = len(self.calls) == 1
        if first:
            self.entered_first.set()
            assert self.release_first.wait(TIMEOUT), "test never released the first batch"
        return [self.result(item) for item in items]


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def queued(c: GroupCommitter) -> int:
    return c._queue.qsize()  # the only way to know callers really wait


@pytest.fixture
def make() -> Iterator[Callable[..., GroupCommitter]]:
    made: list[GroupCommitter] = []

    def factory(fn: Callable[[Sequence[object]], Sequence[object]], **kw: object) -> GroupCommitter:
        c = GroupCommitter(fn, **kw)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield factory
    for c in made:
        c.close()


def submit_in_threads(c: GroupCommitter, items: list[object]) -> tuple[ThreadPoolExecutor, list]:
    pool = ThreadPoolExecutor(max_workers=len(items))
    futures = [pool.submit(c.submit, item) for item in items]
    return pool, futures


# --------------------------------------------------------------------------- basics


def test_single_submit_returns_its_result(make: Callable[..., GroupCommitter]) -> None:
    rec = Recorder(lambda item: item * 10)
    c = make(rec)
    assert c.submit(4) == 40
    assert c.submit(5) == 50
    assert rec.calls == [[4], [5]]


def test_exception_from_result_list_is_raised(make: Callable[..., GroupCommitter]) -> None:
    c = make(lambda items: [KeyError(item) for item in items])
    with pytest.raises(KeyError):
        c.submit("x")


def test_exception_from_commit_batch_is_raised_for_a_lone_item(
    make: Callable[..., GroupCommitter],
) -> None:
    def fail(items: Sequence[object]) -> list[object]:
        raise RuntimeError("disk full")

    c = make(fail)
    with pytest.raises(RuntimeError, match="disk full"):
        c.submit(1)
    # the worker survived and keeps serving
    with pytest.raises(RuntimeError, match="disk full"):
        c.submit(2)


def test_submit_after_close_is_refused() -> None:
    c = GroupCommitter(lambda items: list(items))
    c.close()
    with pytest.raises(RuntimeError):
        c.submit(1)
    c.close()  # idempotent


# --------------------------------------------------------------------------- batching


def test_waiting_submissions_are_committed_as_one_batch(
    make: Callable[..., GroupCommitter],
) -> None:
    rec = Recorder(lambda item: item * 2)
    rec.hold_first()
    c = make(rec)
    first_pool, first = submit_in_threads(c, [0])
    assert rec.entered_first.wait(TIMEOUT)
    pool, futures = submit_in_threads(c, list(range(1, 20)))
    wait_until(lambda: queued(c) == 19, "19 submissions to queue up")
    rec.release_first.set()

    assert first[0].result(TIMEOUT) == 0
    assert [f.result(TIMEOUT) for f in futures] == [i * 2 for i in range(1, 20)]
    assert len(rec.calls) == 2
    assert rec.calls[0] == [0]
    assert sorted(rec.calls[1]) == list(range(1, 20))
    pool.shutdown()
    first_pool.shutdown()


def test_batching_under_concurrency_with_a_slow_commit(make: Callable[..., GroupCommitter]) -> None:
    calls: list[int] = []

    def slow_first(items: Sequence[int]) -> list[int]:
        calls.append(len(items))
        if len(calls) == 1:
            time.sleep(0.05)
        return [item + 1000 for item in items]

    c = make(slow_first)
    barrier = threading.Barrier(20)

    def worker(item: int) -> int:
        barrier.wait(TIMEOUT)
        return c.submit(item)

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(worker, range(20)))

    assert results == [i + 1000 for i in range(20)]
    assert sum(calls) == 20
    assert len(calls) < 20
    # Submissions that arrived while the first (slow) commit ran were grouped. (The workers
    # may also all land before the first get(): then the first batch is the big one.)
    assert max(calls) > 1


def test_batches_never_exceed_max_batch(make: Callable[..., GroupCommitter]) -> None:
    rec = Recorder()
    rec.hold_first()
    c = make(rec, max_batch=5)
    first_pool, first = submit_in_threads(c, ["first"])
    assert rec.entered_first.wait(TIMEOUT)
    pool, futures = submit_in_threads(c, list(range(14)))
    wait_until(lambda: queued(c) == 14, "14 submissions to queue up")
    rec.release_first.set()

    assert [f.result(TIMEOUT) for f in futures] == [("ok", i) for i in range(14)]
    assert first[0].result(TIMEOUT) == ("ok", "first")
    assert [len(call) for call in rec.calls] == [1, 5, 5, 4]
    assert sorted(x for call in rec.calls[1:] for x in call) == list(range(14))
    pool.shutdown()
    first_pool.shutdown()


def test_each_caller_gets_its_own_result_under_load(make: Callable[..., GroupCommitter]) -> None:
    c = make(lambda items: [f"done:{item}" for item in items], max_batch=7)
    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(c.submit, range(300)))
    assert results == [f"done:{i}" for i in range(300)]


# --------------------------------------------------------------------------- failure isolation


def test_failing_batch_is_retried_item_by_item(make: Callable[..., GroupCommitter]) -> None:
    calls: list[list[int]] = []
    entered = threading.Event()
    release = threading.Event()

    def commit(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        if len(calls) == 1:
            entered.set()
            assert release.wait(TIMEOUT)
        if 13 in items:
            raise ValueError("item 13 violates a constraint")
        return [item * 3 for item in items]

    c = make(commit)
    first_pool, first = submit_in_threads(c, [0])
    assert entered.wait(TIMEOUT)
    items = [11, 12, 13, 14, 15]
    pool, futures = submit_in_threads(c, items)
    wait_until(lambda: queued(c) == len(items), "the batch to queue up")
    release.set()

    assert first[0].result(TIMEOUT) == 0
    outcomes = {}
    for item, future in zip(items, futures, strict=True):
        exc = future.exception(TIMEOUT)
        outcomes[item] = exc if exc is not None else future.result()
    assert isinstance(outcomes.pop(13), ValueError)
    assert outcomes == {11: 33, 12: 36, 14: 42, 15: 45}
    # one attempt as a batch, then each item alone
    assert sorted(calls[1]) == items
    assert sorted(calls[2:]) == [[i] for i in items]
    assert len(calls) == 2 + len(items)
    pool.shutdown()
    first_pool.shutdown()


def test_per_item_exceptions_go_to_that_caller_only(make: Callable[..., GroupCommitter]) -> None:
    rec = Recorder(lambda item: LookupError(f"no {item}") if item % 3 == 0 else item)
    rec.hold_first()
    c = make(rec)
    first_pool, first = submit_in_threads(c, [1])
    assert rec.entered_first.wait(TIMEOUT)
    items = list(range(2, 12))
    pool, futures = submit_in_threads(c, items)
    wait_until(lambda: queued(c) == len(items), "the batch to queue up")
    rec.release_first.set()

    assert first[0].result(TIMEOUT) == 1
    for item, future in zip(items, futures, strict=True):
        if item % 3 == 0:
            exc = future.exception(TIMEOUT)
            assert isinstance(exc, LookupError)
            assert str(exc) == f"no {item}"
        else:
            assert future.result(TIMEOUT) == item
    # exceptions in the result list are not a batch failure: no retry
    assert len(rec.calls) == 2
    pool.shutdown()
    first_pool.shutdown()


# --------------------------------------------------------------------------- close


def test_close_drains_everything_already_submitted() -> None:
    rec = Recorder(lambda item: item + 1)
    rec.hold_first()
    c = GroupCommitter(rec, max_batch=4)
    first_pool, first = submit_in_threads(c, [100])
    assert rec.entered_first.wait(TIMEOUT)
    items = list(range(10))
    pool, futures = submit_in_threads(c, items)
    wait_until(lambda: queued(c) == len(items), "submissions to queue up")

    closer = threading.Thread(target=c.close)
    closer.start()
    wait_until(lambda: queued(c) == len(items) + 1, "close() to enqueue its stop marker")
    assert closer.is_alive()  # close waits for the in-flight batch
    rec.release_first.set()
    closer.join(TIMEOUT)
    assert not closer.is_alive()

    # every submission made before close() was committed, none twice
    assert first[0].result(TIMEOUT) == 101
    assert [f.result(TIMEOUT) for f in futures] == [i + 1 for i in items]
    committed = [x for call in rec.calls for x in call]
    assert sorted(committed) == sorted([100, *items])
    assert all(len(call) <= 4 for call in rec.calls)
    with pytest.raises(RuntimeError):
        c.submit(99)
    pool.shutdown()
    first_pool.shutdown()


# --------------------------------------------------------------------------- known bugs


def test_fixed_submit_racing_close_hangs_forever() -> None:
    c = GroupCommitter(lambda items: list(items))
    real_queue = c._queue
    gate = threading.Event()
    in_put = threading.Event()

    class PausingQueue:
        """Pauses a submitter between its _closed check and its put: the race window."""

        def put(self, entry: object) -> None:
            if entry is not committer_module._STOP:
                in_put.set()
                gate.wait(TIMEOUT)
            real_queue.put(entry)

        def __getattr__(self, name: str) -> object:
            return getattr(real_queue, name)

    c._queue = PausingQueue()  # type: ignore[assignment]
    outcome: list[object] = []

    def submitter() -> None:
        try:
            outcome.append(c.submit("late"))
        except RuntimeError as exc:  # refusing is an acceptable answer
            outcome.append(exc)

    t = threading.Thread(target=submitter, daemon=True)
    t.start()
    assert in_put.wait(TIMEOUT)
    c.close()
    gate.set()
    t.join(1.0)
    assert not t.is_alive(), "submit() never returned: its item was queued after the stop marker"
    assert outcome


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_fixed_wrong_result_count_kills_the_worker() -> None:
    c = GroupCommitter(lambda items: [])
    outcome: list[object] = []

    def submitter() -> None:
        try:
            outcome.append(c.submit(1))
        except Exception as exc:  # any error is better than hanging
            outcome.append(exc)

    t = threading.Thread(target=submitter, daemon=True)
    t.start()
    t.join(1.0)
    assert not t.is_alive(), "submit() never returned after a malformed commit_batch result"
    assert outcome


# -- LoopGroupCommitter: the same group commit, driven from an event loop -------------------


class AsyncRecorder:
    """An async commit_batch that records each batch and can hold the first one."""

    def __init__(self, fail: object = None, *, hold_first: bool = True) -> None:
        self.calls: list[list[object]] = []
        self.release_first = asyncio.Event()
        if not hold_first:
            self.release_first.set()
        self.fail = fail

    async def __call__(self, items: Sequence[object]) -> list[object]:
        self.calls.append(list(items))
        if len(self.calls) == 1:
            await self.release_first.wait()
        if self.fail in items and len(items) > 1:
            raise ValueError("one bad item fails the batch")
        return [ValueError(f"bad {item}") if item == self.fail else ("ok", item) for item in items]


def test_loop_submissions_during_a_commit_form_the_next_batch() -> None:
    async def scenario() -> None:
        recorder = AsyncRecorder()
        committer = LoopGroupCommitter(recorder)
        first = asyncio.create_task(committer.submit("a"))
        await asyncio.sleep(0.01)  # "a" is committing, held
        later = [asyncio.create_task(committer.submit(x)) for x in "bcd"]
        await asyncio.sleep(0.01)
        assert recorder.calls == [["a"]]
        recorder.release_first.set()
        assert await first == ("ok", "a")
        assert [await t for t in later] == [("ok", "b"), ("ok", "c"), ("ok", "d")]
        assert recorder.calls == [["a"], ["b", "c", "d"]]

    asyncio.run(scenario())


def test_loop_batch_failure_is_retried_item_by_item() -> None:
    async def scenario() -> None:
        recorder = AsyncRecorder(fail="bad", hold_first=False)
        committer = LoopGroupCommitter(recorder)
        holder = asyncio.create_task(committer.submit("first"))
        tasks = [asyncio.create_task(committer.submit(x)) for x in ("x", "bad", "y")]
        assert await holder == ("ok", "first")
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert results[0] == ("ok", "x") and results[2] == ("ok", "y")
        assert isinstance(results[1], ValueError) and str(results[1]) == "bad bad"
        assert any(len(call) > 1 and "bad" in call for call in recorder.calls)  # failed together
        assert ["bad"] in recorder.calls and ["x"] in recorder.calls  # then one by one

    asyncio.run(scenario())


def test_loop_item_is_committed_even_if_its_waiter_is_cancelled() -> None:
    async def scenario() -> None:
        recorder = AsyncRecorder()
        committer = LoopGroupCommitter(recorder)
        holder = asyncio.create_task(committer.submit("first"))
        await asyncio.sleep(0.01)
        leaving = asyncio.create_task(committer.submit("left"))
        await asyncio.sleep(0.01)
        leaving.cancel()
        recorder.release_first.set()
        assert await holder == ("ok", "first")
        staying = await committer.submit("after")
        assert staying == ("ok", "after")
        assert ["left"] in recorder.calls or ["left", "after"] in recorder.calls

    asyncio.run(scenario())


async def after_a_crowd(committer: LoopGroupCommitter[object, object], size: int = 8) -> None:
    """``size`` writers committed together: the committer now expects batches that big."""
    assert len(await asyncio.gather(*(committer.submit(i) for i in range(size)))) == size


def test_loop_batch_much_smaller_than_recent_ones_waits_for_the_others() -> None:
    """Eight writers committed together; when one comes back before the others, its batch
    waits for them instead of committing alone (and paying a whole commit for one write)."""

    async def scenario() -> None:
        recorder = AsyncRecorder(hold_first=False)
        committer = LoopGroupCommitter(recorder, max_wait=TIMEOUT)
        await after_a_crowd(committer)
        early = asyncio.create_task(committer.submit("early"))
        await asyncio.sleep(0.05)
        assert not early.done()  # waiting for the others, not committed alone
        rest = [asyncio.create_task(committer.submit(f"late{i}")) for i in range(7)]
        assert await early == ("ok", "early")
        await asyncio.gather(*rest)
        assert recorder.calls == [list(range(8)), ["early", *(f"late{i}" for i in range(7))]]

    asyncio.run(scenario())


def test_loop_batch_wait_is_bounded_and_stops_once_writers_have_left() -> None:
    async def scenario() -> None:
        recorder = AsyncRecorder(hold_first=False)
        max_wait = 0.05
        committer = LoopGroupCommitter(recorder, max_wait=max_wait)
        await after_a_crowd(committer)
        loop = asyncio.get_running_loop()
        took = []
        for i in range(20):  # one writer left, writing one after the other
            started = loop.time()
            assert await asyncio.wait_for(committer.submit(i), TIMEOUT) == ("ok", i)
            took.append(loop.time() - started)
        assert recorder.calls[1:] == [[i] for i in range(20)]
        assert all(t >= max_wait * 0.9 for t in took[:5])  # waited, each for max_wait
        assert sum(took[10:]) < 10 * max_wait * 0.9  # and then no longer

    asyncio.run(scenario())


def test_loop_lone_writer_never_waits() -> None:
    async def scenario() -> None:
        recorder = AsyncRecorder(hold_first=False)
        committer = LoopGroupCommitter(recorder, max_wait=TIMEOUT)
        for i in range(5):
            assert await asyncio.wait_for(committer.submit(i), TIMEOUT / 2) == ("ok", i)
        assert recorder.calls == [[i] for i in range(5)]

    asyncio.run(scenario())


def test_loop_first_write_after_a_pause_does_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(committer_module, "IDLE_FORGETS", 0.05)

    async def scenario() -> None:
        recorder = AsyncRecorder(hold_first=False)
        committer = LoopGroupCommitter(recorder, max_wait=TIMEOUT)
        await after_a_crowd(committer)
        await asyncio.sleep(0.1)  # longer than IDLE_FORGETS: the crowd has left
        assert await asyncio.wait_for(committer.submit("alone"), TIMEOUT / 2) == ("ok", "alone")

    asyncio.run(scenario())
