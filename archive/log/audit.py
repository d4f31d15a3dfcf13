"""``amber log verify``: the archive's self-audit against its own evidence log.

It recomputes the tree from the stored leaves and compares it with every stored node and
checkpoint (and each checkpoint's signature); it checks that every memento, citation and
tombstone has exactly one leaf whose facts match the index, and no leaf attests a row that
is not there; with ``full``, that each memento leaf's hashes match the blob's bytes. It
stops at the first mismatch and names it.

Its memory is bounded at any log size: leaves, checkpoints and rows are read a batch at a
time, the tree is recomputed with the stack of perfect-subtree hashes (at most log2(n)),
and the one-leaf-per-row checks are statements the database answers.
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
    checkpoints = _checkpoints(connection)
    due = next(checkpoints, None)  # the next checkpoint to compare, by size
    # The perfect subtrees of the leaves so far, (level, hash): the RFC 9162 compact range
    # of [0, size), at most log2(n) hashes, so memory stays bounded whatever the log's size.
    stack: list[tuple[int, bytes]] = []
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
        if due is not None and due.size == size:
            _compare_checkpoint(due, _root(stack), verifier)
            due = next(checkpoints, None)
    if size != sequenced:
        raise LogMismatch(f"{sequenced} leaves were sequenced but {size} are stored")
    if due is not None:
        raise LogMismatch(f"checkpoint {due.size} covers leaves that are not stored")
    return size


def _checkpoints(connection: Connection) -> Iterator[Any]:
    """Every checkpoint of a non-empty tree, smallest first, a batch at a time."""
    start = 1
    while True:
        rows = connection.execute(
            select(log_checkpoints)
            .where(log_checkpoints.c.size >= start)
            .order_by(log_checkpoints.c.size)
            .limit(BATCH)
        ).all()
        yield from rows
        if len(rows) < BATCH:
            return
        start = rows[-1].size + 1


def _nodes(connection: Connection) -> Callable[[int, int], bytes | None]:
    """Stored node lookups: one window of BATCH nodes per level, moved forward as the
    recomputation walks the leaves (each level's nodes are read once, in order)."""
    windows: dict[int, tuple[int, dict[int, bytes]]] = {}

    def get(level: int, idx: int) -> bytes | None:
        start, found = windows.get(level, (-BATCH, {}))  # the first look-up reads
        if not start <= idx < start + BATCH:
            rows = connection.execute(
                select(log_nodes.c.idx, log_nodes.c.hash).where(
                    log_nodes.c.level == level,
                    log_nodes.c.idx >= idx,
                    log_nodes.c.idx < idx + BATCH,
                )
            )
            found = {r.idx: bytes.fromhex(r.hash) for r in rows}
            windows[level] = (idx, found)
        return found.get(idx)  # not yet integrated: absent

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
    """Counts first (one statement each), then each row's facts against its one leaf,
    streamed in the order of the rows' ids: memory stays bounded at any size."""
    _check_counts(connection)
    mementos = tombstones = blobs = 0
    for row in _joined(connection, mementos_table, MEMENTO):
        memento = memento_from(row)
        mementos += 1
        statement = _statement(row.leaf_statement)
        if statement is not None:
            sha256 = statement.pop("sha256", None)
            _compare(statement, memento_facts(memento, None), f"memento {memento.id}", row.leaf_idx)
            if read_blob is not None and memento.deleted_at is None:
                _check_blob(memento.id, memento.content_hash, sha256, row.leaf_idx, read_blob)
                blobs += 1
    for row in _joined(connection, mementos_table, TOMBSTONE):
        tombstones += 1
        body = _statement(row.leaf_statement)
        deleted_at = memento_from(row).deleted_at
        if body is not None and deleted_at is not None:  # the count check: it is deleted
            kind, policy = deletion_of(row.deletion_reason)
            facts = tombstone_facts(row.id, deleted_at, kind, policy)
            _compare(body, facts, f"tombstone of {row.id}", row.leaf_idx)
    cited = 0
    for row in _joined(connection, citations, CITATION):
        cited += 1
        statement = _statement(row.leaf_statement)
        if statement is not None:
            statement.pop("document_sha256", None)
            statement.pop("quote_sha256", None)
            _compare(statement, citation_facts(row), f"citation {row.id}", row.leaf_idx)
    checkpoints = int(
        connection.execute(select(func.count()).select_from(log_checkpoints)).scalar_one()
    )
    return checkpoints, mementos, cited, tombstones, blobs


# The first row without exactly one leaf of its kind, and the first leaf attesting no row.
_LEAF_COUNT = (
    "SELECT r.id, count(l.idx) FROM {table} r LEFT JOIN log_leaves l "
    "ON l.subject = r.id AND l.kind = '{kind}' {where} "
    "GROUP BY r.id HAVING count(l.idx) <> 1 ORDER BY r.id LIMIT 1"
)
_COUNTED = (
    ("mementos", MEMENTO, "", "memento"),
    ("mementos", TOMBSTONE, "WHERE r.deleted_at IS NOT NULL", "tombstoned memento"),
    ("citations", CITATION, "", "citation"),
)
_STRAY = (
    "SELECT l.idx, l.kind, l.subject FROM log_leaves l WHERE NOT ("
    f"(l.kind = '{MEMENTO}' AND EXISTS (SELECT 1 FROM mementos m WHERE m.id = l.subject)) OR "
    f"(l.kind = '{TOMBSTONE}' AND EXISTS (SELECT 1 FROM mementos m WHERE m.id = l.subject "
    "AND m.deleted_at IS NOT NULL)) OR "
    f"(l.kind = '{CITATION}' AND EXISTS (SELECT 1 FROM citations c WHERE c.id = l.subject))"
    ") ORDER BY l.idx LIMIT 1"
)


def _check_counts(connection: Connection) -> None:
    for table, kind, where, what in _COUNTED:
        wrong = connection.exec_driver_sql(
            _LEAF_COUNT.format(table=table, kind=kind, where=where)
        ).first()
        if wrong is not None:
            raise LogMismatch(f"{what} {wrong[0]} has {wrong[1]} leaves, not exactly one")
    stray = connection.exec_driver_sql(_STRAY).first()
    if stray is not None:
        raise LogMismatch(f"leaf {stray[0]} attests {stray[1]} {stray[2]}, not in the index")


def _joined(connection: Connection, table: Any, kind: str) -> Iterator[Any]:
    """Each row of ``table`` with its one leaf of ``kind`` (``leaf_idx``,
    ``leaf_statement``), by id, a batch at a time (keyset: no cursor held across batches)."""
    query = (
        select(
            table,
            log_leaves.c.idx.label("leaf_idx"),
            log_leaves.c.statement.label("leaf_statement"),
        )
        .join(log_leaves, (log_leaves.c.subject == table.c.id) & (log_leaves.c.kind == kind))
        .order_by(table.c.id)
        .limit(BATCH)
    )
    after: str | None = None
    while True:
        page = query if after is None else query.where(table.c.id > after)
        rows = connection.execute(page).all()
        yield from rows
        if len(rows) < BATCH:
            return
        after = rows[-1].id


def _check_blob(
    memento_id: str, address: str, sha256: Any, idx: int, read_blob: Callable[[str], bytes]
) -> None:
    try:
        data = read_blob(address)
    except AmberError as exc:
        raise LogMismatch(
            f"memento {memento_id}: its blob cannot be read intact ({exc.message})"
        ) from None
    if hashlib.sha256(data).hexdigest() != sha256 or (
        "blake3:" + blake3.blake3(data).hexdigest() != address
    ):
        raise LogMismatch(f"memento {memento_id}: its blob's bytes do not match leaf {idx}")


def _statement(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    body = json.loads(text)
    for key in ("v", "type", "nonce"):
        body.pop(key, None)
    return dict(body)


def _compare(statement: dict[str, Any], expected: dict[str, Any], what: str, idx: int) -> None:
    for key in sorted(set(statement) | set(expected)):
        if statement.get(key) != expected.get(key):
            raise LogMismatch(f"{what}: {key} in the index differs from leaf {idx}")
