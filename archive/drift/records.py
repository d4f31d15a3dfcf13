"""Drift records: what a check observed, what a run chose and stored, and their rows.

The verdict names are those of ``amber-drift-1`` (``docs/specs/amber-drift-1.md``;
:class:`archive.drift.rules.Verdict` has the same values). This module also holds the drift
tables' row <-> record conversions and the SQL pieces the service shares with retention.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Row, Select, Table, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from archive.dates import to_rfc3339
from archive.index.schema import citations, drift_checks
from archive.mementos import Memento
from archive.retention import REACHERS

IDENTICAL, COSMETIC, MATERIAL, REVERSAL = "identical", "cosmetic", "material", "reversal"
GONE, SOFT_404, UNREACHABLE = "gone", "soft_404", "unreachable"
VERDICTS = (IDENTICAL, COSMETIC, MATERIAL, REVERSAL, GONE, SOFT_404, UNREACHABLE)
STABLE = frozenset({IDENTICAL, COSMETIC})
# What counts as erosion in drift rates; ``unreachable`` is inconclusive and never counts.
ERODED = frozenset({MATERIAL, REVERSAL, GONE, SOFT_404})
CHANGED_PASSAGE = frozenset({MATERIAL, REVERSAL})


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
    diff: str | None  # old and new wording of the passage; None once tombstoned
    new_passage_memento_id: str | None
    live_document_memento_id: str | None
    flagged: bool = False  # this check set needs_review on the transcript
    new_passage_hash: str | None = None  # content hash of what replaced the passage

    def as_json(self) -> dict[str, object]:
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
    """Whether a transcript needs a person's look because a check flagged one of its
    citations, and who cleared it."""

    tenant: str
    transcript_id: str
    needs_review: bool
    reasons: list[dict[str, object]]  # JSON objects, one per check that flagged the transcript
    flagged_at: datetime | None
    cleared_by: str | None
    cleared_note: str | None
    cleared_at: datetime | None


@dataclass(frozen=True)
class CitationDrift:
    """One citation's drift history: its checks, newest first."""

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
    """What one drift run did: its checks, and the citations it skipped or could not check."""

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


@dataclass
class Pending:
    """Rows of one finished URI-R, waiting for the batch commit."""

    records: list[CheckRecord]
    mementos: list[Memento]
    due: dict[str, DueCitation]
    contents: dict[str, bytes] = field(default_factory=dict)  # blob bytes, for revival


def host_of(urir_key: str) -> str:
    """``host[:port]`` of a web lookup key (already lower-cased, IDNA, default port dropped)."""
    return urir_key.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]


# -- SQL ----------------------------------------------------------------------------------


def is_web() -> ColumnElement[bool]:
    """The citation's URI-R is ``http``/``https``: the only ones this job checks."""
    lowered = func.lower(citations.c.document_uri_r)
    return or_(lowered.like("http://%"), lowered.like("https://%"))


def upsert(dialect: str, table: Table) -> postgresql.Insert | sqlite.Insert:
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


def _drift_reach(ids: Select[Any]) -> list[Select[Any]]:
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


# -- rows ---------------------------------------------------------------------------------


def due_from(row: Row[*tuple[Any, ...]]) -> DueCitation:
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


def unlink(record: CheckRecord, deleted: set[str]) -> CheckRecord:
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


def with_flag(record: CheckRecord, flagged: bool) -> CheckRecord:
    return replace(record, flagged=True) if flagged else record


def state_row(record: CheckRecord, due: DueCitation) -> dict[str, object]:
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


def check_row(r: CheckRecord) -> dict[str, object]:
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


def record_from(row: Row[*tuple[Any, ...]]) -> CheckRecord:
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
