"""Drift: re-fetch what transcripts cite and say whether the live source still says it.

The job (:class:`DriftJob`, ``amber drift run``) works in four steps:

1. **Choose** the citations that are due (:meth:`DriftService.due`): never checked, or last
   checked longer ago than ``[drift] interval_hours`` (less a tenth, at most an hour, of
   slack so a nightly run finds last night's checks due); a citation whose last
   ``stable_after`` checks were all ``identical``/``cosmetic`` is a stable source and waits
   ``stable_interval_hours``; an ``unreachable`` check (inconclusive) is retried after
   ``retry_hours``. Only ``http``/``https`` URI-Rs are checked; other schemes (``kb:``) are
   counted as *not checkable* and never get a verdict. Tombstoned citations (no selector
   left) and deleted passages are never checked.
2. **Fetch** each distinct URI-R (by lookup key) once per run, through the fetch guard
   (:func:`archive.fetch.fetch_async`: SSRF guard, size cap, every redirect vetted and
   recorded), with a conditional request (``If-None-Match`` / ``If-Modified-Since`` from the
   capture facts) when all citations of the URI-R cite the same capture. At most
   ``concurrency`` fetches in flight, at most ``host_concurrency`` per host, request starts
   on one host at least ``host_delay_seconds`` apart, ``timeout_seconds`` per read.
3. **Classify** each citation with :mod:`archive.drift_rules`, re-extracting the live body
   with the citation path's extractors (:mod:`archive.text`). Soft-404 signals are computed
   only when the passage is not intact; they include a probe of a random sibling URL on the
   same host, once per host and run.
4. **Store**, one transaction per batch of finished URI-Rs: every check (``drift_checks``),
   the citation's drift state (``drift_state``: last verdict, stable streak), and — when the
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
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import blake3
import httpx
from sqlalchemy import Connection, and_, case, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from archive.citations import (
    PDF_EXTRACTOR,
    ExtractedText,
    PreparedText,
    Transcript,
    extract_text,
    prepare,
)
from archive.config import DriftPolicy, Settings
from archive.dates import to_rfc3339, utc_now
from archive.exceptions import AmberError, InvalidInput, NotFound
from archive.fetch import FetchedDocument, fetch_async, guarded_async_client
from archive.hashing import content_address
from archive.index.schema import (
    admin_log,
    citations,
    drift_checks,
    drift_state,
    mementos,
    transcript_reviews,
    transcripts,
)
from archive.mementos import (
    CaptureFacts,
    Memento,
    Scope,
    check_media_type,
    memento_id,
    select_headers,
)
from archive.retention import REACHERS
from archive.uri import parse_uri_r

_T = TypeVar("_T")

if TYPE_CHECKING:
    from archive.drift_rules import CheckOutcome, Soft404Signals

log = logging.getLogger("amber.drift")

DRIFT_TOOL = "drift"
PASSAGE_MEDIA_TYPE = "text/plain; charset=utf-8"
# The verdicts (DESIGN.md "Drift"; archive.drift_rules.Verdict has the same values).
IDENTICAL, COSMETIC, MATERIAL, REVERSAL = "identical", "cosmetic", "material", "reversal"
GONE, SOFT_404, UNREACHABLE = "gone", "soft_404", "unreachable"
VERDICTS = (IDENTICAL, COSMETIC, MATERIAL, REVERSAL, GONE, SOFT_404, UNREACHABLE)
STABLE = frozenset({IDENTICAL, COSMETIC})
# What counts as erosion in drift rates; ``unreachable`` is inconclusive and never counts.
ERODED = frozenset({MATERIAL, REVERSAL, GONE, SOFT_404})
CHANGED_PASSAGE = frozenset({MATERIAL, REVERSAL})
MAX_NOTE = 2000
_RATE_CACHE_SECONDS = 60.0


class CitationNotFound(NotFound):
    code = "citation_not_found"


# -- records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """Where the cited passage (or its closest modified version) is in the live text."""

    start: int
    end: int
    method: str  # exact | normalised | fuzzy
    score: float | None


@dataclass(frozen=True)
class CheckRecord:
    """One observation of the live URI-R for one citation."""

    id: str
    tenant: str
    citation_id: str
    transcript_id: str
    memento_id: str  # the cited passage memento
    uri_r: str
    host: str
    run_id: str
    checked_at: datetime
    verdict: str
    redirected_to: str | None
    http_status: int | None
    error: str | None
    fetch_ms: int | None
    extract_ms: int | None
    classify_ms: int | None
    extractor: str | None
    extractor_version: str | None
    rules_version: str
    live_hash: str | None
    location: Location | None
    reasons: tuple[str, ...]
    diff: Any
    new_passage_memento_id: str | None
    live_document_memento_id: str | None
    flagged: bool = False  # this check set needs_review on the transcript
    new_passage_hash: str | None = None  # content hash of what replaced the passage

    def as_json(self) -> dict[str, Any]:
        """The wire form (``amber drift run --json``, the API): ids, verdict, no page text."""
        return {
            "id": self.id,
            "citation_id": self.citation_id,
            "transcript_id": self.transcript_id,
            "memento_id": self.memento_id,
            "uri_r": self.uri_r,
            "host": self.host,
            "verdict": self.verdict,
            "redirected_to": self.redirected_to,
            "http_status": self.http_status,
            "checked_at": to_rfc3339(self.checked_at),
            "error": self.error,
            "timings_ms": {
                "fetch": self.fetch_ms,
                "extract": self.extract_ms,
                "classify": self.classify_ms,
            },
            "extractor": self.extractor,
            "extractor_version": self.extractor_version,
            "rules_version": self.rules_version,
            "live_hash": self.live_hash,
            "found": None
            if self.location is None
            else {
                "start": self.location.start,
                "end": self.location.end,
                "method": self.location.method,
                "score": self.location.score,
            },
            "reasons": list(self.reasons),
            "new_passage_memento_id": self.new_passage_memento_id,
            "live_document_memento_id": self.live_document_memento_id,
            "flagged_for_review": self.flagged,
        }


@dataclass(frozen=True)
class DueCitation:
    """A citation chosen for a check, with what the check needs to know about it."""

    id: str
    tenant: str
    transcript_id: str
    memento_id: str
    uri_r: str
    urir_key: str
    host: str
    document_hash: str
    document_media_type: str
    headers: dict[str, str]
    exact: str
    prefix: str
    suffix: str
    position: int
    extractor: str
    extractor_version: str
    last_verdict: str | None
    last_conclusive_verdict: str | None
    last_new_passage_memento_id: str | None
    last_new_passage_hash: str | None
    stable_streak: int
    retain_until: datetime  # the citing transcript's: drift mementos live as long


@dataclass(frozen=True)
class SourceRate:
    """How much of what a tenant cites from one host had eroded at its latest check."""

    host: str
    checked: int  # citations with a conclusive check in the window
    eroded: int  # … whose latest verdict is material, reversal, gone or soft_404
    verdicts: dict[str, int]

    @property
    def rate(self) -> float:
        return self.eroded / self.checked if self.checked else 0.0


@dataclass(frozen=True)
class Review:
    tenant: str
    transcript_id: str
    needs_review: bool
    reasons: list[dict[str, Any]]
    flagged_at: datetime | None
    cleared_by: str | None
    cleared_note: str | None
    cleared_at: datetime | None


@dataclass(frozen=True)
class CitationDrift:
    citation_id: str
    transcript_id: str
    memento_id: str
    uri_r: str
    checks: list[CheckRecord]  # newest first

    @property
    def latest(self) -> CheckRecord | None:
        return self.checks[0] if self.checks else None


@dataclass(frozen=True)
class RunSummary:
    checks: list[CheckRecord]
    not_checkable: int  # citations whose URI-R is not http(s): never checked by this job
    due: int
    uri_rs: int
    failed: int = 0  # citations left unchecked by an unexpected error (logged; still due)

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys(VERDICTS, 0)
        for check in self.checks:
            found[check.verdict] += 1
        return found


# -- helpers ------------------------------------------------------------------------------


def _rules() -> Any:
    """:mod:`archive.drift_rules`, imported when a check runs (reads need only this module)."""
    from archive import drift_rules

    return drift_rules


def _less_slack(hours: float) -> timedelta:
    """An interval less a little slack (a tenth, at most an hour), so that a nightly run
    starting at the same hour picks up what the previous night checked a bit later."""
    return timedelta(hours=hours - min(1.0, hours / 10))


def host_of(urir_key: str) -> str:
    """``host[:port]`` of a web lookup key (already lower-cased, IDNA, default port dropped)."""
    return urir_key.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _is_web() -> Any:
    lowered = func.lower(citations.c.document_uri_r)
    return or_(lowered.like("http://%"), lowered.like("https://%"))


def _upsert(dialect: str, table: Any) -> Any:
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    return str(value)


class _HostGate:
    """At most ``concurrency`` requests in flight to one host, starts ``delay`` apart."""

    def __init__(self, concurrency: int, delay: float) -> None:
        self._slots = asyncio.Semaphore(concurrency)
        self._order = asyncio.Lock()
        self._delay = delay
        self._next = 0.0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._slots:
            async with self._order:
                loop = asyncio.get_running_loop()
                wait = self._next - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._next = loop.time() + self._delay
            yield


@dataclass
class _Live:
    """The live representation of one URI-R, fetched once per run."""

    document: FetchedDocument | None
    error: str | None
    fetch_ms: int | None
    extracted: ExtractedText | None = None
    prepared: PreparedText | None = None
    extract_ms: int | None = None
    live_hash: str | None = None
    title: str | None = None
    soft404: Soft404Signals | None = None
    contents: dict[str, bytes] = field(default_factory=dict)  # bytes of mementos made


@dataclass
class _Pending:
    """Rows of one finished URI-R, waiting for the batch commit."""

    records: list[CheckRecord]
    mementos: list[Memento]
    due: dict[str, DueCitation]
    contents: dict[str, bytes] = field(default_factory=dict)  # blob bytes, for revival


# -- the service --------------------------------------------------------------------------


class DriftService:
    """Drift checks of one archive: the job, the stored checks, review flags and rates."""

    def __init__(self, archive: Any) -> None:
        # ``archive`` is the Archive facade; typed loosely to keep imports one-way.
        self.archive = archive
        self.index = archive.index
        self.settings: Settings = archive.settings
        self._rates: OrderedDict[tuple[str, str, int], tuple[float, SourceRate | None]] = (
            OrderedDict()
        )

    @property
    def policy(self) -> DriftPolicy:
        return self.settings.drift

    def job(self) -> DriftJob:
        return DriftJob(self)

    def run(
        self,
        limit: int | None = None,
        concurrency: int | None = None,
        now: datetime | None = None,
        **options: Any,
    ) -> list[CheckRecord]:
        return self.job().run(limit, concurrency, now, **options)

    # -- choosing -------------------------------------------------------------------------

    def due(
        self, now: datetime, limit: int | None = None, *, tenant: str | None = None
    ) -> list[DueCitation]:
        """Citations due for a check at ``now``: never checked first, then the oldest."""
        policy = self.policy
        interval = now - _less_slack(policy.interval_hours)
        stable = now - _less_slack(policy.stable_interval_hours)
        retry = now - _less_slack(policy.retry_hours)
        state = drift_state.c
        is_due = or_(
            state.citation_id.is_(None),
            and_(state.last_verdict == UNREACHABLE, state.last_checked_at <= retry),
            and_(
                state.last_verdict != UNREACHABLE,
                state.stable_streak >= policy.stable_after,
                state.last_checked_at <= stable,
            ),
            and_(
                state.last_verdict != UNREACHABLE,
                state.stable_streak < policy.stable_after,
                state.last_checked_at <= interval,
            ),
        )
        query = (
            select(
                citations,
                mementos.c.urir_key,
                state.last_verdict,
                state.last_conclusive_verdict,
                state.last_new_passage_memento_id,
                state.last_new_passage_hash,
                state.stable_streak,
                transcripts.c.retain_until,
            )
            .join(mementos, mementos.c.id == citations.c.passage_memento_id)
            .join(
                transcripts,
                and_(
                    transcripts.c.tenant == citations.c.tenant,
                    transcripts.c.id == citations.c.transcript_id,
                ),
            )
            .outerjoin(drift_state, state.citation_id == citations.c.id)
            .where(
                citations.c.selector_json.is_not(None),
                mementos.c.deleted_at.is_(None),
                _is_web(),
                is_due,
            )
            .order_by(
                case((state.last_checked_at.is_(None), 0), else_=1),
                state.last_checked_at,
                citations.c.id,
            )
        )
        if tenant is not None:
            query = query.where(citations.c.tenant == tenant)
        if limit is not None:
            query = query.limit(limit)
        with self.index.read() as connection:
            rows = connection.execute(query).all()
        return [self._due_from(row) for row in rows]

    def _due_from(self, row: Any) -> DueCitation:
        selector = json.loads(row.selector_json)
        return DueCitation(
            id=row.id,
            tenant=row.tenant,
            transcript_id=row.transcript_id,
            memento_id=row.passage_memento_id,
            uri_r=row.document_uri_r,
            urir_key=row.urir_key,
            host=host_of(row.urir_key),
            document_hash=row.document_hash,
            document_media_type=row.document_media_type,
            headers=json.loads(row.document_headers_json),
            exact=selector["exact"],
            prefix=selector.get("prefix") or "",
            suffix=selector.get("suffix") or "",
            position=row.position_start,
            extractor=row.extractor,
            extractor_version=row.extractor_version,
            last_verdict=row.last_verdict,
            last_conclusive_verdict=row.last_conclusive_verdict,
            last_new_passage_memento_id=row.last_new_passage_memento_id,
            last_new_passage_hash=row.last_new_passage_hash,
            stable_streak=row.stable_streak or 0,
            retain_until=row.retain_until,
        )

    def not_checkable(self, *, tenant: str | None = None) -> int:
        """Citations this job never checks: their URI-R is not http(s) (e.g. ``kb:``)."""
        query = (
            select(func.count())
            .select_from(citations)
            .where(citations.c.selector_json.is_not(None), ~_is_web())
        )
        if tenant is not None:
            query = query.where(citations.c.tenant == tenant)
        with self.index.read() as connection:
            return int(connection.execute(query).scalar_one())

    # -- storing --------------------------------------------------------------------------

    def store(self, batch: Sequence[_Pending]) -> list[CheckRecord]:
        """Commit finished checks (and their mementos, state and review flags) atomically."""
        records = [r for p in batch for r in p.records]
        if not records:
            return []
        due = {k: v for p in batch for k, v in p.due.items()}
        contents = {a: c for p in batch for a, c in p.contents.items()}
        with self.index.write() as connection:
            outcomes = self.index.insert_mementos(
                connection,
                [m for p in batch for m in p.mementos],
                revive=lambda address: self.archive.blobs.put(
                    contents[address], retain_until=self.archive.initial_lock(utc_now())
                ),
            )
            gone = {o.memento.id for o in outcomes if o.memento.deleted_at is not None}
            # A check may link the new passage an earlier check archived: retention may have
            # deleted that one since.
            inserted = {o.memento.id for o in outcomes}
            linked = {
                i
                for r in records
                for i in (r.new_passage_memento_id, r.live_document_memento_id)
                if i and i not in inserted
            }
            gone |= self.index.deleted_among(connection, linked)
            records = [_unlink(r, gone) for r in records]
            self.index.insert_ignoring(
                connection, drift_checks, [_check_row(r) for r in records], conflict=["id"]
            )
            # What a check archived lives as long as the transcript whose citation it was
            # checked for (retention also finds it through ``_drift_reach``).
            keep: dict[tuple[str, datetime], list[str]] = {}
            for record in records:
                made = [
                    i for i in (record.new_passage_memento_id, record.live_document_memento_id) if i
                ]
                if made:
                    keep.setdefault(
                        (record.tenant, due[record.citation_id].retain_until), []
                    ).extend(made)
            for (tenant, until), ids in keep.items():
                self.index.extend_expiry(connection, tenant, ids, until)
            statement = _upsert(self.index.dialect, drift_state)
            statement = statement.on_conflict_do_update(
                index_elements=["citation_id"],
                set_={
                    c.name: statement.excluded[c.name]
                    for c in drift_state.columns
                    if c.name != "citation_id"
                },
                where=drift_state.c.last_checked_at <= statement.excluded.last_checked_at,
            )
            connection.execute(statement, [_state_row(r, due[r.citation_id]) for r in records])
            stored = []
            for record in records:
                flagged = self._needs_review(record, due[record.citation_id])
                if flagged:
                    self._flag(connection, record)
                stored.append(_replace_flag(record, flagged))
        self._rates.clear()  # rates cached for new citations are stale now
        return stored

    def _needs_review(self, record: CheckRecord, due: DueCitation) -> bool:
        if record.verdict not in self.policy.review_on:
            return False
        # The same finding as at the last check: a cleared review stays cleared.
        return not (
            due.last_conclusive_verdict == record.verdict
            and due.last_new_passage_hash == record.new_passage_hash
        )

    def _flag(self, connection: Connection, record: CheckRecord) -> None:
        reason = {
            "check_id": record.id,
            "citation_id": record.citation_id,
            "verdict": record.verdict,
            "checked_at": to_rfc3339(record.checked_at),
            "uri_r": record.uri_r,
            "reasons": list(record.reasons),
        }
        key = and_(
            transcript_reviews.c.tenant == record.tenant,
            transcript_reviews.c.transcript_id == record.transcript_id,
        )
        row = connection.execute(select(transcript_reviews).where(key)).first()
        if row is None:
            connection.execute(
                insert(transcript_reviews).values(
                    tenant=record.tenant,
                    transcript_id=record.transcript_id,
                    needs_review=1,
                    reasons_json=json.dumps([reason]),
                    flagged_at=record.checked_at,
                )
            )
            return
        reasons = json.loads(row.reasons_json) if row.needs_review else []
        if any(r.get("check_id") == record.id for r in reasons):
            return
        reasons.append(reason)
        connection.execute(
            update(transcript_reviews)
            .where(key)
            .values(
                needs_review=1,
                reasons_json=json.dumps(reasons),
                flagged_at=row.flagged_at if row.needs_review else record.checked_at,
            )
        )

    # -- reading --------------------------------------------------------------------------

    def history(self, tenant: str, citation_id: str, *, limit: int = 100) -> CitationDrift:
        with self.index.read() as connection:
            cited = connection.execute(
                select(
                    citations.c.id,
                    citations.c.transcript_id,
                    citations.c.passage_memento_id,
                    citations.c.document_uri_r,
                    citations.c.selector_json,
                ).where(citations.c.tenant == tenant, citations.c.id == citation_id)
            ).first()
            if cited is None:
                raise CitationNotFound("no citation with this id")
            rows = connection.execute(
                select(drift_checks)
                .where(drift_checks.c.tenant == tenant, drift_checks.c.citation_id == citation_id)
                .order_by(drift_checks.c.checked_at.desc(), drift_checks.c.id.desc())
                .limit(limit)
            ).all()
        checks = [_record_from(r) for r in rows]
        if cited.selector_json is None:  # tombstoned by retention: no passage text, old or new
            checks = [replace(c, diff=None) for c in checks]
        return CitationDrift(
            cited.id, cited.transcript_id, cited.passage_memento_id, cited.document_uri_r, checks
        )

    def latest(self, tenant: str, citation_ids: Iterable[str]) -> dict[str, CheckRecord]:
        """The latest check of each of ``citation_ids`` that has one."""
        ids = list(citation_ids)
        if not ids:
            return {}
        with self.index.read() as connection:
            rows = connection.execute(
                select(drift_checks)
                .join(drift_state, drift_state.c.last_check_id == drift_checks.c.id)
                .where(drift_state.c.tenant == tenant, drift_state.c.citation_id.in_(ids))
            ).all()
        return {row.citation_id: _record_from(row) for row in rows}

    def source_rates(
        self,
        tenant: str,
        *,
        window_days: int | None = None,
        now: datetime | None = None,
        hosts: Iterable[str] | None = None,
    ) -> list[SourceRate]:
        """Per host: of the citations checked conclusively in the window, how many had
        eroded at their latest check. Sorted by rate (highest first), then host."""
        window = window_days or self.policy.window_days
        if window < 1:
            raise InvalidInput("window_days must be at least 1")
        since = (now or utc_now()) - timedelta(days=window)
        conclusive = and_(
            drift_checks.c.tenant == tenant,
            drift_checks.c.checked_at >= since,
            drift_checks.c.verdict != UNREACHABLE,
        )
        wanted = list(hosts) if hosts is not None else None
        if wanted is not None:
            conclusive = and_(conclusive, drift_checks.c.host.in_(wanted))
        latest = (
            select(drift_checks.c.citation_id, func.max(drift_checks.c.checked_at).label("at"))
            .where(conclusive)
            .group_by(drift_checks.c.citation_id)
            .subquery()
        )
        query = (
            select(drift_checks.c.host, drift_checks.c.verdict, func.count().label("n"))
            .join(
                latest,
                and_(
                    latest.c.citation_id == drift_checks.c.citation_id,
                    latest.c.at == drift_checks.c.checked_at,
                ),
            )
            .where(conclusive)
            .group_by(drift_checks.c.host, drift_checks.c.verdict)
        )
        per_host: dict[str, dict[str, int]] = {}
        with self.index.read() as connection:
            for row in connection.execute(query):
                per_host.setdefault(row.host, {})[row.verdict] = int(row.n)
        rates = [
            SourceRate(
                host,
                sum(v.values()),
                sum(n for k, n in v.items() if k in ERODED),
                {k: v.get(k, 0) for k in VERDICTS if k != UNREACHABLE},
            )
            for host, v in per_host.items()
        ]
        return sorted(rates, key=lambda r: (-r.rate, r.host))

    def host_rate(self, tenant: str, host: str) -> SourceRate | None:
        """The drift rate of one host over the default window, cached briefly (hot path)."""
        window = self.policy.window_days
        key = (tenant, host, window)
        found = self._rates.get(key)
        if found is not None and time.monotonic() - found[0] < _RATE_CACHE_SECONDS:
            return found[1]
        rates = self.source_rates(tenant, window_days=window, hosts=[host])
        rate = rates[0] if rates else None
        self._rates[key] = (time.monotonic(), rate)
        while len(self._rates) > 4096:
            self._rates.popitem(last=False)
        return rate

    # -- review ---------------------------------------------------------------------------

    def review(self, tenant: str, transcript_id: str) -> Review:
        self.archive.transcripts.get(tenant, transcript_id)  # unknown transcript → 404
        with self.index.read() as connection:
            row = connection.execute(
                select(transcript_reviews).where(
                    transcript_reviews.c.tenant == tenant,
                    transcript_reviews.c.transcript_id == transcript_id,
                )
            ).first()
        return _review_from(row) if row else _no_review(tenant, transcript_id)

    def transcripts(
        self,
        tenant: str,
        *,
        needs_review: bool | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[tuple[Transcript, Review]]:
        """Transcripts of ``tenant`` with their review state, by id; filtered when asked."""
        flag = func.coalesce(transcript_reviews.c.needs_review, 0)
        t = transcripts.c
        query = (
            select(
                t.id,
                t.created_at,
                t.updated_at,
                t.retention,
                t.retain_until,
                t.labels_json,
                t.legal_hold,
                transcript_reviews.c.transcript_id,
                transcript_reviews.c.tenant,
                transcript_reviews.c.needs_review,
                transcript_reviews.c.reasons_json,
                transcript_reviews.c.flagged_at,
                transcript_reviews.c.cleared_by,
                transcript_reviews.c.cleared_note,
                transcript_reviews.c.cleared_at,
            )
            .outerjoin(
                transcript_reviews,
                and_(
                    transcript_reviews.c.tenant == transcripts.c.tenant,
                    transcript_reviews.c.transcript_id == transcripts.c.id,
                ),
            )
            .where(transcripts.c.tenant == tenant)
            .order_by(transcripts.c.id)
            .limit(limit)
        )
        if needs_review is not None:
            query = query.where(flag == (1 if needs_review else 0))
        if after is not None:
            query = query.where(transcripts.c.id > after)
        with self.index.read() as connection:
            rows = connection.execute(query).all()
        found = []
        for row in rows:
            transcript = Transcript(
                tenant=tenant,
                id=row.id,
                created_at=row.created_at,
                updated_at=row.updated_at,
                retention=row.retention,
                retain_until=row.retain_until,
                labels=json.loads(row.labels_json),
                legal_hold=bool(row.legal_hold),
            )
            review = (
                _review_from(row) if row.transcript_id is not None else _no_review(tenant, row.id)
            )
            found.append((transcript, review))
        return found

    def clear_review(self, tenant: str, transcript_id: str, key_id: str, note: str) -> Review:
        """An auditor or admin clears ``needs_review`` with a note (kept in the admin log)."""
        if not isinstance(note, str) or not note.strip() or len(note) > MAX_NOTE:
            raise InvalidInput(f"a note of 1-{MAX_NOTE} characters is required")
        if any(ord(c) < 0x20 and c not in "\n\t" for c in note) or not _encodable(note):
            raise InvalidInput("the note must be text without control characters")
        self.archive.transcripts.get(tenant, transcript_id)
        now = utc_now()
        key = and_(
            transcript_reviews.c.tenant == tenant,
            transcript_reviews.c.transcript_id == transcript_id,
        )
        with self.index.write() as connection:
            row = connection.execute(select(transcript_reviews).where(key)).first()
            cleared = {
                "needs_review": 0,
                "cleared_by": key_id,
                "cleared_note": note,
                "cleared_at": now,
            }
            if row is None:
                connection.execute(
                    insert(transcript_reviews).values(
                        tenant=tenant, transcript_id=transcript_id, reasons_json="[]", **cleared
                    )
                )
            else:
                connection.execute(update(transcript_reviews).where(key).values(**cleared))
            reasons = json.loads(row.reasons_json) if row is not None and row.needs_review else []
            connection.execute(
                insert(admin_log).values(
                    id=secrets.token_hex(16),
                    tenant=tenant,
                    key_id=key_id,
                    action="review.clear",
                    target_kind="transcript",
                    target_id=transcript_id,
                    reason=note,
                    detail_json=json.dumps(
                        {"cleared_checks": [r.get("check_id") for r in reasons]}
                    ),
                    at=now,
                )
            )
            row = connection.execute(select(transcript_reviews).where(key)).first()
        assert row is not None
        log.info(
            json.dumps(
                {
                    "event": "drift.review_cleared",
                    "tenant": tenant,
                    "transcript_id": transcript_id,
                    "key_id": key_id,
                }
            )
        )
        return _review_from(row)


# -- the job ------------------------------------------------------------------------------


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
    """State of one run: the shared client, host gates, probes and the commit queue."""

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
        self.job = job
        self.service = job.service
        self.policy = job.policy
        self.run_id = run_id
        self.clock = clock
        self.on_check = on_check
        self.fetch_settings = job.settings.with_overrides(
            fetch_timeout_seconds=job.policy.timeout_seconds
        )
        self.concurrency = concurrency
        self.executor = ThreadPoolExecutor(concurrency + 4, thread_name_prefix="amber-drift")
        self.failed = 0
        self.gates: dict[str, _HostGate] = {}
        self.probes: dict[str, asyncio.Task[str | None]] = {}
        self.queue: asyncio.Queue[_Pending | None] = asyncio.Queue()
        self.stored: list[CheckRecord] = []
        self.client: httpx.AsyncClient | None = None

    async def execute(self, groups: list[list[DueCitation]]) -> list[CheckRecord]:
        queue = iter(_interleave(groups))  # shared by the workers: each takes the next group

        async def worker() -> None:
            for group in queue:
                await self._group(group)

        async with guarded_async_client(self.fetch_settings) as client:
            self.client = client
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

    def _thread(self, function: Callable[..., _T], *args: Any) -> Awaitable[_T]:
        """Run blocking work (extraction, classification, blob and index writes) off the loop."""
        return asyncio.get_running_loop().run_in_executor(self.executor, partial(function, *args))

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

    def _gate(self, host: str) -> _HostGate:
        gate = self.gates.get(host)
        if gate is None:
            gate = self.gates[host] = _HostGate(
                self.policy.host_concurrency, self.policy.host_delay_seconds
            )
        return gate

    async def _fetch(self, url: str, host: str, headers: dict[str, str]) -> _Live:
        assert self.client is not None
        async with self._gate(host).slot():
            started = time.monotonic()
            try:
                document = await fetch_async(
                    url, self.fetch_settings, headers=headers, client=self.client
                )
            except AmberError as error:
                return _Live(
                    None,
                    f"{error.code}: {error.message}",
                    round((time.monotonic() - started) * 1000),
                )
        return _Live(document, None, document.elapsed_ms)

    async def _group(self, group: list[DueCitation]) -> None:
        """Fetch one URI-R, check every citation of it, hand the rows to the writer. A bug
        on one page must not stop the run: it is logged and its citations stay due."""
        first = group[0]
        try:
            live = await self._fetch(first.uri_r, first.host, _conditional(group))
            pending = _Pending([], [], {c.id: c for c in group})
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

    def _analyse(
        self, cited: DueCitation, live: _Live, soft404: Soft404Signals | None
    ) -> tuple[CheckOutcome, int]:
        """Hash, extract (once per URI-R, only when some citation needs the text) and
        classify; CPU work, run in a worker thread. Returns the outcome and its time."""
        document = live.document
        if document is not None and live.live_hash is None and document.status != 304:
            live.live_hash = content_address(document.body)
        if live.live_hash is not None and live.live_hash != cited.document_hash:
            self._extract(live, cited)
        started = time.monotonic()
        outcome = self._classify(cited, live, soft404)
        return outcome, round((time.monotonic() - started) * 1000)

    def _extract(self, live: _Live, cited: DueCitation) -> None:
        document = live.document
        if document is None or live.extract_ms is not None:
            return
        started = time.monotonic()
        try:
            if not 200 <= document.status < 300 or not document.body:
                return
            media_type = document.content_type or cited.document_media_type
            try:
                live.extracted = extract_text(document.body, media_type, cache_key=live.live_hash)
            except AmberError:
                return  # not text we can read: the rules see no live text
            live.prepared = prepare(
                live.extracted.text, pdf=live.extracted.extractor == PDF_EXTRACTOR
            )
            try:
                live.title = _rules().html_title(document.body, media_type)
            except Exception:  # a title is only a hint
                live.title = None
        finally:
            live.extract_ms = round((time.monotonic() - started) * 1000)

    async def _soft404(self, live: _Live, cited: DueCitation) -> Soft404Signals | None:
        document = live.document
        if document is None or not 200 <= document.status < 300:
            return None
        if live.soft404 is None:
            probe_text = await self._probe(cited) if self.policy.soft_404_probe else None
            live.soft404 = _rules().soft_404_signals(
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
        sibling = str(httpx.URL(cited.uri_r).join(f"amber-drift-probe-{secrets.token_hex(8)}"))
        probe = await self._fetch(sibling, cited.host, {})
        document = probe.document
        if document is None or not 200 <= document.status < 300 or not document.body:
            return None
        try:
            extracted = await self._thread(
                extract_text, document.body, document.content_type or "text/html"
            )
        except AmberError:
            return None
        return extracted.text

    async def _check(self, cited: DueCitation, live: _Live) -> tuple[CheckRecord, list[Memento]]:
        document = live.document
        outcome, classify_ms = await self._thread(self._analyse, cited, live, None)
        if outcome.verdict in CHANGED_PASSAGE:  # absent or changed: is the page a soft 404?
            signals = await self._soft404(live, cited)
            if signals is not None:
                outcome, more = await self._thread(self._analyse, cited, live, signals)
                classify_ms += more
        verdict = _rules().Verdict(outcome.verdict).value
        checked_at = self.clock()
        made: list[Memento] = []
        passage_id = document_id = passage_hash = None
        location = _location(outcome)
        if (
            document is not None
            and verdict in CHANGED_PASSAGE
            and location is not None
            and live.extracted is not None
        ):
            passage_hash, passage_id, made = await self._thread(
                self._new_mementos, cited, document, live, location
            )
            document_id = next((m.id for m in made if m.scope is Scope.DOCUMENT), None)
        reasons = [str(r) for r in outcome.reasons or ()]
        extracted = live.extracted
        if extracted is not None and (extracted.extractor, extracted.extractor_version) != (
            cited.extractor,
            cited.extractor_version,
        ):
            reasons.append(
                f"extractor changed since the citation: {cited.extractor} "
                f"{cited.extractor_version} -> {extracted.extractor} "
                f"{extracted.extractor_version}"
            )
        identity = "\n".join((cited.tenant, cited.id, self.run_id, to_rfc3339(checked_at)))
        record = CheckRecord(
            id=blake3.blake3(identity.encode()).hexdigest()[:32],
            tenant=cited.tenant,
            citation_id=cited.id,
            transcript_id=cited.transcript_id,
            memento_id=cited.memento_id,
            uri_r=cited.uri_r,
            host=cited.host,
            run_id=self.run_id,
            checked_at=checked_at,
            verdict=verdict,
            redirected_to=_redirected_to(cited, document),
            http_status=document.status if document else None,
            error=live.error,
            fetch_ms=live.fetch_ms,
            extract_ms=live.extract_ms,
            classify_ms=classify_ms,
            extractor=extracted.extractor if extracted else None,
            extractor_version=extracted.extractor_version if extracted else None,
            rules_version=_rules().RULES_VERSION,
            live_hash=live.live_hash,
            location=location,
            reasons=tuple(reasons),
            diff=_jsonable(outcome.diff),
            new_passage_memento_id=passage_id,
            live_document_memento_id=document_id,
            new_passage_hash=passage_hash,
        )
        return record, made

    def _classify(
        self, cited: DueCitation, live: _Live, soft404: Soft404Signals | None
    ) -> CheckOutcome:
        document = live.document
        return _rules().classify(
            status=document.status if document else None,
            error=live.error,
            live_hash=live.live_hash,
            recorded_hash=cited.document_hash,
            not_modified=document is not None and document.status == 304,
            live_text=live.prepared,
            old_exact=cited.exact,
            prefix=cited.prefix,
            suffix=cited.suffix,
            position=cited.position,
            soft404=soft404,
        )

    def _new_mementos(
        self, cited: DueCitation, document: FetchedDocument, live: _Live, location: Location
    ) -> tuple[str | None, str | None, list[Memento]]:
        """What the live page now says in the passage's place (and the page, if kept):
        ``(passage hash, passage memento id, mementos to store)``. The same new passage as
        at the last check is not archived again: the check links the earlier memento."""
        assert live.extracted is not None
        text = live.extracted.text
        context = self.job.context_chars
        passage_bytes = text[max(0, location.start - context) : location.end + context].encode(
            "utf-8"
        )
        if not passage_bytes:
            return None, None, []
        passage_hash = content_address(passage_bytes)
        if passage_hash == cited.last_new_passage_hash and cited.last_new_passage_memento_id:
            return passage_hash, cited.last_new_passage_memento_id, []
        try:
            headers = select_headers(document.headers)
        except AmberError:
            headers = {}
        facts = CaptureFacts(
            tool=DRIFT_TOOL,
            final_url=document.final_url,
            http_status=document.status,
            headers=headers,
        )
        captured_at = document.fetched_at.replace(microsecond=0)
        blobs = self.service.archive.blobs
        now = utc_now()

        def make(content: bytes, media_type: str, scope: Scope) -> Memento:
            # Locked from the start like any other new evidence (S3 Object Lock).
            blob = blobs.put(content, retain_until=self.service.archive.initial_lock(now))
            live.contents[blob.address] = content
            return Memento(
                id=memento_id(cited.tenant, cited.urir_key, captured_at, blob.address),
                tenant=cited.tenant,
                uri_r=cited.uri_r,
                urir_key=cited.urir_key,
                captured_at=captured_at,
                archived_at=now,
                content_hash=blob.address,
                blob_version_id=blob.version_id,
                media_type=media_type,
                size=blob.size,
                scope=scope,
                facts=facts,
            )

        made = [make(passage_bytes, PASSAGE_MEDIA_TYPE, Scope.PASSAGE)]
        if self.job.keep_document:
            try:
                media_type = check_media_type(document.content_type or cited.document_media_type)
            except AmberError:
                media_type = None
            if media_type is not None:
                made.append(make(document.body, media_type, Scope.DOCUMENT))
        return passage_hash, made[0].id, made


# -- row mapping --------------------------------------------------------------------------


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


def _conditional(group: Sequence[DueCitation]) -> dict[str, str]:
    """Validators from the capture facts, only when every citation cites the same capture."""
    captures = {
        (c.document_hash, c.headers.get("etag"), c.headers.get("last-modified")) for c in group
    }
    if len(captures) != 1:
        return {}
    _, etag, modified = next(iter(captures))
    headers = {}
    if etag:
        headers["If-None-Match"] = etag
    if modified:
        headers["If-Modified-Since"] = modified
    return headers


def _redirected_to(cited: DueCitation, document: FetchedDocument | None) -> str | None:
    if document is None or not document.redirects:
        return None
    final = document.final_url
    try:
        same = parse_uri_r(final).key == cited.urir_key
    except AmberError:
        same = final == cited.uri_r
    return None if same else final


def _location(outcome: CheckOutcome) -> Location | None:
    found = outcome.location
    if found is None:
        return None
    score = getattr(found, "score", None)
    return Location(
        int(found.start),
        int(found.end),
        str(found.method),
        float(score) if score is not None else None,
    )


def _unlink(record: CheckRecord, deleted: set[str]) -> CheckRecord:
    """Never link a check to a memento retention already deleted (ids are never reused)."""
    if record.new_passage_memento_id in deleted or record.live_document_memento_id in deleted:
        return replace(
            record,
            new_passage_memento_id=None
            if record.new_passage_memento_id in deleted
            else record.new_passage_memento_id,
            live_document_memento_id=None
            if record.live_document_memento_id in deleted
            else record.live_document_memento_id,
        )
    return record


def _drift_reach(ids: Any) -> list[Any]:
    """Retention: a memento a drift check archived is reached by the checked citation's
    transcript (its retention and legal hold apply). ``ids``: a subquery of memento ids."""
    return [
        select(
            column.label("memento_id"), drift_checks.c.tenant, drift_checks.c.transcript_id
        ).where(column.in_(ids))
        for column in (
            drift_checks.c.new_passage_memento_id,
            drift_checks.c.live_document_memento_id,
        )
    ]


REACHERS.append(_drift_reach)


def _replace_flag(record: CheckRecord, flagged: bool) -> CheckRecord:
    return replace(record, flagged=True) if flagged else record


def _state_row(record: CheckRecord, due: DueCitation) -> dict[str, Any]:
    """The citation's drift state after ``record``; unreachable keeps the last conclusive."""
    conclusive = record.verdict != UNREACHABLE
    if record.verdict in STABLE:
        streak = due.stable_streak + 1
    elif conclusive:
        streak = 0
    else:
        streak = due.stable_streak
    return {
        "citation_id": record.citation_id,
        "tenant": record.tenant,
        "last_check_id": record.id,
        "last_checked_at": record.checked_at,
        "last_verdict": record.verdict,
        "last_conclusive_verdict": record.verdict if conclusive else due.last_conclusive_verdict,
        "last_new_passage_memento_id": (
            record.new_passage_memento_id if conclusive else due.last_new_passage_memento_id
        ),
        "last_new_passage_hash": record.new_passage_hash
        if conclusive
        else due.last_new_passage_hash,
        "stable_streak": streak,
    }


def _check_row(r: CheckRecord) -> dict[str, Any]:
    return {
        "id": r.id,
        "tenant": r.tenant,
        "citation_id": r.citation_id,
        "transcript_id": r.transcript_id,
        "memento_id": r.memento_id,
        "uri_r": r.uri_r,
        "host": r.host,
        "run_id": r.run_id,
        "checked_at": r.checked_at,
        "verdict": r.verdict,
        "redirected_to": r.redirected_to,
        "http_status": r.http_status,
        "error": r.error,
        "fetch_ms": r.fetch_ms,
        "extract_ms": r.extract_ms,
        "classify_ms": r.classify_ms,
        "extractor": r.extractor,
        "extractor_version": r.extractor_version,
        "rules_version": r.rules_version,
        "live_hash": r.live_hash,
        "found_start": r.location.start if r.location else None,
        "found_end": r.location.end if r.location else None,
        "found_method": r.location.method if r.location else None,
        "found_score": r.location.score if r.location else None,
        "reasons_json": json.dumps(list(r.reasons), ensure_ascii=False),
        "diff_json": json.dumps(r.diff, ensure_ascii=False) if r.diff is not None else None,
        "new_passage_memento_id": r.new_passage_memento_id,
        "live_document_memento_id": r.live_document_memento_id,
    }


def _record_from(row: Any) -> CheckRecord:
    location = None
    if row.found_start is not None and row.found_end is not None:
        location = Location(row.found_start, row.found_end, row.found_method or "", row.found_score)
    return CheckRecord(
        id=row.id,
        tenant=row.tenant,
        citation_id=row.citation_id,
        transcript_id=row.transcript_id,
        memento_id=row.memento_id,
        uri_r=row.uri_r,
        host=row.host,
        run_id=row.run_id,
        checked_at=row.checked_at,
        verdict=row.verdict,
        redirected_to=row.redirected_to,
        http_status=row.http_status,
        error=row.error,
        fetch_ms=row.fetch_ms,
        extract_ms=row.extract_ms,
        classify_ms=row.classify_ms,
        extractor=row.extractor,
        extractor_version=row.extractor_version,
        rules_version=row.rules_version,
        live_hash=row.live_hash,
        location=location,
        reasons=tuple(json.loads(row.reasons_json)),
        diff=json.loads(row.diff_json) if row.diff_json is not None else None,
        new_passage_memento_id=row.new_passage_memento_id,
        live_document_memento_id=row.live_document_memento_id,
    )


def _review_from(row: Any) -> Review:
    return Review(
        tenant=row.tenant,
        transcript_id=row.transcript_id,
        needs_review=bool(row.needs_review),
        reasons=json.loads(row.reasons_json) if row.needs_review else [],
        flagged_at=row.flagged_at,
        cleared_by=row.cleared_by,
        cleared_note=row.cleared_note,
        cleared_at=row.cleared_at,
    )


def _no_review(tenant: str, transcript_id: str) -> Review:
    return Review(tenant, transcript_id, False, [], None, None, None, None)


__all__ = [
    "CheckRecord",
    "CitationDrift",
    "CitationNotFound",
    "DriftJob",
    "DriftService",
    "DueCitation",
    "Location",
    "Review",
    "RunSummary",
    "SourceRate",
    "host_of",
]
