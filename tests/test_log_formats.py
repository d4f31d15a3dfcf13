"""The evidence log's formats pinned to public vectors: RFC 9162 proofs (transparency-dev's
inclusion and consistency vectors) and C2SP signed notes (the specification's example),
plus the tree's own proofs against a naive RFC 9162 Merkle tree hash."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from archive.log.proofcheck import (
    Checkpoint,
    ProofError,
    Verifier,
    format_tlog_proof,
    leaf_hash,
    node_hash,
    parse_tlog_proof,
    verify_consistency,
    verify_inclusion,
    verify_note,
)
from archive.log.signing import NoteSigner, origin_from
from archive.log.statements import canonical_json
from archive.log.tree import consistency_plan, inclusion_plan

VECTORS = Path(__file__).parent / "vectors"


def _cases(kind: str) -> list[Path]:
    return sorted((VECTORS / "merkle" / kind).rglob("*.json"))


def _b64(values: list[str] | None) -> list[bytes]:
    return [base64.b64decode(v) for v in values or []]


@pytest.mark.parametrize("path", _cases("inclusion"), ids=lambda p: str(p.relative_to(VECTORS)))
def test_inclusion_vectors(path: Path) -> None:
    case = json.loads(path.read_text())
    check = lambda: verify_inclusion(  # noqa: E731
        case["leafIdx"],
        case["treeSize"],
        base64.b64decode(case["leafHash"]),
        _b64(case["proof"]),
        base64.b64decode(case["root"]),
    )
    if case["wantErr"]:
        with pytest.raises(ProofError):
            check()
    else:
        check()


@pytest.mark.parametrize("path", _cases("consistency"), ids=lambda p: str(p.relative_to(VECTORS)))
def test_consistency_vectors(path: Path) -> None:
    case = json.loads(path.read_text())
    check = lambda: verify_consistency(  # noqa: E731
        case["size1"],
        case["size2"],
        _b64(case["proof"]),
        base64.b64decode(case["root1"]),
        base64.b64decode(case["root2"]),
    )
    if case["wantErr"]:
        with pytest.raises(ProofError):
            check()
    else:
        check()


def test_the_vectors_hold_positive_and_negative_cases() -> None:
    wanted = [
        json.loads(p.read_text())["wantErr"] for p in _cases("inclusion") + _cases("consistency")
    ]
    assert len(wanted) > 50 and True in wanted and False in wanted


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1, straight from its definition."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def _resolve(leaves: list[bytes], plan: list[tuple[tuple[int, int], ...]]) -> list[bytes]:
    out = []
    for cover in plan:
        hashes = [_mth(leaves[i << lv : (i + 1) << lv]) for lv, i in cover]
        folded = hashes[-1]
        for h in reversed(hashes[:-1]):
            folded = node_hash(h, folded)
        out.append(folded)
    return out


def test_tree_plans_give_proofs_that_verify_for_every_size() -> None:
    leaves = [leaf_hash(bytes([i])) for i in range(34)]
    for size in range(1, len(leaves) + 1):
        root = _mth(leaves[:size])
        for index in range(size):
            proof = _resolve(leaves, inclusion_plan(index, size))
            verify_inclusion(index, size, leaves[index], proof, root)
        for old in range(1, size):
            proof = _resolve(leaves, consistency_plan(old, size))
            verify_consistency(old, size, proof, _mth(leaves[:old]), root)
            if proof:
                with pytest.raises(ProofError):
                    verify_consistency(
                        old, size, proof, _mth(leaves[: old - 1] or leaves[1:2]), root
                    )


def test_the_c2sp_signed_note_example_is_accepted() -> None:
    note = (VECTORS / "signed-note" / "example.note").read_text(encoding="utf-8")
    vkey = (VECTORS / "signed-note" / "example.vkey").read_text(encoding="utf-8")
    assert verify_note(note, Verifier.parse(vkey)) == "This is an example message.\n"


def test_any_one_byte_change_of_the_example_is_refused() -> None:
    raw = (VECTORS / "signed-note" / "example.note").read_bytes()
    vkey = Verifier.parse((VECTORS / "signed-note" / "example.vkey").read_text(encoding="utf-8"))
    for position in range(len(raw)):
        changed = bytearray(raw)
        changed[position] ^= 0x01
        try:
            text = bytes(changed).decode("utf-8")
        except UnicodeDecodeError:
            continue  # not a note at all
        with pytest.raises(ProofError):
            verify_note(text, vkey)


def test_a_one_byte_change_of_the_verifier_key_is_refused() -> None:
    vkey = (VECTORS / "signed-note" / "example.vkey").read_text(encoding="utf-8").strip()
    note = (VECTORS / "signed-note" / "example.note").read_text(encoding="utf-8")
    for position in range(len(vkey)):
        changed = vkey[:position] + chr(ord(vkey[position]) ^ 0x01) + vkey[position + 1 :]
        with pytest.raises(ProofError):
            verify_note(note, Verifier.parse(changed))


def test_signed_checkpoints_and_tlog_proofs_round_trip() -> None:
    signer = NoteSigner("example.org/log", Ed25519PrivateKey.generate())
    verifier = Verifier.parse(signer.vkey())
    leaves = [leaf_hash(b"a"), leaf_hash(b"b"), leaf_hash(b"c")]
    checkpoint = Checkpoint("example.org/log", 3, _mth(leaves))
    note = signer.sign(checkpoint.text())
    assert Checkpoint.parse(verify_note(note, verifier)) == checkpoint
    proof_text = format_tlog_proof(1, _resolve(leaves, inclusion_plan(1, 3)), note)
    assert proof_text.startswith("c2sp.org/tlog-proof@v1\nindex 1\n")
    proof = parse_tlog_proof(proof_text)
    verify_inclusion(proof.index, 3, leaves[1], proof.path, checkpoint.root)
    other = NoteSigner("example.org/log", Ed25519PrivateKey.generate())
    with pytest.raises(ProofError):
        verify_note(note, Verifier.parse(other.vkey()))


def test_the_origin_defaults_to_the_base_url_without_its_scheme() -> None:
    assert origin_from(None, "https://amber.example.org") == "amber.example.org/log"
    assert origin_from("example.com/x", "https://a") == "example.com/x"


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_statements_are_exactly_what_the_rfc8785_package_writes(value: object) -> None:
    try:
        expected = rfc8785.dumps(value).decode("utf-8")
    except Exception as refused:  # lone surrogates: refused by both, the same way
        with pytest.raises(type(refused)):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


def test_a_memento_statement_is_rfc8785() -> None:
    text = canonical_json({"uri_r": 'https://é.example/\u2028\x07"\\', "size": 3, "z": None})
    assert text == rfc8785.dumps(json.loads(text)).decode("utf-8")
