"""Retention: every snapshot lives exactly as long as the transcripts that cite it.

Rules (DESIGN.md "Retention arithmetic"):

- A memento expires at the latest ``retain_until`` of the transcripts citing it; one nobody
  cites at ``archived_at`` + grace. A legal hold on a citing transcript, or on the memento,
  suspends expiry while it lasts. ``mementos.expires_at`` caches the answer so a sweep only
  looks at what may have expired (its cost grows with what expired, not with the archive);
  every candidate is re-evaluated from the citations before anything is deleted.
- Deletion is in place: the memento row stays as its own tombstone (hashes, dates, policy,
  ``deleted_at``, ``deletion_reason``) and leaves TimeMaps; citations lose their selector text.
- A blob is shared by every memento with the same bytes and is deleted only when no live
  memento in any tenant references it. Deletion is two-phase: the batch that tombstones the
  last memento marks the blob ``deleting``; then, a few blobs per transaction, under the
  write lock (SQLite's single writer, PostgreSQL ``FOR UPDATE``), the state is checked
  again, the bytes deleted and the blobs marked ``deleted`` — only once the store has made
  the deletions durable (the local store syncs each touched directory once per batch). A
  write landing on a ``deleting``/``deleted`` blob stores the bytes again under the same lock
  (``Index.insert_mementos(revive=…)``), so dedup can never acknowledge bytes a sweep removes.
- Every step is idempotent: a sweep killed anywhere leaves tombstones and ``deleting`` blobs
  that the next sweep finishes (deleting a blob already gone is a success).
- Every statement is set-based: a batch's ids travel as one JSON array parameter, so the
  cost per memento is a few index lookups, not a statement or a bound parameter each.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    Select,
    Text,
    and_,
    bindparam,
    cast,
    exists,
    func,
    insert,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from archive.citations import reached_mementos, resolve_retention
from archive.dates import to_rfc3339, utc_now
from archive.exceptions import (
    InvalidInput,
    NotFound,
    RetentionConflict,
    StorageError,
    TranscriptNotFound,
)
from archive.index import Index
from archive.schema import admin_log, blobs, citations, drift_checks, mementos, transcripts

MAX_REASON = 2000
# Blobs deleted per write transaction: enough to share one commit and one directory sync
# pass, few enough that the write lock is held for tens of milliseconds (writers wait on it).
BLOBS_PER_TRANSACTION = 100
# A store without batched deletes (S3: a round trip per delete) holds the lock longer per blob.
REMOTE_BLOBS_PER_TRANSACTION = 50
# SQLite reads the index through mmap while a sweep runs (SQLite caps it at its build's
# maximum, 2 GiB by default; a larger file is read normally past that).
SWEEP_MMAP_BYTES = 1 << 31


@dataclass
class SweepReport:
    dry_run: bool
    evaluated: int = 0
    mementos_deleted: int = 0
    blobs_deleted: int = 0
    bytes_deleted: int = 0
    held: int = 0
    not_yet: int = 0  # the store refused (Object Lock date not reached: clock skew)
    extended: int = 0  # candidates whose cached expiry was stale (now fixed)
    next_expiry: datetime | None = None
    deleted_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "evaluated": self.evaluated,
            "mementos_deleted": self.mementos_deleted,
            "blobs_deleted": self.blobs_deleted,
            "bytes_deleted": self.bytes_deleted,
            "held": self.held,
            "not_yet": self.not_yet,
            "extended": self.extended,
            "next_expiry": to_rfc3339(self.next_expiry) if self.next_expiry else None,
        }


class _Verdict(NamedTuple):  # a tuple: built once per evaluated memento, cheaply
    memento_id: str
    until: datetime  # the expiry the citations (or the grace period) give, holds aside
    held: bool  # under a legal hold: kept whatever ``until`` says
    cited: bool  # some transcript reaches it (else the grace period applies)

    @property
    def expiry(self) -> datetime | None:
        """When it may be deleted; None while held."""
        return None if self.held else self.until

    def reason(self, grace: timedelta, policies: Iterable[str]) -> dict[str, Any]:
        """Why it expired: dates and policy only (built for deleted mementos alone).

        ``policies``: ``transcript id:retention`` of each transcript reaching it."""
        assert self.expiry is not None
        if not self.cited:
            return {
                "kind": "retention",
                "policy": "uncited-grace",
                "grace_days": grace.days,
                "expired_at": to_rfc3339(self.expiry),
            }
        return {
            "kind": "retention",
            "policy": "transcripts",
            "expired_at": to_rfc3339(self.expiry),
            "transcripts": sorted(set(policies))[:20],
        }


def _check_reason(reason: str) -> str:
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
        raise InvalidInput(f"a reason (1-{MAX_REASON} characters) is required")
    return reason.strip()


@dataclass(frozen=True)
class _EvaluationQueries:
    """Built once: SQLAlchemy then reuses each statement's cache key and compiled form (for
    statements this size, rebuilding and re-keying them per batch cost more than running them)."""

    reachers: tuple[Callable[[Select[Any]], Iterable[Select[Any]]], ...]
    rows: Any  # id, archived_at, legal_hold of the live ones among :ids
    citing: Any  # memento_id, latest retain_until, any hold: over transcripts reaching :ids
    policies: Any  # memento_id, transcript id, retention: for the reasons of tombstones


class Retention:
    def __init__(self, archive: Any) -> None:
        self.archive = archive
        self.index: Index = archive.index
        self.grace = timedelta(days=archive.settings.citations.retention_days)
        self._queries: _EvaluationQueries | None = None

    # -- the sweep -----------------------------------------------------------------------

    def sweep(
        self,
        *,
        now: datetime | None = None,
        batch_size: int = 500,
        dry_run: bool = False,
        progress: Callable[[SweepReport], None] | None = None,
    ) -> SweepReport:
        now = now or utc_now()
        report = SweepReport(dry_run=dry_run)
        cursor: tuple[datetime, str] | None = None
        with self.mapped_index():
            while True:
                candidates = self._candidates(now, cursor, batch_size)
                if not candidates:
                    break
                cursor = candidates[-1]
                self._settle([c[1] for c in candidates], now, dry_run, report)
                if progress:
                    progress(report)
            if not dry_run:
                self._delete_dying_blobs(report)
        if not dry_run and lock_mode_of(self.archive.blobs):
            self.sync_locks()
        report.next_expiry = self._next_expiry(now)
        return report

    @contextmanager
    def mapped_index(self) -> Iterator[None]:
        """On SQLite, the writer connection (where candidates are evaluated) reads the index
        through mmap inside the block; its previous setting is restored after.

        Candidates are scattered over the whole index (ids are hashes): with SQLite's own
        page cache (2 MiB) nearly every probe misses and costs a read() of a page from the OS
        cache; mapped, it is a memory access. Reads only — writes and durability are as before.
        """
        if self.index.dialect != "sqlite":
            yield
            return
        with self.index.write() as connection:
            before = int(connection.exec_driver_sql("PRAGMA mmap_size").scalar() or 0)
            connection.exec_driver_sql(f"PRAGMA mmap_size={SWEEP_MMAP_BYTES}")
        try:
            yield
        finally:
            with self.index.write() as connection:
                connection.exec_driver_sql(f"PRAGMA mmap_size={before}")

    # -- S3 Object Lock: the store itself refuses early deletion ----------------------

    def sync_locks(self) -> dict[str, int]:
        """Extend each live blob's Object Lock to its latest expiry (rounded up to the day)
        and keep its legal-hold flag on while any hold in Amber reaches it.

        Retain-until dates only ever grow; rounding to the day turns a burst of citations
        into one PutObjectRetention per blob per day at most.
        """
        store = self.archive.blobs
        extended = holds_changed = 0
        with self.index.read() as connection:
            wanted = connection.execute(
                select(
                    mementos.c.content_hash,
                    mementos.c.blob_version_id,
                    func.max(mementos.c.expires_at).label("until"),
                    func.max(mementos.c.legal_hold).label("hold"),
                )
                .where(mementos.c.deleted_at.is_(None))
                .group_by(mementos.c.content_hash, mementos.c.blob_version_id)
            ).all()
            # Every path a sweep counts (citations, and what REACHERS adds, e.g. drift
            # checks' archived pages), so the store holds what Amber itself would keep.
            reach = self._reach(
                select(mementos.c.id).where(mementos.c.deleted_at.is_(None)), tuple(REACHERS)
            )
            held_by_transcripts = set(
                connection.execute(
                    select(mementos.c.content_hash)
                    .join(reach, reach.c.memento_id == mementos.c.id)
                    .join(
                        transcripts,
                        and_(
                            transcripts.c.tenant == reach.c.tenant,
                            transcripts.c.id == reach.c.transcript_id,
                        ),
                    )
                    .where(transcripts.c.legal_hold == 1)
                ).scalars()
            )
            applied = {
                row.address: row
                for row in connection.execute(
                    select(blobs.c.address, blobs.c.lock_until, blobs.c.lock_legal_hold)
                )
            }
        for row in wanted:
            current = applied.get(row.content_hash)
            until = ceil_to_day(row.until) if row.until else None
            hold = bool(row.hold) or row.content_hash in held_by_transcripts
            changes: dict[str, Any] = {}
            if until is not None and (
                current is None or current.lock_until is None or until > current.lock_until
            ):
                changes["lock_until"] = store.set_retention(
                    row.content_hash, row.blob_version_id, until
                )
                extended += 1
            if current is None or bool(current.lock_legal_hold) != hold:
                store.set_legal_hold(row.content_hash, row.blob_version_id, hold)
                changes["lock_legal_hold"] = 1 if hold else 0
                holds_changed += 1
            if changes:
                with self.index.write() as connection:
                    connection.execute(
                        update(blobs).where(blobs.c.address == row.content_hash).values(**changes)
                    )
        return {"extended": extended, "holds_changed": holds_changed}

    def _candidates(
        self, now: datetime, cursor: tuple[datetime, str] | None, limit: int
    ) -> list[tuple[datetime, str]]:
        # Keyset pagination over mementos_due (expires_at, id): tombstoned rows leave that
        # partial index, so the cursor only steps over held and re-extended candidates.
        due = and_(mementos.c.deleted_at.is_(None), mementos.c.expires_at <= now)
        if cursor is not None:
            due = and_(due, tuple_(mementos.c.expires_at, mementos.c.id) > cursor)
        query = (
            select(mementos.c.expires_at, mementos.c.id)
            .where(due)
            .order_by(mementos.c.expires_at, mementos.c.id)
            .limit(limit)
        )
        with self.index.read() as connection:
            return [(row.expires_at, row.id) for row in connection.execute(query)]

    def _settle(self, ids: list[str], now: datetime, dry_run: bool, report: SweepReport) -> None:
        with self.index.write(exclusive=True) as connection:
            verdicts = self._evaluate(connection, ids)
            report.evaluated += len(verdicts)
            expired, fresh = [], []
            for verdict in verdicts:
                if verdict.expiry is None:
                    report.held += 1
                elif verdict.expiry > now:
                    fresh.append(verdict)
                else:
                    expired.append(verdict)
            report.extended += len(fresh)
            report.mementos_deleted += len(expired)
            report.deleted_ids.extend(v.memento_id for v in expired)
            if dry_run:
                connection.rollback()
                return
            if fresh:
                connection.execute(
                    update(mementos)
                    .where(mementos.c.id == bindparam("target"))
                    .values(expires_at=bindparam("until")),
                    [{"target": v.memento_id, "until": v.expiry} for v in fresh],
                )
            self._tombstone(connection, expired, now)

    def _values(self, items: Iterable[str] | None = None) -> Select[Any]:
        """A one-column subquery of ids, bound as a single JSON array parameter (``items``, or
        the ``ids`` parameter given at execution when None).

        One parameter per batch instead of one per id: expanding a 500-item IN list cost
        SQLAlchemy more than the queries themselves, and no dialect limit on bound
        parameters applies.
        """
        payload = (
            bindparam("ids", type_=Text)
            if items is None
            else bindparam(None, json.dumps(list(items)), type_=Text)
        )
        if self.index.dialect == "postgresql":
            values = func.jsonb_array_elements_text(cast(payload, JSONB)).table_valued("value")
        else:
            values = func.json_each(payload).table_valued("value")
        return select(values.c.value)

    def _reach(
        self, ids: Select[Any], reachers: Iterable[Callable[[Select[Any]], Iterable[Select[Any]]]]
    ) -> Any:
        """(memento_id, tenant, transcript_id) for every transcript reaching one of ``ids``."""
        sources = [
            select(column.label("memento_id"), citations.c.tenant, citations.c.transcript_id).where(
                column.in_(ids)
            )
            for column in (citations.c.passage_memento_id, citations.c.document_memento_id)
        ]
        for reacher in reachers:
            sources.extend(reacher(ids))
        return union_all(*sources).subquery("reach")

    def _evaluation_queries(self) -> _EvaluationQueries:
        reachers = tuple(REACHERS)
        if (
            self._queries is None or self._queries.reachers != reachers
        ):  # rebuilt if one registers late
            ids = self._values()
            reach = self._reach(ids, reachers)
            by_transcript = and_(
                transcripts.c.tenant == reach.c.tenant, transcripts.c.id == reach.c.transcript_id
            )
            self._queries = _EvaluationQueries(
                reachers=reachers,
                rows=select(mementos.c.id, mementos.c.archived_at, mementos.c.legal_hold).where(
                    mementos.c.id.in_(ids), mementos.c.deleted_at.is_(None)
                ),
                citing=select(
                    reach.c.memento_id,
                    func.max(transcripts.c.retain_until),
                    func.max(transcripts.c.legal_hold),
                )
                .join(transcripts, by_transcript)
                .group_by(reach.c.memento_id),
                policies=select(reach.c.memento_id, transcripts.c.id, transcripts.c.retention).join(
                    transcripts, by_transcript
                ),
            )
        return self._queries

    def _evaluate(self, connection: Any, ids: Sequence[str]) -> list[_Verdict]:
        """Each memento's true expiry from the citations, and whether a hold applies."""
        queries = self._evaluation_queries()
        batch = {"ids": json.dumps(list(ids))}
        rows = connection.execute(queries.rows, batch).all()
        citing = {
            memento_id: (until, hold)
            for memento_id, until, hold in connection.execute(queries.citing, batch)
        }
        grace = self.grace
        verdicts = []
        for memento_id, archived_at, held in rows:
            reached = citing.get(memento_id)
            if reached is None:
                verdicts.append(_Verdict(memento_id, archived_at + grace, bool(held), False))
            else:
                verdicts.append(_Verdict(memento_id, reached[0], bool(held or reached[1]), True))
        return verdicts

    def _policies(self, connection: Any, memento_ids: Sequence[str]) -> dict[str, list[str]]:
        """``transcript id:retention`` of the transcripts reaching each memento (for reasons)."""
        if not memento_ids:
            return {}
        found: dict[str, list[str]] = {}
        for memento_id, transcript_id, retention in connection.execute(
            self._evaluation_queries().policies, {"ids": json.dumps(list(memento_ids))}
        ):
            found.setdefault(memento_id, []).append(f"{transcript_id}:{retention}")
        return found

    def _tombstone(self, connection: Any, expired: Sequence[_Verdict], now: datetime) -> None:
        if not expired:
            return
        policies = self._policies(connection, [v.memento_id for v in expired if v.cited])
        connection.execute(
            update(mementos)
            .where(mementos.c.id == bindparam("target"), mementos.c.deleted_at.is_(None))
            .values(deleted_at=now, deletion_reason=bindparam("why")),
            [
                {
                    "target": v.memento_id,
                    "why": json.dumps(v.reason(self.grace, policies.get(v.memento_id, ()))),
                }
                for v in expired
            ],
        )
        ids = [v.memento_id for v in expired]
        self._forget_text(connection, ids)
        self._mark_orphans_dying(connection, ids)

    def _forget_text(self, connection: Any, memento_ids: Sequence[str]) -> None:
        # Tombstones keep hashes, dates and policy — never quote or selector text, nor the
        # drift diffs (old and new wording of the cited passage).
        batch = self._values(memento_ids)
        connection.execute(
            update(citations)
            .where(citations.c.passage_memento_id.in_(batch))
            .values(selector_json=None)
        )
        connection.execute(
            update(drift_checks).where(drift_checks.c.memento_id.in_(batch)).values(diff_json=None)
        )

    def _mark_orphans_dying(self, connection: Any, memento_ids: Sequence[str]) -> None:
        """Mark ``deleting`` the live blobs of these mementos that no live memento uses."""
        used = exists().where(
            mementos.c.content_hash == blobs.c.address, mementos.c.deleted_at.is_(None)
        )
        connection.execute(
            update(blobs)
            .where(
                blobs.c.address.in_(
                    select(mementos.c.content_hash).where(
                        mementos.c.id.in_(self._values(memento_ids))
                    )
                ),
                blobs.c.state == "live",
                ~used,
            )
            .values(state="deleting")
        )

    def _delete_dying_blobs(self, report: SweepReport) -> None:
        with self.index.read() as connection:
            dying = (
                connection.execute(
                    select(blobs.c.address)
                    .where(blobs.c.state == "deleting")
                    .order_by(blobs.c.address)
                )
                .scalars()
                .all()
            )
        step = (
            BLOBS_PER_TRANSACTION
            if hasattr(self.archive.blobs, "batched_deletes")
            else REMOTE_BLOBS_PER_TRANSACTION
        )
        for start in range(0, len(dying), step):
            with self.index.write(exclusive=True) as connection:
                self._delete_blobs_locked(connection, dying[start : start + step], report)

    def _delete_blob(self, address: str, report: SweepReport, erasure: str | None = None) -> None:
        with self.index.write(exclusive=True) as connection:
            self._delete_blobs_locked(connection, [address], report, erasure)

    def _delete_blobs_locked(
        self,
        connection: Any,
        addresses: Sequence[str],
        report: SweepReport,
        erasure: str | None = None,
    ) -> None:
        """Delete these ``deleting`` blobs' bytes, then mark them ``deleted`` (inside the write
        transaction, so no write can land on them meanwhile). With an ``erasure`` reason the
        store erases (an admin's takedown bypasses GOVERNANCE retention; a sweep never does)."""
        query = select(blobs.c.address, blobs.c.version_id, blobs.c.size).where(
            blobs.c.address.in_(self._values(addresses)), blobs.c.state == "deleting"
        )
        if self.index.dialect == "postgresql":
            query = query.with_for_update(skip_locked=True)  # another sweep has the others
        dying = {row.address: row for row in connection.execute(query)}
        if not dying:
            return  # revived by a write, or another sweep has them
        # Re-checked under the lock: a memento written since the blob was marked keeps it.
        # Every version any memento recorded is deleted (one statement for both answers).
        used: set[str] = set()
        versions: dict[str, set[str | None]] = {
            address: {row.version_id} for address, row in dying.items()
        }
        for address, version, live in connection.execute(
            select(
                mementos.c.content_hash, mementos.c.blob_version_id, mementos.c.deleted_at.is_(None)
            )
            .distinct()
            .where(mementos.c.content_hash.in_(self._values(dying)))
        ):
            versions[address].add(version)
            if live:
                used.add(address)
        if used:
            connection.execute(
                update(blobs).where(blobs.c.address.in_(self._values(used))).values(state="live")
            )
            versions = {
                address: known for address, known in versions.items() if address not in used
            }
        if not versions:
            return
        deleted: list[str] = []
        # The store makes the whole batch's deletions durable when the block ends (raise or
        # not); the blobs are marked deleted only after that, so a crash before leaves them
        # ``deleting`` and the next sweep deletes them again.
        with self._batched_deletes():
            for address in sorted(versions):
                known: list[str | None] = [*sorted(v for v in versions[address] if v is not None)]
                try:
                    for version in known or [None]:
                        if erasure is None:
                            self.archive.blobs.delete(address, version)
                        else:
                            self.archive.blobs.erase(address, version, erasure)
                except StorageError as error:
                    if getattr(error, "code", "") == "retention_locked":
                        report.not_yet += 1
                        continue
                    raise
                deleted.append(address)
        if not deleted:
            return
        connection.execute(
            update(blobs).where(blobs.c.address.in_(self._values(deleted))).values(state="deleted")
        )
        report.blobs_deleted += len(deleted)
        report.bytes_deleted += sum(int(dying[address].size) for address in deleted)

    def _batched_deletes(self) -> AbstractContextManager[Any]:
        batched: Callable[[], AbstractContextManager[Any]] | None = getattr(
            self.archive.blobs, "batched_deletes", None
        )
        return batched() if batched is not None else nullcontext()

    def _next_expiry(self, now: datetime) -> datetime | None:
        with self.index.read() as connection:
            value = connection.execute(
                select(func.min(mementos.c.expires_at)).where(
                    mementos.c.deleted_at.is_(None), mementos.c.expires_at > now
                )
            ).scalar()
        return value if value is None or value.tzinfo else value.replace(tzinfo=now.tzinfo)

    # -- garbage collection of orphan blobs ----------------------------------------------

    def collect_orphans(
        self,
        *,
        safety_age: timedelta = timedelta(hours=1),
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete blobs no index row knows (a write that crashed before its commit).

        Only blobs older than ``safety_age``: an in-flight write stores its blob first and
        its rows a moment later, and must never lose the blob in between.
        """
        now = now or utc_now()
        collected = []
        for address in self.archive.blobs.addresses():
            with self.index.read() as connection:
                known = connection.execute(
                    select(blobs.c.state).where(blobs.c.address == address)
                ).first()
            if known is not None and known.state == "live":
                continue
            stored_at = self._stored_at(address)
            if stored_at is None or now - stored_at < safety_age:
                continue
            if known is None or known.state != "live":
                if not dry_run:
                    self._delete_orphan(address)
                collected.append(address)
        return collected

    def collect_temp_files(
        self,
        *,
        safety_age: timedelta = timedelta(hours=1),
        now: datetime | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete the local store's temp files older than ``safety_age``: bytes a write staged
        and never published because its process died. They hold captured text that nothing
        acknowledged or refers to, so no retention rule would ever delete them otherwise.
        (S3 stages nothing outside the bucket's objects: see :meth:`collect_orphans`.)"""
        temp_files = getattr(self.archive.blobs, "temp_files", None)
        if temp_files is None:
            return []
        cutoff = (now or utc_now()) - safety_age
        stale = [path for path, modified in temp_files() if modified < cutoff]
        if not dry_run:
            for path in stale:
                self.archive.blobs.remove_temp_file(path)
        return stale

    def _stored_at(self, address: str) -> datetime | None:
        stored_at = getattr(self.archive.blobs, "stored_at", None)
        if stored_at is not None:
            value: datetime | None = stored_at(address)
            return value
        path = getattr(self.archive.blobs, "path_for", None)
        if path is None:
            return None
        try:
            return datetime.fromtimestamp(os.stat(path(address)).st_mtime).astimezone()
        except FileNotFoundError:
            return None

    def _delete_orphan(self, address: str) -> None:
        with self.index.write(exclusive=True) as connection:  # no write commits meanwhile
            # Recorded as deleted first. A write deduplicating onto these bytes right now
            # (its publish found them in place, old, with no row yet) then finds the blob not
            # live when it commits and re-stores it, rather than acknowledging a memento whose
            # bytes we are about to delete.
            self.index.insert_ignoring(
                connection,
                blobs,
                [
                    {
                        "address": address,
                        "size": 0,
                        "version_id": None,
                        "stored_at": utc_now(),
                        "state": "deleted",
                        "lock_legal_hold": 0,
                    }
                ],
                conflict=["address"],
            )
            row = connection.execute(
                select(blobs.c.state).where(blobs.c.address == address)
            ).first()
            if row is not None and row.state == "live":
                return
            # An orphan has no recorded VersionId: delete every version the store holds.
            for version in self.archive.blobs.versions_of(address):
                self.archive.blobs.delete(address, version)

    # -- admin actions (each one in the append-only admin log) ---------------------------

    def set_transcript_hold(
        self, tenant: str, transcript_id: str, on: bool, reason: str, actor: str
    ) -> None:
        reason = _check_reason(reason)
        with self.index.write() as connection:
            result = connection.execute(
                update(transcripts)
                .where(transcripts.c.tenant == tenant, transcripts.c.id == transcript_id)
                .values(legal_hold=1 if on else 0)
            )
            if not result.rowcount:
                raise TranscriptNotFound("no transcript with this id")
            self._log(
                connection,
                tenant,
                actor,
                "legal_hold." + ("on" if on else "off"),
                "transcript",
                transcript_id,
                reason,
                {},
            )

    def set_memento_hold(
        self, tenant: str, memento_id: str, on: bool, reason: str, actor: str
    ) -> None:
        reason = _check_reason(reason)
        with self.index.write() as connection:
            result = connection.execute(
                update(mementos)
                .where(
                    mementos.c.tenant == tenant,
                    mementos.c.id == memento_id,
                    mementos.c.deleted_at.is_(None),
                )
                .values(legal_hold=1 if on else 0)
            )
            if not result.rowcount:
                raise NotFound("no memento with this id")
            self._log(
                connection,
                tenant,
                actor,
                "legal_hold." + ("on" if on else "off"),
                "memento",
                memento_id,
                reason,
                {},
            )

    def change_retention(
        self, tenant: str, transcript_id: str, retention: Any, reason: str, actor: str
    ) -> datetime:
        """Set a transcript's retention, shorter included (admin, with a reason)."""
        reason = _check_reason(reason)
        # Exclusive: two changes (or a change and a citation) evaluating side by side on
        # PostgreSQL would each miss the other's uncommitted rows, and the last to write
        # could leave a date later than any transcript's, which no sweep would look at.
        with self.index.write(exclusive=True) as connection:
            row = connection.execute(
                select(transcripts).where(
                    transcripts.c.tenant == tenant, transcripts.c.id == transcript_id
                )
            ).first()
            if row is None:
                raise TranscriptNotFound("no transcript with this id")
            if row.legal_hold:
                raise RetentionConflict("the transcript is under legal hold; release it first")
            label, until = resolve_retention(
                retention, row.created_at, self.archive.settings.citations
            )
            connection.execute(
                update(transcripts)
                .where(transcripts.c.tenant == tenant, transcripts.c.id == transcript_id)
                .values(retention=label, retain_until=until, updated_at=utc_now())
            )
            reached = reached_mementos(connection, tenant, transcript_id)
            if until >= row.retain_until:
                self.index.extend_expiry(connection, tenant, reached, until)
            else:
                # Shortened: recompute from every citing transcript. Held ones too: a sweep
                # only looks at what is due, so a date left too late would outlive the hold.
                for verdict in self._evaluate(connection, reached):
                    connection.execute(
                        update(mementos)
                        .where(mementos.c.id == verdict.memento_id)
                        .values(expires_at=verdict.until)
                    )
            self._log(
                connection,
                tenant,
                actor,
                "retention.change",
                "transcript",
                transcript_id,
                reason,
                {"from": to_rfc3339(row.retain_until), "to": to_rfc3339(until), "retention": label},
            )
        return until

    def erase(self, tenant: str, memento_id: str, reason: str, actor: str) -> None:
        """Delete evidence now (takedown, court order, data-protection request)."""
        reason = _check_reason(reason)
        now = utc_now()
        with self.index.write(exclusive=True) as connection:
            row = connection.execute(
                select(mementos).where(
                    mementos.c.tenant == tenant,
                    mementos.c.id == memento_id,
                    mementos.c.deleted_at.is_(None),
                )
            ).first()
            if row is None:
                raise NotFound("no memento with this id")
            if row.legal_hold:
                raise RetentionConflict("the memento is under legal hold; release it first")
            if self._evaluate(connection, [memento_id])[0].expiry is None:
                raise RetentionConflict(
                    "a transcript citing this memento is under legal hold; release it first"
                )
            if lock_mode_of(self.archive.blobs) == "COMPLIANCE":
                raise RetentionConflict(
                    "the store keeps evidence under S3 Object Lock COMPLIANCE mode: nobody can "
                    "delete it before its retain-until date, so erasure is impossible until then"
                )
            connection.execute(
                update(mementos)
                .where(mementos.c.id == memento_id)
                .values(
                    deleted_at=now, deletion_reason=json.dumps({"kind": "erasure", "by": actor})
                )
            )
            self._forget_text(connection, [memento_id])
            self._mark_orphans_dying(connection, [memento_id])
            self._log(
                connection,
                tenant,
                actor,
                "erasure",
                "memento",
                memento_id,
                reason,
                {"content_hash": row.content_hash},
            )
        report = SweepReport(dry_run=False)
        self._delete_blob(row.content_hash, report, erasure=reason)

    def admin_log(self, tenant: str, limit: int = 100) -> list[dict[str, Any]]:
        with self.index.read() as connection:
            rows = connection.execute(
                select(admin_log)
                .where(admin_log.c.tenant == tenant)
                .order_by(admin_log.c.at, admin_log.c.id)
                .limit(limit)
            )
            return [
                {
                    "id": r.id,
                    "key_id": r.key_id,
                    "action": r.action,
                    "target_kind": r.target_kind,
                    "target_id": r.target_id,
                    "reason": r.reason,
                    "detail": json.loads(r.detail_json),
                    "at": to_rfc3339(r.at),
                }
                for r in rows
            ]

    def _log(
        self,
        connection: Any,
        tenant: str,
        actor: str,
        action: str,
        kind: str,
        target: str,
        reason: str,
        detail: dict[str, Any],
    ) -> None:
        connection.execute(
            insert(admin_log).values(
                id=uuid.uuid4().hex,
                tenant=tenant,
                key_id=actor,
                action=action,
                target_kind=kind,
                target_id=target,
                reason=reason,
                detail_json=json.dumps(detail, sort_keys=True),
                at=utc_now(),
            )
        )

    # -- the cost of keeping evidence ----------------------------------------------------

    def report(self, *, now: datetime | None = None) -> dict[str, Any]:
        """Bytes stored per policy and per label, and what expires when (by month)."""
        now = now or utc_now()
        with self.index.read() as connection:
            live = connection.execute(
                select(
                    mementos.c.id, mementos.c.size, mementos.c.expires_at, mementos.c.content_hash
                ).where(mementos.c.deleted_at.is_(None))
            ).all()
            reach: list[Any] = []
            for column in (citations.c.passage_memento_id, citations.c.document_memento_id):
                reach += connection.execute(
                    select(column, transcripts.c.retention, transcripts.c.labels_json)
                    .join(
                        transcripts,
                        and_(
                            transcripts.c.tenant == citations.c.tenant,
                            transcripts.c.id == citations.c.transcript_id,
                        ),
                    )
                    .where(column.is_not(None))
                ).all()
        policies: dict[str, set[str]] = {}
        labels: dict[str, set[str]] = {}
        for memento_id, retention, labels_json in reach:
            policies.setdefault(retention, set()).add(memento_id)
            for key, value in json.loads(labels_json).items():
                labels.setdefault(f"{key}={value}", set()).add(memento_id)
        size = {row.id: int(row.size) for row in live}
        cited = set().union(*policies.values()) if policies else set()
        uncited = [i for i in size if i not in cited]
        by_month: dict[str, int] = {}
        for row in live:
            month = row.expires_at.strftime("%Y-%m") if row.expires_at else "unknown"
            by_month[month] = by_month.get(month, 0) + int(row.size)
        return {
            "generated_at": to_rfc3339(now),
            "mementos": len(live),
            "bytes": sum(size.values()),
            "distinct_blob_bytes": sum({row.content_hash: int(row.size) for row in live}.values()),
            "by_policy": {name: _sized(ids, size) for name, ids in sorted(policies.items())}
            | {"uncited (grace)": _sized(uncited, size)},
            "by_label": {name: _sized(ids, size) for name, ids in sorted(labels.items())},
            "expiring_bytes_by_month": dict(sorted(by_month.items())),
        }


def ceil_to_day(moment: datetime) -> datetime:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day if day == moment else day + timedelta(days=1)


def lock_mode_of(store: Any) -> str | None:
    mode: str | None = getattr(store, "lock_mode", None)
    return mode


def _sized(ids: Iterable[str], size: dict[str, int]) -> dict[str, int]:
    live = [i for i in set(ids) if i in size]
    return {"mementos": len(live), "bytes": sum(size[i] for i in live)}


# Other features whose mementos a transcript keeps alive (beyond its citations): functions
# from a one-column subquery of memento ids to SELECTs of (memento_id, tenant, transcript_id).
REACHERS: list[Callable[[Select[Any]], Iterable[Select[Any]]]] = []
