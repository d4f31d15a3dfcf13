"""The evidence log's Merkle tree (RFC 9162 §2.1, SHA-256), kept as perfect subtrees.

``log_nodes`` holds the hash of every perfect subtree: node (level, i) covers leaves
``[i * 2^level, (i + 1) * 2^level)``, level 0 being the leaf hashes. Any subtree the RFC's
recursion names, ``[start, end)`` with ``start`` a multiple of a power of two at least
``end - start``, is a fold of at most log2(n) perfect ones; so a root, an inclusion proof
and a consistency proof each read O(log n) stored hashes, fetched in one query.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from sqlalchemy import Connection, insert

from archive.exceptions import StorageError
from archive.index.schema import log_nodes
from archive.log.proofcheck import node_hash

NodeId = tuple[int, int]  # (level, index at that level)
# A proof element or a root: the perfect subtrees folded right to left.
Fold = tuple[NodeId, ...]


def perfect_cover(start: int, end: int) -> Fold:
    """The perfect subtrees that make up ``[start, end)``, left to right, largest first."""
    nodes = []
    while start < end:
        level = 0
        while start % (1 << (level + 1)) == 0 and start + (1 << (level + 1)) <= end:
            level += 1
        nodes.append((level, start >> level))
        start += 1 << level
    return tuple(nodes)


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def inclusion_plan(index: int, size: int) -> list[Fold]:
    """RFC 9162 §2.1.3.1 PATH(index, D[0:size]), leaf's sibling first, as folds."""
    plan: list[Fold] = []
    offset, n, m = 0, size, index
    while n > 1:
        k = _split(n)
        if m < k:
            plan.append(perfect_cover(offset + k, offset + n))
            n = k
        else:
            plan.append(perfect_cover(offset, offset + k))
            offset, n, m = offset + k, n - k, m - k
    plan.reverse()
    return plan


def consistency_plan(old: int, new: int) -> list[Fold]:
    """RFC 9162 §2.1.4.1 PROOF(old, D[0:new]) as folds (0 < old <= new)."""
    plan: list[Fold] = []
    offset, n, m, whole = 0, new, old, True
    while m != n:
        k = _split(n)
        if m <= k:
            plan.append(perfect_cover(offset + k, offset + n))
            n = k
        else:
            plan.append(perfect_cover(offset, offset + k))
            offset, n, m, whole = offset + k, n - k, m - k, False
    if not whole:
        plan.append(perfect_cover(offset, offset + n))
    plan.reverse()
    return plan


def read_nodes(connection: Connection, ids: Iterable[NodeId]) -> dict[NodeId, bytes]:
    """The stored hashes of these nodes: one statement of primary-key point look-ups (the
    text is cached per count, so the driver reuses its prepared statement)."""
    wanted = sorted(set(ids))
    found: dict[NodeId, bytes] = {}
    for chunk in range(0, len(wanted), 200):
        part = wanted[chunk : chunk + 200]
        rows = connection.exec_driver_sql(
            _point_lookups(len(part), connection.dialect.name),
            tuple(v for node in part for v in node),
        )
        found.update(((level, idx), bytes.fromhex(h)) for level, idx, h in rows)
    missing = [n for n in wanted if n not in found]
    if missing:
        raise StorageError("the log's tree lacks a node it should hold", node=str(missing[0]))
    return found


@lru_cache(maxsize=256)
def _point_lookups(count: int, dialect: str) -> str:
    mark = "?" if dialect == "sqlite" else "%s"
    one = f"SELECT level, idx, hash FROM log_nodes WHERE level = {mark} AND idx = {mark}"
    return " UNION ALL ".join([one] * count)


def fold(nodes: dict[NodeId, bytes], cover: Fold) -> bytes:
    """The hash of the subtree made of ``cover``'s perfect subtrees."""
    result = nodes[cover[-1]]
    for node in reversed(cover[:-1]):
        result = node_hash(nodes[node], result)
    return result


def resolve(connection: Connection, plan: Sequence[Fold]) -> list[bytes]:
    nodes = read_nodes(connection, (n for cover in plan for n in cover))
    return [fold(nodes, cover) for cover in plan]


def root(connection: Connection, size: int) -> bytes:
    """The tree head of the first ``size`` leaves (integrated)."""
    if size == 0:
        import hashlib

        return hashlib.sha256(b"").digest()
    [head] = resolve(connection, [perfect_cover(0, size)])
    return head


def inclusion_proof(connection: Connection, index: int, size: int) -> list[bytes]:
    return resolve(connection, inclusion_plan(index, size))


def consistency_proof(connection: Connection, old: int, new: int) -> list[bytes]:
    if old == 0 or old == new:
        return []
    return resolve(connection, consistency_plan(old, new))


def frontier(size: int) -> Fold:
    """The perfect subtrees of the first ``size`` leaves: all a new leaf may complete."""
    return perfect_cover(0, size)


def extend(connection: Connection, size: int, hashes: Sequence[bytes]) -> None:
    """Store the nodes that leaves ``size, size + 1, …`` (their ``hashes``) add."""
    known = read_nodes(connection, frontier(size))
    new: dict[NodeId, bytes] = {}
    for offset, leaf in enumerate(hashes):
        index = size + offset
        new[(0, index)] = leaf
        level, i = 0, index
        while i & 1:  # a right child completes its parent
            left = new.get((level, i - 1)) or known[(level, i - 1)]
            new[(level + 1, i >> 1)] = node_hash(left, new[(level, i)])
            level, i = level + 1, i >> 1
    connection.execute(
        insert(log_nodes),
        [{"level": lv, "idx": i, "hash": h.hex()} for (lv, i), h in new.items()],
    )
