"""Import WARC and WACZ files: every ``response`` and ``resource`` record becomes a memento.

Its URI-R is the WARC-Target-URI, its Memento-Datetime the WARC-Date, its capture facts the
HTTP status and headers. Writes are idempotent (a memento's id is its URI-R, datetime and
content address), so importing a file twice stores nothing the second time. Revisit records
resolve to their original when it is in the same file (by WARC-Refers-To, else by payload
digest), and are skipped with a reason otherwise. The citations an Amber bundle states are
restored after its captures (:mod:`archive.bundles.citationimport`). warcio reads the records: it decodes
chunked and compressed HTTP bodies, so the stored bytes are what a browser was given.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archive.bundles.citationimport import (
    CITATION_HEADER,
    CitationTally,
    citation_of,
    restore_citations,
)
from archive.dates import parse_rfc3339
from archive.exceptions import AmberError, InvalidInput
from archive.mementos import CaptureFacts, Memento, Scope
from archive.writes import MementoRequest

if TYPE_CHECKING:
    from archive.archive import Archive

DEFAULT_TOOL = "warc-import"
# What the stored (decoded) bytes no longer match, and the names Amber's export gives them.
DROPPED_HEADERS = {"content-encoding", "transfer-encoding", "content-length"}
ORIG_PREFIX = "x-archive-orig-"


@dataclass
class ImportSummary:
    read: int = 0
    stored: int = 0
    present: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> records
    citations: CitationTally = field(default_factory=CitationTally)

    def as_dict(self) -> dict[str, Any]:
        return {
            "records_read": self.read,
            "stored": self.stored,
            "already_present": self.present,
            "skipped": dict(sorted(self.skipped.items())),
            "citations_stored": self.citations.stored,
            "citations_already_present": self.citations.present,
            "citations_skipped": dict(sorted(self.citations.skipped.items())),
        }


@dataclass(frozen=True)
class _Capture:
    uri_r: str
    captured_at: datetime
    content: bytes
    content_type: str
    scope: Scope
    facts: CaptureFacts


@dataclass
class _File:
    """What one WARC's records tell the records after them."""

    by_id: dict[str, _Capture] = field(default_factory=dict)
    by_digest: dict[tuple[str, str], _Capture] = field(default_factory=dict)
    mementos: dict[str, Memento] = field(default_factory=dict)  # Amber-Memento-Id -> stored
    citations: list[dict[str, Any]] = field(default_factory=list)


def warc_streams(path: Path) -> Iterator[tuple[str, io.BufferedIOBase | io.BytesIO]]:
    """(name, stream) of every WARC in a WARC file or a WACZ."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as bundle:
            for name in sorted(bundle.namelist()):
                if name.startswith("archive/") and ".warc" in name:
                    yield name, io.BytesIO(bundle.read(name))
        return
    with path.open("rb") as stream:
        yield path.name, stream


def import_file(
    archive: Archive,
    path: Path,
    *,
    tenant: str,
    tool: str = DEFAULT_TOOL,
    transcript: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportSummary:
    """Store every capture of ``path`` as a memento, then the citations an Amber bundle
    states (into ``transcript`` when given, else the transcript each names)."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    summary = ImportSummary()
    streams = 0
    for name, stream in warc_streams(path):
        streams += 1
        seen = _File()
        before = summary.read
        try:
            for record in ArchiveIterator(stream, arc2warc=True):
                summary.read += 1
                _one(archive, record, tenant, tool, summary, seen)
                if progress is not None:
                    progress(1)
        except ArchiveLoadFailed as exc:
            raise InvalidInput(f"not a readable WARC: {exc}") from None
        if summary.read == before and path.stat().st_size > 0:
            raise InvalidInput(f"{name} holds no readable WARC record")
        if seen.citations:
            tally = restore_citations(archive, tenant, seen.citations, seen.mementos, transcript)
            summary.citations.stored += tally.stored
            summary.citations.present += tally.present
            summary.citations.skipped.update(tally.skipped)
    if streams == 0:
        raise InvalidInput("the zip holds no archive/*.warc file: not a WACZ")
    return summary


def _one(
    archive: Archive,
    record: Any,
    tenant: str,
    tool: str,
    summary: ImportSummary,
    seen: _File,
) -> None:
    kind = record.rec_type
    headers = record.rec_headers
    if kind == "metadata" and headers.get_header(CITATION_HEADER):
        facts = citation_of(headers, record.content_stream().read())
        if facts is None:
            summary.skipped["citation record not in Amber's form"] += 1
        else:
            seen.citations.append(facts)
        return
    if kind == "revisit":
        capture = _revisit(record, seen.by_id, seen.by_digest)
        if capture is None:
            summary.skipped["revisit of a record not in this file"] += 1
            return
    elif kind in ("response", "resource"):
        capture = _capture(record, tool)
        if capture is None:
            summary.skipped[f"{kind} without a usable URI or date"] += 1
            return
        record_id = headers.get_header("WARC-Record-ID")
        if record_id:
            seen.by_id[record_id] = capture
        digest = headers.get_header("WARC-Payload-Digest")
        if digest:
            seen.by_digest[(capture.uri_r, digest)] = capture
    else:
        summary.skipped[f"{kind} record (not a capture)"] += 1
        return
    try:
        written = archive.write_memento(
            MementoRequest(
                uri_r=capture.uri_r,
                content=capture.content,
                content_type=capture.content_type,
                captured_at=capture.captured_at,
                scope=capture.scope,
                facts=capture.facts,
            ),
            tenant=tenant,
        )
    except AmberError as error:
        summary.skipped[f"refused: {type(error).__name__}"] += 1
        return
    amber_id = headers.get_header("Amber-Memento-Id")
    if amber_id and kind != "revisit":
        seen.mementos[amber_id] = written.memento
    if written.created:
        summary.stored += 1
    else:
        summary.present += 1


def _date(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return parse_rfc3339(text)
    except (InvalidInput, ValueError):
        try:
            return datetime.strptime(text, "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        except ValueError:
            return None


def _capture(record: Any, tool: str) -> _Capture | None:
    headers = record.rec_headers
    uri = headers.get_header("WARC-Target-URI")
    when = _date(headers.get_header("WARC-Date"))
    if not uri or when is None:
        return None
    content = record.content_stream().read()
    scope = Scope.PASSAGE if headers.get_header("Amber-Scope") == "passage" else Scope.DOCUMENT
    final_url = headers.get_header("Amber-Final-URL")
    used_tool = headers.get_header("Amber-Tool") or tool
    if record.http_headers is not None and record.rec_type == "response":
        http = record.http_headers
        kept = {}
        for name, value in http.headers:
            lowered = name.lower()
            if lowered.startswith(ORIG_PREFIX) and lowered[len(ORIG_PREFIX) :] in DROPPED_HEADERS:
                continue
            if lowered not in DROPPED_HEADERS:
                kept[name] = value
        status = int(http.get_statuscode() or 0) or None
        content_type = (
            headers.get_header("Amber-Content-Type")
            or http.get_header("Content-Type")
            or "application/octet-stream"
        )
        facts = CaptureFacts(used_tool, final_url, status, kept)
    else:
        content_type = (
            headers.get_header("Amber-Content-Type")
            or headers.get_header("Content-Type")
            or "application/octet-stream"
        )
        facts = CaptureFacts(used_tool, final_url, *_amber_http(headers))
    return _Capture(uri, when, content, content_type, scope, facts)


def _amber_http(headers: Any) -> tuple[int | None, dict[str, str]]:
    """The capture facts Amber's export keeps on a passage's resource record."""
    status = headers.get_header("Amber-HTTP-Status")
    if status is None or not status.isdigit():
        return None, {}
    try:
        captured = json.loads(headers.get_header("Amber-HTTP-Headers") or "{}")
    except ValueError:
        captured = {}
    if not isinstance(captured, dict):
        captured = {}
    return int(status), {str(k): str(v) for k, v in captured.items()}


def _revisit(
    record: Any, by_id: dict[str, _Capture], by_digest: dict[tuple[str, str], _Capture]
) -> _Capture | None:
    headers = record.rec_headers
    original = by_id.get(headers.get_header("WARC-Refers-To") or "")
    uri = headers.get_header("WARC-Target-URI")
    if original is None:
        target = headers.get_header("WARC-Refers-To-Target-URI") or uri
        original = by_digest.get((target or "", headers.get_header("WARC-Payload-Digest") or ""))
    when = _date(headers.get_header("WARC-Date"))
    if original is None or not uri or when is None:
        return None
    return _Capture(
        uri, when, original.content, original.content_type, original.scope, original.facts
    )
