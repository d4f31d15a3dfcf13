"""A bounded local disk cache of blob bytes in front of a remote store (S3).

Blobs are immutable and content-addressed, so bytes read once from the store can be served
again from a local file: ``AMBER_BLOB_DISK_CACHE_MB`` of disk per server process (0, the
default, turns it off), in ``AMBER_BLOB_DISK_CACHE_DIR`` (default ``<data dir>/blob-cache``).
Never for a local store: its own files are the bytes.

- **Bounded, least recently used first.** Past the budget, the entries read longest ago
  are removed. After a restart the order is the files' modification times.
- **Atomic.** An entry is written to a temporary file and renamed into place: a crash
  leaves a whole entry or none (and a stray temporary file, removed at the next start).
- **Survives restarts.** Each process holds a slot (``slot-K``, an exclusive ``flock`` for
  its lifetime, the lowest free): a restarted server takes its slot, and its entries, back.
- **Re-hashed.** Every entry is re-hashed before it is served; one that does not match its
  address (a damaged disk, a hand edit) is removed and the bytes are read from the store.
- **Deletions reach it.** This process's deletes and erasures remove their entry at once.
  A deletion anywhere else moves the index's ``deletions`` generation (the SQLite signal
  file, or the ``change_generations`` row on PostgreSQL; erasures are deletions too): at
  its next read, this cache sees the generation moved and removes every entry (it cannot
  know which bytes went). The generation is written beside the entries, so one that moved
  while the server was down empties the cache at its first read. While a deletion commits
  (no settled generation) the cache is neither read nor written.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from archive.blobstore.base import BlobStore, BlobStoreCapabilities, StagedBlob, StoredBlob
from archive.config import Settings
from archive.exceptions import ConfigurationError, IntegrityError
from archive.hashing import verify
from archive.index.generations import DELETIONS

if TYPE_CHECKING:
    from archive.index import Index
    from archive.index.signals import ReadCache

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_SLOTS = 1024
_GENERATION = "generation"


class DiskCachedBlobStore:
    """``inner`` with the bytes it serves remembered on local disk (see the module)."""

    def __init__(
        self,
        inner: BlobStore,
        directory: Path,
        budget_bytes: int,
        deletions: Callable[[], int | None],
        on_close: Callable[[], None] | None = None,
    ) -> None:
        if inner.capabilities.reads_in_process:
            raise ConfigurationError("a local blob store needs no disk cache")
        self._inner = inner
        self._budget = budget_bytes
        self._deletions = deletions
        self._on_close = on_close
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self.directory, self._slot_lock = _claim_slot(directory)
        self._entries: OrderedDict[str, int] = OrderedDict()  # file name -> size, LRU first
        self._size = 0
        self._generation = self._load()
        self.hits = self.misses = self.dropped = 0

    # -- the cache ---------------------------------------------------------------------

    def _load(self) -> int | None:
        found: list[tuple[float, str, int]] = []
        for path in self.directory.iterdir():
            if path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)  # a write that died before its rename
            elif path.name != _GENERATION:
                stat = path.stat()
                found.append((stat.st_mtime, path.name, stat.st_size))
        for _, name, size in sorted(found):
            self._entries[name] = size
            self._size += size
        try:
            return int((self.directory / _GENERATION).read_text(encoding="ascii"))
        except (OSError, ValueError):
            self._wipe()  # under which generation the entries were read is unknown
            return None

    def _wipe(self) -> None:
        for name in list(self._entries):
            (self.directory / name).unlink(missing_ok=True)
        self._entries.clear()
        self._size = 0

    def _usable(self, generation: int | None) -> bool:
        """Whether the cache may be read and written under ``generation`` (the deletions
        generation now): it empties itself first when that moved past its own."""
        if generation is None:
            return False
        with self._lock:
            if self._generation is None or generation > self._generation:
                self._wipe()
                self._generation = generation
                _write_atomically(self.directory / _GENERATION, str(generation).encode())
            return generation == self._generation

    def _cached(self, address: str) -> bytes | None:
        name = _file_name(address)
        with self._lock:
            if name is None or name not in self._entries:
                return None
            self._entries.move_to_end(name)
        try:
            return verify(address, (self.directory / name).read_bytes())
        except (OSError, IntegrityError) as error:
            log.warning("dropping a blob cache entry: %s", type(error).__name__)
            self._drop(address)
            self.dropped += 1
            return None

    def _remember(self, address: str, data: bytes, generation: int | None) -> None:
        """Keep ``data``, read under ``generation``, unless a deletion moved it meanwhile
        (under the lock, so no wipe falls between the check and the write)."""
        size, name = len(data), _file_name(address)
        if size > self._budget or name is None:
            return
        with self._lock:
            if generation != self._generation:
                return
            try:
                _write_atomically(self.directory / name, data)
            except OSError as error:  # a full disk only costs the cache
                log.warning("cannot write a blob cache entry: %s", type(error).__name__)
                return
            self._size += size - self._entries.pop(name, 0)
            self._entries[name] = size
            while self._size > self._budget and self._entries:
                oldest, oldest_size = self._entries.popitem(last=False)
                (self.directory / oldest).unlink(missing_ok=True)
                self._size -= oldest_size

    def _drop(self, address: str) -> None:
        name = _file_name(address)
        if name is None:
            return
        with self._lock:
            size = self._entries.pop(name, None)
            if size is not None:
                self._size -= size
            (self.directory / name).unlink(missing_ok=True)

    def usage(self) -> tuple[int, int, int]:
        """``(entries, their bytes, budget)``."""
        with self._lock:
            return len(self._entries), self._size, self._budget

    # -- reads and deletions go through the cache -------------------------------------

    def get(self, address: str, version_id: str | None = None) -> bytes:
        generation = self._deletions()  # before the read: a deletion after it moves past
        usable = self._usable(generation)
        if usable:
            data = self._cached(address)
            if data is not None:
                self.hits += 1
                return data
        self.misses += 1
        data = self._inner.get(address, version_id)  # re-hashed by the store
        if usable:
            self._remember(address, data, generation)
        return data

    def delete(self, address: str, version_id: str | None = None) -> None:
        self._drop(address)
        self._inner.delete(address, version_id)

    def erase(self, address: str, version_id: str | None, reason: str) -> None:
        self._drop(address)
        self._inner.erase(address, version_id, reason)

    def close(self) -> None:
        self._inner.close()
        self._slot_lock.close()
        if self._on_close is not None:
            self._on_close()

    # -- everything else is the store's ------------------------------------------------

    @property
    def capabilities(self) -> BlobStoreCapabilities:
        return self._inner.capabilities

    @property
    def lock_mode(self) -> str | None:
        return self._inner.lock_mode

    def put(self, data: bytes, *, retain_until: datetime | None = None) -> StoredBlob:
        return self._inner.put(data, retain_until=retain_until)

    def stage(self, data: bytes, *, retain_until: datetime | None = None) -> StagedBlob:
        return self._inner.stage(data, retain_until=retain_until)

    def stage_many(
        self, blobs: Sequence[bytes], *, retain_until: datetime | None = None
    ) -> list[StagedBlob]:
        return self._inner.stage_many(blobs, retain_until=retain_until)

    async def stage_async(self, data: bytes, *, retain_until: datetime | None = None) -> StagedBlob:
        return await self._inner.stage_async(data, retain_until=retain_until)

    def publish(self, staged: Sequence[StagedBlob]) -> None:
        self._inner.publish(staged)

    def discard(self, staged: Sequence[StagedBlob]) -> None:
        self._inner.discard(staged)

    async def publish_async(
        self,
        staged: Sequence[StagedBlob],
        offload: Callable[[Callable[[], Any]], Awaitable[Any]],
        then: Callable[[], T],
    ) -> T:
        return await self._inner.publish_async(staged, offload, then)

    def exists(self, address: str) -> bool:
        return self._inner.exists(address)

    @contextmanager
    def batched_deletes(self) -> Iterator[None]:
        with self._inner.batched_deletes():
            yield

    def addresses(self) -> Iterator[str]:
        return self._inner.addresses()

    def versions_of(self, address: str) -> list[str | None]:
        return self._inner.versions_of(address)

    def stored_at(self, address: str) -> datetime | None:
        return self._inner.stored_at(address)

    def temp_files(self) -> Iterator[tuple[str, datetime]]:
        return self._inner.temp_files()

    def remove_temp_file(self, path: str) -> None:
        self._inner.remove_temp_file(path)

    def set_retention(
        self, address: str, version_id: str | None, retain_until: datetime
    ) -> datetime:
        return self._inner.set_retention(address, version_id, retain_until)

    def set_legal_hold(self, address: str, version_id: str | None, on: bool) -> None:
        self._inner.set_legal_hold(address, version_id, on)

    def retention_of(self, address: str, version_id: str | None) -> tuple[datetime | None, bool]:
        return self._inner.retention_of(address, version_id)


def with_disk_cache(settings: Settings, store: BlobStore, index: Index) -> BlobStore:
    """``store`` behind a disk cache when ``AMBER_BLOB_DISK_CACHE_MB`` asks for one and the
    store is remote; else ``store`` itself."""
    if settings.blob_disk_cache_mb <= 0 or store.capabilities.reads_in_process:
        return store
    directory = Path(settings.blob_disk_cache_dir or settings.data_dir / "blob-cache")
    signal: ReadCache[object, object] = index.changes.cache_until_deletion(lambda _: 1, budget=0)
    generations = index.changes.generations

    def deletions() -> int | None:
        """The deletions generation now: SQLite's signal, or on PostgreSQL the one this
        request read (Index.observe_changes), else the row itself (one statement)."""
        seen = signal.generation()
        if seen is not None or generations is None:
            return seen
        try:
            return generations.read().get(DELETIONS)
        except Exception as error:  # unknown: the cache is then left alone
            log.warning("cannot read the change generations: %s", type(error).__name__)
            return None

    return DiskCachedBlobStore(
        store, directory, settings.blob_disk_cache_mb * 1024 * 1024, deletions, signal.close
    )


def _file_name(address: str) -> str | None:
    """The entry's file name: the address's hex digest (``blake3:<64 hex>``), never a path
    of its own; None for anything else (not cached)."""
    algorithm, _, digest = address.partition(":")
    if algorithm != "blake3" or len(digest) != 64:
        return None
    return digest if all(c in "0123456789abcdef" for c in digest) else None


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):
            temporary.unlink()
        raise


def _claim_slot(directory: Path) -> tuple[Path, IO[bytes]]:
    """The lowest ``slot-K`` directory no live process holds, locked for this one's life."""
    for slot in range(MAX_SLOTS):
        handle = open(directory / f"slot-{slot}.lock", "ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        path = directory / f"slot-{slot}"
        path.mkdir(exist_ok=True)
        return path, handle
    raise ConfigurationError(f"no free blob cache slot in {directory}")
