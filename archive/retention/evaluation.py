"""Each memento's true expiry, decided from the transcripts that reach it.

A memento expires at the latest ``retain_until`` of the transcripts reaching it (through
their citations, or any path another feature registers in :data:`REACHERS`), even when that
is before ``archived_at`` + grace; one nobody reaches at ``archived_at`` + grace. A legal
hold on the memento or on a reaching transcript suspends expiry while it lasts.

``mementos.expires_at`` caches that date for the sweep, which selects its candidates by it.
The cache may be early (the sweep re-evaluates and moves it forward), never late: whatever
changes who reaches a memento re-dates it in the same transaction (:meth:`Evaluator.redate`).

Every statement is set-based: a batch's ids travel as one JSON array parameter, so the cost
per memento is a few index lookups, not a statement or a bound parameter each.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    Connection,
    Select,
    Subquery,
    Text,
    and_,
    bindparam,
    cast,
    func,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from archive.index.schema import citations, mementos, transcripts
from archive.retention.hooks import RetentionHooks
from archive.retention.records import Verdict

Reacher = Callable[[Select[str]], Iterable[Select[str, str, str]]]

# Other features whose mementos a transcript keeps alive (beyond its citations): functions
# from a one-column subquery of memento ids to SELECTs of (memento_id, tenant, transcript_id).
REACHERS: list[Reacher] = []


def json_ids(dialect: str, items: Iterable[str] | None = None) -> Select[str]:
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
    if dialect == "postgresql":
        values = func.jsonb_array_elements_text(cast(payload, JSONB)).table_valued("value")
    else:
        values = func.json_each(payload).table_valued("value")
    return select(values.c.value)


def reach(ids: Select[str], reachers: Iterable[Reacher]) -> Subquery:
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


@dataclass(frozen=True)
class EvaluationQueries:
    """Built once: SQLAlchemy then reuses each statement's cache key and compiled form (for
    statements this size, rebuilding and re-keying them per batch cost more than running them)."""

    reachers: tuple[Reacher, ...]
    rows: Select[str, datetime, int, datetime]  # id, archived_at, legal_hold, expires_at of
    # the live ones among :ids
    citing: Select[
        str, datetime, int
    ]  # memento_id, latest retain_until, any hold: over transcripts reaching :ids
    policies: Select[
        str, str, str
    ]  # memento_id, transcript id, retention: for the reasons of tombstones


class Evaluator:
    """Decides expiries inside the caller's transaction (a sweep's batch, a retention change,
    an erasure), so what it reads is what the caller then acts on under the same lock."""

    def __init__(self, dialect: str, grace: timedelta, hooks: RetentionHooks) -> None:
        self.dialect = dialect
        self.grace = grace
        self.hooks = hooks
        self._queries: EvaluationQueries | None = None

    def queries(self) -> EvaluationQueries:
        reachers = tuple(REACHERS)
        if (
            self._queries is None or self._queries.reachers != reachers
        ):  # rebuilt if one registers late
            ids = json_ids(self.dialect)
            reached = reach(ids, reachers)
            by_transcript = and_(
                transcripts.c.tenant == reached.c.tenant,
                transcripts.c.id == reached.c.transcript_id,
            )
            self._queries = EvaluationQueries(
                reachers=reachers,
                rows=select(
                    mementos.c.id,
                    mementos.c.archived_at,
                    mementos.c.legal_hold,
                    mementos.c.expires_at,
                ).where(mementos.c.id.in_(ids), mementos.c.deleted_at.is_(None)),
                citing=select(
                    reached.c.memento_id,
                    func.max(transcripts.c.retain_until),
                    func.max(transcripts.c.legal_hold),
                )
                .join(transcripts, by_transcript)
                .group_by(reached.c.memento_id),
                policies=select(
                    reached.c.memento_id, transcripts.c.id, transcripts.c.retention
                ).join(transcripts, by_transcript),
            )
        return self._queries

    def evaluate(self, connection: Connection, ids: Sequence[str]) -> list[Verdict]:
        """Each memento's true expiry from the citations, and whether a hold applies."""
        verdicts = [verdict for verdict, _ in self._judge(connection, ids)]
        self.hooks.evaluated(verdicts)
        return verdicts

    def redate(self, connection: Connection, ids: Collection[str]) -> int:
        """Set the cached expiry of these live mementos to their true expiry (holds aside),
        earlier or later; return how many changed.

        Called in the transaction that changed who reaches them (a citation, a drift check's
        capture, a retention shortened), after that change: the date it writes is the
        latest ``retain_until`` among the reaching transcripts this transaction sees, which
        only an exclusive write (a retention change, an erasure) can lower and only a later
        re-date or a sweep can raise. So the cache is never later than the truth, whichever
        of two concurrent re-dates commits last. A memento this transaction sees uncited is
        only ever moved earlier, to its grace date: a citation it cannot see yet may have
        dated it earlier still.
        """
        if not ids:
            return 0
        changed = [
            {"target": verdict.memento_id, "until": verdict.until}
            for verdict, cached in self._judge(connection, sorted(set(ids)))
            if cached != verdict.until
            and (verdict.cited or cached is None or cached > verdict.until)
        ]
        if changed:  # sorted by id: concurrent re-dates lock rows in one order
            connection.execute(
                update(mementos)
                .where(mementos.c.id == bindparam("target"), mementos.c.deleted_at.is_(None))
                .values(expires_at=bindparam("until")),
                changed,
            )
        return len(changed)

    def _judge(
        self, connection: Connection, ids: Sequence[str]
    ) -> list[tuple[Verdict, datetime | None]]:
        """Each live memento's verdict, with the expiry its row caches now."""
        queries = self.queries()
        batch = {"ids": json.dumps(list(ids))}
        rows = connection.execute(queries.rows, batch).all()
        citing = {
            memento_id: (until, hold)
            for memento_id, until, hold in connection.execute(queries.citing, batch)
        }
        grace = self.grace
        judged: list[tuple[Verdict, datetime | None]] = []
        for memento_id, archived_at, held, cached in rows:
            reached = citing.get(memento_id)
            if reached is None:
                verdict = Verdict(memento_id, archived_at + grace, bool(held), False)
            else:
                verdict = Verdict(memento_id, reached[0], bool(held or reached[1]), True)
            judged.append((verdict, cached))
        return judged

    def policies(self, connection: Connection, memento_ids: Sequence[str]) -> dict[str, list[str]]:
        """``transcript id:retention`` of the transcripts reaching each memento (for reasons)."""
        if not memento_ids:
            return {}
        found: dict[str, list[str]] = {}
        for memento_id, transcript_id, retention in connection.execute(
            self.queries().policies, {"ids": json.dumps(list(memento_ids))}
        ):
            found.setdefault(memento_id, []).append(f"{transcript_id}:{retention}")
        return found
