"""Property-based retention on a fake clock (hypothesis state machine).

Random histories of captures, citations, transcripts with different retentions, holds
placed and released, clock advances, sweeps (some interrupted) and erasures. After every
step: no index row points at a missing blob, and nothing reachable from an unexpired
transcript or a hold has been deleted; after a completed sweep, everything expired is gone.
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

from archive.archive import Archive, MementoRequest
from archive.citations import CitationRequest, QuoteRequest
from archive.config import Settings
from archive.dates import utc_now
from archive.exceptions import RetentionConflict, StorageError
from archive.mementos import CaptureFacts
from archive.schema import citations, mementos, transcripts

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
        self.archive = Archive.open(Settings(
            data_dir=root, durability="relaxed",
            extra={"citations": {"retention_days": GRACE_DAYS, "context_chars": 5}},
        ))

    def teardown(self) -> None:
        if self.archive is not None:
            self.archive.close()

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
        memento = self.a.write_memento(MementoRequest(
            uri_r=f"https://ex.org/{page}", content=content, content_type="text/plain",
            facts=CaptureFacts(tool="http.get")))
        if memento.memento.deleted_at is None:
            self.documents.append(memento.memento.id)

    @rule(days=st.sampled_from([1, 2, 5, 30]))
    def open_transcript(self, days: int) -> None:
        transcript_id = f"t{len(self.transcript_ids)}"
        self.a.transcripts.put("default", transcript_id, f"P{days}D", {})
        self.transcript_ids.append(transcript_id)

    @precondition(lambda self: self.documents and self.transcript_ids)
    @rule(data=st.data())
    def cite(self, data: Any) -> None:
        memento_id = data.draw(st.sampled_from(self.documents))
        transcript_id = data.draw(st.sampled_from(self.transcript_ids))
        try:
            memento = self.a.get_memento("default", memento_id)
        except Exception:  # deleted meanwhile: citing it is refused, fine
            return
        word = self.a.read_content(memento).decode().split()[0]
        try:
            self.a.citations.cite("default", transcript_id,
                                  [CitationRequest(QuoteRequest(word), memento_id=memento_id)])
        except Exception as error:  # a deleted passage id is never reused
            assert getattr(error, "code", "") in ("citations_rejected", "gone"), error

    @precondition(lambda self: self.transcript_ids)
    @rule(data=st.data(), on=st.booleans())
    def hold_transcript(self, data: Any, on: bool) -> None:
        self.a.retention.set_transcript_hold("default", data.draw(st.sampled_from(self.transcript_ids)),
                                             on, "case", "admin")

    @precondition(lambda self: self.transcript_ids)
    @rule(data=st.data(), days=st.sampled_from([1, 10, 60]))
    def extend(self, data: Any, days: int) -> None:
        transcript_id = data.draw(st.sampled_from(self.transcript_ids))
        try:
            self.a.transcripts.put("default", transcript_id, f"P{days}D", None)
        except RetentionConflict:
            pass
        except Exception as error:
            assert getattr(error, "code", "") == "retention_shortened", error

    @rule(days=st.integers(1, 20))
    def advance(self, days: int) -> None:
        self.offset += timedelta(days=days)

    @rule(interrupt_after=st.one_of(st.none(), st.integers(0, 2)))
    def sweep(self, interrupt_after: int | None) -> None:
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
            self.a.retention.erase("default", data.draw(st.sampled_from(self.documents)), "takedown", "admin")
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
            live = connection.execute(select(mementos.c.content_hash, mementos.c.blob_version_id)
                                      .where(mementos.c.deleted_at.is_(None))).all()
        for address, version in live:
            assert self.a.blobs.get(address, version)

    @invariant()
    def nothing_reachable_from_unexpired_or_held_is_deleted(self) -> None:
        if self.archive is None:
            return
        now = self.now
        with self.a.index.read() as connection:
            rows = connection.execute(
                select(mementos.c.id, mementos.c.deletion_reason, transcripts.c.retain_until,
                       transcripts.c.legal_hold)
                .select_from(citations.join(transcripts, (transcripts.c.tenant == citations.c.tenant)
                                            & (transcripts.c.id == citations.c.transcript_id))
                             .join(mementos, mementos.c.id == citations.c.passage_memento_id))
                .where(mementos.c.deleted_at.is_not(None))
            ).all()
        for row in rows:
            if '"erasure"' in (row.deletion_reason or ""):
                continue  # an admin erased it on purpose
            assert not row.legal_hold, f"{row.id} deleted under a legal hold"
            assert row.retain_until <= now, f"{row.id} deleted before its transcript expired"

    def check_nothing_expired_is_left(self) -> None:
        now = self.now
        with self.a.index.read() as connection:
            candidates = connection.execute(
                select(mementos.c.id).where(mementos.c.deleted_at.is_(None))).scalars().all()
            verdicts = self.a.retention._evaluate(connection, candidates)
        for verdict in verdicts:
            assert verdict.expiry is None or verdict.expiry > now, f"{verdict.memento_id} expired but kept"


TMP: Any = None


@pytest.fixture(autouse=True)
def _tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    global TMP
    TMP = tmp_path_factory


TestRetentionProperties = RetentionMachine.TestCase
TestRetentionProperties.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
