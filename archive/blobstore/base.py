"""The blob store interface every backend implements."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@dataclass(frozen=True)
class StoredBlob:
    """What a successful ``put`` guarantees is durable in the store."""

    address: str
    size: int
    version_id: str | None = None  # S3 VersionId when the bucket is versioned
    created: bool = True  # False when the bytes were already stored
    # The storage-level lock (S3 Object Lock retain-until) in force after the put, when the
    # store set or confirmed one; None when it has none (local store, no lock mode).
    retain_until: datetime | None = None


@dataclass(frozen=True)
class StagedBlob:
    """A blob written but perhaps not yet durable (see :meth:`BlobStore.stage`)."""

    blob: StoredBlob
    pending: object = None  # the store's own bookkeeping; None when already durable


@runtime_checkable
class RetentionLock(Protocol):
    """Optional capability: a storage-level lock on a blob version (S3 Object Lock).

    Amber's own retention rules decide what expires; this lock makes the *store* refuse an
    early delete too, so a buggy or compromised service cannot destroy evidence early
    (DESIGN.md, invariant 5). ``lock_mode`` None means the store sets no lock and every
    method below is a harmless no-op (the local store, or S3 without a configured mode).

    - ``set_retention`` only ever extends: a date not later than the one in force changes
      nothing. Dates are rounded *up* to the whole second (S3's resolution). It returns the
      retain-until now in force (at least the rounded request).
    - ``set_legal_hold`` turns the S3 legal-hold flag on or off; while on, nothing deletes
      the version, whatever its date.
    - ``retention_of`` reads ``(retain_until, legal_hold)`` back (via HeadObject).
    - ``delete`` of a locked version raises :class:`~archive.exceptions.RetentionLocked`:
      "not yet" for the sweep, which retries it later (the clocks may disagree).
    - ``erase`` is the admin erasure: it removes the legal hold and deletes the version,
      bypassing GOVERNANCE retention; under COMPLIANCE it raises ``RetentionLocked`` until
      the date has passed. Erasing what is already gone is not an error.
    """

    @property
    def lock_mode(self) -> str | None: ...

    def set_retention(
        self, address: str, version_id: str | None, retain_until: datetime
    ) -> datetime: ...

    def set_legal_hold(self, address: str, version_id: str | None, on: bool) -> None: ...

    def retention_of(
        self, address: str, version_id: str | None
    ) -> tuple[datetime | None, bool]: ...

    def erase(self, address: str, version_id: str | None, reason: str) -> None: ...


def ceil_to_second(moment: datetime) -> datetime:
    """``moment`` in UTC, rounded up to the whole second (S3 retention dates are whole
    seconds, and rounding down would shorten a retention)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("retention dates must be timezone-aware")
    moment = moment.astimezone(UTC)
    if moment.microsecond:
        moment = moment.replace(microsecond=0) + timedelta(seconds=1)
    return moment


@dataclass(frozen=True)
class BlobStoreCapabilities:
    """What a store's bytes cost to reach, so callers ask the store instead of its type.

    - ``reads_in_process``: a ``get`` of a small blob is a local file read (page cache,
      microseconds) rather than a network round trip; the API then serves it without a
      thread hop.
    - ``shared_sync``: ``publish`` makes a whole batch durable with one filesystem sync, and
      ``publish_async`` lets an event loop wait for it; the write path then commits on the
      loop.
    - ``loop_puts``: ``stage_async`` stores a blob from the caller's event loop, with no
      worker thread (the lean S3 client); the write path then stages there.
    - ``local_deletes``: a delete is a local unlink (``batched_deletes`` shares the directory
      syncs), so retention deletes many blobs per index transaction; remote deletes are
      round trips, and fewer share one transaction.
    """

    reads_in_process: bool
    shared_sync: bool
    local_deletes: bool
    loop_puts: bool = False


@runtime_checkable
class BlobStore(RetentionLock, Protocol):
    """Immutable, content-addressed bytes.

    - ``put`` is idempotent and returns only once the bytes are durable. ``stage`` (or
      ``stage_many``) + ``publish`` split a put, so a group commit can make a whole batch
      durable at once (the local store shares one filesystem sync). ``retain_until``
      asks a store with a storage-level lock (:class:`RetentionLock`) to lock the bytes
      until then at write time; stores without one ignore it.
    - ``get`` re-hashes and raises :class:`~archive.exceptions.IntegrityError` on mismatch,
      :class:`~archive.exceptions.BlobNotFound` when absent.
    - ``delete`` is called only by retention and garbage collection. On a versioned store it
      needs the recorded ``version_id`` (a versionless delete would only hide the bytes
      behind a delete marker) and raises :class:`ValueError` without one.
    - ``stored_at``, ``versions_of``, ``temp_files`` and ``remove_temp_file`` serve garbage
      collection; a store with nothing of a kind answers empty.
    - Every store is a :class:`RetentionLock`; one without a
      storage-level lock has ``lock_mode`` None and its lock methods are no-ops.
    - ``capabilities`` says what its operations cost (:class:`BlobStoreCapabilities`).
    """

    @property
    def capabilities(self) -> BlobStoreCapabilities: ...

    def put(self, data: bytes, *, retain_until: datetime | None = None) -> StoredBlob: ...

    def stage(self, data: bytes, *, retain_until: datetime | None = None) -> StagedBlob:
        """Write ``data``, maybe not durably yet: it is stored once :meth:`publish` returns.

        A store that shares durability (local: one filesystem sync for many files) lets a
        group commit make a whole batch of writes durable at once; others store here.
        """
        ...

    def stage_many(
        self, blobs: Sequence[bytes], *, retain_until: datetime | None = None
    ) -> list[StagedBlob]:
        """``stage`` of each, in order (a store may write them concurrently)."""
        ...

    async def stage_async(self, data: bytes, *, retain_until: datetime | None = None) -> StagedBlob:
        """:meth:`stage` from an event loop (on the loop itself when ``loop_puts``)."""
        ...

    def publish(self, staged: Sequence[StagedBlob]) -> None:
        """Make staged blobs durable and visible under their addresses (raises StorageError)."""
        ...

    def discard(self, staged: Sequence[StagedBlob]) -> None:
        """Forget staged blobs that will not be published (the write failed before its
        commit); published or already durable ones are left alone."""
        ...

    def get(self, address: str, version_id: str | None = None) -> bytes: ...

    def exists(self, address: str) -> bool: ...

    def delete(self, address: str, version_id: str | None = None) -> None: ...

    async def publish_async(
        self,
        staged: Sequence[StagedBlob],
        offload: Callable[[Callable[[], Any]], Awaitable[Any]],
        then: Callable[[], T],
    ) -> T:
        """:meth:`publish` from an event loop: ``offload`` runs the blocking steps in a
        thread; ``then`` runs in that thread right after the blobs are durable, and its
        result is returned (the caller's next disk step shares the hand-over)."""
        ...

    @contextmanager
    def batched_deletes(self) -> Iterator[None]:
        """Deletes on this thread inside the block may share their syncs until it ends."""
        ...

    def addresses(self) -> Iterator[str]: ...

    def versions_of(self, address: str) -> list[str | None]:
        """The stored versions of a blob, oldest first (``[None]`` for an unversioned one)."""
        ...

    def stored_at(self, address: str) -> datetime | None:
        """When the newest version was written (None if absent): GC's safety age."""
        ...

    def temp_files(self) -> Iterator[tuple[str, datetime]]:
        """(path, last modified) of bytes staged by writers that died before publishing."""
        ...

    def remove_temp_file(self, path: str) -> None: ...

    def close(self) -> None: ...


@contextmanager
def discard_on_failure(store: BlobStore, staged: Sequence[StagedBlob]) -> Iterator[None]:
    """Around the steps from staging to the commit that publishes: if they fail, the staged
    bytes are removed at once rather than left as captured text nothing refers to."""
    try:
        yield
    except BaseException:
        store.discard(staged)  # published ones are left alone
        raise
