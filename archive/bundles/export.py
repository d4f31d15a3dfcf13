"""Export a transcript's evidence as a WACZ 1.1.1 audit bundle (docs/design.md).

Deterministic: the same transcript state gives the same bytes. Entries are sorted, every zip
timestamp is the transcript's last change, record ids are derived from Amber's ids, gzip
members carry no mtime, the datapackage signature is RFC 6979 deterministic ECDSA, and the
log evidence is pinned to the earliest checkpoint covering every leaf of the bundle.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from http import HTTPStatus
from typing import IO, TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from sqlalchemy import Connection, select

from archive.bundles.bundlecheck import (
    CONSISTENCY,
    LATER_CHECKPOINT,
    Entry,
    digest_document,
    write_canonical_zip,
)
from archive.bundles.bundlefile import Bundle, spooled
from archive.bundles.signing import load_wacz_key, sign_hash
from archive.bundles.warcfile import http_block, record_bytes
from archive.dates import to_rfc3339
from archive.exceptions import InvalidInput, NotFound, NotYetCheckpointed, TranscriptNotFound
from archive.index.schema import citations, log_checkpoints, log_leaves, transcripts
from archive.log import tree
from archive.log.proofcheck import format_tlog_proof
from archive.mementos import Memento
from archive.retention.records import shown_deletion_reason

if TYPE_CHECKING:
    from archive.archive import Archive

WACZ_VERSION = "1.1.1"
SOFTWARE = "Amber audit bundle 1"
# In a folder: py-wacz's validator reads every entry's path as "<folder>/<file>".
CITATIONS = "citations/citations.jsonl"
# Renamed in the WARC: the stored payload is the decoded body, so these no longer describe it.
RENAMED_HEADERS = {"content-encoding", "transfer-encoding", "content-length"}
ORIG_PREFIX = "X-Archive-Orig-"
RECORD_NAMESPACE = uuid.UUID("6f0b1d4e-3c35-5d0e-9a59-616d62657231")
WARC = "archive/data.warc.gz"


def record_id(kind: str, subject: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(RECORD_NAMESPACE, kind + ':' + subject)}>"


# -- gathering ------------------------------------------------------------------------------


@dataclass
class _State:
    transcript: Any
    citations: list[Any]
    mementos: dict[str, Memento]
    leaves: dict[tuple[str, str], Any]
    checkpoint: Any
    paths: dict[int, list[bytes]]
    changed: datetime
    later: Any = None  # the checkpoint a consistency proof leads to, when one was asked for
    consistency: list[bytes] = field(default_factory=list)


def _gather(archive: Archive, tenant: str, transcript_id: str, consistent_to: int | None) -> _State:
    with archive.index.read() as connection:
        transcript = connection.execute(
            select(transcripts).where(
                transcripts.c.tenant == tenant, transcripts.c.id == transcript_id
            )
        ).first()
        if transcript is None:
            raise TranscriptNotFound(f"no transcript {transcript_id!r}")
        rows = connection.execute(
            select(citations)
            .where(citations.c.tenant == tenant, citations.c.transcript_id == transcript_id)
            .order_by(citations.c.created_at, citations.c.id)
        ).all()
        ids = {r.passage_memento_id for r in rows} | {
            r.document_memento_id for r in rows if r.document_memento_id
        }
        mementos = {m.id: m for m in archive.index.load_mementos(connection, tenant, sorted(ids))}
        leaves = _leaves(connection, tenant, rows, mementos)
        checkpoint = _checkpoint(connection, leaves)
        paths = {}
        if checkpoint is not None:
            paths = {
                leaf.idx: tree.inclusion_proof(connection, leaf.idx, checkpoint.size)
                for leaf in leaves.values()
            }
        later, consistency = _later(connection, checkpoint, consistent_to)
    changed = max([transcript.updated_at, *(r.created_at for r in rows)])
    return _State(
        transcript, list(rows), mementos, leaves, checkpoint, paths, changed, later, consistency
    )


def _later(connection: Connection, pinned: Any, size: int | None) -> tuple[Any, list[bytes]]:
    """The checkpoint of ``size`` and the consistency proof to it from the pinned one."""
    if size is None or pinned is None or size == pinned.size:
        return None, []
    if size < pinned.size:
        raise InvalidInput(
            f"consistent_to must be at least the bundle's checkpoint size ({pinned.size})"
        )
    later = connection.execute(select(log_checkpoints).where(log_checkpoints.c.size == size))
    found = later.first()
    if found is None:
        raise NotFound(f"no signed checkpoint of size {size}")
    return found, tree.consistency_proof(connection, pinned.size, size)


def _leaves(
    connection: Connection, tenant: str, rows: Sequence[Any], mementos: dict[str, Memento]
) -> dict[tuple[str, str], Any]:
    subjects = {r.id for r in rows} | set(mementos)
    found: dict[tuple[str, str], Any] = {}
    if not subjects:
        return found
    for leaf in connection.execute(
        select(log_leaves)
        .where(log_leaves.c.tenant == tenant, log_leaves.c.subject.in_(sorted(subjects)))
        .order_by(log_leaves.c.idx)
    ):
        found.setdefault((leaf.kind, leaf.subject), leaf)  # a subject's first leaf
    return found


def _checkpoint(connection: Connection, leaves: dict[tuple[str, str], Any]) -> Any:
    """The earliest timestamped checkpoint covering every leaf, else the earliest covering
    one: later checkpoints do not change which one a bundle pins."""
    if not leaves:
        return None
    needed = max(leaf.idx for leaf in leaves.values()) + 1
    covering = log_checkpoints.c.size >= needed
    stamped = connection.execute(
        select(log_checkpoints)
        .where(covering, log_checkpoints.c.tsa_response.is_not(None))
        .order_by(log_checkpoints.c.size)
        .limit(1)
    ).first()
    if stamped is not None:
        return stamped
    return connection.execute(
        select(log_checkpoints).where(covering).order_by(log_checkpoints.c.size).limit(1)
    ).first()


# -- building -------------------------------------------------------------------------------


def export_bundle(
    archive: Archive, tenant: str, transcript_id: str, *, consistent_to: int | None = None
) -> Bundle:
    """The transcript's bundle. ``consistent_to``: also carry the checkpoint of that tree
    size and the consistency proof to it from the bundle's own (deterministic too)."""
    state = _gather(archive, tenant, transcript_id, consistent_to)
    if state.leaves and state.checkpoint is None and archive.index.log is not None:
        archive.evidence_log().step(force=True)  # sign the checkpoint the leaves wait for
        state = _gather(archive, tenant, transcript_id, consistent_to)
    if state.leaves and state.checkpoint is None:
        raise NotYetCheckpointed("the transcript's leaves are not in a signed checkpoint yet")
    with spooled() as warc:
        warc_hash, record_ids, passages = _warc(archive, state, warc)
        files: dict[str, Entry] = {}
        sizes = {WARC: (warc_hash, warc.tell())}
        files["indexes/index.cdx"] = _cdxj(warc, passages)
        files["pages/pages.jsonl"] = _pages(state)
        files[CITATIONS] = _citations_file(state, record_ids)
        files.update(_proofs(state))
        for path, data in files.items():
            assert isinstance(data, bytes)
            sizes[path] = ("sha256:" + hashlib.sha256(data).hexdigest(), len(data))
        key = load_wacz_key(archive.settings.data_dir)
        datapackage = _datapackage(state, sizes)
        files["datapackage.json"] = datapackage
        files["datapackage-digest.json"] = _digest(state, datapackage, key)
        warc.seek(0)
        files[WARC] = (warc, sizes[WARC][1])
        out = spooled()
        try:
            write_canonical_zip(out, files, to_rfc3339(state.changed))
        except BaseException:
            out.close()
            raise
    return Bundle(out, out.tell(), sorted(state.mementos))


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def _ordered(state: _State) -> list[Memento]:
    return sorted(state.mementos.values(), key=lambda m: (m.captured_at, m.uri_r, m.id))


def _warc(archive: Archive, state: _State, out: IO[bytes]) -> tuple[str, dict[str, str], set[int]]:
    """Write the WARC to ``out`` one record at a time (one memento's bytes in memory);
    its SHA-256, each memento's record id, and the offsets of passage records."""
    hasher = hashlib.sha256()
    passages: set[int] = set()
    ids: dict[str, str] = {}
    by_passage: dict[str, list[Any]] = {}
    for row in state.citations:
        by_passage.setdefault(row.passage_memento_id, []).append(row)
    for memento in _ordered(state):
        refers_to = None
        if memento.deleted_at is None:  # else only its tombstone, in citations.jsonl
            refers_to = ids[memento.id] = record_id("memento", memento.id)
            if memento.scope.value == "passage":
                passages.add(out.tell())
            _write(out, hasher, _memento_record(memento, archive.read_content(memento)))
        for row in by_passage.get(memento.id, []):
            _write(out, hasher, _citation_record(state, row, refers_to))
    return "sha256:" + hasher.hexdigest(), ids, passages


def _write(out: IO[bytes], hasher: Any, record: bytes) -> None:
    out.write(record)
    hasher.update(record)


def _memento_record(memento: Memento, content: bytes) -> bytes:
    headers = [
        ("WARC-Type", "resource"),
        ("WARC-Record-ID", record_id("memento", memento.id)),
        ("WARC-Date", to_rfc3339(memento.captured_at)),
        ("WARC-Target-URI", memento.uri_r),
    ]
    facts = memento.facts
    if facts.http_status is not None and memento.scope.value == "document":
        renamed = [
            (ORIG_PREFIX + k if k.lower() in RENAMED_HEADERS else k, v)
            for k, v in sorted(facts.headers.items())
        ]
        block = http_block(facts.http_status, _reason(facts.http_status), renamed, content)
        headers[0] = ("WARC-Type", "response")
        headers.append(("Content-Type", "application/http; msgtype=response"))
    else:
        block = content
        headers.append(("Content-Type", memento.media_type))
    headers += [
        ("Amber-Memento-Id", memento.id),
        ("Amber-Content-Address", memento.content_hash),
        ("Amber-Scope", memento.scope.value),
        ("Amber-Archived-At", to_rfc3339(memento.archived_at)),
    ]
    if memento.scope.value == "document":
        headers.append(("Amber-Content-Type", memento.media_type))
    if facts.tool:
        headers.append(("Amber-Tool", facts.tool))
    if facts.final_url:
        headers.append(("Amber-Final-URL", facts.final_url))
    if headers[0][1] == "resource" and facts.http_status is not None:
        # A passage keeps its document's capture facts; a resource record has no HTTP part.
        headers.append(("Amber-HTTP-Status", str(facts.http_status)))
        headers.append(("Amber-HTTP-Headers", facts.headers_json()))
    return record_bytes(headers, block, content)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def citation_facts(row: Any, statement: str | None) -> dict[str, Any]:
    """What a citation's metadata record and its citations.jsonl line both state: enough to
    restore its row on import (archive/bundles/citationimport.py), with the SHA-256 digests
    its log leaf attests (``statement``; None without a log or once erased)."""
    selector = json.loads(row.selector_json) if row.selector_json else {}
    logged = json.loads(statement) if statement else {}
    return {
        "citation_id": row.id,
        "transcript_id": row.transcript_id,
        "run_id": row.run_id,
        "passage_memento_id": row.passage_memento_id,
        "document_memento_id": row.document_memento_id,
        "document_blake3": row.document_hash,
        "document_size": row.document_size,
        "document_uri_r": row.document_uri_r,
        "document_captured_at": to_rfc3339(row.document_captured_at),
        "document_media_type": row.document_media_type,
        "document_sha256": logged.get("document_sha256"),
        "quote_hash": row.quote_hash,
        "quote_sha256": logged.get("quote_sha256"),
        "source_ids": json.loads(row.source_ids_json),
        "selectors": [
            {
                "type": "TextQuoteSelector",
                "exact": selector.get("exact"),
                "prefix": selector.get("prefix"),
                "suffix": selector.get("suffix"),
            },
            {"type": "TextPositionSelector", "start": row.position_start, "end": row.position_end},
        ],
        "extractor": row.extractor,
        "extractor_version": row.extractor_version,
        "normalisation": row.normalisation,
        "match_method": row.match_method,
        "created_at": to_rfc3339(row.created_at),
    }


def _statement(state: _State, row: Any) -> str | None:
    leaf = state.leaves.get(("citation", row.id))
    return None if leaf is None else leaf.statement


def _citation_record(state: _State, row: Any, refers_to: str | None) -> bytes:
    body = _dumps(citation_facts(row, _statement(state, row)))
    headers = [
        ("WARC-Type", "metadata"),
        ("WARC-Record-ID", record_id("citation", row.id)),
        ("WARC-Date", to_rfc3339(row.created_at)),
        ("WARC-Target-URI", row.document_uri_r),
        ("Content-Type", "application/json"),
        ("Amber-Citation-Id", row.id),
    ]
    if refers_to is not None:  # None: the passage was deleted, its tombstone stands in
        headers.insert(4, ("WARC-Refers-To", refers_to))
    return record_bytes(headers, body, body)


def _cdxj(warc: IO[bytes], passages: set[int]) -> bytes:
    """CDXJ of the replayable records. A passage shares its document's URI-R and datetime:
    where the document is in the bundle, the passage is left out of the index, so a replay
    tool shows the page, not the extracted text around a quote."""
    from cdxj_indexer import CDXJIndexer

    out = io.StringIO()
    warc.seek(0)
    CDXJIndexer(
        out, [warc], sort=True, filename="data.warc.gz", records="response,revisit,resource"
    ).process_all()
    lines = sorted(line for line in out.getvalue().splitlines() if line)
    parsed = [(line, line.split(" ", 2), json.loads(line.split(" ", 2)[2])) for line in lines]
    documents = {(f[0], f[1]) for _, f, d in parsed if int(d["offset"]) not in passages}
    kept = [
        line
        for line, f, d in parsed
        if int(d["offset"]) not in passages or (f[0], f[1]) not in documents
    ]
    return ("\n".join(kept) + "\n").encode() if kept else b""


def _pages(state: _State) -> bytes:
    lines = [_dumps({"format": "json-pages-1.0", "id": "pages", "title": "Cited pages"})]
    cited: dict[str, list[str]] = {}
    for row in state.citations:
        cited.setdefault(row.passage_memento_id, []).append(row.id)
    for memento in _ordered(state):
        if memento.id not in cited or memento.deleted_at is not None:
            continue
        page = {
            "id": memento.id,
            "url": memento.uri_r,
            "ts": to_rfc3339(memento.captured_at),
            "title": memento.uri_r,
            "citations": cited[memento.id],
        }
        lines.append(_dumps(page))
    return b"\n".join(lines) + b"\n"


def _citations_file(state: _State, record_ids: dict[str, str]) -> bytes:
    lines = []
    for row in state.citations:
        entry = citation_facts(row, _statement(state, row))
        entry["warc_record_id"] = record_ids.get(row.passage_memento_id)
        entry["metadata_record_id"] = record_id("citation", row.id)
        leaf = state.leaves.get(("citation", row.id))
        entry["leaf_index"] = None if leaf is None else leaf.idx
        mementos = [row.passage_memento_id]
        if row.document_memento_id:
            mementos.append(row.document_memento_id)
        entry["mementos"] = [_memento_entry(state, i, record_ids) for i in mementos]
        lines.append(_dumps(entry))
    return b"".join(line + b"\n" for line in lines)


def _memento_entry(state: _State, memento_id: str, record_ids: dict[str, str]) -> dict[str, Any]:
    memento = state.mementos[memento_id]
    leaf = state.leaves.get(("memento", memento_id))
    entry: dict[str, Any] = {
        "id": memento_id,
        "blake3": memento.content_hash,
        "size": memento.size,
        "memento_datetime": to_rfc3339(memento.captured_at),
        "leaf_index": None if leaf is None else leaf.idx,
        "warc_record_id": record_ids.get(memento_id),
    }
    if memento.deleted_at is not None:
        tombstone = state.leaves.get(("tombstone", memento_id))
        entry["tombstone"] = {
            "deleted_at": to_rfc3339(memento.deleted_at),
            "policy": shown_deletion_reason(memento.deletion_reason),
            "leaf_index": None if tombstone is None else tombstone.idx,
        }
    return entry


def proof_name(kind: str, subject: str) -> str:
    return f"proofs/{kind}-{subject}"


def _proofs(state: _State) -> dict[str, bytes]:
    if state.checkpoint is None:
        return {}
    note = state.checkpoint.note
    files = {"proofs/checkpoint.txt": note.encode("utf-8")}
    if state.later is not None:
        files[LATER_CHECKPOINT] = state.later.note.encode("utf-8")
        files[CONSISTENCY] = _dumps(
            {
                "old_size": state.checkpoint.size,
                "new_size": state.later.size,
                "proof": [base64.b64encode(h).decode() for h in state.consistency],
            }
        )
    if state.checkpoint.tsa_response is not None:
        files["proofs/checkpoint.tsr"] = base64.b64decode(state.checkpoint.tsa_response)
    for (kind, subject), leaf in sorted(state.leaves.items()):
        name = proof_name(kind, subject)
        proof = format_tlog_proof(leaf.idx, state.paths[leaf.idx], note)
        files[name + ".tlog-proof"] = proof.encode("utf-8")
        if leaf.statement is not None:
            files[name + ".statement.json"] = leaf.statement.encode("utf-8")
        else:  # erased: the leaf hash alone still proves the entry existed
            files[name + ".leaf-hash"] = leaf.leaf_hash.encode("ascii")
    return files


def _datapackage(state: _State, sizes: dict[str, tuple[str, int]]) -> bytes:
    """``sizes``: every entry's ``sha256:`` hash and length."""
    resources = [
        {"name": os.path.basename(path), "path": path, "hash": digest, "bytes": size}
        for path, (digest, size) in sorted(sizes.items())
    ]
    package = {
        "profile": "data-package",
        "wacz_version": WACZ_VERSION,
        "title": f"Amber audit bundle: transcript {state.transcript.id}",
        "created": to_rfc3339(state.changed),
        "modified": to_rfc3339(state.changed),
        "software": SOFTWARE,
        "resources": resources,
    }
    return json.dumps(package, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"


def _digest(state: _State, datapackage: bytes, key: ec.EllipticCurvePrivateKey) -> bytes:
    digest = "sha256:" + hashlib.sha256(datapackage).hexdigest()
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return digest_document(
        digest,
        sign_hash(key, digest),
        base64.b64encode(public).decode(),
        to_rfc3339(state.changed),
        SOFTWARE,
    )
