"""``GET /metrics``: the host's counters in the Prometheus text format.

Two figures decide how fast Amber is under load, and both are invisible from outside: how
many writes share each group commit (a batch has a fixed cost whatever its size), and how
many URI-M answers come from memory. Each server process counts its own; with several
workers (``amber serve --workers N``, which sets ``AMBER_METRICS_DIR``) the one scraped
adds up every worker's (:mod:`archive.workermetrics`): one scrape of the shared port is
the whole host. Counts only: no tenant, id or captured text.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from api.auth import require
from api.deps import get_archive
from api.fastpath import MementoRoute
from api.models import ERROR_RESPONSES
from archive.access.keys import Principal, Role
from archive.archive import Archive
from archive.blobstore.diskcache import DiskCachedBlobStore
from archive.citations.extract import cached_entries
from archive.workermetrics import COUNTER, GAUGE, Figure, WorkerBoard, render

router = APIRouter(tags=["ops"])
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# response_class=Response: with PlainTextResponse, FastAPI would document the JSON error
# answers as text/plain too.
@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text format (version 0.0.4).",
            "content": {"text/plain": {}},
        },
        **ERROR_RESPONSES,
    },
    summary="The host's counters, every worker's (admin)",
)
async def metrics(
    request: Request,
    archive: Annotated[Archive, Depends(get_archive)],
    principal: Annotated[Principal, Depends(require(Role.ADMIN))],
) -> PlainTextResponse:
    board: WorkerBoard | None = getattr(request.app.state, "metrics_board", None)
    route: MementoRoute = request.app.memento_route
    if board is not None:
        text = await run_in_threadpool(board.gather)
    else:
        text = render(await run_in_threadpool(collect, archive, route), {})
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


def collect(archive: Archive, route: MementoRoute) -> list[Figure]:
    """This process's figures now (in a worker thread: it reads the index on PostgreSQL)."""
    commits = archive.write_commits()
    archive.index.observe_changes_now()  # PostgreSQL: what the caches hold is valid under it
    archive.text_memory.heed()  # an erasure anywhere since: its text is forgotten first
    figures = [
        Figure(
            "amber_write_batches_total",
            COUNTER,
            "Group commits of memento writes (a failed batch's retries count too).",
            commits.batches,
        ),
        Figure(
            "amber_write_batch_mementos_total",
            COUNTER,
            "Memento writes in those batches: divided by the batches, writes per commit.",
            commits.items,
        ),
        Figure(
            "amber_text_cache_entries",
            GAUGE,
            "Texts extracted from captured bytes remembered (erasures empty it).",
            cached_entries(),
        ),
    ]
    disk = archive.blobs
    if isinstance(disk, DiskCachedBlobStore):
        entries, size, budget = disk.usage()
        figures += [
            Figure("amber_blob_disk_cache_hits_total", COUNTER, "Blob reads from disk.", disk.hits),
            Figure(
                "amber_blob_disk_cache_misses_total",
                COUNTER,
                "Blob reads from the store.",
                disk.misses,
            ),
            Figure(
                "amber_blob_disk_cache_dropped_total",
                COUNTER,
                "Entries dropped because they did not match their address.",
                disk.dropped,
            ),
            Figure("amber_blob_disk_cache_entries", GAUGE, "Blobs on disk.", entries),
            Figure("amber_blob_disk_cache_bytes", GAUGE, "Their bytes.", size),
            Figure(
                "amber_blob_disk_cache_budget_bytes",
                GAUGE,
                "AMBER_BLOB_DISK_CACHE_MB in bytes.",
                budget,
            ),
        ]
    cache = route.served_cache()
    if cache is not None:
        entries, weight, budget = cache.usage()
        figures += [
            Figure(
                "amber_uri_m_cache_hits_total", COUNTER, "URI-M answers from memory.", cache.hits
            ),
            Figure(
                "amber_uri_m_cache_misses_total",
                COUNTER,
                "URI-M requests that read the index.",
                cache.misses,
            ),
            Figure("amber_uri_m_cache_entries", GAUGE, "Mementos remembered.", entries),
            Figure(
                "amber_uri_m_cache_bytes",
                GAUGE,
                "About the memory they take (AMBER_URI_M_CACHE_MB is the limit).",
                weight,
            ),
            Figure(
                "amber_uri_m_cache_budget_bytes", GAUGE, "AMBER_URI_M_CACHE_MB in bytes.", budget
            ),
        ]
    return figures
