"""Citations of an Amber audit bundle, restored when the bundle is imported.

An Amber WARC states every citation in a ``metadata`` record (``Amber-Citation-Id``, JSON
body: the facts citations.jsonl states too). After the captures are stored, each citation
whose passage was stored from the same file becomes a row again (docs/design.md §13.3):

- its transcript is the one it names, or the one the importer is told (``--transcript``);
  a transcript that does not exist is created with the default retention (a bundle does not
  carry its transcript's retention);
- its id is derived as citing derives it (tenant, transcript, passage, position, document
  address), so importing into the same tenant and transcript keeps every id, and importing
  again adds nothing;
- its dates, run id, selectors, extractor and digests are the recorded ones, not the
  importer's; its document's capture facts are the passage's (a passage keeps them);
- with the log on, each row inserted gets its leaf: a new statement over the same facts,
  at the importing archive's next index (leaf indices are positions in that log).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from archive.citations.ledger import citation_id
from archive.citations.transcripts import check_transcript_id
from archive.dates import parse_rfc3339
from archive.exceptions import InvalidInput, TranscriptNotFound
from archive.mementos import Memento

if TYPE_CHECKING:
    from archive.archive import Archive

CITATION_HEADER = "Amber-Citation-Id"
BATCH = 500  # rows per transaction


@dataclass
class CitationTally:
    stored: int = 0
    present: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> citations


def citation_of(headers: Any, body: bytes) -> dict[str, Any] | None:
    """The facts a citation's metadata record states (None: not in Amber's form)."""
    try:
        facts = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(facts, dict) or facts.get("citation_id") != headers.get_header(
        CITATION_HEADER
    ):
        return None
    return facts


def restore_citations(
    archive: Archive,
    tenant: str,
    found: Sequence[dict[str, Any]],
    mementos: dict[str, Memento],
    transcript: str | None,
) -> CitationTally:
    """Store ``found`` (metadata record facts) as citations. ``mementos`` maps the bundle's
    memento ids to the mementos stored from it; ``transcript`` overrides the recorded one."""
    tally = CitationTally()
    rows: list[dict[str, Any]] = []
    digests: dict[str, tuple[str, str]] = {}
    logged = archive.index.log is not None
    ordered = sorted(found, key=lambda f: (str(f.get("created_at")), str(f.get("citation_id"))))
    for facts in ordered:
        target = transcript or facts.get("transcript_id")
        passage = mementos.get(str(facts.get("passage_memento_id")))
        if passage is None:
            tally.skipped["citation of a passage not stored from this file"] += 1
            continue
        document = mementos.get(str(facts.get("document_memento_id")))
        try:
            row = _row(tenant, check_transcript_id(str(target)), facts, passage, document)
        except (InvalidInput, KeyError, TypeError, ValueError, IndexError):
            tally.skipped["citation record not in Amber's form"] += 1
            continue
        pair = (facts.get("document_sha256"), facts.get("quote_sha256"))
        if logged and not all(isinstance(d, str) and len(d) == 64 for d in pair):
            tally.skipped["citation without the SHA-256 digests its log leaf needs"] += 1
            continue
        if row["id"] not in digests:
            digests[row["id"]] = (str(pair[0]), str(pair[1]))
            rows.append(row)
    _ensure_transcripts(archive, tenant, {r["transcript_id"] for r in rows})
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        inserted = archive.citations.ledger.restore(batch, digests if logged else None)
        tally.stored += len(inserted)
        tally.present += len(batch) - len(inserted)
    return tally


def _ensure_transcripts(archive: Archive, tenant: str, ids: set[str]) -> None:
    for transcript_id in sorted(ids):
        try:
            archive.transcripts.get(tenant, transcript_id)
        except TranscriptNotFound:
            archive.transcripts.put(tenant, transcript_id, None, None)


def _row(
    tenant: str,
    transcript_id: str,
    facts: dict[str, Any],
    passage: Memento,
    document: Memento | None,
) -> dict[str, Any]:
    quote, position = facts["selectors"][0], facts["selectors"][1]
    start, end = int(position["start"]), int(position["end"])
    selector = {"exact": quote["exact"], "prefix": quote["prefix"], "suffix": quote["suffix"]}
    if not isinstance(selector["exact"], str) or not 0 <= start <= end:
        raise ValueError("no quote or no position")
    captured = passage.facts
    return {
        "id": citation_id(
            tenant, transcript_id, passage.id, start, end, str(facts["document_blake3"])
        ),
        "tenant": tenant,
        "transcript_id": transcript_id,
        "passage_memento_id": passage.id,
        "document_memento_id": None if document is None else document.id,
        "document_hash": str(facts["document_blake3"]),
        "document_size": int(facts["document_size"]),
        "document_media_type": str(facts["document_media_type"]),
        "document_uri_r": str(facts["document_uri_r"]),
        "document_captured_at": parse_rfc3339(facts["document_captured_at"]),
        "document_tool": captured.tool,
        "document_final_url": captured.final_url,
        "document_http_status": captured.http_status,
        "document_headers_json": captured.headers_json(),
        "quote_hash": str(facts["quote_hash"]),
        "selector_json": json.dumps(selector, ensure_ascii=False),
        "position_start": start,
        "position_end": end,
        "extractor": str(facts["extractor"]),
        "extractor_version": str(facts["extractor_version"]),
        "normalisation": str(facts["normalisation"]),
        "match_method": str(facts["match_method"]),
        "run_id": facts.get("run_id"),
        "source_ids_json": json.dumps([str(s) for s in facts.get("source_ids") or []]),
        "created_at": parse_rfc3339(facts["created_at"]),
    }
