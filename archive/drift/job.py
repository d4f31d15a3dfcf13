"""The drift job: re-fetch what transcripts cite and say whether the live source still says it.

One run (:class:`DriftJob`, ``amber drift run``) works in four steps:

1. **Choose** the citations that are due (:meth:`archive.drift.service.DriftService.due`).
2. **Fetch** each distinct URI-R (by lookup key) once per run, through the fetch guard
   (:mod:`archive.drift.fetching`), with a conditional request (``If-None-Match`` /
   ``If-Modified-Since`` from the capture facts) when all citations of the URI-R cite the
   same capture. At most ``concurrency`` fetches in flight, at most ``host_concurrency`` per
   host, request starts on one host at least ``host_delay_seconds`` apart,
   ``timeout_seconds`` per read. URI-Rs are taken round-robin by host.
3. **Classify** each citation with the rules ``amber-drift-1`` (:mod:`archive.drift.rules`,
   specified in ``docs/specs/amber-drift-1.md``), re-extracting the live body with the
   citation path's extractors (:mod:`archive.drift.analysis`). Soft-404 signals are
   computed only when the passage is not intact; they include a probe of a random sibling
   URL on the same host, once per host and run.
4. **Store**, one transaction per batch of finished URI-Rs
   (:meth:`~archive.drift.service.DriftService.store`): every check (``drift_checks``), the
   citation's drift state (``drift_state``: last verdict, stable streak), and — when the
   passage changed (``material``/``reversal``) and the rules located what the page now says
   in its place — that aligned text with ``citations.context_chars`` of context on each
   side as a new ``passage`` memento of the URI-R (tool ``drift``), linked from the check
   (so retention keeps it as long as the citation it was checked for); the whole live
   document too, only when ``citations.keep_document`` is on. A verdict listed in
   ``[drift] review_on`` (default ``reversal``) sets ``needs_review`` on the citing
   transcript with the reasons, unless the same citation already had that verdict for the
   same live passage (a cleared review is not re-opened by the same finding every night).

Blobs are written before the rows that name them and each batch commits atomically, so the
job can be killed at any point and rerun: what was committed is not due again, what was not
is picked up by the next run, and at worst an orphan blob is left for garbage collection.

Logs carry ids, hosts, verdicts and timings — never captured text. A check's ``diff`` holds
the old and new wording of the cited passage only (it is evidence, served to readers of that
tenant like the passage itself).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple

from archive.dates import utc_now
from archive.drift.analysis import Analyser, check_record, location_of
from archive.drift.fetching import Fetcher, Live, conditional, sibling_url
from archive.drift.records import (
    CHANGED_PASSAGE,
    CheckRecord,
    DueCitation,
    Pending,
    RunSummary,
)
from archive.drift.rules import Soft404Signals, Verdict, classify, soft_404_signals
from archive.exceptions import InvalidInput
from archive.fetch import guarded_async_client
from archive.mementos import Memento

if TYPE_CHECKING:
    from archive.drift.service import DriftService

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

log = logging.getLogger("amber.drift")


class DriftJob:
    """One run of the drift job (see the module docstring)."""

    def __init__(self, service: DriftService) -> None:
        self.service = service
        self.settings = service.settings
        self.policy = service.policy
        self.context_chars = self.settings.citations.context_chars
        self.keep_document = self.settings.citations.keep_document

    def run(
        self,
        limit: int | None = None,
        concurrency: int | None = None,
        now: datetime | None = None,
        *,
        tenant: str | None = None,
        on_plan: Callable[[int], None] | None = None,
        on_check: Callable[[CheckRecord], None] | None = None,
    ) -> list[CheckRecord]:
        """Check the citations due at ``now`` (default: the clock); return the checks stored.

        ``now`` stands in for the clock when choosing what is due and when stamping checks
        (tests use it to be "two days later"); mementos keep the real fetch time."""
        return self.run_summary(
            limit, concurrency, now, tenant=tenant, on_plan=on_plan, on_check=on_check
        ).checks

    def run_summary(
        self,
        limit: int | None = None,
        concurrency: int | None = None,
        now: datetime | None = None,
        *,
        tenant: str | None = None,
        on_plan: Callable[[int], None] | None = None,
        on_check: Callable[[CheckRecord], None] | None = None,
    ) -> RunSummary:
        return asyncio.run(
            self.run_async(
                limit, concurrency, now, tenant=tenant, on_plan=on_plan, on_check=on_check
            )
        )

    async def run_async(
        self,
        limit: int | None = None,
        concurrency: int | None = None,
        now: datetime | None = None,
        *,
        tenant: str | None = None,
        on_plan: Callable[[int], None] | None = None,
        on_check: Callable[[CheckRecord], None] | None = None,
    ) -> RunSummary:
        if limit is not None and limit < 0:
            raise InvalidInput("limit must not be negative")
        self.service.memory.heed()  # an erasure since the last run: forget extractions
        started = time.monotonic()
        start = now or utc_now()
        run_id = secrets.token_hex(8)
        due = await asyncio.to_thread(self.service.due, start, limit, tenant=tenant)
        not_checkable = await asyncio.to_thread(self.service.not_checkable, tenant=tenant)
        if on_plan is not None:
            on_plan(len(due))
        groups: dict[tuple[str, str], list[DueCitation]] = {}
        for item in due:
            groups.setdefault((item.tenant, item.urir_key), []).append(item)

        def clock() -> datetime:
            return start + timedelta(seconds=time.monotonic() - started)

        run = _Run(self, run_id, clock, concurrency or self.policy.concurrency, on_check)
        checks = await run.execute(list(groups.values()))
        log.info(
            json.dumps(
                {
                    "event": "drift.run",
                    "run_id": run_id,
                    "due": len(due),
                    "uri_rs": len(groups),
                    "checked": len(checks),
                    "failed": run.failed,
                    "not_checkable": not_checkable,
                    "seconds": round(time.monotonic() - started, 3),
                }
            )
        )
        return RunSummary(checks, not_checkable, len(due), len(groups), run.failed)


class _Run:
    """State of one run: the fetcher, probes, the analysis steps and the commit queue."""

    def __init__(
        self,
        job: DriftJob,
        run_id: str,
        clock: Callable[[], datetime],
        concurrency: int,
        on_check: Callable[[CheckRecord], None] | None,
    ) -> None:
        if concurrency < 1:
            raise InvalidInput("concurrency must be at least 1")
        service = job.service
        self.service = service
        self.policy = job.policy
        self.run_id = run_id
        self.clock = clock
        self.on_check = on_check
        self.fetch_settings = job.settings.with_overrides(
            fetch_timeout_seconds=job.policy.timeout_seconds
        )
        self.analyser = Analyser(
            service.classify or classify,  # the service's seam, read when the run starts
            service.blobs,
            service.initial_lock,
            context_chars=job.context_chars,
            keep_document=job.keep_document,
            extraction_limits=job.settings.extraction_limits,
        )
        self.concurrency = concurrency
        self.executor = ThreadPoolExecutor(concurrency + 4, thread_name_prefix="amber-drift")
        self.failed = 0
        self.probes: dict[str, asyncio.Task[str | None]] = {}
        self.queue: asyncio.Queue[Pending | None] = asyncio.Queue()
        self.stored: list[CheckRecord] = []
        self.fetcher: Fetcher | None = None

    async def execute(self, groups: list[list[DueCitation]]) -> list[CheckRecord]:
        queue = iter(_interleave(groups))  # shared by the workers: each takes the next group

        async def worker() -> None:
            for group in queue:
                await self._group(group)

        async with guarded_async_client(self.fetch_settings) as client:
            self.fetcher = Fetcher(client, self.fetch_settings, self.policy)
            writer = asyncio.create_task(self._writer())
            try:
                await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(groups)))))
            finally:
                await self.queue.put(None)
                await writer
                for probe in self.probes.values():
                    probe.cancel()
                self.executor.shutdown(wait=False)
        return self.stored

    def _thread(self, function: Callable[[*_Ts], _T], *args: *_Ts) -> Awaitable[_T]:
        """Run blocking work (extraction, classification, blob and index writes) off the loop."""
        return asyncio.get_running_loop().run_in_executor(self.executor, partial(function, *args))

    async def _fetch(self, url: str, host: str, headers: dict[str, str]) -> Live:
        assert self.fetcher is not None
        return await self.fetcher.fetch(url, host, headers)

    # -- committing: group commit of whatever finished meanwhile --------------------------

    async def _writer(self) -> None:
        done = False
        while not done:
            first = await self.queue.get()
            batch = [] if first is None else [first]
            done = first is None
            while not self.queue.empty():
                item = self.queue.get_nowait()
                if item is None:
                    done = True
                else:
                    batch.append(item)
            if batch:
                stored = await self._thread(self.service.store, batch)
                self.stored.extend(stored)
                for record in stored:
                    self._log(record)
                    if self.on_check is not None:
                        self.on_check(record)

    def _log(self, record: CheckRecord) -> None:
        log.info(
            json.dumps(
                {
                    "event": "drift.check",
                    "run_id": record.run_id,
                    "tenant": record.tenant,
                    "citation_id": record.citation_id,
                    "host": record.host,
                    "verdict": record.verdict,
                    "http_status": record.http_status,
                    "fetch_ms": record.fetch_ms,
                    "flagged": record.flagged,
                },
                sort_keys=True,
            )
        )

    # -- one URI-R ------------------------------------------------------------------------

    async def _group(self, group: list[DueCitation]) -> None:
        """Fetch one URI-R, check every citation of it, hand the rows to the writer. A bug
        on one page must not stop the run: it is logged and its citations stay due."""
        first = group[0]
        try:
            live = await self._fetch(first.uri_r, first.host, conditional(group))
            pending = Pending([], [], {c.id: c for c in group})
            for cited in group:
                record, made = await self._check(cited, live)
                pending.records.append(record)
                pending.mementos.extend(made)
                if made and live.document is not None:
                    pending.contents.update(live.contents)
        except Exception as error:
            self.failed += len(group)
            log.error(
                json.dumps(
                    {
                        "event": "drift.failed",
                        "run_id": self.run_id,
                        "host": first.host,
                        "citation_ids": [c.id for c in group],
                        "error": type(error).__name__,
                    }
                )
            )
            return
        await self.queue.put(pending)

    async def _check(self, cited: DueCitation, live: Live) -> tuple[CheckRecord, list[Memento]]:
        document = live.document
        analyse = self.analyser.analyse
        outcome, classify_ms = await self._thread(analyse, cited, live, None)
        if outcome.verdict in CHANGED_PASSAGE:  # absent or changed: is the page a soft 404?
            signals = await self._soft404(live, cited)
            if signals is not None:
                outcome, more = await self._thread(analyse, cited, live, signals)
                classify_ms += more
        verdict = Verdict(outcome.verdict).value
        checked_at = self.clock()
        new_passage: tuple[str | None, str | None, list[Memento]] = (None, None, [])
        location = location_of(outcome)
        if (
            document is not None
            and verdict in CHANGED_PASSAGE
            and location is not None
            and live.extracted is not None
        ):
            new_passage = await self._thread(
                self.analyser.new_mementos, cited, document, live, location
            )
        record = check_record(
            cited,
            live,
            outcome,
            verdict=verdict,
            run_id=self.run_id,
            checked_at=checked_at,
            classify_ms=classify_ms,
            location=location,
            new_passage=new_passage,
        )
        return record, new_passage[2]

    async def _soft404(self, live: Live, cited: DueCitation) -> Soft404Signals | None:
        document = live.document
        if document is None or not 200 <= document.status < 300:
            return None
        if live.soft404 is None:
            probe_text = await self._probe(cited) if self.policy.soft_404_probe else None
            live.soft404 = soft_404_signals(
                requested_url=cited.uri_r,
                final_url=document.final_url,
                status=document.status,
                title=live.title,
                text=live.extracted.text if live.extracted else "",
                probe_text=probe_text,
            )
        return live.soft404

    def _probe(self, cited: DueCitation) -> Awaitable[str | None]:
        task = self.probes.get(cited.host)
        if task is None:
            task = self.probes[cited.host] = asyncio.ensure_future(self._run_probe(cited))
        return asyncio.shield(task)

    async def _run_probe(self, cited: DueCitation) -> str | None:
        """The text a random sibling URL answers with, when it answers 2xx (else None)."""
        probe = await self._fetch(sibling_url(cited.uri_r), cited.host, {})
        document = probe.document
        if document is None or not 200 <= document.status < 300 or not document.body:
            return None
        return await self._thread(self.analyser.probe_text, document)


def _interleave(groups: list[list[DueCitation]]) -> list[list[DueCitation]]:
    """Groups ordered round-robin by host, so one slow or rate-limited host does not hold
    every worker while other hosts wait."""
    by_host: dict[str, list[list[DueCitation]]] = {}
    for group in groups:
        by_host.setdefault(group[0].host, []).append(group)
    queues = list(by_host.values())
    ordered: list[list[DueCitation]] = []
    for round_ in range(max((len(q) for q in queues), default=0)):
        ordered.extend(q[round_] for q in queues if round_ < len(q))
    return ordered
