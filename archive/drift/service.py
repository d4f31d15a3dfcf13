"""The drift service: which citations are due, storing checks, history, rates and review.

The job that fetches and classifies (:meth:`DriftService.job`, :mod:`archive.drift.job`)
is imported only when a run starts, with the rules: reading checks, rates and review flags
needs neither.

A citation is due (:meth:`DriftService.due`) when it was never checked, or last checked
longer ago than ``[drift] interval_hours`` (less a tenth, at most an hour, of slack so a
nightly run finds last night's checks due); a citation whose last ``stable_after`` checks
were all ``identical``/``cosmetic`` is a stable source and waits ``stable_interval_hours``;
an ``unreachable`` check (inconclusive) is retried after ``retry_hours``. Only
``http``/``https`` URI-Rs are checked; other schemes (``kb:``) are counted as *not
checkable* and never get a verdict. Tombstoned citations (no selector left) and deleted
passages are never checked.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import and_, case, func, or_, select

from archive.blobstore.base import BlobStore
from archive.citations import Transcript, TranscriptBook
from archive.citations.ledger import Redate
from archive.citations.textmemory import TextMemory
from archive.config import DriftPolicy, Settings
from archive.dates import utc_now
from archive.drift.records import (
    ERODED,
    UNREACHABLE,
    VERDICTS,
    CheckRecord,
    CitationDrift,
    DueCitation,
    Pending,
    Review,
    SourceRate,
    check_row,
    due_from,
    is_web,
    record_from,
    state_row,
    unlink,
    upsert,
    with_flag,
)
from archive.drift.reviews import ReviewFlags
from archive.drift.rules.edits import UNJUDGED
from archive.exceptions import CitationNotFound, InvalidInput
from archive.index import Index
from archive.index.schema import citations, drift_checks, drift_state, mementos, transcripts

if TYPE_CHECKING:
    from archive.drift.job import DriftJob
    from archive.drift.rules import Classify

_RATE_CACHE_SECONDS = 60.0


class DriftService:
    """Drift checks of one archive: the job, the stored checks, review flags and rates.

    Two seams a test may replace on one service (``monkeypatch.setattr(service, ...)``),
    because every run goes through them: :meth:`store` (the batch commit: a stand-in that
    raises is a run killed before its commit) and :attr:`classify` (the verdict for one
    citation, called in the job's worker threads: a stand-in that raises for one page is a
    bug on that page). ``classify`` None means :func:`archive.drift.rules.classify`.
    """

    def __init__(
        self,
        settings: Settings,
        index: Index,
        blobs: BlobStore,
        transcript_book: TranscriptBook,
        initial_lock: Callable[[datetime], datetime | None],
        redate: Redate,
        *,
        classify: Classify | None = None,
        memory: TextMemory | None = None,
    ) -> None:
        self.settings = settings
        # The extraction cache holds live pages' text: heeded before each run (textmemory).
        self.memory = memory if memory is not None else TextMemory(None)
        self.index = index
        self.blobs = blobs
        # When a new blob's Object Lock retention ends (the facade's ``initial_lock``).
        self.initial_lock = initial_lock
        # Retention's Evaluator.redate: dates what a check archived from the transcripts
        # reaching it, inside the check's transaction.
        self.redate = redate
        self.classify = classify
        self.reviews = ReviewFlags(index, transcript_book)
        self._rates: OrderedDict[tuple[str, str, int], tuple[float, SourceRate | None]] = (
            OrderedDict()
        )

    @property
    def policy(self) -> DriftPolicy:
        return self.settings.drift

    def job(self) -> DriftJob:
        from archive.drift.job import DriftJob  # the rules load with the first run

        return DriftJob(self)

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
        return self.job().run(
            limit, concurrency, now, tenant=tenant, on_plan=on_plan, on_check=on_check
        )

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
                is_web(),
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
        return [due_from(row) for row in rows]

    def not_checkable(self, *, tenant: str | None = None) -> int:
        """Citations this job never checks: their URI-R is not http(s) (e.g. ``kb:``)."""
        query = (
            select(func.count())
            .select_from(citations)
            .where(citations.c.selector_json.is_not(None), ~is_web())
        )
        if tenant is not None:
            query = query.where(citations.c.tenant == tenant)
        with self.index.read() as connection:
            return int(connection.execute(query).scalar_one())

    # -- storing --------------------------------------------------------------------------

    def store(self, batch: Sequence[Pending]) -> list[CheckRecord]:
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
                revive=lambda address: self.blobs.put(
                    contents[address], retain_until=self.initial_lock(utc_now())
                ),
                contents=contents,
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
            records = [unlink(r, gone) for r in records]
            self.index.inserts.insert_ignoring(
                connection, drift_checks, [check_row(r) for r in records], conflict=["id"]
            )
            # What a check archived expires with the transcripts reaching it (through the
            # drift reacher in records), as they stand in this transaction — before its grace
            # date when they are short.
            self.redate(
                connection,
                {
                    i
                    for record in records
                    for i in (record.new_passage_memento_id, record.live_document_memento_id)
                    if i
                },
            )
            statement = upsert(self.index.dialect, drift_state)
            statement = statement.on_conflict_do_update(
                index_elements=["citation_id"],
                set_={
                    c.name: statement.excluded[c.name]
                    for c in drift_state.columns
                    if c.name != "citation_id"
                },
                where=drift_state.c.last_checked_at <= statement.excluded.last_checked_at,
            )
            connection.execute(statement, [state_row(r, due[r.citation_id]) for r in records])
            stored = []
            for record in records:
                flagged = self._needs_review(record, due[record.citation_id])
                if flagged:
                    self.reviews.flag(connection, record)
                stored.append(with_flag(record, flagged))
        self._rates.clear()  # rates cached for new citations are stale now
        return stored

    def _needs_review(self, record: CheckRecord, due: DueCitation) -> bool:
        # A passage in a language the rules cannot read was not judged: a person must look,
        # whatever verdicts ``review_on`` names.
        unjudged = any(reason.startswith(UNJUDGED) for reason in record.reasons)
        if record.verdict not in self.policy.review_on and not unjudged:
            return False
        # The same finding as at the last check: a cleared review stays cleared.
        return not (
            due.last_conclusive_verdict == record.verdict
            and due.last_new_passage_hash == record.new_passage_hash
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
        checks = [record_from(r) for r in rows]
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
        return {row.citation_id: record_from(row) for row in rows}

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

    # -- review (see archive.drift.reviews) -----------------------------------------------

    def review(self, tenant: str, transcript_id: str) -> Review:
        return self.reviews.get(tenant, transcript_id)

    def transcripts(
        self,
        tenant: str,
        *,
        needs_review: bool | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[tuple[Transcript, Review]]:
        """Transcripts of ``tenant`` with their review state, by id; filtered when asked."""
        return self.reviews.transcripts(tenant, needs_review=needs_review, after=after, limit=limit)

    def clear_review(self, tenant: str, transcript_id: str, key_id: str, note: str) -> Review:
        """An auditor or admin clears ``needs_review`` with a note (kept in the admin log)."""
        return self.reviews.clear(tenant, transcript_id, key_id, note)


def _less_slack(hours: float) -> timedelta:
    """An interval less a little slack (a tenth, at most an hour), so that a nightly run
    starting at the same hour picks up what the previous night checked a bit later."""
    return timedelta(hours=hours - min(1.0, hours / 10))
