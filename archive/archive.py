"""The Archive: the one object the HTTP API, the CLI and the jobs talk to.

Write order is the durability contract (DESIGN.md invariant 2): the blob is stored and
durable first, then the index rows commit in one transaction (batched with concurrent
writers by :class:`~archive.committer.GroupCommitter`). A crash in between leaves an orphan
blob for garbage collection, never an index row pointing at nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import anyio
from sqlalchemy import Connection

from archive.audit import ReadAudit
from archive.blobstore import BlobStore, open_blob_store
from archive.blobstore.base import StagedBlob, discard_on_failure
from archive.citations import CitationDesk, TranscriptBook
from archive.committer import CommitCounts, GroupCommitter, LoopGroupCommitter
from archive.config import Settings
from archive.dates import to_rfc3339, utc_now
from archive.drift import DriftService
from archive.exceptions import (
    Gone,
    IdempotencyConflict,
    MementoNotFound,
    OriginalNotFound,
    PayloadTooLarge,
)
from archive.hashing import content_address
from archive.index import DEFAULT_TENANT, Index, Neighbours, OpenWrite, StoredResponse, WriteOutcome
from archive.keys import KeyRing, load_server_secret
from archive.mementos import (
    CaptureFacts,
    Memento,
    Scope,
    check_captured_at,
    check_media_type,
    check_memento_id,
    check_tool,
    memento_id,
    select_headers,
)
from archive.retention import Retention, ceil_to_day
from archive.uri import URIR, parse_uri_r

_T = TypeVar("_T")

# Reading (and re-hashing) a local blob this small takes microseconds: less than handing
# the call to a worker thread. Larger ones, or any network read, go to a thread.
QUICK_READ_BYTES = 256 * 1024
# Likewise for hashing and staging a write's bytes on the caller's event loop.
QUICK_WRITE_BYTES = 256 * 1024


@dataclass(frozen=True)
class MementoRequest:
    """What a client asks to archive. ``captured_at`` None means "now" (server time)."""

    uri_r: str
    content: bytes
    content_type: str
    captured_at: datetime | None = None
    scope: Scope = Scope.DOCUMENT
    facts: CaptureFacts = field(default_factory=CaptureFacts)


@dataclass(frozen=True)
class WriteResult:
    memento: Memento
    created: bool


@dataclass(frozen=True)
class TimeMapPage:
    original: URIR
    mementos: list[Memento]
    page: int
    page_size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))


@dataclass(frozen=True)
class _PendingWrite:
    memento: Memento
    content: bytes  # kept until commit: a blob a sweep started deleting is stored again
    staged: StagedBlob  # published (made durable) by the group commit, before the rows
    idempotency_key: str | None
    request_hash: str | None


class Archive:
    def __init__(self, settings: Settings, blob_store: BlobStore, index: Index) -> None:
        self.settings = settings
        self.blobs = blob_store
        self.index = index
        self.keys = KeyRing(index, load_server_secret(settings.key_secret, settings.data_dir))
        self.read_audit = ReadAudit(index)
        self.transcripts = TranscriptBook(index, settings.citations)
        self.citations = CitationDesk(
            index=index,
            blobs=blob_store,
            transcripts=self.transcripts,
            policy=settings.citations,
            internal_schemes=settings.internal_schemes,
            get_memento=self.get_memento,
            read_content=self.read_content,
            initial_lock=self.initial_lock,
        )
        self.drift = DriftService(settings, index, blob_store, self.transcripts, self.initial_lock)
        self.retention = Retention(self.index, self.blobs, settings.citations)
        self._committer: GroupCommitter[_PendingWrite, WriteResult] = GroupCommitter(
            self._commit_batch
        )
        # Writes from an event loop (write_memento_async): committed by the loop, which
        # waits for the disk in this one thread.
        self._loop_committer: LoopGroupCommitter[_PendingWrite, WriteResult] = LoopGroupCommitter(
            self._commit_batch_async
        )
        self._disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amber-disk")

    @classmethod
    def open(cls, settings: Settings) -> Archive:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        return cls(
            settings,
            open_blob_store(settings),
            Index(
                settings.resolved_database_url,
                durable=settings.durable,
                grace=timedelta(days=settings.citations.retention_days),
            ),
        )

    def write_commits(self) -> CommitCounts:
        """Memento write batches committed (or tried) by this process, and the writes in them."""
        return self._committer.counts + self._loop_committer.counts

    def close(self) -> None:
        self._committer.close()
        self._disk.shutdown(wait=True)
        self.citations.close()
        self.read_audit.close()
        self.keys.close()
        self.index.close()
        self.blobs.close()

    # -- writing --------------------------------------------------------------------------

    def write_memento(
        self,
        request: MementoRequest,
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> WriteResult:
        """Store a memento durably; idempotent. Raises :class:`InvalidInput` subclasses."""
        pending = self.prepare_write(request, tenant, idempotency_key, request_hash)
        if isinstance(pending, WriteResult):
            return pending
        with discard_on_failure(self.blobs, [pending.staged]):
            return self._committer.submit(pending)

    async def write_memento_async(
        self,
        request: MementoRequest,
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> WriteResult:
        """:meth:`write_memento` for an event loop. A quick write (:meth:`_write_is_quick`) is
        checked and staged on the loop, which serves other requests while the group commit
        makes it durable; any other is written in a worker thread."""
        if not self._write_is_quick(len(request.content)):
            return await anyio.to_thread.run_sync(
                functools.partial(
                    self.write_memento,
                    request,
                    tenant=tenant,
                    idempotency_key=idempotency_key,
                    request_hash=request_hash,
                )
            )
        pending = self.prepare_write(request, tenant, idempotency_key, request_hash)
        if isinstance(pending, WriteResult):
            return pending
        try:
            return await self._loop_committer.submit(pending)
        except asyncio.CancelledError:
            # Still queued, the commit publishes or discards the staged bytes; only when the
            # loop shuts down is the batch cancelled, leaving its temp files to `amber gc`.
            raise
        except BaseException:
            self.blobs.discard([pending.staged])
            raise

    def _write_is_quick(self, size: int) -> bool:
        """Whether checking and staging a write of ``size`` bytes takes microseconds: a small
        body, a local blob store and an in-process index (SQLite); no network round trip."""
        return (
            size <= QUICK_WRITE_BYTES
            and self.blobs.capabilities.shared_sync
            and self.index.reads_in_process
        )

    def prepare_write(
        self,
        request: MementoRequest,
        tenant: str,
        idempotency_key: str | None,
        request_hash: str | None,
    ) -> _PendingWrite | WriteResult:
        """Check a write and stage its bytes; or the first answer of a replayed request."""
        if idempotency_key is not None:
            replay = self.index.check_idempotency(tenant, idempotency_key, request_hash or "")
            if replay is not None:
                return self._replay(tenant, replay)
        uri = parse_uri_r(request.uri_r, self.settings.internal_schemes)
        archived_at = utc_now()
        captured_at = check_captured_at(request.captured_at, archived_at)
        media_type = check_media_type(request.content_type)
        if len(request.content) > self.settings.max_body_bytes:
            raise PayloadTooLarge("content is larger than the configured limit")
        facts = CaptureFacts(
            tool=check_tool(request.facts.tool),
            final_url=request.facts.final_url,
            http_status=request.facts.http_status,
            headers=select_headers(request.facts.headers),
        )
        if facts.final_url is not None:
            parse_uri_r(facts.final_url, self.settings.internal_schemes)
        # Written now, made durable by the group commit together with concurrent writes.
        staged = self.blobs.stage(request.content, retain_until=self.initial_lock(archived_at))
        with discard_on_failure(self.blobs, [staged]):
            stored = staged.blob
            memento = Memento(
                id=memento_id(tenant, uri.key, captured_at, stored.address),
                tenant=tenant,
                uri_r=uri.raw,
                urir_key=uri.key,
                captured_at=captured_at,
                archived_at=archived_at,
                content_hash=stored.address,
                blob_version_id=stored.version_id,
                media_type=media_type,
                size=stored.size,
                scope=request.scope,
                facts=facts,
            )
        return _PendingWrite(memento, request.content, staged, idempotency_key, request_hash)

    def initial_lock(self, archived_at: datetime) -> datetime | None:
        """With S3 Object Lock, a new blob is locked for the grace period from the start;
        retention jobs extend the lock when a longer-lived citation reaches it."""
        if self.blobs.lock_mode is None:
            return None
        return ceil_to_day(archived_at + timedelta(days=self.settings.citations.retention_days))

    def _commit_batch(self, batch: Sequence[_PendingWrite]) -> list[WriteResult | BaseException]:
        # Bytes durable before any row that points at them (one sync for the whole batch).
        self.blobs.publish([p.staged for p in batch])
        with self.index.write() as connection:
            return self._insert_batch(connection, batch)

    def _insert_batch(
        self, connection: Connection, batch: Sequence[_PendingWrite]
    ) -> list[WriteResult | BaseException]:
        """The batch's rows, inside an open write; each write's result or error."""
        contents = {p.memento.content_hash: p.content for p in batch}
        outcomes = self.index.insert_mementos(
            connection,
            [p.memento for p in batch],
            # A blob a retention sweep was deleting is stored again, under the write lock:
            # rare, and one put.
            revive=lambda address: self.blobs.put(
                contents[address], retain_until=self.initial_lock(utc_now())
            ),
        )
        return [self._settle(connection, p, o) for p, o in zip(batch, outcomes, strict=True)]

    async def _commit_batch_async(
        self, batch: Sequence[_PendingWrite]
    ) -> list[WriteResult | BaseException]:
        """:meth:`_commit_batch` on an event loop (a local store and SQLite only: see
        _write_is_quick). The syncs, the wait for the write lock and the commit run in the
        disk thread; everything else runs here, so the two threads hand the GIL to each
        other a handful of times per batch rather than at every statement."""

        async def offload(function: Callable[[], _T]) -> _T:
            # Shielded: a disk step, once handed over, runs to its end even if the loop
            # shuts down meanwhile; the step that opened the index write then ends it.
            running = self._disk.submit(function)
            try:
                return await asyncio.shield(asyncio.wrap_future(running))
            except asyncio.CancelledError:
                running.add_done_callback(_end_unused_write)
                raise

        blobs = self.blobs
        # The write opens (and may wait for SQLite's write lock) in the thread that made the
        # names durable, in the same hand-over.
        write = await blobs.publish_async(
            [p.staged for p in batch], offload, then=self.index.open_write
        )
        try:
            results = self._insert_batch(write.connection, batch)
        except BaseException:
            await offload(write.rollback)
            raise
        await offload(write.commit)
        return results

    def _settle(
        self, connection: object, pending: _PendingWrite, outcome: WriteOutcome
    ) -> WriteResult | BaseException:
        if outcome.memento.deleted_at is not None:
            return Gone(
                "this capture was stored before and has been deleted; URI-Ms are never reused",
                memento_id=outcome.memento.id,
            )
        if not outcome.memento.same_capture_as(pending.memento):
            return IdempotencyConflict(
                "a memento of this URI-R with the same datetime and content already exists "
                "with different capture facts; mementos are never edited",
                memento_id=outcome.memento.id,
            )
        result = WriteResult(outcome.memento, outcome.created)
        if pending.idempotency_key is None:
            return result
        first = self.index.remember_response(
            connection,  # type: ignore[arg-type]
            outcome.memento.tenant,
            pending.idempotency_key,
            StoredResponse(
                request_hash=pending.request_hash or "",
                status_code=201 if outcome.created else 200,
                body={"memento_id": outcome.memento.id},
            ),
            utc_now(),
        )
        if first.request_hash != (pending.request_hash or ""):
            return IdempotencyConflict(
                "this Idempotency-Key was already used for a different request"
            )
        return WriteResult(outcome.memento, first.status_code == 201)

    def _replay(self, tenant: str, stored: StoredResponse) -> WriteResult:
        memento = self.get_memento(tenant, str(stored.body["memento_id"]))
        return WriteResult(memento, stored.status_code == 201)

    # -- reading --------------------------------------------------------------------------

    def get_memento(self, tenant: str, memento_id_: str) -> Memento:
        check_memento_id(memento_id_)
        return self._present(self.index.get_memento(tenant, memento_id_))

    @staticmethod
    def _present(memento: Memento | None) -> Memento:
        """The memento, or the error that says why there is none to show."""
        if memento is None:
            raise MementoNotFound("no memento with this id")
        if memento.deleted_at is not None:
            raise Gone(
                "this memento was deleted",
                memento_id=memento.id,
                deleted_at=to_rfc3339(memento.deleted_at),
                reason=memento.deletion_reason or "",
                content_hash=memento.content_hash,
                memento_datetime=to_rfc3339(memento.captured_at),
            )
        return memento

    async def get_memento_async(self, tenant: str, memento_id_: str) -> Memento:
        """:meth:`get_memento` for an event loop: right there when the index is read in
        process (SQLite: a point lookup of microseconds, less than a thread hop), else in a
        worker thread, so the loop never waits on the network."""
        if self.index.reads_in_process:
            return self.get_memento(tenant, memento_id_)
        return await anyio.to_thread.run_sync(self.get_memento, tenant, memento_id_)

    def read_content(self, memento: Memento) -> bytes:
        """The memento's bytes, re-hashed: raises IntegrityError rather than serve bad bytes."""
        return self.read_blob(memento.content_hash, memento.blob_version_id)

    def read_blob(self, address: str, version_id: str | None = None) -> bytes:
        """The bytes stored at ``address``, re-hashed (:meth:`read_content` by address)."""
        return self.blobs.get(address, version_id)

    async def read_blob_async(self, address: str, version_id: str | None, *, size: int) -> bytes:
        """:meth:`read_blob` for an event loop, given the blob's ``size``: right there when
        it is small and local (QUICK_READ_BYTES), else in a worker thread."""
        if self.blobs.capabilities.reads_in_process and size <= QUICK_READ_BYTES:
            return self.read_blob(address, version_id)
        return await anyio.to_thread.run_sync(self.read_blob, address, version_id)

    def original(self, uri_r: str) -> URIR:
        return parse_uri_r(uri_r, self.settings.internal_schemes)

    def timegate(self, tenant: str, uri_r: str, accept_datetime: datetime | None) -> Neighbours:
        original = self.original(uri_r)
        found = self.index.neighbours(tenant, original.key, accept_datetime)
        if found is None:
            raise OriginalNotFound("no mementos of this URI-R")
        return found

    def timemap(self, tenant: str, uri_r: str, page: int = 1) -> TimeMapPage:
        original = self.original(uri_r)
        size = self.settings.timemap_page_size
        total = self.index.count_mementos(tenant, original.key)
        if total == 0:
            raise OriginalNotFound("no mementos of this URI-R")
        items = self.index.list_mementos(tenant, original.key, offset=(page - 1) * size, limit=size)
        if not items and page != 1:
            raise OriginalNotFound("this TimeMap page is past the last one")
        return TimeMapPage(
            original=original, mementos=items, page=page, page_size=size, total=total
        )

    def content_address_of(self, data: bytes) -> str:
        return content_address(data)


def _end_unused_write(step: Future[Any]) -> None:
    """Called when a disk step of a cancelled batch is done, in the disk thread (or at once,
    if it was): when that step opened the index write, nobody will commit it, so it ends
    here, without the event loop, which may be closed by now."""
    if step.cancelled() or step.exception() is not None:
        return
    opened = step.result()
    if isinstance(opened, OpenWrite):
        opened.rollback()
