"""What retention is given: the blob store as it uses it, and hooks for tests.

Retention deletes bytes, extends and erases storage-level locks and lists what the store
holds: more of the store than :class:`~archive.blobstore.base.BlobStore` promises, all of
which both backends implement. The local store's staging area (temp files) exists only
there, so retention asks for it by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, cast

from archive.blobstore.base import BlobStore, RetentionLock
from archive.retention.records import Verdict


class RetentionStore(RetentionLock, Protocol):
    """The blob store as retention and garbage collection use it."""

    def delete(self, address: str, version_id: str | None = None) -> None: ...

    def addresses(self) -> Iterator[str]: ...

    def versions_of(self, address: str) -> list[str | None]:
        """Every version the store holds of ``address`` (``[None]`` for an unversioned blob that
        exists, ``[]`` when absent)."""
        ...


class TempFileStore(Protocol):
    """A store that stages writes in temp files outside its blobs (the local store)."""

    def temp_files(self) -> Iterator[tuple[str, datetime]]: ...

    def remove_temp_file(self, path: str) -> None: ...


def as_retention_store(store: BlobStore) -> RetentionStore:
    """``store`` as retention uses it. Every backend (local, S3) implements
    :class:`~archive.blobstore.base.RetentionLock` and ``versions_of``; the blob store's
    declared capabilities will let this be checked instead of assumed."""
    return cast(RetentionStore, store)


def _nothing(verdicts: Sequence[Verdict]) -> None:
    """The default hook: nothing happens at these moments outside tests."""


@dataclass
class RetentionHooks:
    """Named moments inside retention's write transactions (the write lock held), where a
    test starts a concurrent writer — another API replica's citation, hold or retention
    change — to prove that the ordering and the lock keep evidence safe. Each defaults to
    doing nothing; a test replaces one on the instance a :class:`Retention` was given.

    - ``evaluated(verdicts)``: the expiries of some mementos have just been decided from
      the transcripts reaching them (a sweep's batch, a retention change, an erasure); the
      caller acts on ``verdicts`` next, in the same transaction.
    - ``batch_decided(expired)``: a sweep has evaluated a batch and re-dated the candidates
      not yet due; the ``expired`` ones are tombstoned next (never called on a dry run).
    """

    evaluated: Callable[[Sequence[Verdict]], None] = _nothing
    batch_decided: Callable[[Sequence[Verdict]], None] = _nothing
