"""The write path: a memento checked, its bytes staged, then made durable with its rows.

Write order is the durability contract (invariant 2 in docs/design.md): the blob is stored
and durable first, then the index rows commit in one transaction, batched with concurrent
writers by :class:`~archive.committer.GroupCommitter`. A crash in between leaves an orphan
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

from archive.blobstore import BlobStore
from archive.blobstore.base import StagedBlob, discard_on_failure
from archive.committer import CommitCounts, GroupCommitter, LoopGroupCommitter
from archive.config import Settings
from archive.dates import utc_now
from archive.exceptions import AmberError, Gone, IdempotencyConflict, PayloadTooLarge
from archive.index import DEFAULT_TENANT, Index, OpenWrite, StoredResponse, WriteOutcome
from archive.mementos import (
    CaptureFacts,
    Memento,
    Scope,
    check_captured_at,
    check_media_type,
    check_tool,
    memento_id,
    select_headers,
)
from archive.retention import first_lock
from archive.uri import URIR, parse_uri_r

_T = TypeVar("_T")

# Hashing and staging a write's bytes this small takes microseconds on the caller's event
# loop: less than handing it to a worker thread.
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
    """The memento as stored, and whether this write created it (False: it was there)."""

    memento: Memento
    created: bool


@dataclass(frozen=True)
class PendingWrite:
    """A checked write whose bytes are staged, waiting for its group commit."""

    memento: Memento
    content: bytes  # kept until commit: a blob a sweep started deleting is stored again
    staged: StagedBlob  # published (made durable) by the group commit, before the rows
    idempotency_key: str | None
    request_hash: str | None


@dataclass(frozen=True)
class CheckedWrite:
    """A write's request once checked: everything its memento needs but the stored blob."""

    tenant: str
    uri: URIR
    captured_at: datetime
    archived_at: datetime
    media_type: str
    scope: Scope
    facts: CaptureFacts

    def memento_of(self, staged: StagedBlob) -> Memento:
        stored = staged.blob
        return Memento(
            id=memento_id(self.tenant, self.uri.key, self.captured_at, stored.address),
            tenant=self.tenant,
            uri_r=self.uri.raw,
            urir_key=self.uri.key,
            captured_at=self.captured_at,
            archived_at=self.archived_at,
            content_hash=stored.address,
            blob_version_id=stored.version_id,
            media_type=self.media_type,
            size=stored.size,
            scope=self.scope,
            facts=self.facts,
        )


class MementoWriter:
    """Writes mementos: checks a request, stages its bytes, and commits it with concurrent
    writes (a group commit per batch, on a thread or on the caller's event loop)."""

    def __init__(
        self,
        settings: Settings,
        blobs: BlobStore,
        index: Index,
        get_memento: Callable[[str, str], Memento],
    ) -> None:
        self._settings = settings
        self.blobs = blobs
        self.index = index
        self._get_memento = get_memento  # replays answer with the memento as it is now
        self._grace = timedelta(days=settings.citations.retention_days)
        self.committer: GroupCommitter[PendingWrite, WriteResult] = GroupCommitter(
            self._commit_batch
        )
        # Writes from an event loop (write_async): committed by the loop, which waits for
        # the disk in this one thread.
        self._loop_committer: LoopGroupCommitter[PendingWrite, WriteResult] = LoopGroupCommitter(
            self._commit_batch_async
        )
        self._disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amber-disk")

    def commits(self) -> CommitCounts:
        """Memento write batches committed (or tried) by this process, and the writes in them."""
        return self.committer.counts + self._loop_committer.counts

    def close(self) -> None:
        self.committer.close()
        self._disk.shutdown(wait=True)

    def write(
        self,
        request: MementoRequest,
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> WriteResult:
        """Store a memento durably; idempotent. Raises :class:`InvalidInput` subclasses."""
        pending = self.prepare(request, tenant, idempotency_key, request_hash)
        if isinstance(pending, WriteResult):
            return pending
        with discard_on_failure(self.blobs, [pending.staged]):
            return self.committer.submit(pending)

    async def write_async(
        self,
        request: MementoRequest,
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> WriteResult:
        """:meth:`write` for an event loop. A quick write (:meth:`stages_on_loop`) is
        checked and staged on the loop, which serves other requests while the group commit
        makes it durable; any other is written in a worker thread."""
        if self.puts_on_loop(len(request.content)):
            return await self._write_putting_on_loop(request, tenant, idempotency_key, request_hash)
        if not self.stages_on_loop(len(request.content)):
            return await anyio.to_thread.run_sync(
                functools.partial(
                    self.write,
                    request,
                    tenant=tenant,
                    idempotency_key=idempotency_key,
                    request_hash=request_hash,
                )
            )
        pending = self.prepare(request, tenant, idempotency_key, request_hash)
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

    def stages_on_loop(self, size: int) -> bool:
        """Whether checking and staging a write of ``size`` bytes takes microseconds: a small
        body, a local blob store and an in-process index (SQLite); no network round trip."""
        return (
            size <= QUICK_WRITE_BYTES
            and self.blobs.capabilities.shared_sync
            and self.index.reads_in_process
        )

    def puts_on_loop(self, size: int) -> bool:
        """Whether a write of ``size`` bytes is put from the event loop (a remote store whose
        puts need no thread: ``loop_puts``) and committed by the commit thread, with no
        worker thread held for either wait."""
        return size <= QUICK_WRITE_BYTES and self.blobs.capabilities.loop_puts

    async def _write_putting_on_loop(
        self,
        request: MementoRequest,
        tenant: str,
        idempotency_key: str | None,
        request_hash: str | None,
    ) -> WriteResult:
        """The event loop checks the write and sends its PutObject; the commit thread
        commits its rows with the other writes of its batch. The idempotency check before
        the put is an index read: a thread's job, and only for keyed writes."""
        if idempotency_key is not None:
            replay = await anyio.to_thread.run_sync(
                self.index.check_idempotency, tenant, idempotency_key, request_hash or ""
            )
            if replay is not None:
                return await anyio.to_thread.run_sync(self._replay, tenant, replay)
        checked = self._check(request, tenant)
        staged = await self.blobs.stage_async(
            request.content, retain_until=self.initial_lock(checked.archived_at)
        )
        pending = PendingWrite(
            checked.memento_of(staged), request.content, staged, idempotency_key, request_hash
        )
        # Staged on S3 means stored: a failed commit leaves an orphan for `amber gc`.
        return await self.committer.submit_async(pending)

    def prepare(
        self,
        request: MementoRequest,
        tenant: str,
        idempotency_key: str | None,
        request_hash: str | None,
    ) -> PendingWrite | WriteResult:
        """Check a write and stage its bytes; or the first answer of a replayed request."""
        if idempotency_key is not None:
            replay = self.index.check_idempotency(tenant, idempotency_key, request_hash or "")
            if replay is not None:
                return self._replay(tenant, replay)
        checked = self._check(request, tenant)
        # Written now, made durable by the group commit together with concurrent writes.
        staged = self.blobs.stage(
            request.content, retain_until=self.initial_lock(checked.archived_at)
        )
        try:
            memento = checked.memento_of(staged)
        except BaseException:  # discard_on_failure, without a generator per write
            self.blobs.discard([staged])
            raise
        return PendingWrite(memento, request.content, staged, idempotency_key, request_hash)

    def _check(self, request: MementoRequest, tenant: str) -> CheckedWrite:
        """A write's request checked (InvalidInput subclasses when it is not acceptable)."""
        uri = parse_uri_r(request.uri_r, self._settings.internal_schemes)
        archived_at = utc_now()
        captured_at = check_captured_at(request.captured_at, archived_at)
        media_type = check_media_type(request.content_type)
        if len(request.content) > self._settings.max_body_bytes:
            raise PayloadTooLarge("content is larger than the configured limit")
        facts = CaptureFacts(
            tool=check_tool(request.facts.tool),
            final_url=request.facts.final_url,
            http_status=request.facts.http_status,
            headers=select_headers(request.facts.headers),
        )
        if facts.final_url is not None:
            parse_uri_r(facts.final_url, self._settings.internal_schemes)
        return CheckedWrite(tenant, uri, captured_at, archived_at, media_type, request.scope, facts)

    def initial_lock(self, archived_at: datetime) -> datetime | None:
        """With S3 Object Lock, a new blob is locked for the grace period from the start;
        retention jobs extend the lock when a longer-lived citation reaches it."""
        return first_lock(self.blobs, self._grace, archived_at)

    def _commit_batch(self, batch: Sequence[PendingWrite]) -> list[WriteResult | BaseException]:
        # Bytes durable before any row that points at them (one sync for the whole batch).
        self.blobs.publish([p.staged for p in batch])
        with self.index.write() as connection:
            return self._insert_batch(connection, batch)

    def _insert_batch(
        self, connection: Connection, batch: Sequence[PendingWrite]
    ) -> list[WriteResult | BaseException]:
        """The batch's rows, inside an open write; each write's result or error.

        Idempotency keys are claimed before any row is inserted: a write whose key already
        has an answer (committed by another transaction, or claimed by an earlier write of
        this batch) inserts nothing. It is answered with that answer when it is the same
        request, and refused (409) when it is another, so a refused request leaves no row;
        its blob, published with the batch, is an orphan for ``amber gc``."""
        keyed = [(i, p) for i, p in enumerate(batch) if p.idempotency_key is not None]
        claimed = self.index.idempotency.claim(
            connection,
            [(p.memento.tenant, p.idempotency_key or "", _first_answer(p)) for _, p in keyed],
            utc_now(),
        )
        answered = {i: a for (i, _), a in zip(keyed, claimed, strict=True) if a is not None}
        writing = [p for i, p in enumerate(batch) if i not in answered]
        contents = {p.memento.content_hash: p.content for p in writing}
        outcomes = iter(
            self.index.insert_mementos(
                connection,
                [p.memento for p in writing],
                # A blob a retention sweep was deleting is stored again, under the write
                # lock: rare, and one put.
                revive=lambda address: self.blobs.put(
                    contents[address], retain_until=self.initial_lock(utc_now())
                ),
                contents=contents,
            )
        )
        results: list[WriteResult | BaseException | None] = [
            None if i in answered else self._settle(connection, p, next(outcomes))
            for i, p in enumerate(batch)
        ]
        # The result of each key's owner in this batch, for the same request made again in it.
        owners = {
            (p.memento.tenant, p.idempotency_key or ""): result
            for p, result in zip(batch, results, strict=True)
            if result is not None and p.idempotency_key is not None
        }
        for i, answer in answered.items():
            pending = batch[i]
            owner = owners.get((pending.memento.tenant, pending.idempotency_key or ""))
            results[i] = self._answer_again(pending, answer, owner)
        done = [result for result in results if result is not None]
        assert len(done) == len(batch), "every write of the batch is answered"
        return done

    async def _commit_batch_async(
        self, batch: Sequence[PendingWrite]
    ) -> list[WriteResult | BaseException]:
        """:meth:`_commit_batch` on an event loop (a local store and SQLite only: see
        stages_on_loop). Two hand-overs to the disk thread per batch: the sync of the
        bytes, the renames, the sync of the names and the opening of the index write (which
        may wait for SQLite's write lock); then, after the statements, the commit.

        The statements run here, on the loop: the disk thread is idle meanwhile, so the
        driver's release of the GIL around each row's step costs nothing. Run in the disk
        thread beside a busy loop, each row's step had to win the GIL back from the loop,
        and on a loaded machine a batch then took longer than its syncs (measured with
        bench_floor.py: 0.59 of the floor against 0.83, same run; benchmarks/README.md)."""

        async def offload(function: Callable[[], _T]) -> _T:
            # Shielded: a disk step, once handed over, runs to its end even if the loop
            # shuts down meanwhile; the step that opened the index write then ends it.
            running = self._disk.submit(function)
            try:
                return await asyncio.shield(asyncio.wrap_future(running))
            except asyncio.CancelledError:
                running.add_done_callback(_end_unused_write)
                raise

        write = await self.blobs.publish_async(
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
        self, connection: Connection, pending: PendingWrite, outcome: WriteOutcome
    ) -> WriteResult | BaseException:
        """The result of a write whose rows were inserted (or found), its key claimed."""
        refusal = _refusal(pending, outcome)
        key = pending.idempotency_key
        if refusal is not None:
            if key is not None:  # a refusal is not an answer to replay: a retry is checked anew
                self.index.idempotency.release(connection, pending.memento.tenant, key)
            return refusal
        if key is not None and not outcome.created:  # claimed as a 201; the memento was there
            self.index.idempotency.settle(connection, pending.memento.tenant, key, 200)
        return WriteResult(outcome.memento, outcome.created)

    def _answer_again(
        self,
        pending: PendingWrite,
        answer: StoredResponse,
        owner: WriteResult | BaseException | None,
    ) -> WriteResult | BaseException:
        """The result of a write whose key was answered first by another request: ``owner``
        is that request's result when it is in this batch."""
        if answer.request_hash != (pending.request_hash or ""):
            return IdempotencyConflict(
                "this Idempotency-Key was already used for a different request"
            )
        if owner is not None:
            return owner  # the same request twice in one batch: one answer
        try:
            return self._replay(pending.memento.tenant, answer)
        except AmberError as error:
            return error

    def _replay(self, tenant: str, stored: StoredResponse) -> WriteResult:
        memento = self._get_memento(tenant, str(stored.body["memento_id"]))
        return WriteResult(memento, stored.status_code == 201)


def _first_answer(pending: PendingWrite) -> StoredResponse:
    """What a write claims as its key's answer: created, this memento."""
    return StoredResponse(
        request_hash=pending.request_hash or "",
        status_code=201,
        body={"memento_id": pending.memento.id},
    )


def _refusal(pending: PendingWrite, outcome: WriteOutcome) -> BaseException | None:
    """Why a write's memento id, as found in the index, refuses it; None if it does not."""
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
    return None


def _end_unused_write(step: Future[Any]) -> None:
    """Called when a disk step of a cancelled batch is done, in the disk thread (or at once,
    if it was): when that step opened the index write, nobody will commit it, so it ends
    here, without the event loop, which may be closed by now."""
    if step.cancelled() or step.exception() is not None:
        return
    opened = step.result()
    if isinstance(opened, OpenWrite):
        opened.rollback()
