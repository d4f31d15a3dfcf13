"""Revocation signal: lets every Amber process on one SQLite index cache verified API keys
without ever honouring a revoked one.

Checking a key against the index costs a lookup and an HMAC; a cache of verified keys
costs a dictionary read, but is only safe while nothing has been revoked since. The signal
is a small file beside the database holding a *generation* number, mapped into memory by
every process (reading it is a memory read: no system call, no database statement):

* even generation: settled. A key verified while the generation was ``g`` may be reused
  while it is still ``g``;
* odd generation: a revocation is being committed. Keys are checked against the index on
  every request, and nothing is cached.

A revocation (:meth:`RevocationSignal.revoking`, any process, serialised by ``flock``) moves
``g`` → ``g + 1`` before its commit and ``g + 1`` → ``g + 2`` after it, so a request that
starts after the commit either sees the odd generation (and checks the index, which has the
revocation) or the new even one (and starts from an empty cache). The generation is stored
twice and written copy by copy; a reader that finds the copies different treats the
signal as odd, so a torn read can only ever make it more careful.

A revoker that dies between its two writes leaves the generation odd: keys are then checked
on every request — correct, only slower — until the next revocation, or until an Amber
process opens the index and, finding no revoker holding the lock, settles it. Revoking by
hand in the database (not through Amber) bypasses the signal: revoke with ``amber keys
revoke`` or the admin API. The file is found by its path and mapped at start: deleting or
replacing it while servers run (say, restoring a backup over the data directory) leaves
them mapping the old one until they restart.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

try:
    import fcntl
except ImportError:  # not POSIX: no signal, keys are checked on every request
    fcntl = None  # type: ignore[assignment]

# Native byte order: the file is only ever shared by processes on one machine, and the
# readers index a native memoryview of it (cheaper than unpacking, on every request).
_COPY = struct.Struct("=Q")
_SIZE = 2 * _COPY.size


class RevocationSignal:
    def __init__(self, path: str, *, like: str) -> None:
        """Map the signal at ``path``, creating it with the mode and owner of the file
        ``like`` (the database), as SQLite does for its ``-wal`` and ``-shm`` files: whoever
        runs the first command must not lock the server out of it."""
        self.path = path
        descriptor = _open_like(path, like)
        try:
            if os.fstat(descriptor).st_size < _SIZE:
                os.ftruncate(descriptor, _SIZE)  # zeros: generation 0, settled
            self._map = mmap.mmap(descriptor, _SIZE, access=mmap.ACCESS_READ)
            self._copies = memoryview(self._map).cast("Q")
        finally:
            os.close(descriptor)
        self._settle_abandoned()

    @classmethod
    def available(cls) -> bool:
        return fcntl is not None

    def settled_generation(self) -> int | None:
        """The current generation if settled (even, both copies agree), else None."""
        copies = self._copies
        try:
            # The copy written last is read first (seqlock order): if it holds a new value,
            # the other copy was complete before it was begun, so only a settled value
            # reads equal.
            second = copies[1]
            first = copies[0]
        except ValueError:
            return None  # closed: check keys against the index
        if first != second or first & 1:
            return None
        return int(first)

    @contextmanager
    def revoking(self) -> Iterator[None]:
        """Wrap a revocation's commit: odd generation during it, a new even one after it
        (also when it fails: caches are then flushed for nothing, which is harmless)."""
        assert fcntl is not None
        descriptor = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # one revoker at a time, all processes
            generation = _read(descriptor)
            start = generation + 1 if generation % 2 == 0 else generation + 2  # odd
            _write(descriptor, start)
            try:
                yield
            finally:
                _write(descriptor, start + 1)
        finally:
            os.close(descriptor)  # releases the flock

    def close(self) -> None:
        self._copies.release()  # an mmap refuses to close while a view of it exists
        self._map.close()

    def _settle_abandoned(self) -> None:
        """An odd generation nobody is revoking under: a revoker died; settle it."""
        if fcntl is None or self.settled_generation() is not None:
            return
        descriptor = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a revocation is in progress: it settles the signal itself
            generation = _read(descriptor)  # odd, or copies left different
            _write(descriptor, generation + 1 if generation % 2 else generation + 2)
        finally:
            os.close(descriptor)


def _open_like(path: str, like: str) -> int:
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        model = os.stat(like)
        os.fchmod(descriptor, model.st_mode & 0o666)
        if os.geteuid() == 0:
            os.fchown(descriptor, model.st_uid, model.st_gid)
    except FileNotFoundError:
        pass  # no database file yet: keep 0600, this process's user
    return descriptor


def _read(descriptor: int) -> int:
    data = os.pread(descriptor, _SIZE, 0)
    first, second = _COPY.unpack_from(data, 0)[0], _COPY.unpack_from(data, _COPY.size)[0]
    return int(max(first, second))  # a writer killed between its two copies left the first ahead


def _write(descriptor: int, generation: int) -> None:
    # Copy by copy, in order: a reader that sees them differ treats the signal as unsettled.
    packed = _COPY.pack(generation)
    os.pwrite(descriptor, packed, 0)
    os.pwrite(descriptor, packed, _COPY.size)
