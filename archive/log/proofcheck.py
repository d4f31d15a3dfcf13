"""Checking Amber's log evidence offline: needs only the standard library, ``cryptography``
and (for RFC 3161 timestamps) ``rfc3161-client``, so an auditor can copy this one file and
run it anywhere, with no server and no index.

Formats, followed exactly (docs/design.md, "The evidence log"):

- leaves and nodes: RFC 9162 §2.1 with SHA-256 (leaf ``0x00``, node ``0x01`` prefixes);
- inclusion and consistency proofs: RFC 9162 §2.1.3.2 and §2.1.4.2;
- checkpoints: C2SP ``tlog-checkpoint`` (origin, size, base64 root, extension lines);
- signatures: C2SP ``signed-note`` with Ed25519 (signature type ``0x01``);
- proofs: C2SP ``tlog-proof@v1``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

HASH_SIZE = 32
ED25519_TYPE = b"\x01"
PROOF_HEADER = "c2sp.org/tlog-proof@v1"
SIGNATURE_PREFIX = "\u2014 "  # an em dash and a space start every signature line


class ProofError(Exception):
    """The evidence does not check out; the message says which part and why."""


# -- RFC 9162 §2.1 hashing ----------------------------------------------------------------


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162 §2.1.3.2: raise :class:`ProofError` unless ``proof`` proves the leaf with hash
    ``leaf`` at ``index`` in the tree of ``size`` leaves whose root is ``root``."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of {size} leaves")
    _check_hashes(leaf, root, *proof)
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            raise ProofError("the inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the inclusion proof is shorter than the tree is deep")
    if r != root:
        raise ProofError("the inclusion proof does not lead to the checkpoint's root")


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """RFC 9162 §2.1.4.2: raise :class:`ProofError` unless the tree of ``size2`` leaves with
    root ``root2`` extends the one of ``size1`` leaves with root ``root1``."""
    if size1 < 1 or size2 < size1:
        # Every tree extends the empty one: a proof from size 0 proves nothing.
        raise ProofError(f"no consistency proof goes from size {size1} to {size2}")
    _check_hashes(*proof)
    if size1 == size2:
        if proof:
            raise ProofError("a consistency proof between equal sizes is empty")
        if root1 != root2:
            raise ProofError("two different roots for the same tree size")
        return
    if not proof:
        raise ProofError("the consistency proof is empty")
    path = list(proof)
    if size1 & (size1 - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is longer than needed")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the consistency proof is shorter than needed")
    if fr != root1:
        raise ProofError("the consistency proof does not lead to the old root")
    if sr != root2:
        raise ProofError("the consistency proof does not lead to the new root")


def _check_hashes(*hashes: bytes) -> None:
    if any(len(h) != HASH_SIZE for h in hashes):
        raise ProofError("a hash in the proof is not 32 bytes long")


# -- C2SP signed-note with Ed25519 ----------------------------------------------------------


@dataclass(frozen=True)
class Verifier:
    """A signed-note verifier key: ``<name>+<key id hex>+<base64(0x01 || public key)>``."""

    name: str
    key_id: bytes
    public_key: Ed25519PublicKey

    @classmethod
    def parse(cls, vkey: str) -> Verifier:
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3 or not _valid_name(parts[0]) or len(parts[1]) != 8:
            raise ProofError("a verifier key reads <name>+<8 hex digits>+<base64 key>")
        name, hex_id, encoded = parts
        try:
            key_id = bytes.fromhex(hex_id)
            raw = base64.b64decode(encoded, validate=True)
        except (ValueError, binascii.Error):
            raise ProofError("the verifier key's id or key is not well encoded") from None
        if len(raw) != 33 or raw[:1] != ED25519_TYPE:
            raise ProofError("only Ed25519 verifier keys (type 0x01) are supported")
        if key_id != key_id_of(name, raw):
            raise ProofError("the verifier key's id does not match its name and key")
        return cls(name, key_id, Ed25519PublicKey.from_public_bytes(raw[1:]))


def key_id_of(name: str, typed_key: bytes) -> bytes:
    """signed-note key id: the first four bytes of SHA-256(name || 0x0A || type || key)."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + typed_key).digest()[:4]


def _valid_name(name: str) -> bool:
    return bool(name) and all(c.isprintable() and not c.isspace() and c != "+" for c in name)


def split_note(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    """A signed note's text (with its final newline) and its (name, signature bytes) lines."""
    if not note.endswith("\n"):
        raise ProofError("a signed note ends with a newline")
    cut = note.rfind("\n\n")
    if cut < 0:
        raise ProofError("a signed note has a blank line before its signatures")
    text, block = note[: cut + 1], note[cut + 2 :]
    if not block:
        raise ProofError("the note carries no signature")
    signatures = []
    for line in block[:-1].split("\n"):
        if not line.startswith(SIGNATURE_PREFIX):
            raise ProofError("a signature line starts with an em dash and a space")
        fields = line[len(SIGNATURE_PREFIX) :].split(" ")
        if len(fields) != 2 or not _valid_name(fields[0]):
            raise ProofError("a signature line reads '— <name> <base64 signature>'")
        try:
            signature = base64.b64decode(fields[1], validate=True)
        except binascii.Error:
            raise ProofError("a signature is not valid base64") from None
        if len(signature) < 5:
            raise ProofError("a signature is too short to hold a key id")
        signatures.append((fields[0], signature))
    return text, signatures


def verify_note(note: str, verifier: Verifier) -> str:
    """The note's text, once a signature by ``verifier`` (never a key the note names)
    checks out; :class:`ProofError` otherwise."""
    text, signatures = split_note(note)
    for name, signature in signatures:
        if name != verifier.name or signature[:4] != verifier.key_id:
            continue
        try:
            verifier.public_key.verify(signature[4:], text.encode("utf-8"))
        except InvalidSignature:
            raise ProofError("the note's signature by the given key is not valid") from None
        return text
    raise ProofError(f"the note carries no signature by {verifier.name}")


# -- C2SP tlog-checkpoint and tlog-proof ----------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise ProofError("a checkpoint has an origin, a size and a root, each on a line")
        origin, size, root = lines[0], lines[1], lines[2]
        if not origin or not size.isdigit() or (size != "0" and size.startswith("0")):
            raise ProofError("the checkpoint's origin or size is not well formed")
        try:
            root_hash = base64.b64decode(root, validate=True)
        except binascii.Error:
            raise ProofError("the checkpoint's root is not valid base64") from None
        if len(root_hash) != HASH_SIZE:
            raise ProofError("the checkpoint's root is not a SHA-256 hash")
        return cls(origin, int(size), root_hash)

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"


@dataclass(frozen=True)
class TlogProof:
    index: int
    path: list[bytes]
    note: str  # the signed checkpoint, verbatim


def format_tlog_proof(index: int, path: Sequence[bytes], note: str) -> str:
    lines = [PROOF_HEADER, f"index {index}", *(base64.b64encode(h).decode() for h in path)]
    return "\n".join(lines) + "\n\n" + note


def parse_tlog_proof(text: str) -> TlogProof:
    head, sep, note = text.partition("\n\n")
    lines = head.split("\n")
    if not sep or lines[0] != PROOF_HEADER:
        raise ProofError(f"a proof starts with {PROOF_HEADER} and ends with a checkpoint")
    rest = lines[1:]
    if rest and rest[0].startswith("extra "):
        rest = rest[1:]  # unauthenticated by definition: never used
    if not rest or not rest[0].startswith("index "):
        raise ProofError("the proof names no entry index")
    number = rest[0][len("index ") :]
    if not number.isdigit() or (number != "0" and number.startswith("0")):
        raise ProofError("the proof's index is not a decimal without leading zeros")
    try:
        path = [base64.b64decode(line, validate=True) for line in rest[1:]]
    except binascii.Error:
        raise ProofError("an inclusion proof hash is not valid base64") from None
    if any(len(h) != HASH_SIZE for h in path):
        raise ProofError("an inclusion proof hash is not a SHA-256 hash")
    return TlogProof(int(number), path, note)


# -- a whole proof document (GET /api/v1/{mementos,citations}/{id}/proof) -------------------


@dataclass(frozen=True)
class Verified:
    statement: dict[str, Any]
    index: int
    checkpoint: Checkpoint
    timestamped: bool


def verify_proof_document(
    document: dict[str, Any],
    vkey: str,
    *,
    tsa_ca: bytes | None = None,
    content: bytes | None = None,
) -> Verified:
    """Check a proof document: its statement against ``content`` (when given), its inclusion
    in the checkpoint, the checkpoint's signature by ``vkey``, its consistency with the
    latest checkpoint, and (with ``tsa_ca``) its RFC 3161 timestamp."""
    verifier = Verifier.parse(vkey)
    statement_text = document.get("statement")
    if not isinstance(statement_text, str):
        raise ProofError("the proof holds no statement (erased, or not a proof document)")
    statement_bytes = statement_text.encode("utf-8")
    try:
        statement = json.loads(statement_text)
    except ValueError:
        raise ProofError("the statement is not JSON") from None
    if not isinstance(statement, dict) or statement.get("v") != 1:
        raise ProofError("the statement is not a version 1 Amber leaf")
    if content is not None:
        _check_content(statement, content)
    proof = parse_tlog_proof(_text(document, "proof"))
    checkpoint = Checkpoint.parse(verify_note(proof.note, verifier))
    if checkpoint.origin != verifier.name:
        raise ProofError("the checkpoint's origin is not the verifier key's name")
    verify_inclusion(
        proof.index, checkpoint.size, leaf_hash(statement_bytes), proof.path, checkpoint.root
    )
    consistency = document.get("consistency")
    if consistency is not None:
        latest = Checkpoint.parse(verify_note(_text(consistency, "checkpoint"), verifier))
        hashes = [base64.b64decode(h, validate=True) for h in consistency.get("proof", [])]
        verify_consistency(checkpoint.size, latest.size, hashes, checkpoint.root, latest.root)
    stamped = document.get("timestamp")
    if tsa_ca is not None:
        if not isinstance(stamped, str):
            raise ProofError("a TSA certificate was given but the proof has no timestamp")
        verify_timestamp(base64.b64decode(stamped), proof.note.encode("utf-8"), tsa_ca)
    return Verified(statement, proof.index, checkpoint, stamped is not None and tsa_ca is not None)


def _text(document: Any, key: str) -> str:
    value = document.get(key) if isinstance(document, dict) else None
    if not isinstance(value, str):
        raise ProofError(f"the proof's {key!r} is missing or not text")
    return value


def _check_content(statement: dict[str, Any], content: bytes) -> None:
    if statement.get("type") != "memento":
        raise ProofError("--content checks a memento statement's bytes")
    if statement.get("sha256") != hashlib.sha256(content).hexdigest():
        raise ProofError("the content's SHA-256 is not the statement's")
    if statement.get("size") != len(content):
        raise ProofError("the content's size is not the statement's")
    try:
        import blake3  # optional: SHA-256 already binds the bytes
    except ImportError:
        return
    if statement.get("blake3") != "blake3:" + blake3.blake3(content).hexdigest():
        raise ProofError("the content's BLAKE3 address is not the statement's")


def verify_timestamp(response: bytes, data: bytes, ca_pem: bytes) -> None:
    """Check an RFC 3161 response: signed by a TSA chaining to ``ca_pem``, over ``data``."""
    from cryptography import x509
    from rfc3161_client import VerifierBuilder, decode_timestamp_response
    from rfc3161_client.errors import VerificationError

    try:
        stamp = decode_timestamp_response(response)
        roots = x509.load_pem_x509_certificates(ca_pem)
        builder = VerifierBuilder()
        for root in roots:
            builder = builder.add_root_certificate(root)
        builder.build().verify_message(stamp, data)
    except (VerificationError, ValueError) as exc:
        raise ProofError(f"the RFC 3161 timestamp does not verify: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python proofcheck.py PROOF.json VKEY_FILE [CA.pem] [CONTENT]``: the same checks as
    ``amber proof verify``, for an auditor without Amber installed."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print("usage: proofcheck.py PROOF.json VKEY_FILE [CA.pem] [CONTENT]", file=sys.stderr)
        return 2
    document = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    vkey = Path(args[1]).read_text(encoding="utf-8").strip()
    ca = Path(args[2]).read_bytes() if len(args) > 2 else None
    content = Path(args[3]).read_bytes() if len(args) > 3 else None
    try:
        verified = verify_proof_document(document, vkey, tsa_ca=ca, content=content)
    except ProofError as exc:
        print(f"NOT VERIFIED: {exc}", file=sys.stderr)
        return 1
    print(f"verified: leaf {verified.index} of {verified.checkpoint.size}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
