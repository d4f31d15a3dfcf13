"""Retention on both backend pairs: expiry, holds, dedup safety, admin actions, sweeps."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, text

from archive.archive import Archive
from archive.blobstore.local import LocalBlobStore
from archive.citations import CitationRequest, QuoteRequest
from archive.config import Settings
from archive.dates import utc_now
from archive.exceptions import Gone, RetentionConflict
from archive.index.schema import blobs, mementos
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

DAY = timedelta(days=1)


FILLER = b" Lorem ipsum filler so that a passage (quote plus context) is not the whole page." * 8


def capture(
    archive: Archive, content: bytes, uri: str = "https://ex.org/a", tenant: str = "default"
) -> Any:
    return archive.write_memento(
        MementoRequest(
            uri_r=uri,
            content=content,
            content_type="text/plain",
            facts=CaptureFacts(tool="http.get"),
        ),
        tenant=tenant,
    ).memento


def cite(
    archive: Archive, transcript: str, memento_id: str, exact: str, tenant: str = "default"
) -> Any:
    return archive.citations.cite(
        tenant, transcript, [CitationRequest(quote=QuoteRequest(exact), memento_id=memento_id)]
    ).citations[0]


def blob_present(archive: Archive, address: str, version_id: str | None = None) -> bool:
    try:
        archive.blobs.get(address, version_id)
        return True
    except Exception:
        return False


def assert_no_dangling_rows(archive: Archive) -> None:
    with archive.index.read() as connection:
        live = connection.execute(
            select(mementos.c.id, mementos.c.content_hash, mementos.c.blob_version_id).where(
                mementos.c.deleted_at.is_(None)
            )
        ).all()
    for row in live:
        assert blob_present(archive, row.content_hash, row.blob_version_id), row.id


def test_uncited_memento_lives_for_the_grace_period_then_goes(archive: Archive) -> None:
    memento = capture(archive, b"uncited evidence")
    grace = timedelta(days=archive.settings.citations.retention_days)
    early = archive.retention.sweep(now=memento.archived_at + grace - DAY)
    assert early.mementos_deleted == 0 and early.next_expiry is not None
    assert archive.get_memento("default", memento.id).id == memento.id
    late = archive.retention.sweep(now=memento.archived_at + grace + DAY)
    assert late.mementos_deleted == 1 and late.blobs_deleted == 1
    assert late.bytes_deleted == len(b"uncited evidence")
    with pytest.raises(Gone) as gone:
        archive.get_memento("default", memento.id)
    assert gone.value.detail["content_hash"] == memento.content_hash
    assert "uncited-grace" in str(gone.value.detail["reason"])
    assert not blob_present(archive, memento.content_hash, memento.blob_version_id)
    assert archive.index.count_mementos("default", memento.urir_key) == 0


def test_cited_evidence_lives_as_long_as_the_transcript(archive: Archive) -> None:
    document = capture(archive, b"The fee is 40 euros per year." + FILLER)
    archive.transcripts.put("default", "t-7y", "P7Y", {})
    citation = cite(archive, "t-7y", document.id, "40 euros")
    now = utc_now()
    # Cited by memento id, the document is reached by the transcript as well as the passage.
    assert archive.retention.sweep(now=now + timedelta(days=365 * 6)).mementos_deleted == 0
    assert archive.get_memento("default", citation.passage.id)
    after = archive.retention.sweep(now=now + timedelta(days=365 * 7 + 3))
    assert set(after.deleted_ids) == {document.id, citation.passage.id}
    shown = archive.citations.for_transcript("default", "t-7y")[0]
    assert shown.selector is None  # tombstone: hashes and dates stay, no quote text
    assert shown.quote_hash == citation.quote_hash
    assert_no_dangling_rows(archive)


def test_extending_a_transcript_extends_what_it_cites(archive: Archive) -> None:
    document = capture(archive, b"Alpha beta gamma." + FILLER)
    archive.transcripts.put("default", "t", "P30D", {})
    citation = cite(archive, "t", document.id, "beta")
    archive.transcripts.put("default", "t", "P2Y", None)
    report = archive.retention.sweep(now=utc_now() + timedelta(days=400))
    assert citation.passage.id not in report.deleted_ids
    assert archive.get_memento("default", citation.passage.id)


def test_legal_holds_suspend_expiry_and_release(archive: Archive) -> None:
    document = capture(archive, b"Held evidence text." + FILLER)
    archive.transcripts.put("default", "t", "P1D", {})
    citation = cite(archive, "t", document.id, "evidence")
    archive.retention.set_transcript_hold("default", "t", True, "litigation 2026-17", "admin-key")
    archive.retention.set_memento_hold(
        "default", document.id, True, "litigation 2026-17", "admin-key"
    )
    later = utc_now() + timedelta(days=60)
    held = archive.retention.sweep(now=later)
    assert held.mementos_deleted == 0 and held.held == 2
    with pytest.raises(RetentionConflict):
        archive.retention.change_retention("default", "t", "PT1S", "shorten", "admin-key")
    with pytest.raises(RetentionConflict):
        archive.retention.erase("default", document.id, "takedown", "admin-key")
    archive.retention.set_transcript_hold("default", "t", False, "case closed", "admin-key")
    archive.retention.set_memento_hold("default", document.id, False, "case closed", "admin-key")
    released = archive.retention.sweep(now=later)
    assert set(released.deleted_ids) == {document.id, citation.passage.id}
    actions = [entry["action"] for entry in archive.retention.admin_log("default")]
    assert actions == ["legal_hold.on", "legal_hold.on", "legal_hold.off", "legal_hold.off"]
    with pytest.raises(Exception, match="append-only"), archive.index.write() as connection:
        connection.execute(text("UPDATE admin_log SET reason = 'rewritten'"))


def test_shared_bytes_survive_until_the_last_memento_expires(archive: Archive) -> None:
    mine = capture(archive, b"same bytes in two tenants", tenant="default")
    archive.transcripts.put("other", "keep", "P5Y", {})
    theirs = capture(
        archive, b"same bytes in two tenants", uri="https://other.example/", tenant="other"
    )
    cite(archive, "keep", theirs.id, "same bytes", tenant="other")
    report = archive.retention.sweep(now=utc_now() + timedelta(days=90))
    assert report.deleted_ids == [mine.id]  # theirs is reached by tenant "other"'s transcript
    assert report.blobs_deleted == 0  # the bytes are shared: still in use
    assert (
        archive.read_content(archive.get_memento("other", theirs.id))
        == b"same bytes in two tenants"
    )
    assert_no_dangling_rows(archive)


def test_a_write_landing_on_a_dying_blob_revives_it(archive: Archive) -> None:
    first = capture(archive, b"dedup race bytes")
    archive.retention.sweep(
        now=first.archived_at + timedelta(days=30)
    )  # first expires, blob deleted
    again = capture(archive, b"dedup race bytes", uri="https://ex.org/again")
    assert archive.read_content(again) == b"dedup race bytes"
    with archive.index.read() as connection:
        state = connection.execute(
            select(blobs.c.state).where(blobs.c.address == again.content_hash)
        ).scalar_one()
    assert state == "live"
    # A blob marked deleting (a sweep interrupted between its phases) is revived the same way.
    with archive.index.write() as connection:
        connection.execute(
            blobs.update().where(blobs.c.address == again.content_hash).values(state="deleting")
        )
    third = capture(archive, b"dedup race bytes", uri="https://ex.org/third")
    archive.retention.sweep(now=utc_now())  # finishes "deleting" blobs: must see it revived
    assert archive.read_content(third) == b"dedup race bytes"
    assert_no_dangling_rows(archive)


def test_concurrent_writers_and_sweeps_never_lose_acknowledged_bytes(archive: Archive) -> None:
    contents = [f"shared content {i}".encode() for i in range(4)]
    for i, content in enumerate(contents):  # old captures that are already expired
        capture(archive, content, uri=f"https://old.example/{i}")
    future = utc_now() + timedelta(days=30)
    stop = threading.Event()
    acknowledged: list[Any] = []
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        try:
            sequence = 0
            while not stop.is_set():
                sequence += 1
                content = contents[sequence % len(contents)]
                acknowledged.append(
                    capture(archive, content, uri=f"https://new.example/{number}/{sequence}")
                )
        except BaseException as error:
            errors.append(error)

    def sweeper() -> None:
        try:
            while not stop.is_set():
                # Everything written so far is due at this "now": sweeps delete blobs that
                # writers are deduplicating onto at the same moment.
                archive.retention.sweep(now=future, batch_size=2)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=sweeper) for _ in range(2)]
    for thread in threads:
        thread.start()
    stop.wait(2.0)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    assert acknowledged
    survivors = 0
    for memento in acknowledged:
        try:
            current = archive.get_memento("default", memento.id)
        except Gone:
            continue  # deleted on (fake) schedule: allowed
        assert archive.read_content(current) in contents  # acknowledged and live → bytes there
        survivors += 1
    assert_no_dangling_rows(archive)
    final = archive.retention.sweep(now=future)
    assert_no_dangling_rows(archive)
    assert survivors >= 0 and final.mementos_deleted >= 0


def test_shortening_and_erasure_are_admin_actions_with_reasons(archive: Archive) -> None:
    document = capture(archive, b"Erase me: personal data." + FILLER)
    archive.transcripts.put("default", "t", "P7Y", {})
    citation = cite(archive, "t", document.id, "personal data")
    until = archive.retention.change_retention("default", "t", "P1D", "customer left", "admin-key")
    assert until < utc_now() + timedelta(days=2)
    report = archive.retention.sweep(now=utc_now() + timedelta(days=20))
    assert citation.passage.id in report.deleted_ids
    other = capture(archive, b"Court order target.", uri="https://ex.org/court")
    archive.retention.erase("default", other.id, "court order 12/2026", "admin-key")
    with pytest.raises(Gone):
        archive.get_memento("default", other.id)
    assert not blob_present(archive, other.content_hash, other.blob_version_id)
    log = archive.retention.admin_log("default")
    assert [e["action"] for e in log] == ["retention.change", "erasure"]
    assert log[1]["reason"] == "court order 12/2026"
    with pytest.raises(Exception, match="reason"):
        archive.retention.erase("default", document.id, "  ", "admin-key")


def test_dry_run_changes_nothing_and_report_counts_bytes(archive: Archive) -> None:
    document = capture(archive, b"Report me." + FILLER)
    archive.transcripts.put("default", "t", "regulated", {"customer": "acme"})
    cite(archive, "t", document.id, "Report")
    uncited = capture(archive, b"nobody cites me", uri="https://ex.org/uncited")
    dry = archive.retention.sweep(now=utc_now() + timedelta(days=30), dry_run=True)
    assert dry.deleted_ids == [uncited.id] and dry.extended == 0
    assert archive.get_memento("default", uncited.id)
    report = archive.retention.report()
    assert report["by_policy"]["regulated"]["mementos"] == 2  # the passage and the cited document
    assert report["by_label"]["customer=acme"]["mementos"] == 2
    assert report["by_policy"]["uncited (grace)"]["bytes"] == len(b"nobody cites me")
    assert report["bytes"] == sum(p["bytes"] for p in report["by_policy"].values())


def test_gone_over_http_and_timemap(client: Any, archive: Archive) -> None:
    made = client.post(
        "/api/v1/mementos",
        json={"uri_r": "https://ex.org/g", "content": "x", "content_type": "text/plain"},
    ).json()
    archive.retention.sweep(now=utc_now() + timedelta(days=30))
    gone = client.get(made["uri_m"])
    assert gone.status_code == 410
    assert gone.json()["error"]["code"] == "gone"
    assert gone.json()["error"]["detail"]["content_hash"] == made["content_hash"]
    assert client.get("/timemap/json/https://ex.org/g").status_code == 404
    again = client.post(
        "/api/v1/mementos",
        json={
            "uri_r": "https://ex.org/g",
            "content": "x",
            "content_type": "text/plain",
            "captured_at": made["memento_datetime"],
        },
    )
    assert again.status_code == 410  # ids are never reused


def test_orphan_blobs_are_collected_after_the_safety_age(archive: Archive) -> None:
    orphan = archive.blobs.put(b"written, then the process died before the index commit")
    kept = capture(archive, b"a real memento")
    assert archive.retention.collect_orphans(safety_age=timedelta(hours=1)) == []  # too young
    collected = archive.retention.collect_orphans(
        safety_age=timedelta(hours=1), now=utc_now() + timedelta(hours=2)
    )
    assert collected == [orphan.address]
    assert not archive.blobs.exists(orphan.address)
    assert archive.read_content(kept) == b"a real memento"


def _while_a_sweep_decides(
    archive: Archive, monkeypatch: Any, action: Any
) -> list[threading.Thread]:
    """Run ``action`` (another API replica) in a thread once a sweep has evaluated a batch
    and before it tombstones it; give it a second. The threads still blocked then (waiting
    for the sweep's lock: serialised, which is correct) are returned to be joined."""
    blocked: list[threading.Thread] = []

    def batch_decided(expired: Any) -> None:
        if not getattr(batch_decided, "ran", False):
            batch_decided.ran = True  # type: ignore[attr-defined]
            thread = threading.Thread(target=action)
            thread.start()
            thread.join(timeout=1.0)
            if thread.is_alive():
                blocked.append(thread)

    monkeypatch.setattr(archive.retention.hooks, "batch_decided", batch_decided)
    return blocked


def _cited_passage(archive: Archive) -> tuple[Any, Any]:
    """A document memento (held, so only its passage can expire) and a passage cited by a
    transcript that expired long ago."""
    document = capture(archive, b"The fee is 40 euros." + FILLER)
    archive.retention.set_memento_hold("default", document.id, True, "keep the page", "admin-key")
    archive.transcripts.put("default", "short", "PT10S", {})
    return document, cite(archive, "short", document.id, "40 euros").passage


def test_a_citation_committed_while_a_sweep_decides_keeps_its_passage(
    archive: Archive, monkeypatch: Any
) -> None:
    """Either the new citation waits for the sweep and is refused (410: its passage is
    gone), or it commits first and the sweep sees it. Never acknowledged and deleted
    (PostgreSQL runs writers concurrently at READ COMMITTED: found by a review session)."""
    document, passage = _cited_passage(archive)
    archive.transcripts.put("default", "long", "P7Y", {})
    outcome: list[Any] = []

    def cite_for_seven_years() -> None:
        try:
            outcome.append(cite(archive, "long", document.id, "40 euros"))
        except Gone as refused:
            outcome.append(refused)

    blocked = _while_a_sweep_decides(archive, monkeypatch, cite_for_seven_years)
    report = archive.retention.sweep(now=utc_now() + timedelta(days=30))
    for thread in blocked:
        thread.join()
    assert len(outcome) == 1
    if isinstance(outcome[0], Gone):
        assert passage.id in report.deleted_ids
    else:
        assert outcome[0].passage.id == passage.id
        assert passage.id not in report.deleted_ids, (
            "an acknowledged citation's passage was deleted"
        )
        assert archive.read_content(archive.get_memento("default", passage.id))


def test_a_hold_committed_while_a_sweep_decides_keeps_its_passage(
    archive: Archive, monkeypatch: Any
) -> None:
    _, passage = _cited_passage(archive)
    blocked = _while_a_sweep_decides(
        archive,
        monkeypatch,
        lambda: archive.retention.set_transcript_hold(
            "default", "short", True, "lawsuit", "admin-key"
        ),
    )
    report = archive.retention.sweep(now=utc_now() + timedelta(days=30))
    for thread in blocked:
        thread.join()
    if not blocked:  # the hold committed before the sweep's deletion: it must have counted
        assert passage.id not in report.deleted_ids, "a passage was deleted under a committed hold"
    else:  # the hold waited for the sweep: placed on a transcript whose passage is gone
        assert passage.id in report.deleted_ids


def test_a_citation_of_a_document_deleted_meanwhile_is_refused(
    archive: Archive, monkeypatch: Any
) -> None:
    """The document is read when the request is planned; a sweep deletes it before the
    commit. The commit must notice rather than acknowledge a citation of a tombstone."""
    document = capture(archive, b"The fee is 40 euros." + FILLER)
    archive.transcripts.put("default", "t", "P7Y", {})
    grace = timedelta(days=archive.settings.citations.retention_days)
    real_stage_many = archive.blobs.stage_many

    def sweep_first(*args: Any, **kwargs: Any) -> Any:
        archive.retention.sweep(now=document.archived_at + grace + timedelta(seconds=1))
        return real_stage_many(*args, **kwargs)

    monkeypatch.setattr(archive.blobs, "stage_many", sweep_first)
    with pytest.raises(Gone):
        cite(archive, "t", document.id, "40 euros")
    assert archive.citations.for_transcript("default", "t") == []


def test_erasure_is_refused_while_a_citing_transcript_is_held(archive: Archive) -> None:
    document = capture(archive, b"The fee is 40 euros." + FILLER)
    archive.transcripts.put("default", "t", "P7Y", {})
    passage = cite(archive, "t", document.id, "40 euros").passage
    archive.retention.set_transcript_hold("default", "t", True, "litigation 2026-17", "admin-key")
    with pytest.raises(
        RetentionConflict, match="transcript citing this memento is under legal hold"
    ):
        archive.retention.erase("default", passage.id, "takedown", "admin-key")
    assert archive.read_content(archive.get_memento("default", passage.id))
    archive.retention.set_transcript_hold("default", "t", False, "settled", "admin-key")
    archive.retention.erase("default", passage.id, "takedown", "admin-key")
    with pytest.raises(Gone):
        archive.get_memento("default", passage.id)


def test_gc_never_deletes_bytes_a_concurrent_write_deduplicated_onto(
    archive: Archive, monkeypatch: Any
) -> None:
    """An old orphan (a write that died after storing its bytes) is rewritten by a new
    write: its stage finds the bytes in place, so nothing new is stored. ``amber gc`` runs
    between that write's publish and its commit: the write must still end with its bytes."""
    content = b"bytes first stored by a write that died before its index commit"
    archive.blobs.put(content)
    real_publish = archive.blobs.publish
    collected: list[str] = []

    def publish_then_gc(staged: Any) -> None:
        real_publish(staged)
        if not collected:  # once: the commit's re-store publishes too, under the write lock
            collected.extend(
                archive.retention.collect_orphans(
                    safety_age=timedelta(hours=1), now=utc_now() + timedelta(hours=2)
                )
            )

    monkeypatch.setattr(archive.blobs, "publish", publish_then_gc)
    written = archive.write_memento(
        MementoRequest(
            uri_r="https://ex.org/deduplicated",
            content=content,
            content_type="text/plain",
            facts=CaptureFacts(tool="http.get"),
        )
    )
    monkeypatch.setattr(archive.blobs, "publish", real_publish)
    assert collected == [written.memento.content_hash]  # gc did take the orphan's bytes …
    stored = archive.get_memento("default", written.memento.id)
    assert archive.read_content(stored) == content  # … and the commit stored them again
    assert (
        archive.retention.collect_orphans(
            safety_age=timedelta(hours=1), now=utc_now() + timedelta(hours=2)
        )
        == []
    )


@pytest.fixture()
def local_archive(tmp_path: Any) -> Iterator[Archive]:
    """The embedded default: only the local store stages blobs in temp files (S3 stages
    objects, which :meth:`collect_orphans` covers)."""
    archive = Archive.open(Settings(data_dir=tmp_path / "amber"))
    yield archive
    archive.close()


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def left_by_a_dead_writer(staged: Any, hours_ago: float) -> str:
    """Rename a staged temp file as if a process that has since died had written it."""
    directory, name = os.path.split(staged.pending.temp_name)
    _, digest, _, number = name.split(".")
    leftover = os.path.join(directory, f".{digest}.{dead_pid()}.{number}")
    os.rename(staged.pending.temp_name, leftover)
    when = (utc_now() - timedelta(hours=hours_ago)).timestamp()
    os.utime(leftover, (when, when))
    return leftover


def test_leftover_temp_files_are_collected_after_the_safety_age(local_archive: Archive) -> None:
    archive = local_archive
    died = left_by_a_dead_writer(archive.blobs.stage(b"staged, then the process died"), 3)
    died_lately = left_by_a_dead_writer(archive.blobs.stage(b"died a moment ago"), 0)
    stalled = archive.blobs.stage(b"staged hours ago by a write of this (live) process")
    long_ago = (utc_now() - timedelta(hours=3)).timestamp()
    os.utime(stalled.pending.temp_name, (long_ago, long_ago))
    kept = capture(archive, b"a real memento")
    assert sorted(path for path, _ in archive.blobs.temp_files()) == sorted([died, died_lately])
    assert archive.retention.collect_temp_files(safety_age=timedelta(hours=1), dry_run=True) == [
        died
    ]
    assert os.path.exists(died)  # a dry run deletes nothing
    assert archive.retention.collect_temp_files(safety_age=timedelta(hours=1)) == [died]
    assert not os.path.exists(died) and os.path.exists(died_lately)  # too young yet
    archive.blobs.publish([stalled])  # a live writer's file is never taken from it
    assert (
        archive.blobs.get(stalled.blob.address)
        == b"staged hours ago by a write of this (live) process"
    )
    assert archive.read_content(kept) == b"a real memento"


def test_only_the_stores_own_temp_files_can_be_removed(tmp_path: Any) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    outside = tmp_path / ".tmp-not-ours"
    outside.write_bytes(b"x")
    published = store.put(b"a blob")
    for path in (str(outside), str(store.path_for(published.address))):
        with pytest.raises(ValueError):
            store.remove_temp_file(path)
    assert outside.exists() and store.get(published.address) == b"a blob"


@pytest.fixture()
def governance_archive(seaweedfs_settings: Any, tmp_path: Any) -> Iterator[Archive]:
    """An embedded index over a SeaweedFS bucket with Object Lock in GOVERNANCE mode."""
    locked = seaweedfs_settings.with_overrides(
        data_dir=tmp_path / "amber",
        database_url=f"sqlite:///{tmp_path / 'amber.sqlite3'}",
        s3_object_lock_mode="GOVERNANCE",
    )
    archive = Archive.open(locked)
    yield archive
    archive.close()


@pytest.mark.seaweedfs
def test_object_lock_follows_expiry_and_holds(governance_archive: Archive) -> None:
    """With Object Lock (GOVERNANCE), the store itself refuses early deletion: a new blob is
    locked for the grace period, citations extend the lock (to the day), holds set the flag."""
    from archive.exceptions import RetentionLocked

    archive = governance_archive
    document = capture(archive, b"Locked evidence sentence." + FILLER)
    until, hold = archive.blobs.retention_of(document.content_hash, document.blob_version_id)
    assert until is not None and until >= document.archived_at + timedelta(days=13)
    archive.transcripts.put("default", "t", "P2Y", {})
    citation = cite(archive, "t", document.id, "evidence sentence")
    # The passage is locked from its first write, not only once a sweep gets to it.
    passage_until, _ = archive.blobs.retention_of(
        citation.passage.content_hash, citation.passage.blob_version_id
    )
    assert passage_until is not None
    assert passage_until >= citation.passage.archived_at + timedelta(days=13)
    archive.retention.set_transcript_hold("default", "t", True, "litigation", "admin")
    archive.retention.sweep()
    until, hold = archive.blobs.retention_of(document.content_hash, document.blob_version_id)
    assert until is not None and until >= utc_now() + timedelta(days=365 * 2 - 1)
    assert until.hour == 0 and until.minute == 0  # rounded up to the day
    assert hold is True
    with pytest.raises(RetentionLocked):
        archive.blobs.delete(citation.passage.content_hash, citation.passage.blob_version_id)
    archive.retention.set_transcript_hold("default", "t", False, "closed", "admin")
    archive.retention.sweep()
    assert archive.blobs.retention_of(document.content_hash, document.blob_version_id)[1] is False


@pytest.mark.seaweedfs
def test_erasure_deletes_governance_locked_bytes_at_once(governance_archive: Archive) -> None:
    """A court order cannot wait for the lock date: erasure bypasses GOVERNANCE retention
    (a sweep never does), and the bytes are gone the moment the admin action returns."""
    archive = governance_archive
    target = capture(archive, b"Takedown target sentence." + FILLER)
    assert archive.blobs.retention_of(target.content_hash, target.blob_version_id)[0] is not None
    archive.retention.erase("default", target.id, "court order 7/2026", "admin-key")
    assert not blob_present(archive, target.content_hash, target.blob_version_id)
    with archive.index.read() as connection:
        state = connection.execute(
            select(blobs.c.state).where(blobs.c.address == target.content_hash)
        ).scalar_one()
    assert state == "deleted"


def test_a_write_that_stored_its_blob_before_a_sweep_records_the_surviving_version(
    archive: Archive,
) -> None:
    """The interleaving behind a once-seen CI failure, made deterministic.

    A writer stores its bytes (outside the index lock) and gets the existing version V0.
    Before it commits, a sweep deletes V0 and a second writer re-stores the bytes as V1.
    The first writer must not record V0, which no longer exists, for its acknowledged memento.
    """
    content = b"deduplicated bytes that a sweep deletes mid-write" + FILLER
    capture(archive, content, uri="https://old.example/x")  # expires first
    store = archive.blobs
    real_stage = store.stage
    interleaved = False

    def stage_then_interleave(data: bytes, **kwargs: Any) -> Any:
        nonlocal interleaved
        staged = real_stage(data, **kwargs)
        if not interleaved and data == content:
            interleaved = True  # once: the sweep and the second writer run in between
            assert archive.retention.sweep(now=utc_now() + timedelta(days=30)).blobs_deleted == 1
            capture(archive, content, uri="https://second.example/x")
        return staged

    store.stage = stage_then_interleave  # type: ignore[method-assign]
    try:
        first = capture(archive, content, uri="https://first.example/x")
    finally:
        store.stage = real_stage  # type: ignore[method-assign]
    assert interleaved
    live = archive.get_memento("default", first.id)
    assert live.blob_version_id == first.blob_version_id
    assert archive.read_content(live) == content
    assert_no_dangling_rows(archive)


def _expires_at(archive: Archive, memento_id: str) -> Any:
    with archive.index.read() as connection:
        return connection.execute(
            select(mementos.c.expires_at).where(mementos.c.id == memento_id)
        ).scalar_one()


def _retain_until(archive: Archive, transcript_id: str) -> Any:
    return archive.transcripts.get("default", transcript_id).retain_until


def test_a_shortening_while_a_hold_applies_still_moves_the_date_forward(archive: Archive) -> None:
    """A sweep only looks at what is due: a date left too late would keep the evidence past
    every transcript once the hold is released (found by a review session)."""
    document = capture(archive, b"The fee is 40 euros." + FILLER)
    archive.transcripts.put("default", "t1", "P10Y", {})
    passage = cite(archive, "t1", document.id, "40 euros").passage
    archive.retention.set_memento_hold("default", passage.id, True, "audit", "admin-key")
    archive.retention.change_retention("default", "t1", "P1D", "mistake", "admin-key")
    archive.retention.set_memento_hold("default", passage.id, False, "audit over", "admin-key")
    assert _expires_at(archive, passage.id) == _retain_until(archive, "t1")
    report = archive.retention.sweep(now=_retain_until(archive, "t1") + 30 * DAY)
    assert passage.id in report.deleted_ids


def test_a_citation_racing_a_shortening_lives_only_as_long_as_the_transcript_now(
    archive: Archive, monkeypatch: Any
) -> None:
    """cite() reads its transcript before the write transaction; a shortening committed in
    between must not let the citation extend its evidence to the old date."""
    document = capture(archive, b"The fee is 40 euros." + FILLER)
    archive.transcripts.put("default", "t1", "P10Y", {})
    committer = archive.citations.committer
    real_submit = committer.submit

    def shortened_meanwhile(job: Any) -> Any:
        archive.retention.change_retention("default", "t1", "P1D", "mistake", "admin-key")
        return real_submit(job)

    monkeypatch.setattr(committer, "submit", shortened_meanwhile)
    passage = cite(archive, "t1", document.id, "40 euros").passage
    # Cited evidence expires with its transcript as it stands in the citation's transaction:
    # the shortened one day, earlier than the passage's grace date.
    assert _retain_until(archive, "t1") < passage.archived_at + archive.retention.grace
    assert _expires_at(archive, passage.id) == _retain_until(archive, "t1")
    report = archive.retention.sweep(now=_retain_until(archive, "t1") + 30 * DAY)
    assert passage.id in report.deleted_ids


def test_two_shortenings_at_once_leave_the_latest_transcripts_date(
    archive: Archive, monkeypatch: Any
) -> None:
    """On PostgreSQL writers run side by side: two shortenings evaluating at once would each
    miss the other's change, and the last to write would leave a date too late."""
    document = capture(archive, b"The fee is 40 euros." + FILLER)
    archive.transcripts.put("default", "t1", "P10Y", {})
    archive.transcripts.put("default", "t2", "P8Y", {})
    passage = cite(archive, "t1", document.id, "40 euros").passage
    assert cite(archive, "t2", document.id, "40 euros").passage.id == passage.id
    others: list[threading.Thread] = []

    def evaluated(verdicts: Any) -> None:
        if not others:  # the first shortening has evaluated: start the second beside it
            thread = threading.Thread(
                target=lambda: archive.retention.change_retention(
                    "default", "t2", "P2D", "mistake", "admin-key"
                )
            )
            others.append(thread)
            thread.start()
            thread.join(timeout=1.0)  # blocked on the first one's lock: serialised, correct

    monkeypatch.setattr(archive.retention.hooks, "evaluated", evaluated)
    archive.retention.change_retention("default", "t1", "P1D", "mistake", "admin-key")
    others[0].join()
    latest = max(_retain_until(archive, "t1"), _retain_until(archive, "t2"))
    assert _expires_at(archive, passage.id) == latest


@pytest.mark.seaweedfs
def test_a_page_a_drift_check_archived_is_held_in_the_store_with_its_transcript(
    governance_archive: Archive,
) -> None:
    """The sweep keeps what a drift check archived for as long as the checked citation's
    transcript (and its hold); the store's legal hold must reach it the same way."""
    from archive.index.schema import drift_checks

    archive = governance_archive
    document = capture(archive, b"Locked evidence sentence." + FILLER)
    archive.transcripts.put("default", "t", "P2Y", {})
    citation = cite(archive, "t", document.id, "evidence sentence")
    live_page = capture(
        archive, b"The page as the drift check found it." + FILLER, uri="https://ex.org/a?checked"
    )
    with (
        archive.index.write() as connection
    ):  # what a drift check records (archive/drift/service.py)
        connection.execute(
            drift_checks.insert().values(
                id="check-1",
                tenant="default",
                citation_id=citation.id,
                transcript_id="t",
                memento_id=citation.passage.id,
                uri_r="https://ex.org/a",
                host="ex.org",
                run_id="run-1",
                checked_at=utc_now(),
                verdict="material",
                rules_version="test",
                reasons_json="[]",
                live_document_memento_id=live_page.id,
            )
        )
    archive.retention.set_transcript_hold("default", "t", True, "litigation", "admin")
    with archive.index.read() as connection:  # Amber itself keeps it ...
        assert archive.retention.evaluator.evaluate(connection, [live_page.id])[0].held
    archive.retention.sweep()  # ... and so must the store
    assert archive.blobs.retention_of(live_page.content_hash, live_page.blob_version_id)[1] is True
