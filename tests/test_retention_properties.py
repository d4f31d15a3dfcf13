"""Property-based retention on a fake clock (hypothesis state machine).

Random histories of captures, citations, transcripts with different retentions (shorter
and longer than the grace period), retention extended and shortened, holds placed and
released, clock advances, sweeps (some interrupted) and erasures. After every step no index
row points at a missing blob, and no memento's cached expiry is later than its true expiry
computed here from the citations (else a sweep, which selects by the cache, would keep it
too long); no sweep (complete or interrupted) deletes a memento that a hold or an unexpired
transcript protected when it started; after a completed sweep everything expired is gone —
so no memento outlives all its citing transcripts by more than one sweep, however short they
were. Dedup onto shared and dying blobs is frequent (few distinct contents), so the revive
path is exercised too.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sqlalchemy import select

from archive.archive import Archive
from archive.citations import CitationRequest, QuoteRequest
from archive.config import Settings
from archive.dates import utc_now
from archive.exceptions import Gone, RetentionConflict, StorageError
from archive.index.schema import citations, mementos, transcripts
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

WORDS = ["alpha", "bravo", "charlie", "delta"]
GRACE_DAYS = 3


class Interrupted(Exception):
    pass


class RetentionMachine(RuleBasedStateMachine):
    """The model is the database itself: invariants recompute what must be alive."""

    def __init__(self) -> None:
        super().__init__()
        self.archive: Archive | None = None
        self.offset = timedelta(0)
        self.documents: list[str] = []
        self.transcript_ids: list[str] = []

    @initialize()
    def open_archive(self) -> None:
        root = Path(TMP.mktemp("retention-machine"))
        self.archive = Archive.open(
            Settings(
                data_dir=root,
                durability="relaxed",
                extra={"citations": {"retention_days": GRACE_DAYS, "context_chars": 5}},
            )
        )

    def teardown(self) -> None:
        if self.archive is not None:
            self.archive.close()

    @staticmethod
    def pick(items: list[str], data: Any) -> str:
        # Draw an index, not a value: the values (ids) differ between runs, and hypothesis
        # needs draws that do not depend on them.
        return items[data.draw(st.integers(0, 1_000_000)) % len(items)]

    @property
    def now(self) -> datetime:
        return utc_now() + self.offset

    @property
    def a(self) -> Archive:
        assert self.archive is not None
        return self.archive

    @rule(word=st.sampled_from(WORDS), page=st.integers(0, 2))
    def capture(self, word: str, page: int) -> None:
        # Few distinct contents and URIs: dedup onto shared (and dying) blobs is frequent.
        content = f"{word} is the word on page {page}.".encode()
        try:
            memento = self.a.write_memento(
                MementoRequest(
                    uri_r=f"https://ex.org/{page}",
                    content=content,
                    content_type="text/plain",
                    facts=CaptureFacts(tool="http.get"),
                )
            )
        except Gone:
            return  # the same capture (same second) was erased: ids are never reused
        self.documents.append(memento.memento.id)

    # Durations from the transcript's creation (real time); the grace period is 3 days.
    @rule(retention=st.sampled_from(["PT3S", "PT1H", "P1D", "P2D", "P5D", "P30D"]))
    def open_transcript(self, retention: str) -> None:
        transcript_id = f"t{len(self.transcript_ids)}"
        self.a.transcripts.put("default", transcript_id, retention, {})
        self.transcript_ids.append(transcript_id)

    @precondition(lambda self: self.documents and self.transcript_ids)
    @rule(data=st.data())
    def cite(self, data: Any) -> None:
        memento_id = self.pick(self.documents, data)
        transcript_id = self.pick(self.transcript_ids, data)
        try:
            memento = self.a.get_memento("default", memento_id)
        except Exception:  # deleted meanwhile: citing it is refused, fine
            return
        word = self.a.read_content(memento).decode().split()[0]
        try:
            self.a.citations.cite(
                "default",
                transcript_id,
                [CitationRequest(QuoteRequest(word), memento_id=memento_id)],
            )
        except Exception as error:  # a deleted passage id is never reused
            assert getattr(error, "code", "") in ("citations_rejected", "gone"), error

    @precondition(lambda self: self.transcript_ids)
    @rule(data=st.data(), on=st.booleans())
    def hold_transcript(self, data: Any, on: bool) -> None:
        self.a.retention.set_transcript_hold(
            "default", self.pick(self.transcript_ids, data), on, "case", "admin"
        )

    @precondition(lambda self: self.transcript_ids)
    @rule(data=st.data(), days=st.sampled_from([1, 10, 60]))
    def extend(self, data: Any, days: int) -> None:
        transcript_id = self.pick(self.transcript_ids, data)
        try:
            self.a.transcripts.put("default", transcript_id, f"P{days}D", None)
        except RetentionConflict:
            pass
        except Exception as error:
            assert getattr(error, "code", "") == "retention_shortened", error

    @precondition(lambda self: self.transcript_ids)
    @rule(data=st.data(), retention=st.sampled_from(["PT3S", "P1D", "P4D"]))
    def shorten(self, data: Any, retention: str) -> None:
        try:
            self.a.retention.change_retention(
                "default", self.pick(self.transcript_ids, data), retention, "sensitive", "admin"
            )
        except RetentionConflict:  # held: released first, in another step
            pass

    @rule(days=st.integers(1, 20))
    def advance(self, days: int) -> None:
        self.offset += timedelta(days=days)

    @rule(interrupt_after=st.one_of(st.none(), st.integers(0, 2)))
    def sweep(self, interrupt_after: int | None) -> None:
        protected, before = self.protected(), self.deleted()
        try:
            self.run_sweep(interrupt_after)
        finally:
            newly_deleted = self.deleted() - before
            assert not newly_deleted & protected, (
                f"deleted while protected: {newly_deleted & protected}"
            )

    def run_sweep(self, interrupt_after: int | None) -> None:
        if interrupt_after is None:
            self.a.retention.sweep(now=self.now, batch_size=3)
            self.check_nothing_expired_is_left()
            return
        store, real_delete = self.a.blobs, self.a.blobs.delete
        calls = {"n": 0}

        def failing_delete(address: str, version_id: str | None = None) -> None:
            if calls["n"] >= interrupt_after:
                raise Interrupted()
            calls["n"] += 1
            real_delete(address, version_id)

        store.delete = failing_delete  # type: ignore[method-assign]
        try:
            self.a.retention.sweep(now=self.now, batch_size=3)
        except Interrupted:
            pass
        finally:
            store.delete = real_delete  # type: ignore[method-assign]

    @precondition(lambda self: self.documents)
    @rule(data=st.data())
    def erase(self, data: Any) -> None:
        try:
            self.a.retention.erase("default", self.pick(self.documents, data), "takedown", "admin")
        except (RetentionConflict, StorageError):
            pass
        except Exception as error:
            assert getattr(error, "code", "") == "not_found", error

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def no_row_points_at_a_missing_blob(self) -> None:
        if self.archive is None:
            return
        with self.a.index.read() as connection:
            live = connection.execute(
                select(mementos.c.content_hash, mementos.c.blob_version_id).where(
                    mementos.c.deleted_at.is_(None)
                )
            ).all()
        for address, version in live:
            assert self.a.blobs.get(address, version)

    @invariant()
    def no_cached_expiry_is_later_than_the_truth(self) -> None:
        if self.archive is None:
            return
        truth = self.true_expiries()
        with self.a.index.read() as connection:
            cached = dict(
                connection.execute(
                    select(mementos.c.id, mementos.c.expires_at).where(
                        mementos.c.deleted_at.is_(None)
                    )
                ).all()
            )
        for memento_id, until in truth.items():
            assert cached[memento_id] <= until, f"{memento_id} cached past its expiry"

    def true_expiries(self) -> dict[str, datetime]:
        """Each live memento's expiry by the rule, holds aside, computed here rather than by
        the evaluator: the latest retain_until of the transcripts citing it, else its
        archived_at + grace."""
        with self.a.index.read() as connection:
            live = connection.execute(
                select(mementos.c.id, mementos.c.archived_at).where(mementos.c.deleted_at.is_(None))
            ).all()
            rows = connection.execute(
                select(
                    citations.c.passage_memento_id,
                    citations.c.document_memento_id,
                    transcripts.c.retain_until,
                ).join(
                    transcripts,
                    (transcripts.c.tenant == citations.c.tenant)
                    & (transcripts.c.id == citations.c.transcript_id),
                )
            ).all()
        cited: dict[str, datetime] = {}
        for passage, document, until in rows:
            for memento_id in (passage, document):
                if memento_id:
                    cited[memento_id] = max(until, cited.get(memento_id, until))
        grace = timedelta(days=GRACE_DAYS)
        return {
            memento_id: cited.get(memento_id, archived_at + grace)
            for memento_id, archived_at in live
        }

    def held(self) -> set[str]:
        """Live mementos under a hold of their own or of a transcript citing them."""
        with self.a.index.read() as connection:
            own = set(
                connection.execute(
                    select(mementos.c.id).where(
                        mementos.c.legal_hold == 1, mementos.c.deleted_at.is_(None)
                    )
                ).scalars()
            )
            rows = connection.execute(
                select(citations.c.passage_memento_id, citations.c.document_memento_id).join(
                    transcripts,
                    (transcripts.c.tenant == citations.c.tenant)
                    & (transcripts.c.id == citations.c.transcript_id)
                    & (transcripts.c.legal_hold == 1),
                )
            ).all()
        return own | {i for row in rows for i in row if i}

    def protected(self) -> set[str]:
        """Mementos a hold or an unexpired citing transcript keeps alive right now."""
        now = self.now
        with self.a.index.read() as connection:
            held = set(
                connection.execute(
                    select(mementos.c.id).where(
                        mementos.c.legal_hold == 1, mementos.c.deleted_at.is_(None)
                    )
                ).scalars()
            )
            rows = connection.execute(
                select(
                    citations.c.passage_memento_id,
                    citations.c.document_memento_id,
                    transcripts.c.retain_until,
                    transcripts.c.legal_hold,
                ).join(
                    transcripts,
                    (transcripts.c.tenant == citations.c.tenant)
                    & (transcripts.c.id == citations.c.transcript_id),
                )
            ).all()
        for passage, document, until, hold in rows:
            if hold or until > now:
                held.update(i for i in (passage, document) if i)
        return held

    def deleted(self) -> set[str]:
        with self.a.index.read() as connection:
            return set(
                connection.execute(
                    select(mementos.c.id).where(mementos.c.deleted_at.is_not(None))
                ).scalars()
            )

    def check_nothing_expired_is_left(self) -> None:
        now = self.now
        with self.a.index.read() as connection:
            candidates = (
                connection.execute(select(mementos.c.id).where(mementos.c.deleted_at.is_(None)))
                .scalars()
                .all()
            )
            verdicts = self.a.retention.evaluator.evaluate(connection, candidates)
        for verdict in verdicts:
            assert verdict.expiry is None or verdict.expiry > now, (
                f"{verdict.memento_id} expired but kept"
            )
        # The same, by this test's own reading of the rule: what a completed sweep leaves is
        # held or has a transcript (or, uncited, its grace period) still running.
        held = self.held()
        for memento_id, until in self.true_expiries().items():
            assert memento_id in held or until > now, f"{memento_id} outlived its transcripts"


TMP: Any = None


@pytest.fixture(autouse=True)
def _tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    global TMP
    TMP = tmp_path_factory


TestRetentionProperties = RetentionMachine.TestCase
TestRetentionProperties.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
