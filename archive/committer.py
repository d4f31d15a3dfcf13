"""Group commit: many concurrent writers, one transaction per batch.

With durability on, every commit costs a sync of the database journal. Requests that arrive
while a commit is in flight wait in a queue and are committed together by the next one, so
the sync is paid once per batch instead of once per request — the classic group commit.
Each caller still returns only after *its* rows are committed.

Callers wait in one of two ways. A thread blocks in :meth:`GroupCommitter.submit`. A
coroutine awaits :meth:`GroupCommitter.submit_async`: its event loop goes on serving other
requests, and the worker wakes that loop once per batch, not once per caller. On a busy
server, waking and switching threads cost more than the write itself (benchmarks/README.md).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar, Union

T = TypeVar("T")
R = TypeVar("R")

_STOP = object()

# Who waits for an item: a blocked thread, or a coroutine on an event loop.
_Waiter = Union[Future[R], "asyncio.Future[R]"]


class GroupCommitter(Generic[T, R]):
    def __init__(
        self,
        commit_batch: Callable[[Sequence[T]], Sequence[R | BaseException]],
        *,
        max_batch: int = 256,
        name: str = "amber-group-commit",
    ) -> None:
        self._commit_batch = commit_batch
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[tuple[T, _Waiter[R]] | object] = queue.SimpleQueue()
        self._closed = False
        self._closing = threading.Lock()  # makes "check closed, then enqueue" atomic
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> R:
        """Queue ``item`` and block until the batch holding it has committed."""
        future: Future[R] = Future()
        self._enqueue(item, future)
        return future.result()

    async def submit_async(self, item: T) -> R:
        """Queue ``item`` and wait, without blocking the event loop, until the batch holding
        it has committed. Once queued, the item is committed even if the waiting task is
        cancelled: only its answer is lost, as when a client disconnects."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._enqueue(item, future)
        return await future

    def _enqueue(self, item: T, waiter: _Waiter[R]) -> None:
        with self._closing:
            if self._closed:
                raise RuntimeError("committer is closed")
            self._queue.put((item, waiter))

    def close(self) -> None:
        """Commit what is queued, then stop the worker."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)  # after every item that passed the closed check
        self._thread.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            stop_after = False
            while len(batch) < self._max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop_after = True
                    break
                batch.append(nxt)
            self._commit(batch)  # type: ignore[arg-type]
            if stop_after:
                return

    def _commit(self, batch: list[tuple[T, _Waiter[R]]]) -> None:
        try:
            results = self._commit_batch([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError("commit_batch returned the wrong number of results")
        except BaseException as exc:  # handed to the waiting callers, never lost
            if len(batch) == 1:
                _answer([(batch[0][1], exc)])
                return
            # One bad item must not fail its neighbours: retry them one by one.
            for entry in batch:
                self._commit([entry])
            return
        _answer([(waiter, result) for (_, waiter), result in zip(batch, results, strict=True)])


def _answer(answers: Sequence[tuple[_Waiter[R], R | BaseException]]) -> None:
    """Hand each waiter its result: threads directly, each event loop in one call."""
    by_loop: defaultdict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[R], R | BaseException]]]
    by_loop = defaultdict(list)
    for waiter, result in answers:
        if isinstance(waiter, asyncio.Future):
            by_loop[waiter.get_loop()].append((waiter, result))
        elif isinstance(result, BaseException):
            waiter.set_exception(result)
        else:
            waiter.set_result(result)
    for loop, settled in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, settled)
        except RuntimeError:
            pass  # the loop has closed: nobody is left waiting for these answers


def _settle(settled: Sequence[tuple[asyncio.Future[R], R | BaseException]]) -> None:
    """On the waiters' event loop: set each result (a cancelled waiter left already)."""
    for future, result in settled:
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
