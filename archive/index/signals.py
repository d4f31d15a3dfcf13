"""Change signals: let every Amber process on one SQLite index remember what it read —
verified API keys, live mementos — without ever acting on something changed since.

Reading the index costs a statement (and, for a key, an HMAC); a remembered answer costs a
dictionary read, but is only safe while nothing that could change it has happened since.
A signal is a small file beside the database holding a *generation* number, mapped into
memory by every process (reading it is a memory read: no system call, no database
statement). There is one per kind of change: ``<database>.revocations`` (API keys revoked)
and ``<database>.deletions`` (mementos deleted: expiry sweeps, erasure).

* even generation: settled. Something read while the generation was ``g`` may be reused
  while it is still ``g``;
* odd generation: a change is being committed. Everything is read from the index, and
  nothing is remembered.

A change (:meth:`ChangeSignal.changing`, any process, serialised by ``flock``) moves
``g`` → ``g + 1`` before its commit and ``g + 1`` → ``g + 2`` after it, so a request that
starts after the commit either sees the odd generation (and reads the index, which has the
change) or the new even one (and starts from an empty memory). The generation is stored
twice and written copy by copy; a reader that finds the copies different treats the
signal as odd, so a torn read can only ever make it more careful.

A changer that dies between its two writes leaves the generation odd: the index is then
read on every request — correct, only slower — until the next change, or until an Amber
process opens the index and, finding no changer holding the lock, settles it. Changing by
hand in the database (not through Amber) bypasses the signal: revoke with ``amber keys
revoke`` or the admin API, delete with the retention commands. The file is found by its
path and mapped at start: deleting or replacing it while servers run (say, restoring a
backup over the data directory) leaves them mapping the old one until they restart.
"""

from __future__ import annotations

import logging
import mmap
import os
import secrets
import struct
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from archive.exceptions import ConfigurationError
from archive.index.generations import SharedGenerations

try:
    import fcntl
except ImportError:  # not POSIX: no signal, the index is read on every request
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# Native byte order: the file is only ever shared by processes on one machine, and the
# readers index a native memoryview of it (cheaper than unpacking, on every request).
_COPY = struct.Struct("=Q")
_SIZE = 2 * _COPY.size


class ChangeSignal:
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
            return None  # closed: read the index
        if first != second or first & 1:
            return None
        return int(first)

    @contextmanager
    def changing(self) -> Iterator[None]:
        """Wrap a change's commit: odd generation during it, a new even one after it (also
        when it fails: memories are then flushed for nothing, which is harmless)."""
        assert fcntl is not None
        descriptor = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # one changer at a time, all processes
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
        """An odd generation nobody is changing under: a changer died; settle it."""
        if fcntl is None or self.settled_generation() is not None:
            return
        descriptor = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a change is in progress: it settles the signal itself
            generation = _read(descriptor)  # odd, or copies left different
            _write(descriptor, generation + 1 if generation % 2 else generation + 2)
        finally:
            os.close(descriptor)


def _open_like(path: str, like: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    # Made whole under a private name, then linked into place: no process can open it
    # before it has the database's mode and owner (and be locked out for its lifetime).
    staging = f"{path}.{os.getpid()}-{secrets.token_hex(4)}"
    descriptor = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(descriptor, _SIZE)  # zeros: generation 0, settled
        _take_mode_and_owner(descriptor, like)
        os.link(staging, path)
    except FileExistsError:  # another process linked its own first: use that one
        os.close(descriptor)
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except BaseException:
        os.close(descriptor)
        raise
    finally:
        os.unlink(staging)
    return descriptor


def _take_mode_and_owner(descriptor: int, like: str) -> None:
    try:
        model = os.stat(like)
    except FileNotFoundError:
        return  # no database file yet: keep 0600, this process's user
    os.fchmod(descriptor, model.st_mode & 0o666)
    if os.geteuid() == 0:
        os.fchown(descriptor, model.st_uid, model.st_gid)


def _read(descriptor: int) -> int:
    data = os.pread(descriptor, _SIZE, 0)
    first, second = _COPY.unpack_from(data, 0)[0], _COPY.unpack_from(data, _COPY.size)[0]
    return int(max(first, second))  # a changer killed between its two copies left the first ahead


def _write(descriptor: int, generation: int) -> None:
    # Copy by copy, in order: a reader that sees them differ treats the signal as unsettled.
    packed = _COPY.pack(generation)
    os.pwrite(descriptor, packed, 0)
    os.pwrite(descriptor, packed, _COPY.size)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class _Entries(Generic[K, V]):
    """Values read from the index while the signal stood at ``generation``."""

    generation: int
    # key -> (value, its weight), oldest first: the weight is kept so forgetting is cheap.
    values: OrderedDict[K, tuple[V, int]] = field(default_factory=OrderedDict)
    weight: int = 0


def _one(value: object) -> int:
    return 1


class SharedSignal:
    """The signal of one kind of change on PostgreSQL: the generation the current request
    read from ``change_generations`` (:mod:`archive.index.generations`). The change's own
    transaction moves it, so :meth:`changing` has nothing to do."""

    def __init__(self, generations: SharedGenerations, kind: str) -> None:
        self._generations = generations
        self._kind = kind

    def settled_generation(self) -> int | None:
        return self._generations.seen(self._kind)

    def changing(self) -> AbstractContextManager[None]:
        return nullcontext()

    def close(self) -> None:
        return None


class ReadCache(Generic[K, V]):
    """Values read from a SQLite index, remembered while the signal of the changes that could
    alter them (``<database>.<kind>``) stays where it stood when they were read. On
    PostgreSQL (``shared``), while the generation of that kind the current request read
    stays where it stood (:class:`SharedSignal`).

    Without a signal — PostgreSQL without ``shared``, not POSIX, or a file this process
    cannot open — nothing is remembered; and a process that cannot open an existing index's signal may not make
    the change (:meth:`changing` refuses), since the others would never hear of it. What is
    remembered weighs at most ``budget`` (``weigh`` of each value; 1 by default): past it,
    the values remembered first are forgotten first, one index read each to recover.
    """

    def __init__(
        self,
        database: str | None,
        kind: str,
        *,
        budget: int,
        weigh: Callable[[V], int] = _one,
        shared: SharedGenerations | None = None,
    ) -> None:
        # The real path: two processes reaching one database through different links must
        # still share one signal.
        self.path = (
            f"{os.path.realpath(database)}.{kind}"
            if database is not None and ChangeSignal.available()
            else None
        )
        self._signal: ChangeSignal | SharedSignal | None = (
            SharedSignal(shared, kind) if shared is not None else _open_signal(self.path, database)
        )
        self._entries: _Entries[K, V] = _Entries(-1)
        self._budget = budget
        self._weigh = weigh
        # Since this process began; misses include reads of values that are not remembered
        # (no signal, a change in progress, forgotten, never read).
        self.hits = 0
        self.misses = 0

    @property
    def signalled(self) -> bool:
        """True when this process maps the signal (SQLite, POSIX, a file it could open), or
        reads the shared generations (PostgreSQL)."""
        return self._signal is not None

    def get(self, key: K) -> V | None:
        """The remembered value, or None: a dictionary read and a memory read, no more."""
        signal = self._signal
        entries = self._entries
        remembered = entries.values.get(key)
        if (
            remembered is None
            or signal is None
            or signal.settled_generation() != entries.generation
        ):
            self.misses += 1
            return None
        self.hits += 1
        return remembered[0]

    def usage(self) -> tuple[int, int, int]:
        """``(values, their weight, budget)`` remembered and still valid now."""
        entries = self._entries
        if self._signal is None or self._signal.settled_generation() != entries.generation:
            return 0, 0, self._budget  # forgotten: the next put starts afresh
        return len(entries.values), entries.weight, self._budget

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        """The remembered value, else :meth:`refresh`."""
        value = self.get(key)
        return value if value is not None else self.refresh(key, load)

    async def get_or_load_async(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """:meth:`get_or_load` with a loader that is awaited."""
        value = self.get(key)
        if value is not None:
            return value
        generation = self.generation()
        value = await load()
        self.put(generation, key, value)
        return value

    def refresh(self, key: K, load: Callable[[], V]) -> V:
        """``load()``, read from the index now, and remembered unless a change was being
        committed while it read (see :meth:`generation`)."""
        generation = self.generation()
        value = load()
        self.put(generation, key, value)
        return value

    def generation(self) -> int | None:
        """Read before reading the index for a value to :meth:`put` under it: a read that
        raced a change is then never remembered under the generation that change ends with.
        :meth:`get_or_load` and :meth:`refresh` do both."""
        return self._signal.settled_generation() if self._signal is not None else None

    def put(self, generation: int | None, key: K, value: V) -> None:
        if generation is None or self._budget <= 0:
            return
        entries = self._entries
        if entries.generation != generation:
            if generation < entries.generation:
                return  # read just before another thread saw a newer one
            entries = self._entries = _Entries(generation)
        weight = self._weigh(value)
        if weight > self._budget or key in entries.values:
            return
        # Oldest first, not all at once: a working set just over the budget would otherwise
        # be forgotten wholesale again and again, and miss about half of its reads.
        values = entries.values
        while entries.weight + weight > self._budget:
            try:
                entries.weight -= values.popitem(last=False)[1][1]
            except KeyError:  # emptied (by another thread's put, say)
                entries.weight = 0
        values[key] = (value, weight)
        entries.weight += weight

    def changing(self) -> AbstractContextManager[None]:
        """Wrap the commit of a change that alters what may be remembered, in any process."""
        if self._signal is not None:
            return self._signal.changing()
        if self.path is not None:
            raise ConfigurationError(
                f"cannot write the change signal {self.path}; run this as the user that runs Amber"
            )
        return nullcontext()  # no signal on this index: nobody remembers anything

    def close(self) -> None:
        if self._signal is not None:
            self._signal.close()


def _open_signal(path: str | None, database: str | None) -> ChangeSignal | None:
    if path is None or database is None:
        return None
    try:
        return ChangeSignal(path, like=database)
    except OSError as error:
        log.warning(
            "cannot open the change signal %s (%s): the index is read on every "
            "request, and this process cannot make that change",
            path,
            error.strerror,
        )
        return None
