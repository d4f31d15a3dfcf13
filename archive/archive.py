"""The Archive: the one object the HTTP API, the CLI and the jobs talk to.

It is the composition root: it builds the blob store, the index and the services over them
(writes, citations, drift, retention, keys, read audit), handing each the collaborators it
uses, and it answers the reads (mementos, their bytes, TimeGates and TimeMaps) itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

import anyio

from archive.access.audit import ReadAudit
from archive.access.keys import KeyRing, load_server_secret
from archive.access.sessions import SessionBook
from archive.base_url import (
    DEFAULT_PUBLIC_BASE_URL,
    SettledBaseUrl,
    move_base_url,
    settle_base_url,
)
from archive.blobstore import BlobStore, open_blob_store
from archive.blobstore.diskcache import with_disk_cache
from archive.citations import CitationDesk, TranscriptBook
from archive.citations.textmemory import TextMemory, erasure_generation_of
from archive.committer import CommitCounts
from archive.config import Settings
from archive.dates import to_rfc3339
from archive.drift import DriftService
from archive.exceptions import (
    ConfigurationError,
    Gone,
    MementoNotFound,
    OriginalNotFound,
)
from archive.hashing import content_address, verify
from archive.index import DEFAULT_TENANT, Index, Neighbours
from archive.index.signals import ReadCache
from archive.index.timeline import Timeline, TimeMapView
from archive.log.service import EvidenceLog, open_evidence_log
from archive.mementos import (
    Memento,
    check_memento_id,
)
from archive.retention import Retention
from archive.retention.records import shown_deletion_reason
from archive.uri import URIR, parse_uri_r
from archive.writes import MementoRequest, MementoWriter, WriteResult

_T = TypeVar("_T")

# Reading (and re-hashing) a local blob this small takes microseconds: less than handing
# the call to a worker thread. Larger ones, or any network read, go to a thread.
QUICK_READ_BYTES = 256 * 1024
# Likewise for hashing and staging a write's bytes on the caller's event loop.
QUICK_WRITE_BYTES = 256 * 1024


@dataclass(frozen=True)
class TimeMapPage:
    """One page of a URI-R's TimeMap: its live mementos in TimeMap order."""

    original: URIR
    mementos: list[Memento]
    page: int
    page_size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))


class Archive:
    """Amber's library as one object: open it from :class:`Settings`, close it when done."""

    def __init__(self, settings: Settings, blob_store: BlobStore, index: Index) -> None:
        self.settings = settings
        self.blobs = blob_store
        self.index = index
        self.writes = MementoWriter(settings, blob_store, index, self.get_memento)
        self._evidence_log: EvidenceLog | None = None
        self.keys = KeyRing(index, load_server_secret(settings.key_secret, settings.data_dir))
        self.read_audit = ReadAudit(index)
        self.sessions = SessionBook(
            index,
            idle=timedelta(minutes=settings.session_idle_minutes),
            absolute=timedelta(hours=settings.session_max_hours),
        )
        self.transcripts = TranscriptBook(index, settings.citations)
        # This process's text caches, told of erasures (here at once, elsewhere by signal
        # on SQLite or the deletions generation row on PostgreSQL).
        self.text_memory = TextMemory(erasure_generation_of(index))
        self.retention = Retention(
            self.index, self.blobs, settings.citations, forget_text=self.text_memory.forget
        )
        self.citations = CitationDesk(
            index=index,
            blobs=blob_store,
            transcripts=self.transcripts,
            policy=settings.citations,
            internal_schemes=settings.internal_schemes,
            get_memento=self.get_memento,
            read_content=self.read_content,
            initial_lock=self.writes.initial_lock,
            redate=self.retention.evaluator.redate,
            extraction_limits=settings.extraction_limits,
            memory=self.text_memory,
        )
        self.drift = DriftService(
            settings,
            index,
            blob_store,
            self.transcripts,
            self.writes.initial_lock,
            self.retention.evaluator.redate,
            memory=self.text_memory,
        )
        # (tenant, URI-R key) -> its Timeline, until a memento is written or deleted in any
        # process; only the half of AMBER_TIMEMAP_CACHE_MB the API leaves for rendered answers.
        self.timelines: ReadCache[tuple[str, str], Timeline] = (
            index.changes.cache_until_timemaps_change(
                Timeline.weight, budget=settings.timemap_cache_mb * 1024 * 1024 // 2
            )
        )
        # (address, version) -> the bytes of a live memento read from a remote store (S3),
        # until a deletion in any process; re-hashed before every answer. A local store
        # is read instead: a file read costs about what the re-hash does.
        self.blob_bytes: ReadCache[tuple[str, str | None], bytes] = (
            index.changes.cache_until_deletion(
                _bytes_weight,
                budget=0
                if blob_store.capabilities.reads_in_process
                else settings.blob_cache_mb * 1024 * 1024,
            )
        )

    @classmethod
    def open(cls, settings: Settings) -> Archive:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        blobs = open_blob_store(settings)
        try:
            index = Index(
                settings.resolved_database_url,
                durable=settings.durable,
                grace=timedelta(days=settings.citations.retention_days),
                idempotency_ttl=timedelta(hours=settings.idempotency_ttl_hours),
                evidence_log=settings.evidence_log == "on",
            )
        except BaseException:
            blobs.close()
            raise
        return cls(settings, with_disk_cache(settings, blobs, index), index)

    def evidence_log(self) -> EvidenceLog:
        """The evidence log (archive/log), its origin from the recorded base URL; opened on
        first use, and started (background integration) by :meth:`start_evidence_log`."""
        if self._evidence_log is None:
            if self.index.log is None:
                raise ConfigurationError("the evidence log is off (AMBER_EVIDENCE_LOG=off)")
            self._evidence_log = open_evidence_log(
                self.settings, self.index, self.settle_base_url().url
            )
        return self._evidence_log

    def close(self) -> None:
        if self._evidence_log is not None:
            self._evidence_log.close()
        self.writes.close()
        self.citations.close()
        self.read_audit.close()
        self.keys.close()
        self.timelines.close()
        self.blob_bytes.close()
        self.index.close()
        self.blobs.close()

    # -- the public base URL (archive.base_url says why it is recorded) -------------------

    def settle_base_url(self, fallback: str | None = DEFAULT_PUBLIC_BASE_URL) -> SettledBaseUrl:
        """The base every URI-M of this index is minted under: the recorded one, else
        ``AMBER_PUBLIC_BASE_URL`` or ``fallback``, recorded now. Raises BaseUrlMismatch."""
        return settle_base_url(self.index.recorded, self.settings.public_base_url, fallback)

    def move_base_url(self, new_base: str) -> tuple[str | None, str]:
        """Record another base for every URI-M (an operator's explicit decision)."""
        return move_base_url(self.index.recorded, new_base)

    # -- writing (archive.writes does the work) -------------------------------------------

    def write_memento(
        self,
        request: MementoRequest,
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> WriteResult:
        """Store a memento durably; idempotent. Raises :class:`InvalidInput` subclasses."""
        return self.writes.write(
            request, tenant=tenant, idempotency_key=idempotency_key, request_hash=request_hash
        )

    async def write_memento_async(
        self,
        request: MementoRequest,
        *,
        tenant: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> WriteResult:
        """:meth:`write_memento` for an event loop (see :meth:`MementoWriter.write_async`)."""
        return await self.writes.write_async(
            request, tenant=tenant, idempotency_key=idempotency_key, request_hash=request_hash
        )

    def write_commits(self) -> CommitCounts:
        """Memento write batches committed (or tried) by this process, and the writes in them."""
        return self.writes.commits()

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
                reason=shown_deletion_reason(memento.deletion_reason),
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
        key = (address, version_id)
        remembered = self.blob_bytes.get(key)
        if remembered is not None:
            return verify(address, remembered)  # bytes are re-hashed before every answer
        generation = self.blob_bytes.generation()  # before the read (ReadCache.refresh)
        data = await anyio.to_thread.run_sync(self.read_blob, address, version_id)
        self.blob_bytes.put(generation, key, data)
        return data

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

    # -- TimeGates and TimeMaps from timelines (archive.index.timeline) -------------------

    def navigate(self, tenant: str, uri_r: str, accept_datetime: datetime | None) -> Neighbours:
        """:meth:`timegate`'s answer, from the URI-R's remembered or freshly read timeline."""
        original = self.original(uri_r)
        return _choose(self._timeline(tenant, original.key), self, tenant, uri_r, accept_datetime)

    async def navigate_async(
        self, tenant: str, uri_r: str, accept_datetime: datetime | None
    ) -> Neighbours:
        """:meth:`navigate` for an event loop: right there when the timeline is remembered,
        else in a worker thread."""
        original = self.original(uri_r)
        remembered = self.timelines.get((tenant, original.key))
        if remembered is None:
            return await anyio.to_thread.run_sync(self.navigate, tenant, uri_r, accept_datetime)
        return _choose(remembered, self, tenant, uri_r, accept_datetime)

    def timemap_view(self, tenant: str, uri_r: str, page: int = 1) -> TimeMapView:
        """Page ``page`` of the URI-R's TimeMap with its first and last memento."""
        original = self.original(uri_r)
        return _view(self._timeline(tenant, original.key), self, tenant, uri_r, page)

    async def timemap_view_async(self, tenant: str, uri_r: str, page: int = 1) -> TimeMapView:
        """:meth:`timemap_view` for an event loop (as :meth:`navigate_async`)."""
        original = self.original(uri_r)
        remembered = self.timelines.get((tenant, original.key))
        if remembered is None:
            return await anyio.to_thread.run_sync(self.timemap_view, tenant, uri_r, page)
        return _view(remembered, self, tenant, uri_r, page)

    def _timeline(self, tenant: str, urir_key: str) -> Timeline | None:
        """The URI-R's timeline, remembered (SQLite) until its mementos change; None when
        it is too long to read whole."""
        key = (tenant, urir_key)
        remembered = self.timelines.get(key)
        if remembered is not None:
            return remembered
        generation = self.timelines.generation()  # before the read (ReadCache.refresh)
        timeline = self.index.timeline(tenant, urir_key)
        if timeline is not None:
            self.timelines.put(generation, key, timeline)
        return timeline

    def content_address_of(self, data: bytes) -> str:
        return content_address(data)


def _bytes_weight(data: bytes) -> int:
    """About the memory a remembered blob takes: its bytes, the bytes object and its key."""
    return len(data) + 300


def _choose(
    timeline: Timeline | None,
    archive: Archive,
    tenant: str,
    uri_r: str,
    accept_datetime: datetime | None,
) -> Neighbours:
    if timeline is None:  # too long to read whole: the indexed look-ups choose
        return archive.timegate(tenant, uri_r, accept_datetime)
    if not timeline.entries:
        raise OriginalNotFound("no mementos of this URI-R")
    return timeline.neighbours(accept_datetime)


def _view(
    timeline: Timeline | None, archive: Archive, tenant: str, uri_r: str, page: int
) -> TimeMapView:
    if timeline is None:  # too long to read whole: one page and the bounds, by the index
        found = archive.timemap(tenant, uri_r, page)
        bounds = archive.timegate(tenant, uri_r, None)
        return TimeMapView(
            found.mementos, page, found.page_size, found.total, bounds.first, bounds.last
        )
    if not timeline.entries:
        raise OriginalNotFound("no mementos of this URI-R")
    view = timeline.page(page, archive.settings.timemap_page_size)
    if view is None:
        raise OriginalNotFound("this TimeMap page is past the last one")
    return view
