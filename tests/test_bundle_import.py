"""Importing WARC and WACZ files: Amber's own bundles round-trip, a warcio-written WARC and a
py-wacz WACZ become mementos one can cite from, revisits resolve within the file, and a
second import stores nothing."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_bundles import fresh_bundle, populate, settings_for, unpack
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from api.cli import main
from archive.archive import Archive
from archive.bundles.bundlecheck import verify_bundle
from archive.bundles.export import CITATIONS, export_bundle
from archive.bundles.importer import import_file
from archive.bundles.warcfile import read_records
from archive.citations import CitationRequest, QuoteRequest
from archive.config import Settings
from archive.exceptions import TranscriptNotFound
from archive.mementos import Scope

PAGE = b"<html><body><p>Imported archives hold the quote we cite today.</p></body></html>"
WHEN = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
BASE = "http://testserver"


def open_archive(data_dir: Path) -> Archive:
    return Archive.open(
        Settings(
            data_dir=data_dir,
            public_base_url="http://testserver",
            durability="relaxed",
            extra={
                "citations": {
                    "keep_document": True,
                    "evidence_sources": ["http.get", "warc-import"],
                }
            },
        )
    )


@pytest.fixture()
def empty(tmp_path: Path) -> Iterator[Archive]:
    opened = open_archive(tmp_path / "empty")
    yield opened
    opened.close()


def warcio_file(path: Path) -> None:
    """A response, a resource, a revisit of the response, a revisit of nothing here, and a
    request record, written by warcio itself (its default SHA-1 digests)."""
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        http = StatusAndHeaders(
            "200 OK",
            [("Content-Type", "text/html; charset=utf-8"), ("Server", "test")],
            protocol="HTTP/1.1",
        )
        response = writer.create_warc_record(
            "https://example.net/page",
            "response",
            payload=io.BytesIO(PAGE),
            http_headers=http,
            warc_headers_dict={"WARC-Date": "2024-05-06T07:08:09Z"},
        )
        writer.write_record(response)
        writer.write_record(
            writer.create_warc_record(
                "https://example.net/notes.txt",
                "resource",
                payload=io.BytesIO(b"plain notes, kept as a resource"),
                warc_content_type="text/plain",
                warc_headers_dict={"WARC-Date": "2024-05-06T07:08:10Z"},
            )
        )
        revisit = writer.create_revisit_record(
            "https://example.net/page",
            response.rec_headers.get_header("WARC-Payload-Digest"),
            "https://example.net/page",
            "2024-05-06T07:08:09Z",
            http_headers=http,
        )
        revisit.rec_headers.replace_header("WARC-Date", "2024-06-01T00:00:00Z")
        writer.write_record(revisit)
        orphan = writer.create_revisit_record(
            "https://example.net/gone", "sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "", ""
        )
        writer.write_record(orphan)
        writer.write_record(
            writer.create_warc_record(
                "https://example.net/page", "request", payload=io.BytesIO(b"GET / HTTP/1.1\r\n\r\n")
            )
        )


def test_a_warcio_warc_imports_once_and_can_be_cited(empty: Archive, tmp_path: Path) -> None:
    warc = tmp_path / "crawl.warc.gz"
    warcio_file(warc)
    first = import_file(empty, warc, tenant="default")
    assert first.as_dict() == {
        "records_read": 5,
        "stored": 3,
        "already_present": 0,
        "skipped": {"request record (not a capture)": 1, "revisit of a record not in this file": 1},
        "citations_stored": 0,
        "citations_already_present": 0,
        "citations_skipped": {},
    }
    again = import_file(empty, warc, tenant="default")
    assert (again.stored, again.present) == (0, 3)
    [page] = empty.timemap("default", "https://example.net/page").mementos[:1]
    memento = empty.get_memento("default", page.id)
    assert memento.captured_at == WHEN
    assert memento.facts.http_status == 200 and memento.facts.tool == "warc-import"
    assert empty.read_content(memento) == PAGE
    assert len(empty.timemap("default", "https://example.net/page").mementos) == 2  # + revisit
    empty.transcripts.put("default", "t-imp", "P7Y", {})
    cited = empty.citations.cite(
        "default",
        "t-imp",
        [CitationRequest(quote=QuoteRequest("the quote we cite today"), memento_id=memento.id)],
    )
    assert not cited.errors and len(cited.citations) == 1


def test_a_py_wacz_bundle_imports(empty: Archive, tmp_path: Path) -> None:
    warc = tmp_path / "crawl.warc.gz"
    warcio_file(warc)
    wacz = tmp_path / "crawl.wacz"
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "from wacz.main import main; main()",
            "create",
            "-o",
            str(wacz),
            str(warc),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    summary = import_file(empty, wacz, tenant="default", tool="browsertrix")
    assert (summary.read, summary.stored) == (5, 3)
    page = empty.timemap("default", "https://example.net/notes.txt").mementos[0]
    assert empty.get_memento("default", page.id).facts.tool == "browsertrix"


def test_export_import_export_keeps_mementos_and_hashes(tmp_path: Path) -> None:
    source = open_archive(tmp_path / "source")
    try:
        source.transcripts.put("default", "t-1", "P7Y", {})
        warc = tmp_path / "crawl.warc.gz"
        warcio_file(warc)
        import_file(source, warc, tenant="default")
        page = source.timemap("default", "https://example.net/page").mementos[0]
        source.citations.cite(
            "default",
            "t-1",
            [CitationRequest(quote=QuoteRequest("hold the quote"), memento_id=page.id)],
        )
        bundle = export_bundle(source, "default", "t-1")
        originals = {
            m.id: (m.content_hash, m.uri_r, m.captured_at, m.scope, m.facts)
            for m in (source.get_memento("default", i) for i in bundle.mementos)
        }
    finally:
        source.close()
    exported = tmp_path / "t-1.wacz"
    exported.write_bytes(bundle.data)
    target = open_archive(tmp_path / "target")
    try:
        summary = import_file(target, exported, tenant="default")
        assert summary.stored == len(originals) and summary.skipped == {}
        assert summary.citations.stored == 1 and not summary.citations.skipped
        copies = {
            i: (m.content_hash, m.uri_r, m.captured_at, m.scope, m.facts)
            for i in originals
            for m in [target.get_memento("default", i)]
        }
        assert copies == originals
        assert {c[3] for c in copies.values()} == {Scope.PASSAGE, Scope.DOCUMENT}
    finally:
        target.close()


def without_leaf_indices(value: Any) -> Any:
    """A citations.jsonl value without its log positions (the importing archive's own)."""
    if isinstance(value, dict):
        return {k: without_leaf_indices(v) for k, v in value.items() if k != "leaf_index"}
    if isinstance(value, list):
        return [without_leaf_indices(v) for v in value]
    return value


def citation_records(data: bytes) -> list[bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        warc = bundle.read("archive/data.warc.gz")
    return [r.block for r in read_records(warc) if r.type == "metadata"]


def test_a_bundle_round_trips_with_its_citations(database_url: str, tmp_path: Path) -> None:
    """Export, import into an empty archive (both backends), export again: the same
    mementos and hashes, the same citations file but for the log positions, and the
    second bundle verifies against the importing archive's log."""
    source = Archive.open(settings_for(tmp_path / "source"))
    try:
        populate(source)
        first = export_bundle(source, "default", "t-1")
        originals = {
            m.id: (m.content_hash, m.uri_r, m.captured_at, m.scope, m.facts, m.media_type)
            for m in (source.get_memento("default", i) for i in first.mementos)
        }
    finally:
        source.close()
    exported = tmp_path / "t-1.wacz"
    exported.write_bytes(first.data)
    target = Archive.open(settings_for(tmp_path / "target", database_url))
    try:
        summary = import_file(target, exported, tenant="default")
        assert (summary.stored, summary.present, dict(summary.skipped)) == (len(originals), 0, {})
        assert (summary.citations.stored, summary.citations.present) == (3, 0)
        again = import_file(target, exported, tenant="default")  # idempotent
        assert (again.stored, again.present) == (0, len(originals))
        assert (again.citations.stored, again.citations.present) == (0, 3)
        second = export_bundle(target, "default", "t-1")
        vkey = target.evidence_log().signer.vkey()
        copies = {
            m.id: (m.content_hash, m.uri_r, m.captured_at, m.scope, m.facts, m.media_type)
            for m in (target.get_memento("default", i) for i in second.mementos)
        }
    finally:
        target.close()
    assert copies == originals
    lines = [
        [json.loads(line) for line in unpack(bundle.data)[CITATIONS].splitlines()]
        for bundle in (first, second)
    ]
    assert len(lines[0]) == 3 and all(isinstance(e["leaf_index"], int) for e in lines[1])
    assert [without_leaf_indices(e) for e in lines[1]] == [
        without_leaf_indices(e) for e in lines[0]
    ]
    assert citation_records(second.data) == citation_records(first.data)
    report = verify_bundle(second.data, vkey)
    assert report.ok and len(report.citations) == 3, report.lines()


def test_citations_go_into_the_transcript_asked_for(tmp_path: Path) -> None:
    (tmp_path / "t-1.wacz").write_bytes(fresh_bundle(tmp_path / "source"))
    env = {"AMBER_DATA_DIR": str(tmp_path / "cli-data"), "AMBER_PUBLIC_BASE_URL": BASE}
    args = ["import", str(tmp_path / "t-1.wacz"), "--transcript", "case-9"]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    assert '"citations_stored": 3' in result.output
    target = Archive.open(Settings(data_dir=tmp_path / "cli-data", public_base_url=BASE))
    try:
        cited = target.citations.for_transcript("default", "case-9")
        assert len(cited) == 3
        with pytest.raises(TranscriptNotFound):
            target.transcripts.get("default", "t-1")
    finally:
        target.close()


def test_the_cli_prints_a_summary(tmp_path: Path) -> None:
    warc = tmp_path / "crawl.warc.gz"
    warcio_file(warc)
    env = {
        "AMBER_DATA_DIR": str(tmp_path / "cli-data"),
        "AMBER_PUBLIC_BASE_URL": "http://testserver",
    }
    result = CliRunner().invoke(main, ["import", str(warc), "--tool", "crawler"], env=env)
    assert result.exit_code == 0, result.output
    assert '"stored": 3' in result.output and '"records_read": 5' in result.output


def test_files_that_are_not_warcs_are_refused_cleanly(tmp_path: Path) -> None:
    env = {
        "AMBER_DATA_DIR": str(tmp_path / "cli-data"),
        "AMBER_PUBLIC_BASE_URL": "http://testserver",
    }
    (tmp_path / "notes.txt").write_text("hello world\n")
    (tmp_path / "broken.warc.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (tmp_path / "empty.wacz").write_bytes(_zip_without_warcs())
    for name in ("notes.txt", "broken.warc.gz", "empty.wacz"):
        result = CliRunner().invoke(main, ["import", str(tmp_path / name)], env=env)
        assert result.exit_code == 1 and "Error:" in result.output, (name, result.output)


def _zip_without_warcs() -> bytes:
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as bundle:
        bundle.writestr("datapackage.json", "{}")
    return out.getvalue()
