"""Leaf statements: what each leaf of the evidence log attests, as RFC 8785 canonical JSON.

A statement is the exact byte string the leaf hash covers (RFC 9162: SHA-256 of ``0x00``
and these bytes), so it is built once, stored verbatim, and handed out verbatim: nobody
re-encodes it. Each carries a random 128-bit ``nonce``, so that a leaf hash reveals nothing
of facts that were guessed once the statement is erased.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import rfc8785

from archive.dates import to_rfc3339
from archive.log.proofcheck import leaf_hash
from archive.mementos import Memento

VERSION = 1
MEMENTO, CITATION, TOMBSTONE = "memento", "citation", "tombstone"


@dataclass(frozen=True)
class Statement:
    kind: str
    subject: str  # the memento's or citation's id
    tenant: str
    text: str  # canonical JSON

    @property
    def leaf_hash(self) -> bytes:
        return leaf_hash(self.text.encode("utf-8"))


def _statement(kind: str, subject: str, tenant: str, facts: dict[str, Any]) -> Statement:
    body = {"v": VERSION, "type": kind, "nonce": secrets.token_hex(16), **facts}
    return Statement(kind, subject, tenant, canonical_json(body))


def canonical_json(value: Any) -> str:
    """RFC 8785 (JCS) text of ``value``.

    For the values statements hold (ASCII keys; strings, integers below 2^53, booleans,
    null, objects, arrays: no floats), JCS is exactly Python's sorted, compact JSON without
    ASCII escaping: same key order (UTF-16 order is code point order for ASCII), same
    escapes (``\\"``, ``\\\\``, ``\\b\\f\\n\\r\\t``, other controls as lower-case ``\\u00xx``).
    That costs a hundredth of the ``rfc8785`` package's pure-Python encoder on the write
    path; anything else goes to the package (tests hold the two equal).
    """
    if _plain(value):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return rfc8785.dumps(value).decode("utf-8")


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        return value.isascii() or _utf8(value)
    if isinstance(value, int):
        return -(2**53) < value < 2**53
    if isinstance(value, dict):
        return all(isinstance(k, str) and k.isascii() and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return False


def memento_statement(memento: Memento, sha256: str) -> Statement:
    return _statement(MEMENTO, memento.id, memento.tenant, memento_facts(memento, sha256))


def memento_facts(memento: Memento, sha256: str | None) -> dict[str, Any]:
    """What a memento leaf attests (``sha256`` None: every fact but that one, for checks
    against the index, which keeps only the BLAKE3 address)."""
    facts: dict[str, Any] = {
        "id": memento.id,
        "tenant": memento.tenant,
        "uri_r": memento.uri_r,
        "memento_datetime": to_rfc3339(memento.captured_at),
        "archived_at": to_rfc3339(memento.archived_at),
        "content_type": memento.media_type,
        "size": memento.size,
        "blake3": memento.content_hash,
        "scope": str(memento.scope),
    }
    if sha256 is not None:
        facts["sha256"] = sha256
    return facts


def citation_statement(row: dict[str, Any], document_sha256: str, quote_sha256: str) -> Statement:
    facts = {**citation_facts(row), "document_sha256": document_sha256}
    facts["quote_sha256"] = quote_sha256
    return _statement(CITATION, row["id"], row["tenant"], facts)


def citation_facts(row: Any) -> dict[str, Any]:
    """What a citation leaf attests that the citations table holds too (``row``: a mapping
    or a row with these names)."""
    get = row.get if isinstance(row, dict) else row._mapping.get
    created = get("created_at")
    assert isinstance(created, datetime)
    return {
        "id": get("id"),
        "tenant": get("tenant"),
        "transcript_id": get("transcript_id"),
        "passage_memento_id": get("passage_memento_id"),
        "document_blake3": get("document_hash"),
        "selector": {"start": get("position_start"), "end": get("position_end")},
        "created_at": to_rfc3339(created),
        "run_id": get("run_id"),
    }


def tombstone_statement(
    memento_id: str, tenant: str, deleted_at: datetime, kind: str, policy: Any
) -> Statement:
    facts = tombstone_facts(memento_id, deleted_at, kind, policy)
    return _statement(TOMBSTONE, memento_id, tenant, facts)


def tombstone_facts(
    memento_id: str, deleted_at: datetime, kind: str, policy: Any
) -> dict[str, Any]:
    """``kind`` is ``expiry`` or ``erasure``; ``policy`` the deletion reason the index keeps."""
    return {
        "memento_id": memento_id,
        "deleted_at": to_rfc3339(deleted_at),
        "deletion": kind,
        "policy": policy,
    }


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")  # lone surrogates are not Unicode text: the package refuses them
    except UnicodeEncodeError:
        return False
    return True


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
