"""Identical work asked for concurrently, done once: what lets concurrent puts of the same
bytes share one upload (:meth:`archive.blobstore.s3.S3BlobStore.put` says why)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class InFlight(Generic[K, T]):
    """Calls under one key: the first runs; those arriving meanwhile wait for its result.

    A waiter runs the call itself when the first one failed (its failure is its own) or was
    made with another ``terms`` (say, another lock date), so sharing never changes what a
    caller asked for."""

    def __init__(self) -> None:
        self._running: dict[K, tuple[Future[T], Hashable]] = {}
        self._guard = threading.Lock()

    def run(self, key: K, terms: Hashable, call: Callable[[], T], shared: Callable[[T], T]) -> T:
        """``call()``, or ``shared(result)`` of the same call already running."""
        with self._guard:
            running = self._running.get(key)
            if running is None:
                mine: Future[T] = Future()
                self._running[key] = (mine, terms)
        if running is not None:
            first, first_terms = running
            try:
                result = first.result()
            except Exception:
                return call()
            return shared(result) if first_terms == terms else call()
        try:
            result = call()
        except BaseException as error:
            mine.set_exception(error)
            raise
        else:
            mine.set_result(result)
            return result
        finally:
            with self._guard:
                del self._running[key]
