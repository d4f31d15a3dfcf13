"""Local directory backend: the embedded default.

Layout: ``<root>/<2 hex>/<64 hex>``, 256 shard directories, as restic's ``data/`` and git's
``objects/``. Stores made by earlier versions keep their ``<root>/<2 hex>/<2 hex>/<64 hex>``
(found by looking, :func:`_shard_levels`): its 65,536 directories cost a young store a new
directory, and an inode, with almost every blob (benchmarks/README.md).
A write goes to a temporary file in the same directory, is fsync'd, renamed into place
(atomic on POSIX) and the directory is fsync'd, so a crash leaves either nothing, a stray
temporary file, or the complete blob — never a partial blob under its address.

The local store has no storage-level lock: it implements
:class:`~archive.blobstore.base.RetentionLock` with ``lock_mode`` None, so ``retain_until``,
retention dates and legal holds are accepted and ignored, and ``erase`` is a plain delete.
Early deletion is prevented by Amber's retention rules alone; anyone with write access to
the directory can delete evidence. Use S3 with Object Lock where that matters.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio

from archive.blobstore.base import BlobStoreCapabilities, StagedBlob, StoredBlob, ceil_to_second
from archive.blobstore.objectlock import NoStorageLock
from archive.exceptions import BlobNotFound, StorageError
from archive.hashing import ALGORITHM, content_address, parse_address, verify

_TEMP_PREFIX = ".tmp-"
_DIGEST_START = len(ALGORITHM) + 1  # "blake3:" before the hex digest

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class LocalBlobStore(NoStorageLock):
    # A small blob is in the page cache: microseconds to read. A batch shares one sync.
    capabilities = BlobStoreCapabilities(
        reads_in_process=True, shared_sync=True, local_deletes=True
    )

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        self.durable = durable
        self.root.mkdir(parents=True, exist_ok=True)
        self.shard_levels = _shard_levels(self._root)
        self._batch = threading.local()  # directories awaiting fsync in batched_deletes

    def path_for(self, address: str) -> Path:
        return Path(self._location(parse_address(address))[1])

    def _location(self, digest: str) -> tuple[str, str]:
        """(shard directory, blob path) of a digest, as plain strings."""
        # Joined by hand: os.path.join's checks cost more than the read of a small blob's
        # name, and a digest is 64 hex characters, never a separator or an absolute path.
        if self.shard_levels == 1:
            directory = f"{self._root}{os.sep}{digest[:2]}"
        else:
            directory = f"{self._root}{os.sep}{digest[:2]}{os.sep}{digest[2:4]}"
        return directory, f"{directory}{os.sep}{digest}"

    def put(self, data: bytes, *, retain_until: datetime | None = None) -> StoredBlob:
        """Store ``data``, durable when it returns; ``retain_until`` is ignored (no
        storage-level lock here)."""
        staged = self.stage(data, retain_until=retain_until)
        self.publish([staged])
        return staged.blob

    def stage_many(
        self, blobs: Sequence[bytes], *, retain_until: datetime | None = None
    ) -> list[StagedBlob]:
        """``stage`` of each, in order; identical bytes twice are written once (the later
        ones report ``created=False``: the first carries the write)."""
        staged: list[StagedBlob] = []
        first: dict[bytes, StoredBlob] = {}
        try:
            for data in blobs:
                earlier = first.get(data)
                if earlier is not None:
                    staged.append(StagedBlob(replace(earlier, created=False)))
                    continue
                one = self.stage(data, retain_until=retain_until)
                first[data] = one.blob
                staged.append(one)
        except BaseException:
            self.discard(staged)
            raise
        return staged

    async def stage_async(self, data: bytes, *, retain_until: datetime | None = None) -> StagedBlob:
        """:meth:`stage` in a worker thread (the write path stages small bodies on its loop
        itself: ``shared_sync``)."""
        return await anyio.to_thread.run_sync(
            functools.partial(self.stage, data, retain_until=retain_until)
        )

    def stage(self, data: bytes, *, retain_until: datetime | None = None) -> StagedBlob:
        """Write ``data`` to a temp file beside its final path, not yet synced or named."""
        if retain_until is not None:
            ceil_to_second(retain_until)  # same validation as a locking store
        address = content_address(data)
        # Plain strings and descriptors: a request stages one blob per passage it cites, and
        # pathlib plus tempfile cost several times the system calls they make.
        digest = address[_DIGEST_START:]
        directory, path = self._location(digest)
        if os.path.exists(path):
            # Perhaps renamed in by a concurrent put whose directory sync is still to come.
            return StagedBlob(
                StoredBlob(address=address, size=len(data), created=False),
                _Staged(path, None, (directory,)),
            )
        try:
            created: list[str] = []
            try:
                temp_name = _write_temp(directory, digest, data)
            except FileNotFoundError:  # a new shard directory (early in a store's life)
                created = _make_dirs(directory, stop_at=self._root)
                temp_name = _write_temp(directory, digest, data)
        except OSError as exc:
            raise StorageError("could not write blob to the local store", address=address) from exc
        parents = tuple(os.path.dirname(made) for made in created)
        return StagedBlob(
            StoredBlob(address=address, size=len(data), created=True),
            _Staged(path, temp_name, (directory, *parents)),
        )

    def publish(self, staged: Sequence[StagedBlob]) -> None:
        """Make staged blobs durable, together: one filesystem sync for all their bytes, then
        the renames into place, then one sync for all the names. Two syncs per batch instead
        of two fsyncs per blob, and no blob is ever visible before its bytes are durable.
        """
        pending = self._publishable(staged)
        try:
            self._sync_bytes(pending)
            _name(pending)
            self._sync_names(pending)
        except OSError as exc:
            self.discard(staged)
            raise StorageError("could not write blobs to the local store") from exc

    async def publish_async(
        self,
        staged: Sequence[StagedBlob],
        offload: Callable[[Callable[[], Any]], Awaitable[Any]],
        then: Callable[[], _T],
    ) -> _T:
        """:meth:`publish` from an event loop: ``offload`` runs it in a thread, the loop goes
        on meanwhile. ``then`` runs in the same thread right after the names are durable, and
        its result is returned: each hand-over to a thread and back costs ~90 us of CPU, so
        the syncs, the renames and the caller's next disk step (opening the index write)
        share one. The renames run there too: on ext4 each is a journalled change of a
        directory, and on the loop it held every request meanwhile."""

        def publish_then() -> _T:
            self.publish(staged)
            return then()

        return cast(_T, await offload(publish_then))

    def _publishable(self, staged: Sequence[StagedBlob]) -> list[_Staged]:
        pending = [one.pending for one in staged if isinstance(one.pending, _Staged)]
        if any(item.discarded for item in pending):
            # A failed publish discarded these bytes: publishing "nothing to rename" now
            # would let rows point at a blob that was never stored.
            self.discard(staged)
            raise StorageError("staged bytes were discarded by a failed publish; retry the write")
        return pending

    def _sync_bytes(self, pending: Sequence[_Staged]) -> None:
        new = [p.temp_name for p in pending if p.temp_name is not None]
        if self.durable and new:
            _sync_files(self._root, new)

    def _sync_names(self, pending: Sequence[_Staged]) -> None:
        if self.durable and pending:
            _sync_directories(self._root, {d for p in pending for d in p.directories})

    def discard(self, staged: Sequence[StagedBlob]) -> None:
        """Remove the temp files of staged blobs not yet published: captured text that
        nothing will refer to (``amber gc`` would otherwise find it only once this process
        has exited)."""
        for one in staged:
            item = one.pending
            if isinstance(item, _Staged) and item.temp_name is not None:
                _remove_quietly(item.temp_name)
                item.temp_name = None
                item.discarded = True

    def get(self, address: str, version_id: str | None = None) -> bytes:
        # A plain string path and descriptor: a Path and a buffered file object cost more
        # than reading a small blob (URI-M resolution is the hottest path).
        _, path = self._location(parse_address(address))
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise BlobNotFound("no blob at this address", address=address) from None
        except OSError as exc:
            raise StorageError("could not read blob from the local store", address=address) from exc
        try:
            data = _read_all(descriptor)
        except OSError as exc:
            raise StorageError("could not read blob from the local store", address=address) from exc
        finally:
            os.close(descriptor)
        return verify(address, data)

    def exists(self, address: str) -> bool:
        return self.path_for(address).is_file()

    def delete(self, address: str, version_id: str | None = None) -> None:
        path = self.path_for(address)
        try:
            path.unlink()
        except FileNotFoundError:
            pass  # maybe unlinked by a killed caller, not yet durable: sync below all the same
        if not self.durable:
            return
        pending: set[Path] | None = getattr(self._batch, "directories", None)
        if pending is not None:
            pending.add(path.parent)
        else:
            _fsync_directory_if_present(path.parent)

    @contextmanager
    def batched_deletes(self) -> Iterator[None]:
        """Deletes on this thread inside the block unlink at once; each directory they touched
        is fsync'd once when the block ends, also when it raises.

        The caller records the deletions only after the block: a crash before the syncs may
        bring files back, but their records still say "to delete", so they are deleted again.
        """
        if getattr(self._batch, "directories", None) is not None:
            yield  # nested: the outer block syncs
            return
        pending: set[Path] = set()
        self._batch.directories = pending
        try:
            yield
        finally:
            self._batch.directories = None
            for directory in sorted(pending):
                _fsync_directory_if_present(directory)

    def addresses(self) -> Iterator[str]:
        for shard in self._shards():
            for blob in sorted(shard.iterdir()):
                if not blob.name.startswith(_TEMP_PREFIX):
                    yield f"{ALGORITHM}:{blob.name}"

    def temp_files(self) -> Iterator[tuple[str, datetime]]:
        """(path, last modified) of temp files left by writers that are no longer running:
        bytes staged and never published because the process died in between. Files of a
        live process (this one included) are in flight — or stalled, but still to be
        published — and are never listed; callers also leave recent ones alone."""
        for shard in self._shards():
            with os.scandir(shard) as entries:
                for entry in entries:
                    if not entry.name.startswith(_TEMP_PREFIX) or _writer_alive(entry.name):
                        continue
                    try:
                        modified = entry.stat(follow_symlinks=False).st_mtime
                    except FileNotFoundError:
                        continue  # published or discarded meanwhile
                    yield entry.path, datetime.fromtimestamp(modified, UTC)

    def _shards(self) -> Iterator[Path]:
        """The shard directories (``<2 hex>``, or ``<2 hex>/<2 hex>``), in order."""
        for first in sorted(self.root.iterdir()):
            if not first.is_dir():
                continue
            if self.shard_levels == 1:
                yield first
            else:
                yield from sorted(first.iterdir())

    def remove_temp_file(self, path: str) -> None:
        """Delete one of :meth:`temp_files` (nothing refers to it: it never got a name)."""
        if (
            not os.path.basename(path).startswith(_TEMP_PREFIX)
            or os.path.commonpath([self._root, path]) != self._root
        ):
            raise ValueError("not a temp file of this store")
        _remove_quietly(path)

    def close(self) -> None:
        return None

    def stored_at(self, address: str) -> datetime | None:
        """When the blob file was last written (None if absent): GC's safety age."""
        try:
            return datetime.fromtimestamp(os.stat(self.path_for(address)).st_mtime).astimezone()
        except FileNotFoundError:
            return None

    def versions_of(self, address: str) -> list[str | None]:
        """``[None]`` when the blob exists (the local store keeps no versions), else ``[]``."""
        return [None] if self.exists(address) else []


_SHARD = re.compile(r"[0-9a-f]{2}")


def _shard_levels(root: str) -> int:
    """How many levels of shard directories the store at ``root`` has: 2 when its shard
    directories hold shard directories (made by an earlier version), else 1."""
    with os.scandir(root) as entries:
        shards = [e.path for e in entries if e.is_dir() and _SHARD.fullmatch(e.name)]
    for shard in shards:
        with os.scandir(shard) as entries:
            for entry in entries:
                if entry.is_dir():
                    return 2
                if not entry.name.startswith(_TEMP_PREFIX):
                    return 1
    return 1  # new, or every blob deleted: either way nothing is where 1 level looks


def _fsync_path(name: str) -> None:
    fd = os.open(name, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(directory: str, *, stop_at: str) -> list[str]:
    """Create missing directories; return the ones created, so their parents get fsync'd."""
    missing = []
    current = directory
    while current != stop_at and not os.path.isdir(current):
        missing.append(current)
        current = os.path.dirname(current)
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            pass  # a concurrent writer made it first
    return missing


def _name(pending: Sequence[_Staged]) -> None:
    """Rename staged temp files into place (their bytes are durable by now)."""
    for item in pending:
        if item.temp_name is not None:
            os.replace(item.temp_name, item.path)
            item.temp_name = None


@dataclass
class _Staged:
    path: str  # where the blob goes
    temp_name: str | None  # the temp file holding its bytes until renamed; None once named
    directories: tuple[str, ...]  # whose entries must be durable (parent, created dirs' parents)
    discarded: bool = False  # its temp file was removed unpublished: it can never be published


# Temp names: unique per process (pid) and per write (counter); O_EXCL catches a leftover of
# an earlier process that had the same pid.
_temp_numbers = itertools.count()


def _write_temp(directory: str, digest: str, data: bytes) -> str:
    """A temp file in ``directory`` holding ``data`` (not yet synced); returns its name."""
    while True:  # the name format is read back by _writer_alive
        # Joined by hand, as in _location: a digest and numbers are never separators.
        name = f"{directory}{os.sep}{_TEMP_PREFIX}{digest[:16]}.{os.getpid()}.{next(_temp_numbers)}"
        try:
            descriptor = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            break
        except FileExistsError:
            continue  # an earlier process with the same pid left it
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
        finally:
            os.close(descriptor)
    except BaseException:
        _remove_quietly(name)
        raise
    return name


def _writer_alive(temp_name: str) -> bool:
    """Whether the process that staged this temp file (``.tmp-<digest>.<pid>.<n>``) still
    runs. Names without a pid (older versions) count as not running: age alone decides."""
    parts = temp_name.split(".")
    if len(parts) != 4 or not parts[2].isdigit():
        return False
    try:
        os.kill(int(parts[2]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _load_syncfs() -> Callable[[int], int] | None:
    """Linux's syncfs(2): flush one filesystem's dirty data and metadata, and wait."""
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None  # not Linux: the per-file fsyncs below are used instead
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return cast(Callable[[int], int], function)


_SYNCFS = _load_syncfs()


def _sync_filesystem(root: str) -> bool:
    """syncfs on the filesystem holding ``root``; False when the platform has none."""
    if _SYNCFS is None:
        return False
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _SYNCFS(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))
    finally:
        os.close(fd)
    return True


def _sync_files(root: str, names: Iterable[str]) -> None:
    if not _sync_filesystem(root):
        for name in names:
            _fsync_path(name)


def _sync_directories(root: str, directories: Iterable[str]) -> None:
    if not _sync_filesystem(root):
        for directory in sorted(directories):
            _fsync_directory(directory)


def _fsync_directory(directory: str | Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory_if_present(directory: Path) -> None:
    try:
        _fsync_directory(directory)
    except FileNotFoundError:
        pass  # never created: nothing was ever stored, nor unlinked, there


def _remove_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def _read_all(descriptor: int) -> bytes:
    # Until an empty read: a short read is the end of a regular file on local disks, but
    # not a promise every filesystem keeps, and a false integrity alarm is worse than a syscall.
    chunks = []
    while chunk := os.read(descriptor, 1 << 20):
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
