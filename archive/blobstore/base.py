"""The blob store interface every backend implements."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


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
class BlobStore(Protocol):
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
    - ``reads_in_process`` is True when ``get`` of a small blob is a local file read (page
      cache, microseconds) rather than a network round trip; the API then serves it
      without a thread hop.
    """

    reads_in_process: bool

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

    def addresses(self) -> Iterator[str]: ...

    def close(self) -> None: ...


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


@contextmanager
def discard_on_failure(store: BlobStore, staged: Sequence[StagedBlob]) -> Iterator[None]:
    """Around the steps from staging to the commit that publishes: if they fail, the staged
    bytes are removed at once rather than left as captured text nothing refers to."""
    try:
        yield
    except BaseException:
        store.discard(staged)  # published ones are left alone
        raise
