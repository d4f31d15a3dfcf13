"""``amber log verify``: the archive's self-audit against its own evidence log.

It recomputes the tree from the stored leaves and compares it with every stored node and
checkpoint (and each checkpoint's signature); it checks that every memento, citation and
tombstone has exactly one leaf whose facts match the index, and no leaf attests a row that
is not there; with ``full``, that each memento leaf's hashes match the blob's bytes. It
stops at the first mismatch and names it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import blake3
from sqlalchemy import Connection, func, select

from archive.exceptions import AmberError, LogMismatch
from archive.index import Index
from archive.index.rows import memento_from
from archive.index.schema import citations, log_checkpoints, log_counters, log_leaves, log_nodes
from archive.index.schema import mementos as mementos_table
from archive.log.proofcheck import Checkpoint, ProofError, Verifier, leaf_hash, node_hash
from archive.log.sequencer import deletion_of
from archive.log.statements import (
    CITATION,
    MEMENTO,
    TOMBSTONE,
    citation_facts,
    memento_facts,
    tombstone_facts,
)

BATCH = 10_000


@dataclass(frozen=True)
class AuditReport:
    leaves: int
    checkpoints: int
    mementos: int
    citations: int
    tombstones: int
    blobs_checked: int


def audit(
    index: Index, vkey: str, *, read_blob: Callable[[str], bytes] | None = None
) -> AuditReport:
    """Raise :class:`LogMismatch` at the first disagreement; a summary when all agree.
    ``read_blob(address)`` (``--full``) reads a memento's bytes."""
    verifier = Verifier.parse(vkey)
    with index.read() as connection:
        leaves = _check_tree(connection, verifier)
        counts = _check_facts(connection, read_blob)
    return AuditReport(leaves, *counts)


def _leaves(connection: Connection) -> Iterator[Any]:
    start = 0
    while True:
        rows = connection.execute(
            select(log_leaves)
            .where(log_leaves.c.idx >= start)
            .order_by(log_leaves.c.idx)
            .limit(BATCH)
        ).all()
        yield from rows
        if len(rows) < BATCH:
            return
        start = rows[-1].idx + 1


def _check_tree(connection: Connection, verifier: Verifier) -> int:
    sequenced = int(
        connection.execute(
            select(log_counters.c.value).where(log_counters.c.name == "sequenced")
        ).scalar_one()
    )
    checkpoints = {
        r.size: r
        for r in connection.execute(select(log_checkpoints).order_by(log_checkpoints.c.size))
    }
    stack: list[tuple[int, bytes]] = []  # perfect subtrees of the leaves so far: (level, hash)
    stored_nodes = _nodes(connection)
    size = 0
    for row in _leaves(connection):
        if row.idx != size:
            raise LogMismatch(f"leaf {size} is missing (the next stored leaf is {row.idx})")
        if (
            row.statement is not None
            and leaf_hash(row.statement.encode("utf-8")).hex() != row.leaf_hash
        ):
            raise LogMismatch(f"leaf {size}: its statement does not hash to its leaf hash")
        node = (0, bytes.fromhex(row.leaf_hash))
        _compare_node(stored_nodes, 0, size, node[1])
        position = size
        while stack and stack[-1][0] == node[0]:
            level, left = stack.pop()
            node = (level + 1, node_hash(left, node[1]))
            position >>= 1
            _compare_node(stored_nodes, node[0], position, node[1])
        stack.append(node)
        size += 1
        if size in checkpoints:
            _compare_checkpoint(checkpoints[size], _root(stack), verifier)
    if size != sequenced:
        raise LogMismatch(f"{sequenced} leaves were sequenced but {size} are stored")
    beyond = [s for s in checkpoints if s > size]
    if beyond:
        raise LogMismatch(f"checkpoint {beyond[0]} covers leaves that are not stored")
    return size


def _nodes(connection: Connection) -> Callable[[int, int], bytes | None]:
    """Stored node lookups, a level's range read at a time."""
    cache: dict[tuple[int, int], bytes] = {}

    def get(level: int, idx: int) -> bytes | None:
        if (level, idx) not in cache:
            if len(cache) > 4 * BATCH:
                cache.clear()
            for r in connection.execute(
                select(log_nodes).where(
                    log_nodes.c.level == level,
                    log_nodes.c.idx >= idx,
                    log_nodes.c.idx < idx + BATCH,
                )
            ):
                cache[(r.level, r.idx)] = bytes.fromhex(r.hash)
        return cache.get((level, idx))

    return get


def _compare_node(
    stored: Callable[[int, int], bytes | None], level: int, idx: int, computed: bytes
) -> None:
    found = stored(level, idx)
    if found is not None and found != computed:  # not yet integrated: absent, not wrong
        raise LogMismatch(f"tree node (level {level}, index {idx}) is not the hash of its leaves")


def _root(stack: list[tuple[int, bytes]]) -> bytes:
    result = stack[-1][1]
    for _, left in reversed(stack[:-1]):
        result = node_hash(left, result)
    return result


def _compare_checkpoint(row: Any, computed: bytes, verifier: Verifier) -> None:
    from archive.log.proofcheck import verify_note

    if bytes.fromhex(row.root) != computed:
        raise LogMismatch(f"checkpoint {row.size}: its root is not the root of the stored leaves")
    try:
        checkpoint = Checkpoint.parse(verify_note(row.note, verifier))
    except ProofError as exc:
        raise LogMismatch(f"checkpoint {row.size}: {exc}") from None
    if checkpoint.size != row.size or checkpoint.root != computed:
        raise LogMismatch(f"checkpoint {row.size}: the signed note names another tree")


def _check_facts(
    connection: Connection, read_blob: Callable[[str], bytes] | None
) -> tuple[int, int, int, int, int]:
    leaves: dict[tuple[str, str], list[Any]] = {}
    for row in _leaves(connection):
        leaves.setdefault((row.kind, row.subject), []).append(row)
    seen = set()
    mementos = tombstones = blobs = 0
    for row in connection.execute(select(mementos_table).order_by(mementos_table.c.id)):
        memento = memento_from(row)
        [leaf] = _one(leaves, MEMENTO, memento.id, "memento")
        seen.add((MEMENTO, memento.id))
        mementos += 1
        statement = _statement(leaf)
        if statement is not None:
            expected = memento_facts(memento, None)
            sha256 = statement.pop("sha256", None)
            _compare(statement, expected, f"memento {memento.id}", leaf.idx)
            if read_blob is not None and memento.deleted_at is None:
                try:
                    data = read_blob(memento.content_hash)
                except AmberError as exc:
                    raise LogMismatch(
                        f"memento {memento.id}: its blob cannot be read intact ({exc.message})"
                    ) from None
                if hashlib.sha256(data).hexdigest() != sha256 or (
                    "blake3:" + blake3.blake3(data).hexdigest() != memento.content_hash
                ):
                    raise LogMismatch(
                        f"memento {memento.id}: its blob's bytes do not match leaf {leaf.idx}"
                    )
                blobs += 1
        if memento.deleted_at is not None:
            [stone] = _one(leaves, TOMBSTONE, memento.id, "tombstoned memento")
            seen.add((TOMBSTONE, memento.id))
            tombstones += 1
            body = _statement(stone)
            kind, policy = deletion_of(row.deletion_reason)
            if body is not None:
                _compare(
                    body,
                    tombstone_facts(memento.id, memento.deleted_at, kind, policy),
                    f"tombstone of {memento.id}",
                    stone.idx,
                )
    cited = 0
    for row in connection.execute(select(citations).order_by(citations.c.id)):
        [leaf] = _one(leaves, CITATION, row.id, "citation")
        seen.add((CITATION, row.id))
        cited += 1
        statement = _statement(leaf)
        if statement is not None:
            statement.pop("document_sha256", None)
            statement.pop("quote_sha256", None)
            _compare(statement, citation_facts(row), f"citation {row.id}", leaf.idx)
    stray = sorted(set(leaves) - seen)
    if stray:
        kind, subject = stray[0]
        raise LogMismatch(
            f"leaf {leaves[stray[0]][0].idx} attests {kind} {subject}, not in the index"
        )
    checkpoints = int(
        connection.execute(select(func.count()).select_from(log_checkpoints)).scalar_one()
    )
    return checkpoints, mementos, cited, tombstones, blobs


def _one(leaves: dict[tuple[str, str], list[Any]], kind: str, subject: str, what: str) -> list[Any]:
    found = leaves.get((kind, subject), [])
    if len(found) != 1:
        raise LogMismatch(f"{what} {subject} has {len(found)} leaves, not exactly one")
    return found


def _statement(leaf: Any) -> dict[str, Any] | None:
    if leaf.statement is None:
        return None
    body = json.loads(leaf.statement)
    for key in ("v", "type", "nonce"):
        body.pop(key, None)
    return dict(body)


def _compare(statement: dict[str, Any], expected: dict[str, Any], what: str, idx: int) -> None:
    for key in sorted(set(statement) | set(expected)):
        if statement.get(key) != expected.get(key):
            raise LogMismatch(f"{what}: {key} in the index differs from leaf {idx}")
