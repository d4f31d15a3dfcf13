"""The blob store interface every backend implements."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class StoredBlob:
    """What a successful ``put`` guarantees is durable in the store."""

    address: str
    size: int
    version_id: str | None = None  # S3 VersionId when the bucket is versioned
    created: bool = True  # False when the bytes were already stored


@runtime_checkable
class BlobStore(Protocol):
    """Immutable, content-addressed bytes.

    - ``put`` is idempotent and returns only once the bytes are durable.
    - ``get`` re-hashes and raises :class:`~archive.exceptions.IntegrityError` on mismatch,
      :class:`~archive.exceptions.BlobNotFound` when absent.
    - ``delete`` is called only by retention and garbage collection.
    """

    def put(self, data: bytes) -> StoredBlob: ...

    def get(self, address: str, version_id: str | None = None) -> bytes: ...

    def exists(self, address: str) -> bool: ...

    def delete(self, address: str, version_id: str | None = None) -> None: ...

    def addresses(self) -> Iterator[str]: ...

    def close(self) -> None: ...
