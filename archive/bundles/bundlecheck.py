"""Checking an audit bundle offline: the standard library, ``cryptography`` and (for RFC 3161
timestamps) ``rfc3161-client``; no server, no index, no network. Copy this file with
``archive/log/proofcheck.py`` and ``archive/bundles/warcfile.py`` into one folder and run
``python bundlecheck.py BUNDLE.wacz VKEY_FILE [CA.pem]`` anywhere.

What is checked, in order (docs/design.md, "Audit bundles"): the zip and every datapackage
hash and size, the datapackage signature (ECDSA P-384, WACZ ``signedData``; against
``--wacz-key`` when given), every WARC record's SHA-256 digests, every leaf statement
against its record's bytes, every inclusion proof against the checkpoint, the checkpoint's
signature against the log's vkey, its timestamp (with a CA), every quote at its selector in
the passage text, and that the WARC's citation records and citations.jsonl are one set.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

try:  # installed with Amber
    from archive.bundles import warcfile
    from archive.log import proofcheck
except ImportError:  # copied out beside proofcheck.py and warcfile.py
    import proofcheck  # type: ignore[no-redef]
    import warcfile  # type: ignore[no-redef]

Checkpoint = proofcheck.Checkpoint
ProofError = proofcheck.ProofError
WarcError = warcfile.WarcError
WarcRecord = warcfile.WarcRecord

CITATIONS = "citations/citations.jsonl"
UNSIGNED = {"datapackage.json", "datapackage-digest.json"}
# Present when the export was asked for a later checkpoint: its note, and the RFC 9162
# consistency proof to it from proofs/checkpoint.txt.
LATER_CHECKPOINT = "proofs/later-checkpoint.txt"
CONSISTENCY = "proofs/consistency.json"
COPY_CHUNK = 1 << 20


# An entry's bytes, or a stream of them and its length (export streams the WARC).
Entry = bytes | tuple[IO[bytes], int]


def canonical_zip(files: dict[str, bytes], created: str) -> bytes:
    """The one zip layout of a bundle (:func:`write_canonical_zip`), in memory."""
    out = io.BytesIO()
    write_canonical_zip(out, dict(files), created)
    return out.getvalue()


def write_canonical_zip(out: IO[bytes], files: Mapping[str, Entry], created: str) -> None:
    """The one zip layout of a bundle, written to a seekable ``out``: entries sorted and
    stored, every timestamp the datapackage's ``created``. Export writes it; the check
    rebuilds it and compares bytes, so no zip field (dates, attributes, extra data) can
    change unnoticed. A streamed entry is written as its bytes would be: its size is set
    first, and a seekable ``out`` needs no data descriptor."""
    moment = datetime.fromisoformat(created.replace("Z", "+00:00")).astimezone(UTC)
    stamp = (
        max(moment.year, 1980),
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
    )
    with zipfile.ZipFile(out, "w") as bundle:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.compress_type = zipfile.ZIP_STORED  # WACZ: WARCs stay seekable
            info.create_system = 3
            info.external_attr = 0o644 << 16
            entry = files[path]
            if isinstance(entry, bytes):
                bundle.writestr(info, entry)
                continue
            stream, info.file_size = entry
            with bundle.open(info, "w") as sink:
                shutil.copyfileobj(stream, sink, COPY_CHUNK)


def digest_document(
    digest: str, signature: str, public_key: str, created: str, software: str
) -> bytes:
    """datapackage-digest.json, WACZ ``signedData`` form (anonymous signing), in its one
    serialisation: the check rebuilds it, so its unsigned fields cannot change either."""
    document = {
        "path": "datapackage.json",
        "hash": digest,
        "signedData": {
            "hash": digest,
            "signature": signature,
            "publicKey": public_key,
            "created": created,
            "software": software,
        },
    }
    return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


class BundleError(Exception):
    """The bundle as a whole does not check out (before any citation is looked at)."""


@dataclass
class Report:
    """One line per citation: (citation id, None when verified, else the first failure)."""

    citations: list[tuple[str, str | None]] = field(default_factory=list)
    bundle_error: str | None = None
    records: int = 0

    @property
    def ok(self) -> bool:
        return self.bundle_error is None and all(e is None for _, e in self.citations)

    def lines(self) -> list[str]:
        out = []
        if self.bundle_error is not None:
            out.append(f"\u2717 bundle: {self.bundle_error}")
        for citation, error in self.citations:
            out.append(f"\u2713 {citation}" if error is None else f"\u2717 {citation}: {error}")
        return out


def verify_bundle(
    data: bytes, vkey: str, *, tsa_ca: bytes | None = None, wacz_key: bytes | None = None
) -> Report:
    report = Report()
    try:
        files = _open_zip(data)
        _check_package(files, wacz_key)
        _check_layout(data, files)
        records = _check_warc(files["archive/data.warc.gz"])
        report.records = len(records)
        verifier = proofcheck.Verifier.parse(vkey)
        checkpoint = _check_checkpoint(files, verifier, tsa_ca)
        _check_consistency(files, verifier, checkpoint)
        entries = _entries(files)
        _check_one_set(entries, records)
    except (BundleError, ProofError, WarcError) as exc:
        report.bundle_error = str(exc)
        return report
    by_id = {r.get("WARC-Record-ID"): r for r in records}
    for entry in entries:
        try:
            _check_citation(entry, files, by_id, checkpoint)
        except (BundleError, ProofError, WarcError, KeyError, TypeError, ValueError) as exc:
            report.citations.append((str(entry.get("citation_id")), str(exc) or repr(exc)))
        else:
            report.citations.append((str(entry["citation_id"]), None))
    return report


def _open_zip(data: bytes) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as bundle:
            names = bundle.namelist()
            if len(names) != len(set(names)):
                raise BundleError("the zip names an entry twice")
            return {name: bundle.read(name) for name in names}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise BundleError(f"not a readable zip: {exc}") from None
    except Exception as exc:  # zlib and struct errors from a damaged central directory
        raise BundleError(f"not a readable zip: {exc!r}") from None


def _check_layout(data: bytes, files: dict[str, bytes]) -> None:
    created = _json(files["datapackage.json"], "datapackage.json")["created"]
    try:
        rebuilt = canonical_zip(files, created)
    except ValueError:
        raise BundleError("datapackage.json's creation date is not RFC 3339") from None
    if rebuilt != data:
        raise BundleError("the zip's layout (dates, attributes, order) is not the bundle's")


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BundleError(f"{what} is not JSON") from None


def _check_package(files: dict[str, bytes], wacz_key: bytes | None) -> None:
    for name in ("datapackage.json", "datapackage-digest.json", "archive/data.warc.gz", CITATIONS):
        if name not in files:
            raise BundleError(f"the bundle has no {name}")
    package = _json(files["datapackage.json"], "datapackage.json")
    digest = _json(files["datapackage-digest.json"], "datapackage-digest.json")
    expected = "sha256:" + hashlib.sha256(files["datapackage.json"]).hexdigest()
    if not isinstance(digest, dict) or digest.get("hash") != expected:
        raise BundleError("datapackage.json does not match the hash in datapackage-digest.json")
    signed = digest.get("signedData")
    _check_signature(signed, expected, wacz_key)
    assert isinstance(signed, dict)  # _check_signature refuses anything else
    if not isinstance(package, dict) or not isinstance(package.get("created"), str):
        raise BundleError("datapackage.json has no creation date")
    try:
        rebuilt = digest_document(
            expected,
            signed["signature"],
            signed["publicKey"],
            package["created"],
            str(package.get("software")),
        )
    except (KeyError, TypeError):
        raise BundleError("the signed data is not in the bundle's form") from None
    if rebuilt != files["datapackage-digest.json"]:
        raise BundleError("datapackage-digest.json is not in the bundle's one form")
    listed: set[str] = set()
    for resource in package.get("resources", []) if isinstance(package, dict) else []:
        path = resource.get("path") if isinstance(resource, dict) else None
        if not isinstance(path, str) or path not in files:
            raise BundleError(f"datapackage.json lists {path!r}, which the zip does not hold")
        data = files[path]
        if resource.get("hash") != "sha256:" + hashlib.sha256(data).hexdigest():
            raise BundleError(f"{path} does not match its datapackage hash")
        if resource.get("bytes") != len(data):
            raise BundleError(f"{path} does not have its datapackage size")
        listed.add(path)
    unlisted = set(files) - listed - UNSIGNED
    if unlisted:
        raise BundleError(
            f"the zip holds entries datapackage.json does not list: {sorted(unlisted)}"
        )


def _check_signature(signed: Any, expected: str, wacz_key: bytes | None) -> None:
    if not isinstance(signed, dict) or signed.get("hash") != expected:
        raise BundleError("the signed data is missing or signs another hash")
    try:
        der = base64.b64decode(signed["publicKey"], validate=True)
        public = serialization.load_der_public_key(der)
        raw = base64.b64decode(signed["signature"], validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise BundleError("the signed data's key or signature is not well encoded") from None
    if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name != "secp384r1":
        raise BundleError("the datapackage is not signed with an ECDSA P-384 key")
    if wacz_key is not None:
        given = serialization.load_pem_public_key(wacz_key)
        if (
            given.public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            != der
        ):
            raise BundleError("the datapackage is signed by another key than --wacz-key")
    if len(raw) != 96:
        raise BundleError("the signature is not a raw P-384 r||s pair")
    signature = encode_dss_signature(
        int.from_bytes(raw[:48], "big"), int.from_bytes(raw[48:], "big")
    )
    try:
        public.verify(signature, expected.encode("utf-8"), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise BundleError("the datapackage signature does not verify") from None


def _check_warc(data: bytes) -> list[WarcRecord]:
    records = list(warcfile.read_records(data))
    for record in records:
        try:
            warcfile.check_digests(record)
        except WarcError as exc:
            raise BundleError(f"record {record.get('WARC-Record-ID')}: {exc}") from None
    return records


def _check_checkpoint(
    files: dict[str, bytes], verifier: proofcheck.Verifier, tsa_ca: bytes | None
) -> Checkpoint:
    note_bytes = files.get("proofs/checkpoint.txt")
    if note_bytes is None:
        raise BundleError("the bundle has no checkpoint (proofs/checkpoint.txt)")
    checkpoint = Checkpoint.parse(proofcheck.verify_note(note_bytes.decode("utf-8"), verifier))
    if checkpoint.origin != verifier.name:
        raise ProofError("the checkpoint's origin is not the verifier key's name")
    if tsa_ca is not None:
        stamp = files.get("proofs/checkpoint.tsr")
        if stamp is None:
            raise BundleError("a TSA certificate was given but the checkpoint has no timestamp")
        proofcheck.verify_timestamp(stamp, note_bytes, tsa_ca)
    return checkpoint


def _check_consistency(
    files: dict[str, bytes], verifier: proofcheck.Verifier, pinned: Checkpoint
) -> None:
    """A later checkpoint, when the bundle holds one, is signed by the vkey and extends the
    bundle's checkpoint (its consistency proof checks out)."""
    note, proof = files.get(LATER_CHECKPOINT), files.get(CONSISTENCY)
    if note is None and proof is None:
        return
    if note is None or proof is None:
        raise BundleError(f"{LATER_CHECKPOINT} and {CONSISTENCY} come together")
    later = Checkpoint.parse(proofcheck.verify_note(note.decode("utf-8"), verifier))
    if later.origin != verifier.name:
        raise ProofError("the later checkpoint's origin is not the verifier key's name")
    stated = _json(proof, CONSISTENCY)
    try:
        sizes = (stated["old_size"], stated["new_size"])
        hashes = [base64.b64decode(h, validate=True) for h in stated["proof"]]
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise BundleError(f"{CONSISTENCY} is not a consistency proof") from None
    if sizes != (pinned.size, later.size):
        raise ProofError("the consistency proof is not between the bundle's two checkpoints")
    proofcheck.verify_consistency(pinned.size, later.size, hashes, pinned.root, later.root)


def _entries(files: dict[str, bytes]) -> list[dict[str, Any]]:
    entries = []
    for line in files[CITATIONS].decode("utf-8", "replace").splitlines():
        entry = _json(line.encode("utf-8"), "a citations.jsonl line")
        if not isinstance(entry, dict) or not isinstance(entry.get("citation_id"), str):
            raise BundleError("a citations.jsonl line names no citation")
        entries.append(entry)
    return entries


def _check_one_set(entries: list[dict[str, Any]], records: list[WarcRecord]) -> None:
    listed = {e["citation_id"] for e in entries}
    recorded = {r.get("Amber-Citation-Id") for r in records if r.type == "metadata"}
    if listed != recorded or len(listed) != len(entries):
        raise BundleError("citations.jsonl and the WARC's citation records are not one set")


def _proven(
    files: dict[str, bytes], kind: str, subject: str, index: Any, checkpoint: Checkpoint
) -> dict[str, Any] | None:
    """The leaf's statement (None when erased) once its inclusion proof checks out."""
    base = f"proofs/{kind}-{subject}"
    proof_bytes = files.get(base + ".tlog-proof")
    if proof_bytes is None:
        raise BundleError(f"no proof for {kind} {subject}")
    proof = proofcheck.parse_tlog_proof(proof_bytes.decode("utf-8"))
    if proof.note.encode("utf-8") != files["proofs/checkpoint.txt"]:
        raise ProofError(f"the {kind} proof ends with another checkpoint")
    if proof.index != index:
        raise ProofError(f"the {kind} proof is for leaf {proof.index}, not {index}")
    statement_bytes = files.get(base + ".statement.json")
    if statement_bytes is not None:
        hashed = proofcheck.leaf_hash(statement_bytes)
    else:
        hashed = bytes.fromhex(files[base + ".leaf-hash"].decode("ascii"))
    proofcheck.verify_inclusion(proof.index, checkpoint.size, hashed, proof.path, checkpoint.root)
    if statement_bytes is None:
        return None
    statement = _json(statement_bytes, f"the {kind} statement")
    if not isinstance(statement, dict) or statement.get("type") != kind or statement.get("v") != 1:
        raise ProofError(f"the {kind} statement is not a version 1 {kind} leaf")
    return statement


def _check_citation(
    entry: dict[str, Any],
    files: dict[str, bytes],
    records: dict[str | None, WarcRecord],
    checkpoint: Checkpoint,
) -> None:
    cid = entry["citation_id"]
    metadata = records.get(entry.get("metadata_record_id"))
    if metadata is None or metadata.get("Amber-Citation-Id") != cid:
        raise BundleError("its metadata record is missing")
    stated = _json(metadata.block, "its metadata record")
    shared = {k: v for k, v in entry.items() if k in stated}
    if shared != stated:
        raise BundleError("citations.jsonl and its metadata record disagree")
    if metadata.get("WARC-Refers-To") != entry.get("warc_record_id"):
        raise BundleError("its metadata record refers to another record")
    statement = _proven(files, "citation", cid, entry.get("leaf_index"), checkpoint)
    if statement is not None:
        _compare_citation(statement, entry)
    passage_text = None
    for memento in entry["mementos"]:
        content = _check_memento(memento, files, records, checkpoint)
        if memento["id"] == entry["passage_memento_id"] and content is not None:
            passage_text = content.decode("utf-8")
    if passage_text is not None:
        _check_quote(entry, passage_text)


def _compare_citation(statement: dict[str, Any], entry: dict[str, Any]) -> None:
    position = entry["selectors"][1]
    pairs = (
        ("id", entry["citation_id"]),
        ("transcript_id", entry["transcript_id"]),
        ("passage_memento_id", entry["passage_memento_id"]),
        ("document_blake3", entry["document_blake3"]),
        ("selector", {"start": position["start"], "end": position["end"]}),
        ("run_id", entry["run_id"]),
        ("created_at", entry["created_at"]),
        ("document_sha256", entry.get("document_sha256")),
        ("quote_sha256", entry.get("quote_sha256")),
    )
    for key, value in pairs:
        if statement.get(key) != value:
            raise ProofError(f"the logged citation's {key} is not the bundle's")


def _check_memento(
    memento: dict[str, Any],
    files: dict[str, bytes],
    records: dict[str | None, WarcRecord],
    checkpoint: Checkpoint,
) -> bytes | None:
    """The memento's bytes once its leaf and record agree (None: a tombstone)."""
    statement = _proven(files, "memento", memento["id"], memento.get("leaf_index"), checkpoint)
    if "tombstone" in memento:
        tombstone = memento["tombstone"]
        _proven(files, "tombstone", memento["id"], tombstone.get("leaf_index"), checkpoint)
        return None
    record = records.get(memento.get("warc_record_id"))
    if record is None or record.get("Amber-Memento-Id") != memento["id"]:
        raise BundleError(f"memento {memento['id']} has no WARC record")
    content = record.payload
    if statement is None:
        raise ProofError(f"memento {memento['id']} has bytes but an erased statement")
    checks = (
        ("sha256", hashlib.sha256(content).hexdigest()),
        ("size", len(content)),
        ("uri_r", record.get("WARC-Target-URI")),
        ("memento_datetime", record.get("WARC-Date")),
        ("blake3", record.get("Amber-Content-Address")),
        ("blake3", memento.get("blake3")),
    )
    for key, value in checks:
        if statement.get(key) != value:
            raise ProofError(f"memento {memento['id']}: its logged {key} is not the record's")
    try:
        import blake3  # optional: SHA-256 already binds the bytes
    except ImportError:
        return content
    if statement.get("blake3") != "blake3:" + blake3.blake3(content).hexdigest():
        raise ProofError(f"memento {memento['id']}: its bytes are not its BLAKE3 address")
    return content


def _check_quote(entry: dict[str, Any], passage: str) -> None:
    """The passage is the extracted text around the quote: the quote must be in it, and as
    long as its position selector says."""
    quote, position = entry["selectors"][0], entry["selectors"][1]
    exact = quote.get("exact")
    if not isinstance(exact, str) or len(exact) != position["end"] - position["start"]:
        raise ProofError("the quote's length is not its position selector's")
    context = (quote.get("prefix") or "") + exact + (quote.get("suffix") or "")
    if context not in passage:
        raise ProofError("the quote is not at its selector in the passage text")


def main(argv: Sequence[str] | None = None) -> int:
    """``python bundlecheck.py BUNDLE.wacz VKEY_FILE [CA.pem]``."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print("usage: bundlecheck.py BUNDLE.wacz VKEY_FILE [CA.pem]", file=sys.stderr)
        return 2
    vkey = Path(args[1]).read_text(encoding="utf-8").strip()
    ca = Path(args[2]).read_bytes() if len(args) > 2 else None
    report = verify_bundle(Path(args[0]).read_bytes(), vkey, tsa_ca=ca)
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
