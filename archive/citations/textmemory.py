"""What this process remembers of text derived from captured bytes, and how an erasure in
any process makes it forget.

Three caches hold such text: extraction results (:mod:`~archive.citations.extract`, by
tenant and content address), the citation desk's prepared texts (by tenant and document
hash) and the last few :func:`~archive.citations.normalise.prepare` results. They are
reached only by presenting the same bytes again, so they serve nobody text they do not
already hold; but an erasure promises the text is gone, memory included.

- The process that erases forgets the erased addresses at once (:meth:`TextMemory.forget`).
- Every other process on a SQLite index hears of it through the ``<database>.erasures``
  change signal (:mod:`archive.index.signals`): before a cache is used, :meth:`heed` compares
  the signal's generation with the one it last saw and forgets everything when it moved
  (the other process does not say which addresses, and erasures are rare).
- On PostgreSQL, every replica and worker hears of it through the ``deletions`` row of
  ``change_generations`` (:mod:`archive.index.generations`): an erasure is an exclusive
  write, and every exclusive write moves that row in its own transaction. :meth:`heed`
  reads the row (one small statement per citation request or drift run) and forgets
  everything when it moved. Other deletions (retention sweeps) move it too, so the text
  caches are emptied a little more often than erasures alone would need: they are small
  and rebuilt from the bytes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from archive.citations.extract import clear_cache, forget_cached
from archive.citations.normalise import forget_prepared
from archive.index.generations import DELETIONS

if TYPE_CHECKING:
    from archive.index import Index

log = logging.getLogger(__name__)

# A cache's own forgetting: (tenant, content addresses) for the named ones, or (None, None)
# for everything it holds.
Forget = Callable[[str | None, Collection[str] | None], None]


def _forget_module_caches(tenant: str | None, addresses: Collection[str] | None) -> None:
    if addresses is None:
        clear_cache()
    else:
        forget_cached(tenant, addresses)
    forget_prepared()  # keyed by object: cannot be told apart by address


def erasure_generation_of(index: Index) -> Callable[[], int | None] | None:
    """What :class:`TextMemory` watches on ``index``: the erasures signal (SQLite), the
    ``deletions`` generation row (PostgreSQL), or nothing (an index with neither)."""
    changes = index.changes
    if changes.erasures_signalled:
        return changes.erasure_generation
    generations = changes.generations
    if generations is None:
        return None

    def deletions_generation() -> int | None:
        try:
            return generations.read().get(DELETIONS)
        except Exception as error:  # unknown: None makes heed() forget everything
            log.warning("cannot read the change generations: %s", type(error).__name__)
            return None

    return deletions_generation


class TextMemory:
    """The text caches of one process, kept coherent with erasures on one index.

    ``generation`` is the index's erasure generation (:func:`erasure_generation_of`): it
    moves after every erasure, and is None while one commits (or cannot be read). None
    instead of a function when the index has no signal: :meth:`heed` then does nothing."""

    def __init__(self, generation: Callable[[], int | None] | None) -> None:
        self._generation = generation
        self._seen = generation() if generation is not None else None
        self._caches: list[Forget] = [_forget_module_caches]
        self._lock = threading.Lock()

    def register(self, forget: Forget) -> None:
        """Add a cache that holds text derived from captured bytes."""
        with self._lock:
            self._caches.append(forget)

    def heed(self) -> None:
        """Call before using a cache: forget everything if an erasure committed (in any
        process) since the last call. One memory read when nothing happened."""
        if self._generation is None:
            return
        current = self._generation()
        if current == self._seen and current is not None:
            return
        with self._lock:
            if current == self._seen and current is not None:
                return
            # A new generation, or an erasure committing now (None): what is remembered may
            # come from bytes it erases. An entry added meanwhile is forgotten at the next
            # call, which sees the settled generation differ from None.
            self._seen = current
            caches = list(self._caches)
        for forget in caches:
            forget(None, None)

    def forget(self, tenant: str, addresses: Collection[str]) -> None:
        """Forget, in this process and now, what ``tenant``'s caches derived from these
        content addresses (the erasing process; the others :meth:`heed`)."""
        with self._lock:
            caches = list(self._caches)
        for forget in caches:
            forget(tenant, addresses)
