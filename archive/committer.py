"""Group commit: many concurrent writers, one transaction per batch.

With durability on, every commit costs a sync of the database journal. Requests that arrive
while a commit is in flight wait in a queue and are committed together by the next one, so
the sync is paid once per batch instead of once per request — the classic group commit.
Each caller still returns only after *its* rows are committed.

:class:`GroupCommitter` commits in a worker thread, for callers that block.
:class:`LoopGroupCommitter` commits from the callers' event loop, handing only the waits
for the disk to a thread: a worker thread beside a busy event loop passes the GIL back and
forth around every system call and statement it makes, and those hand-overs cost more than
the write itself (benchmarks/README.md).

A batch also has a fixed cost (syncs, the transaction, thread hand-overs) whatever its size.
Left to itself, a loop committer under steady load settles into a costly rhythm: a big batch
commits, its writers get their answers, and the one write that arrived meanwhile is
committed alone while the others are on their way back. So :class:`LoopGroupCommitter`
waits briefly (at most ``max_wait``) before committing a batch much smaller than the
recent ones: the classic commit delay, which only ever applies when many writers are
active (PostgreSQL's ``commit_delay`` with ``commit_siblings``, measured by recent batches).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_STOP = object()
# A loop batch smaller than this share of recent ones waits (max_wait at most) to fill up.
FILL_RATIO = 0.9
# How fast "recent" forgets a big batch once writers leave: after ~15 batches it is a
# twentieth. Each of those batches waits max_wait at most. After a second with nothing to
# commit it is forgotten at once.
RECENT_DECAY = 0.8
IDLE_FORGETS = 1.0


@dataclass
class CommitCounts:
    """Batches handed to ``commit_batch`` and the items in them, since this process began
    (a failed batch's retries, one item each, count too). Items per batch is the figure
    that says whether concurrent writers really share their commits."""

    batches: int = 0
    items: int = 0

    def add(self, size: int) -> None:
        self.batches += 1
        self.items += size

    def __add__(self, other: CommitCounts) -> CommitCounts:
        return CommitCounts(self.batches + other.batches, self.items + other.items)


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
        self.counts = CommitCounts()
        self._queue: queue.SimpleQueue[tuple[T, Future[R]] | object] = queue.SimpleQueue()
        self._closed = False
        self._closing = threading.Lock()  # makes "check closed, then enqueue" atomic
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> R:
        """Queue ``item`` and block until the batch holding it has committed."""
        future: Future[R] = Future()
        with self._closing:
            if self._closed:
                raise RuntimeError("committer is closed")
            self._queue.put((item, future))
        return future.result()

    async def submit_async(self, item: T) -> R:
        """:meth:`submit` for an event loop: the loop serves others until the batch holding
        ``item`` has committed, and no thread waits meanwhile. Once queued, ``item`` is
        committed even if the waiting task is cancelled."""
        future: Future[R] = Future()
        with self._closing:
            if self._closed:
                raise RuntimeError("committer is closed")
            self._queue.put((item, future))
        return await asyncio.wrap_future(future)

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

    def _commit(self, batch: list[tuple[T, Future[R]]]) -> None:
        self.counts.add(len(batch))
        try:
            results = self._commit_batch([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError("commit_batch returned the wrong number of results")
        except BaseException as exc:  # handed to the waiting callers, never lost
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
                return
            # One bad item must not fail its neighbours: retry them one by one.
            for entry in batch:
                self._commit([entry])
            return
        for (_, future), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)


class LoopGroupCommitter(Generic[T, R]):
    """Group commit on the caller's event loop: items submitted while a batch commits are
    committed together by the next one, by a task on that loop. ``commit_batch`` is a
    coroutine; it must hand anything that blocks (disk syncs, lock waits) to a thread."""

    def __init__(
        self,
        commit_batch: Callable[[Sequence[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        max_batch: int = 256,
        max_wait: float = 0.002,
    ) -> None:
        self._commit_batch = commit_batch
        self._max_batch = max_batch
        self._max_wait = max_wait
        self.counts = CommitCounts()
        # Per event loop (tests run several, one after the other): what waits, and the
        # task committing it while there is any.
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopQueue[T, R]] = (
            weakref.WeakKeyDictionary()
        )

    async def submit(self, item: T) -> R:
        """Queue ``item`` and wait until the batch holding it has committed. Once queued,
        it is committed even if the waiting task is cancelled."""
        loop = asyncio.get_running_loop()
        waiting = self._queues.get(loop)
        if waiting is None:
            waiting = self._queues[loop] = _LoopQueue()
        future: asyncio.Future[R] = loop.create_future()
        waiting.items.append((item, future))
        if waiting.filled is not None and len(waiting.items) >= waiting.wanted:
            _settle(waiting.filled, None)
        if waiting.task is None:
            if loop.time() - waiting.idle_since > IDLE_FORGETS:
                waiting.recent = 0.0  # the crowd of writers that made the last batches left
            waiting.task = loop.create_task(self._drain(waiting))
        return await future

    async def _drain(self, waiting: _LoopQueue[T, R]) -> None:
        try:
            while waiting.items:
                await self._fill(waiting)
                batch = waiting.items[: self._max_batch]
                del waiting.items[: self._max_batch]
                waiting.recent = max(len(batch), waiting.recent * RECENT_DECAY)
                await self._commit(batch)
        except asyncio.CancelledError:
            # The loop is shutting down: nothing left is acknowledged, nobody waits forever.
            for _, future in waiting.items:
                future.cancel()
            waiting.items.clear()
            raise
        finally:
            waiting.task = None
            waiting.idle_since = asyncio.get_running_loop().time()

    async def _fill(self, waiting: _LoopQueue[T, R]) -> None:
        """Wait, at most ``max_wait``, until the queue holds nearly as many items as recent
        batches did; return at once when it does already. A lone writer never waits, nor
        does the first write after a pause."""
        wanted = min(self._max_batch, int(waiting.recent * FILL_RATIO))
        if len(waiting.items) >= wanted:
            return
        loop = asyncio.get_running_loop()
        waiting.wanted = wanted
        waiting.filled = loop.create_future()
        timer = loop.call_later(self._max_wait, _settle, waiting.filled, None)
        try:
            await waiting.filled
        finally:
            timer.cancel()
            waiting.filled = None

    async def _commit(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        self.counts.add(len(batch))
        try:
            results = await self._commit_batch([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError("commit_batch returned the wrong number of results")
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except BaseException as exc:  # handed to the waiting callers, never lost
            if len(batch) == 1:
                _settle(batch[0][1], exc)
                return
            # One bad item must not fail its neighbours: retry them one by one.
            for entry in batch:
                await self._commit([entry])
            return
        for (_, future), result in zip(batch, results, strict=True):
            _settle(future, result)


class _LoopQueue(Generic[T, R]):
    def __init__(self) -> None:
        self.items: list[tuple[T, asyncio.Future[R]]] = []
        self.task: asyncio.Task[None] | None = None
        # Recent batch sizes, as a maximum that decays with every batch: how many writers
        # are active. While the committer waits for a batch to fill, `filled` is set when
        # `wanted` items are queued.
        self.recent = 0.0
        self.idle_since = float("-inf")  # loop time when the last drain ended
        self.filled: asyncio.Future[None] | None = None
        self.wanted = 0


def _settle(future: asyncio.Future[R], result: R | BaseException) -> None:
    if future.done():
        return  # its caller was cancelled and left
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
