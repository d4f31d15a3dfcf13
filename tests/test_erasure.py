"""Erasure reaches everything derived from the erased bytes, and leaves no text behind.

Issue #18, finding 8: an erased document's passages, the citations' selectors, drift diffs
and reasons, review flags and the text caches all held its text; SQLite kept the deleted
cells in free pages and WAL frames. Every test runs on both backend pairs (local store +
SQLite, SeaweedFS S3 + PostgreSQL) unless it is about SQLite's files or signals. The text
is a unique marker; "no text left" means the marker is in no row of any table (both
backends) and in no byte of the SQLite files or the local blob directory.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Text, cast, select, update

import archive.citations.extract as extraction
from archive.archive import Archive
from archive.citations import CitationRequest, QuoteRequest, SourceRequest
from archive.config import Settings
from archive.exceptions import ConfigurationError, Gone, RetentionConflict
from archive.index import signals
from archive.index.schema import drift_checks, mementos, metadata, transcript_reviews
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

CAPTURED = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. " * 6


class Origin:
    """A one-page web origin on 127.0.0.1 whose body the test sets (for the drift job)."""

    def __init__(self) -> None:
        self.body = b""
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                body = origin.body if self.path == "/doc" else b"<html><body>no</body></html>"
                self.send_response(200 if self.path == "/doc" else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def html(*paragraphs: str) -> bytes:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return f"<html><head><title>Fees</title></head><body>{body}</body></html>".encode()


@pytest.fixture()
def settings(settings: Settings) -> Settings:
    return settings.with_overrides(
        fetch_allow=("127.0.0.1:*",),
        extra={"drift": {"host_delay_seconds": 0.0, "timeout_seconds": 2.0}},
    )


@pytest.fixture()
def origin() -> Iterator[Origin]:
    served = Origin()
    yield served
    served.close()


@dataclass
class Cited:
    marker: str
    document: Any  # the document memento
    by_id: Any  # citation of it by memento id
    inline: Any  # citation of the same capture, sent inline (kept only by hash)


def cited_world(archive: Archive, origin: Origin, *, long: bool = False) -> Cited:
    """A document holding a unique marker, cited twice (by id and inline), and a drift
    check whose diff quotes the marker: the live page lost the marker's sentence. ``long``
    makes the first quote 3,000 characters, so its selector and diff take overflow pages
    in SQLite (freed whole when blanked: only secure_delete zeroes them)."""
    tenant = "default"
    marker = "Quixmarker" + secrets.token_hex(6)
    detail = f" It was agreed by the {marker} committee after a long consultation." * (
        40 if long else 0
    )
    sentence = f"The annual fee for {marker} members is 40 euros.{detail}"
    other = f"Refunds for {marker} accounts take ten working days."
    content = html(FILLER, sentence, FILLER, other, FILLER)
    uri = origin.base + "/doc"
    document = archive.write_memento(
        MementoRequest(
            uri_r=uri,
            content=content,
            content_type="text/html; charset=utf-8",
            captured_at=CAPTURED,
            facts=CaptureFacts(tool="http.get", http_status=200),
        ),
        tenant=tenant,
    ).memento
    archive.transcripts.put(tenant, "t", "P1Y", {})
    by_id = archive.citations.cite(
        tenant, "t", [CitationRequest(quote=QuoteRequest(sentence), memento_id=document.id)]
    ).citations[0]
    inline = archive.citations.cite(
        tenant,
        "t",
        [
            CitationRequest(
                quote=QuoteRequest(other),
                source=SourceRequest(
                    uri_r=uri,
                    content=content,
                    content_type="text/html; charset=utf-8",
                    captured_at=CAPTURED,
                    tool="http.get",
                    http_status=200,
                ),
            )
        ],
    ).citations[0]
    if not archive.settings.citations.keep_document:
        assert inline.document_memento_id is None  # kept by hash only
    origin.body = html(
        FILLER,
        "The annual fee for all members is 90 euros." + detail.replace(marker, "board"),
        FILLER,
        "Refunds for all accounts take thirty working days.",
        FILLER,
    )
    checks = archive.drift.run()
    assert len(checks) == 2 and all(c.diff for c in checks), [c.verdict for c in checks]
    assert any(marker in json.dumps(c.diff) for c in checks)  # the test means something
    assert all(":" in reason for c in checks for reason in c.reasons)  # words in reasons
    return Cited(marker, document, by_id, inline)


def rows_holding(archive: Archive, marker: str) -> list[str]:
    """``table.column`` of every stored value that contains the marker, any table."""
    found = []
    with archive.index.read() as connection:
        for table in metadata.sorted_tables:
            for column in table.columns:
                hits = connection.execute(
                    select(column).where(cast(column, Text).contains(marker))
                ).all()
                if hits:
                    found.append(f"{table.name}.{column.name}")
    return found


def files_holding(root: Path, marker: str) -> list[str]:
    needles = [marker.encode("utf-8"), marker.encode("utf-16-le")]
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and any(n in path.read_bytes() for n in needles)
    )


def erase_over_http(client: Any, memento_id: str) -> dict[str, Any]:
    response = client.post(
        f"/api/v1/mementos/{memento_id}/erase", json={"reason": "data-protection request 7"}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_erasing_a_document_reaches_everything_cut_from_it(
    client: Any, archive: Archive, origin: Origin, settings: Settings
) -> None:
    world = cited_world(archive, origin)
    passages = {world.by_id.passage.id, world.inline.passage.id}
    assert rows_holding(archive, world.marker)  # selectors, diffs: the text is there
    assert any(key[1] == world.document.content_hash for key in extraction._cache)

    answer = erase_over_http(client, world.document.id)

    assert answer["erased"] is True and set(answer["erased_ids"]) == {world.document.id} | passages
    assert answer["index_scrubbed"] is True
    for memento_id in [world.document.id, *passages]:
        gone = client.get(f"/memento/{memento_id}")
        assert gone.status_code == 410, memento_id
        assert world.marker not in gone.text
    transcript = client.get("/api/v1/transcripts/t").json()
    assert len(transcript["citations"]) == 2
    for citation in transcript["citations"]:
        assert citation["selector"] is None and citation["text_fragment_url"] is None
        deleted = citation["passage_deleted"]
        assert deleted["reason"]["kind"] == "erasure"
        assert deleted["reason"]["admin_log_id"] == answer["admin_log_id"]
        assert deleted["reason"]["of"] == world.document.id
        assert "by" not in deleted["reason"]  # no key id on a tombstone
        assert deleted["position"]["end"] > deleted["position"]["start"]
        assert citation["quote_hash"].startswith("blake3:")
    assert rows_holding(archive, world.marker) == []
    with archive.index.read() as connection:
        checks = connection.execute(select(drift_checks)).all()
        flags = connection.execute(select(transcript_reviews.c.reasons_json)).scalar_one()
    # Diffs gone; reasons keep their kind, not the words they quoted ("ten->thirty").
    assert len(checks) == 2 and all(c.diff_json is None for c in checks)
    kinds = [json.loads(c.reasons_json) for c in checks]
    assert all(kinds) and not any(":" in reason for reasons in kinds for reason in reasons)
    flagged = [reason for flag in json.loads(flags) for reason in flag["reasons"]]
    assert flagged and not any(":" in reason for reason in flagged)
    for memento in [world.document, world.by_id.passage, world.inline.passage]:
        with pytest.raises(Exception):  # noqa: B017 - each store says "gone" in its own words
            archive.blobs.get(memento.content_hash, memento.blob_version_id)
    # The caches forgot it: nothing of the erased bytes is remembered, and citing the
    # erased document again is refused as gone rather than answered from memory.
    assert not any(key[1] == world.document.content_hash for key in extraction._cache)
    with pytest.raises(Gone):
        archive.get_memento("default", world.document.id)
    refused = client.post(
        "/api/v1/transcripts/t/citations",
        json={"citations": [{"memento_id": world.document.id, "quote": {"exact": "fee"}}]},
    )
    assert refused.status_code in (410, 422) and world.marker not in refused.text
    log = client.get("/api/v1/admin/log").json()
    assert log[-1]["id"] == answer["admin_log_id"] and log[-1]["action"] == "erasure"
    if archive.index.dialect == "sqlite":
        assert files_holding(settings.data_dir, world.marker) == []


@pytest.mark.parametrize("settings", ["local-sqlite"], indirect=True)  # SQLite's own files
@pytest.mark.parametrize("long", [False, True], ids=["short-quote", "overflow-pages"])
def test_sqlite_files_held_the_text_before_and_hold_none_after(
    client: Any, archive: Archive, origin: Origin, settings: Settings, long: bool
) -> None:
    assert archive.index.dialect == "sqlite"
    world = cited_world(archive, origin, long=long)
    data = settings.data_dir
    before = files_holding(data, world.marker)
    assert any(name.startswith("amber.sqlite3") for name in before), before
    assert any(name.startswith("blobs/") for name in before), before
    # The evidence log's background round integrates the erasure's tombstone leaves a moment
    # later and writes the WAL again (scrubbed pages only); stopped here so that the file
    # shows what the erasure itself left. tests/test_evidence_log.py covers the log's side.
    archive.evidence_log().close()
    erase_over_http(client, world.document.id)
    assert files_holding(data, world.marker) == []
    assert (data / "amber.sqlite3-wal").stat().st_size == 0  # checkpointed and truncated
    with archive.index.read() as connection:
        assert connection.exec_driver_sql("PRAGMA secure_delete").scalar() == 1


def test_erasing_a_passage_blanks_its_selector_and_drift_text(
    client: Any, archive: Archive, origin: Origin
) -> None:
    world = cited_world(archive, origin)
    answer = erase_over_http(client, world.by_id.passage.id)
    assert answer["erased_ids"] == [world.by_id.passage.id]
    assert client.get(f"/memento/{world.by_id.passage.id}").status_code == 410
    assert client.get(f"/memento/{world.document.id}").status_code == 200  # not cut from it
    shown = {c["id"]: c for c in client.get("/api/v1/transcripts/t").json()["citations"]}
    assert shown[world.by_id.id]["selector"] is None
    assert shown[world.by_id.id]["passage_deleted"]["reason"]["kind"] == "erasure"
    assert "of" not in shown[world.by_id.id]["passage_deleted"]["reason"]
    assert shown[world.inline.id]["selector"] is not None  # another passage: untouched
    assert shown[world.inline.id]["passage_deleted"] is None
    with archive.index.read() as connection:
        diffs = dict(
            connection.execute(select(drift_checks.c.citation_id, drift_checks.c.diff_json)).all()
        )
    assert diffs[world.by_id.id] is None and diffs[world.inline.id] is not None


def test_bytes_another_live_memento_uses_survive_its_erasure(archive: Archive) -> None:
    """Blobs are shared by content address, across tenants: the erased memento is gone, the
    other one keeps its evidence (its own text is its tenant's, not the erased one's)."""
    content = b"Shared evidence bytes " + secrets.token_hex(8).encode()

    def write(tenant: str, uri: str) -> Any:
        return archive.write_memento(
            MementoRequest(
                uri_r=uri,
                content=content,
                content_type="text/plain",
                facts=CaptureFacts(tool="http.get"),
            ),
            tenant=tenant,
        ).memento

    erased = write("default", "https://ex.org/a")
    same_tenant = write("default", "https://ex.org/b")
    other_tenant = write("acme", "https://ex.org/a")
    result = archive.retention.erase("default", erased.id, "takedown", "admin-key")
    assert result.blobs_deleted == 0
    with pytest.raises(Gone):
        archive.get_memento("default", erased.id)
    for survivor, tenant in ((same_tenant, "default"), (other_tenant, "acme")):
        assert archive.read_content(archive.get_memento(tenant, survivor.id)) == content
    archive.retention.erase("default", same_tenant.id, "takedown", "admin-key")
    assert archive.read_content(archive.get_memento("acme", other_tenant.id)) == content
    last = archive.retention.erase("acme", other_tenant.id, "takedown", "admin-key")
    assert last.blobs_deleted == 1
    with pytest.raises(Exception):  # noqa: B017 - each store says "gone" in its own words
        archive.blobs.get(erased.content_hash, other_tenant.blob_version_id)


def test_a_hold_on_a_passage_cut_from_it_refuses_the_erasure(
    archive: Archive, origin: Origin
) -> None:
    world = cited_world(archive, origin)
    passage = world.inline.passage.id
    archive.retention.set_memento_hold("default", passage, True, "litigation 4/2026", "admin")
    with pytest.raises(RetentionConflict, match="passage cut from this memento"):
        archive.retention.erase("default", world.document.id, "takedown", "admin")
    assert archive.get_memento("default", world.document.id)  # nothing changed
    assert archive.citations.for_transcript("default", "t")[0].selector is not None
    archive.retention.set_memento_hold("default", passage, False, "settled", "admin")
    archive.retention.erase("default", world.document.id, "takedown", "admin")
    assert all(c.selector is None for c in archive.citations.for_transcript("default", "t"))


def test_other_processes_forget_cached_text_when_one_erases(settings: Settings) -> None:
    """Two Archive objects on one index stand for two processes (SQLite: the erasures
    signal; PostgreSQL: the deletions generation row): the erasing one forgets the erased
    addresses; the other forgets everything at its next use."""
    eraser, other = Archive.open(settings), Archive.open(settings)
    try:
        forgotten: list[tuple[str | None, object]] = []
        other.text_memory.register(lambda tenant, addresses: forgotten.append((tenant, addresses)))
        memento = eraser.write_memento(
            MementoRequest(
                uri_r="https://ex.org/x",
                content=b"to be erased",
                content_type="text/plain",
                facts=CaptureFacts(tool="http.get"),
            )
        ).memento
        other.text_memory.heed()
        assert forgotten == []  # nothing erased: nothing forgotten
        eraser.retention.erase("default", memento.id, "takedown", "admin")
        other.text_memory.heed()
        assert forgotten == [(None, None)]
        other.text_memory.heed()
        assert forgotten == [(None, None)]  # once per erasure
    finally:
        eraser.close()
        other.close()


def test_tombstones_show_no_erasing_key_id(archive: Archive) -> None:
    """New erasures name their admin-log entry; older tombstones that named the key id are
    shown without it."""
    memento = archive.write_memento(
        MementoRequest(
            uri_r="https://ex.org/old",
            content=b"erased long ago",
            content_type="text/plain",
            facts=CaptureFacts(tool="http.get"),
        )
    ).memento
    with archive.index.write() as connection:
        connection.execute(
            update(mementos)
            .where(mementos.c.id == memento.id)
            .values(
                deleted_at=datetime.now(UTC),
                deletion_reason=json.dumps({"kind": "erasure", "by": "0123456789ab"}),
            )
        )
    with pytest.raises(Gone) as gone:
        archive.get_memento("default", memento.id)
    assert json.loads(str(gone.value.detail["reason"])) == {"kind": "erasure"}
    fresh = archive.write_memento(
        MementoRequest(
            uri_r="https://ex.org/new",
            content=b"erased now",
            content_type="text/plain",
            facts=CaptureFacts(tool="http.get"),
        )
    ).memento
    erasure = archive.retention.erase("default", fresh.id, "takedown", "0123456789ab")
    with pytest.raises(Gone) as gone:
        archive.get_memento("default", fresh.id)
    assert json.loads(str(gone.value.detail["reason"])) == {
        "kind": "erasure",
        "admin_log_id": erasure.admin_log_id,
    }
    assert archive.retention.admin_log("default")[-1]["key_id"] == "0123456789ab"


def test_erasing_a_live_page_the_drift_job_kept_erases_what_was_cut_from_it(
    settings: Settings, origin: Origin
) -> None:
    """With keep_document, a drift check keeps the changed live page and the new wording cut
    from it: erasing that page erases the new wording too, and the diff that quoted it."""
    keeping = settings.with_overrides(
        extra={**settings.extra, "citations": {"keep_document": True}}
    )
    archive = Archive.open(keeping)
    try:
        world = cited_world(archive, origin)
        with archive.index.read() as connection:
            kept = connection.execute(
                select(drift_checks).where(drift_checks.c.live_document_memento_id.is_not(None))
            ).all()
        assert kept and all(c.new_passage_memento_id for c in kept)
        page = kept[0].live_document_memento_id
        result = archive.retention.erase("default", page, "takedown", "admin")
        new_wording = {c.new_passage_memento_id for c in kept}
        assert set(result.erased_ids) == {page} | new_wording
        for memento_id in new_wording:
            with pytest.raises(Gone) as gone:
                archive.get_memento("default", memento_id)
            assert json.loads(str(gone.value.detail["reason"]))["of"] == page
        with archive.index.read() as connection:
            diffs = connection.execute(
                select(drift_checks.c.diff_json).where(drift_checks.c.id.in_([c.id for c in kept]))
            ).scalars()
            assert all(diff is None for diff in diffs)
        # The cited capture is other bytes: it and its citations' selectors stay.
        assert archive.get_memento("default", world.document.id)
        assert all(c.selector for c in archive.citations.for_transcript("default", "t"))
    finally:
        archive.close()


def test_a_process_that_cannot_open_the_erasure_signal_cannot_erase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other processes would never hear of the erasure: it is refused, nothing changed."""
    settings = Settings(data_dir=tmp_path / "amber-data")
    first = Archive.open(settings)
    memento = first.write_memento(
        MementoRequest(
            uri_r="https://ex.org/x",
            content=b"kept",
            content_type="text/plain",
            facts=CaptureFacts(tool="http.get"),
        )
    ).memento
    first.close()
    real_open = signals.os.open

    def refusing(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".erasures"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(signals.os, "open", refusing)
    archive = Archive.open(settings)
    try:
        with pytest.raises(ConfigurationError):
            archive.retention.erase("default", memento.id, "takedown", "admin")
        assert archive.read_content(archive.get_memento("default", memento.id)) == b"kept"
    finally:
        archive.close()
