"""``GET /metrics``: this process's counters in the Prometheus text format.

Two figures decide how fast Amber is under load, and both are invisible from outside: how
many writes share each group commit (a batch has a fixed cost whatever its size), and how
many URI-M answers come from memory. Each server process counts its own (one uvicorn worker
is one target to scrape). Counts only: no tenant, id or captured text.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse, Response

from api.auth import require
from api.deps import get_archive
from api.models import ERROR_RESPONSES
from archive.access.keys import Principal, Role
from archive.archive import Archive

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
    summary="This process's counters (admin)",
)
def metrics(
    request: Request,
    archive: Annotated[Archive, Depends(get_archive)],
    principal: Annotated[Principal, Depends(require(Role.ADMIN))],
) -> PlainTextResponse:
    commits = archive.write_commits()
    archive.index.observe_changes_now()  # PostgreSQL: what the caches hold is valid under it
    lines = [
        *_metric(
            "amber_write_batches_total",
            "counter",
            "Group commits of memento writes (a failed batch's retries count too).",
            commits.batches,
        ),
        *_metric(
            "amber_write_batch_mementos_total",
            "counter",
            "Memento writes in those batches: divided by the batches, writes per commit.",
            commits.items,
        ),
    ]
    cache = request.app.memento_route.served_cache()
    if cache is not None:
        entries, weight, budget = cache.usage()
        lines += [
            *_metric(
                "amber_uri_m_cache_hits_total", "counter", "URI-M answers from memory.", cache.hits
            ),
            *_metric(
                "amber_uri_m_cache_misses_total",
                "counter",
                "URI-M requests that read the index.",
                cache.misses,
            ),
            *_metric("amber_uri_m_cache_entries", "gauge", "Mementos remembered.", entries),
            *_metric(
                "amber_uri_m_cache_bytes",
                "gauge",
                "About the memory they take (AMBER_URI_M_CACHE_MB is the limit).",
                weight,
            ),
            *_metric(
                "amber_uri_m_cache_budget_bytes", "gauge", "AMBER_URI_M_CACHE_MB in bytes.", budget
            ),
        ]
    return PlainTextResponse("\n".join(lines) + "\n", media_type=CONTENT_TYPE)


def _metric(name: str, kind: str, help_text: str, value: int) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
