"""Evidence goes when its transcript goes (issue #19, DESIGN.md "Retention arithmetic").

A memento some transcript cites expires at the latest ``retain_until`` of the transcripts
citing it, even when that is before ``archived_at`` + grace; only evidence nobody cites gets
the grace period. Runs on both backend pairs (local + SQLite, SeaweedFS + PostgreSQL); the
Object Lock case runs on SeaweedFS with GOVERNANCE locks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from archive.archive import Archive
from archive.citations import CitationRequest, QuoteRequest
from archive.dates import utc_now
from archive.exceptions import BlobNotFound, Gone
from archive.index.migrations import migrate
from archive.index.schema import mementos, schema_migrations
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

FILLER = b" Lorem ipsum filler so that a passage (quote plus context) is not the whole page." * 8
PAGE = b"The fee is 40 euros per year." + FILLER
MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)


def capture(archive: Archive, content: bytes = PAGE, uri: str = "https://ex.org/a") -> Any:
    return archive.write_memento(
        MementoRequest(
            uri_r=uri,
            content=content,
            content_type="text/plain",
            facts=CaptureFacts(tool="http.get"),
        ),
        tenant="default",
    ).memento


def cite(archive: Archive, transcript: str, memento_id: str, exact: str = "40 euros") -> Any:
    return archive.citations.cite(
        "default", transcript, [CitationRequest(quote=QuoteRequest(exact), memento_id=memento_id)]
    ).citations[0]


def expires_at(archive: Archive, memento_id: str) -> datetime:
    with archive.index.read() as connection:
        value: datetime = connection.execute(
            select(mementos.c.expires_at).where(mementos.c.id == memento_id)
        ).scalar_one()
    return value


def retain_until(archive: Archive, transcript_id: str) -> datetime:
    return archive.transcripts.get("default", transcript_id).retain_until


def assert_gone(archive: Archive, memento_id: str) -> None:
    with pytest.raises(Gone):
        archive.get_memento("default", memento_id)


def test_a_short_transcripts_evidence_goes_with_it_before_the_grace_date(
    archive: Archive,
) -> None:
    """The issue's first case: a passage cited only by a PT3S transcript, and the document
    it was cut from, are deleted by the first sweep after the transcript expired."""
    document = capture(archive)
    archive.transcripts.put("default", "short", "PT3S", {})
    passage = cite(archive, "short", document.id).passage
    until = retain_until(archive, "short")
    # The cache says so at once: the sweep finds them among what is due, by the index.
    assert expires_at(archive, passage.id) == until
    assert expires_at(archive, document.id) == until
    assert until < passage.archived_at + archive.retention.grace
    report = archive.retention.sweep(now=until + MINUTE)
    assert set(report.deleted_ids) == {document.id, passage.id}
    assert report.blobs_deleted == 2
    for memento_id in (document.id, passage.id):
        assert_gone(archive, memento_id)
    assert archive.index.count_mementos("default", document.urir_key) == 0
    with archive.index.read() as connection:
        reason = connection.execute(
            select(mementos.c.deletion_reason).where(mementos.c.id == passage.id)
        ).scalar_one()
    assert json.loads(reason)["policy"] == "transcripts"
    assert json.loads(reason)["transcripts"] == ["short:PT3S"]


def test_over_http_the_passage_answers_410_and_leaves_its_timemap(
    client: Any, archive: Archive
) -> None:
    """The issue as reported: after a PT3S transcript expired and a sweep ran, its passage
    no longer answers 200 nor stays in its TimeMap (well before the grace date)."""
    made = client.post(
        "/api/v1/mementos",
        json={
            "uri_r": "https://ex.org/h",
            "content": PAGE.decode(),
            "content_type": "text/plain",
            "tool": "http.get",
        },
    )
    assert made.status_code == 201, made.text
    put = client.put("/api/v1/transcripts/brief", json={"retention": "PT3S"})
    assert put.status_code == 201, put.text
    cited = client.post(
        "/api/v1/transcripts/brief/citations",
        json={"citations": [{"memento_id": made.json()["id"], "quote": {"exact": "40 euros"}}]},
    )
    assert cited.status_code == 201, cited.text
    passage_uri = cited.json()["citations"][0]["uri_m"]
    assert client.get(passage_uri).status_code == 200
    archive.retention.sweep(now=retain_until(archive, "brief") + MINUTE)
    assert client.get(passage_uri).status_code == 410
    assert client.get(made.json()["uri_m"]).status_code == 410
    assert client.get("/timemap/json/https://ex.org/h").status_code == 404


def test_an_expired_transcripts_evidence_goes_once_its_hold_is_released(
    archive: Archive,
) -> None:
    document = capture(archive)
    archive.transcripts.put("default", "short", "PT3S", {})
    passage = cite(archive, "short", document.id).passage
    archive.retention.set_transcript_hold("default", "short", True, "lawsuit", "admin-key")
    later = retain_until(archive, "short") + MINUTE
    held = archive.retention.sweep(now=later)
    assert held.mementos_deleted == 0 and held.held == 2
    assert archive.get_memento("default", passage.id)
    archive.retention.set_transcript_hold("default", "short", False, "settled", "admin-key")
    released = archive.retention.sweep(now=later + MINUTE)
    assert set(released.deleted_ids) == {document.id, passage.id}


def test_evidence_cited_by_several_transcripts_expires_with_the_latest(
    archive: Archive,
) -> None:
    """Max of their dates, whichever order they cite in, even when all are shorter than
    the grace period."""
    document = capture(archive)
    archive.transcripts.put("default", "two-days", "P2D", {})
    archive.transcripts.put("default", "three-seconds", "PT3S", {})
    passage = cite(archive, "two-days", document.id).passage
    assert cite(archive, "three-seconds", document.id).passage.id == passage.id
    latest = retain_until(archive, "two-days")
    assert expires_at(archive, passage.id) == latest
    assert expires_at(archive, document.id) == latest
    kept = archive.retention.sweep(now=retain_until(archive, "three-seconds") + DAY)
    assert kept.mementos_deleted == 0
    gone = archive.retention.sweep(now=latest + MINUTE)
    assert set(gone.deleted_ids) == {document.id, passage.id}
    assert latest + MINUTE < passage.archived_at + archive.retention.grace


def test_a_later_short_citation_never_shortens_a_long_ones_evidence(archive: Archive) -> None:
    document = capture(archive)
    archive.transcripts.put("default", "long", "P7Y", {})
    archive.transcripts.put("default", "short", "PT3S", {})
    passage = cite(archive, "long", document.id).passage
    cite(archive, "short", document.id)
    assert expires_at(archive, passage.id) == retain_until(archive, "long")
    report = archive.retention.sweep(now=utc_now() + timedelta(days=365))
    assert report.mementos_deleted == 0


def test_a_transcripts_changed_retention_re_dates_its_evidence(archive: Archive) -> None:
    """Lengthened: the evidence lives longer (past its grace date); shortened by an admin:
    it goes with the new date, before its grace date."""
    document = capture(archive)
    archive.transcripts.put("default", "t", "P1D", {})
    passage = cite(archive, "t", document.id).passage
    archive.transcripts.put("default", "t", "P30D", None)
    assert expires_at(archive, passage.id) == retain_until(archive, "t")
    assert archive.retention.sweep(now=utc_now() + 20 * DAY).mementos_deleted == 0
    archive.retention.change_retention("default", "t", "PT1S", "sensitive", "admin-key")
    assert expires_at(archive, passage.id) == retain_until(archive, "t")
    report = archive.retention.sweep(now=retain_until(archive, "t") + MINUTE)
    assert set(report.deleted_ids) == {document.id, passage.id}


def test_evidence_cited_by_a_transcript_already_expired_goes_at_the_next_sweep(
    archive: Archive,
) -> None:
    """A citation made after its transcript's date is accepted (the quote is checked as
    ever), but the evidence is already due: the next sweep deletes it."""
    document = capture(archive)
    past = (utc_now() - DAY).isoformat()
    archive.transcripts.put("default", "over", {"retain_until": past}, {})
    passage = cite(archive, "over", document.id).passage
    assert expires_at(archive, passage.id) == retain_until(archive, "over")
    report = archive.retention.sweep()
    assert set(report.deleted_ids) == {document.id, passage.id}
    # Citing the deleted evidence again is refused, as before: ids are never reused.
    archive.transcripts.put("default", "later", "P7Y", {})
    with pytest.raises(Gone):
        cite(archive, "later", document.id)


def test_uncited_evidence_keeps_its_grace_period_beside_cited_evidence(
    archive: Archive,
) -> None:
    cited = capture(archive)
    uncited = capture(archive, b"Nobody quotes this page at all." + FILLER, "https://ex.org/b")
    archive.transcripts.put("default", "short", "PT3S", {})
    passage = cite(archive, "short", cited.id).passage
    report = archive.retention.sweep(now=retain_until(archive, "short") + DAY)
    assert set(report.deleted_ids) == {cited.id, passage.id}
    assert archive.get_memento("default", uncited.id)
    assert expires_at(archive, uncited.id) == uncited.archived_at + archive.retention.grace
    late = archive.retention.sweep(now=uncited.archived_at + archive.retention.grace + MINUTE)
    assert late.deleted_ids == [uncited.id]


def test_migration_7_re_dates_evidence_stored_under_the_grace_floor(archive: Archive) -> None:
    """An index written before version 7 has cited evidence dated at its grace date; the
    upgrade moves it to its transcripts' date and leaves everything else alone."""
    document = capture(archive)
    uncited = capture(archive, b"Nobody quotes this page at all." + FILLER, "https://ex.org/b")
    archive.transcripts.put("default", "short", "PT3S", {})
    archive.transcripts.put("default", "gone", "PT3S", {})
    passage = cite(archive, "short", document.id).passage
    doomed = capture(archive, b"This page is cited and deleted." + FILLER, "https://ex.org/c")
    doomed_passage = cite(archive, "gone", doomed.id, "cited and deleted").passage
    archive.retention.erase("default", doomed_passage.id, "takedown", "admin-key")
    grace = archive.retention.grace
    floor = {m.id: m.archived_at + grace for m in (document, passage, uncited, doomed)}
    with archive.index.write() as connection:  # the state the old code left
        for memento_id, date in floor.items():
            connection.execute(
                update(mementos).where(mementos.c.id == memento_id).values(expires_at=date)
            )
        connection.execute(delete(schema_migrations).where(schema_migrations.c.version == 7))
    erased_before = expires_at(archive, doomed_passage.id)
    assert migrate(archive.index._writer) == [7]
    until = retain_until(archive, "short")
    assert expires_at(archive, passage.id) == until
    assert expires_at(archive, document.id) == until
    assert expires_at(archive, doomed.id) == retain_until(archive, "gone")
    assert expires_at(archive, uncited.id) == floor[uncited.id]
    assert expires_at(archive, doomed_passage.id) == erased_before  # tombstones untouched
    report = archive.retention.sweep(now=until + MINUTE)
    assert {document.id, passage.id, doomed.id} <= set(report.deleted_ids)
    assert uncited.id not in report.deleted_ids


@pytest.fixture()
def short_lock_archive(seaweedfs_settings: Any, tmp_path: Any) -> Iterator[Archive]:
    """SeaweedFS with Object Lock (GOVERNANCE); new blobs are first locked a few seconds
    ahead instead of at the grace date, so the test can outlive the lock for real."""
    locked = seaweedfs_settings.with_overrides(
        data_dir=tmp_path / "amber",
        database_url=f"sqlite:///{tmp_path / 'amber.sqlite3'}",
        s3_object_lock_mode="GOVERNANCE",
    )
    archive = Archive.open(locked)
    yield archive
    archive.close()


@pytest.mark.seaweedfs
def test_a_blob_locked_past_its_evidence_is_deleted_when_the_lock_allows(
    short_lock_archive: Archive, monkeypatch: Any
) -> None:
    """Object Lock can only lengthen: evidence of a short transcript is tombstoned on time
    (never served again), its blob waits for its lock — reported by ``amber retention
    report`` — and the first sweep after the lock date deletes it."""
    import time

    archive = short_lock_archive
    lock = utc_now().replace(microsecond=0) + timedelta(seconds=4)
    monkeypatch.setattr(archive.writes, "initial_lock", lambda archived_at: lock)
    monkeypatch.setattr(archive.citations.ledger, "initial_lock", lambda archived_at: lock)
    document = capture(archive, b"Locked evidence of a short chat." + FILLER)
    archive.transcripts.put("default", "short", "PT1S", {})
    passage = cite(archive, "short", document.id, "short chat").passage
    time.sleep(1.2)  # the transcript's one second passes; the lock's four do not
    first = archive.retention.sweep()
    assert set(first.deleted_ids) == {document.id, passage.id}
    assert first.not_yet == 2 and first.blobs_deleted == 0
    assert_gone(archive, passage.id)
    waiting = archive.retention.report()["waiting_on_lock"]
    assert waiting == archive.retention.waiting_on_lock()
    assert isinstance(waiting, dict) and waiting["blobs"] == 2
    assert waiting["bytes"] == document.size + passage.size
    assert waiting["latest"] is not None
    assert datetime.fromisoformat(str(waiting["latest"]).replace("Z", "+00:00")) >= lock
    remaining = (lock - utc_now()).total_seconds() + 1.0
    time.sleep(max(remaining, 0))
    second = archive.retention.sweep()
    assert second.blobs_deleted == 2 and second.not_yet == 0
    assert archive.retention.waiting_on_lock()["blobs"] == 0
    for memento in (document, passage):
        with pytest.raises(BlobNotFound):
            archive.blobs.get(memento.content_hash, memento.blob_version_id)


def test_report_and_gc_say_what_waits_on_a_lock_and_until_when(tmp_path: Any) -> None:
    """The CLI's side: ``amber retention report`` carries ``waiting_on_lock`` and ``amber gc``
    prints it when some blob waits (a lock date recorded as a sweep would after a refusal;
    the real refusal is tested on SeaweedFS above)."""
    from click.testing import CliRunner

    from api.cli import main
    from archive.config import Settings
    from archive.index.schema import blobs

    env = {"AMBER_DATA_DIR": str(tmp_path / "d")}
    archive = Archive.open(Settings(data_dir=tmp_path / "d"))
    try:
        memento = capture(archive)
        empty = json.loads(CliRunner().invoke(main, ["retention", "report"], env=env).output)
        assert empty["waiting_on_lock"] == {
            "blobs": 0,
            "bytes": 0,
            "earliest": None,
            "latest": None,
        }
        lock = utc_now().replace(microsecond=0) + 10 * DAY
        with archive.index.write() as connection:
            connection.execute(
                update(blobs)
                .where(blobs.c.address == memento.content_hash)
                .values(state="deleting", lock_until=lock)
            )
    finally:
        archive.close()
    report = json.loads(CliRunner().invoke(main, ["retention", "report"], env=env).output)
    waiting = report["waiting_on_lock"]
    assert waiting["blobs"] == 1 and waiting["bytes"] == memento.size
    assert datetime.fromisoformat(waiting["latest"].replace("Z", "+00:00")) == lock
    done = CliRunner().invoke(main, ["gc"], env=env)
    assert done.exit_code == 0, done.output
    assert f"1 expired blob(s) ({memento.size} bytes) wait on their Object Lock" in done.output
    assert waiting["latest"] in done.output
