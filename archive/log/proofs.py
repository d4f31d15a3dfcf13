"""Proof documents (docs/design.md §12.5): a leaf, its inclusion proof against the first
timestamped checkpoint holding it (or the latest), that checkpoint's timestamp, and a
consistency proof to the latest checkpoint.

One request reads the leaf and both checkpoints in one statement, then every node of both
proofs in one more (driver SQL: SQLAlchemy's statement building cost more than the reads).
A consistency proof between two sizes never changes (the tree is append-only), and every
proof of a leaf covered by the same two checkpoints shares it: it is remembered by sizes.
"""

from __future__ import annotations

import base64
import threading
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection

from archive.dates import to_rfc3339
from archive.exceptions import NotFound, NotYetCheckpointed
from archive.log import tree
from archive.log.proofcheck import format_tlog_proof

# The leaf (a subject's first), then one row per checkpoint chosen: the first timestamped
# one holding the leaf and the latest (one row when they are the same). No checkpoint
# holds the leaf yet: one row with a NULL size.
_DOCUMENT = (
    "WITH leaf AS (SELECT idx, statement, leaf_hash, sequenced_at FROM log_leaves "
    "WHERE subject = {0} AND kind = {0} AND tenant = {0} ORDER BY idx LIMIT 1) "
    "SELECT leaf.idx, leaf.statement, leaf.leaf_hash, leaf.sequenced_at, "
    "c.size, c.note, c.tsa_response FROM leaf LEFT JOIN log_checkpoints c "
    "ON c.size > leaf.idx AND c.size IN ("
    "(SELECT min(size) FROM log_checkpoints "
    "WHERE size > leaf.idx AND tsa_response IS NOT NULL), "
    "(SELECT max(size) FROM log_checkpoints))"
)
CONSISTENCY_CACHE = 64  # (old, new) pairs remembered per process


@lru_cache(maxsize=2)
def _document_sql(dialect: str) -> str:
    return _DOCUMENT.format("?" if dialect == "sqlite" else "%s")


class ProofDocuments:
    def __init__(self) -> None:
        self._consistency: dict[tuple[int, int], list[bytes]] = {}
        self._lock = threading.Lock()

    def build(self, connection: Connection, kind: str, subject: str, tenant: str) -> dict[str, Any]:
        """The proof document of a memento's or citation's first leaf."""
        rows = connection.exec_driver_sql(
            _document_sql(connection.dialect.name), (subject, kind, tenant)
        ).all()
        if not rows:
            raise NotFound(f"this {kind} has no leaf in the evidence log")
        idx, statement, leaf_hash, sequenced_at = rows[0][:4]
        checkpoints = sorted((r[4], r[5], r[6]) for r in rows if r[4] is not None)
        if not checkpoints:
            raise NotYetCheckpointed("this leaf is not in a signed checkpoint yet; retry")
        (chosen, note, stamp), (newest, newest_note, _) = checkpoints[0], checkpoints[-1]
        inclusion = tree.inclusion_plan(idx, chosen)
        consistency = self._consistency.get((chosen, newest))
        plan = inclusion if consistency is not None else inclusion + self._plan(chosen, newest)
        hashes = tree.resolve(connection, plan)
        if consistency is None:
            consistency = hashes[len(inclusion) :]
            self._remember(chosen, newest, consistency)
        return {
            "index": idx,
            "statement": statement,
            "leaf_hash": base64.b64encode(bytes.fromhex(leaf_hash)).decode(),
            "sequenced_at": to_rfc3339(as_utc(sequenced_at)),
            "proof": format_tlog_proof(idx, hashes[: len(inclusion)], note),
            "timestamp": stamp,  # stored as base64 already
            "consistency": {
                "old_size": chosen,
                "new_size": newest,
                "proof": [base64.b64encode(h).decode() for h in consistency],
                "checkpoint": newest_note,
            },
        }

    @staticmethod
    def _plan(old: int, new: int) -> list[tree.Fold]:
        return tree.consistency_plan(old, new) if old != new else []

    def _remember(self, old: int, new: int, proof: list[bytes]) -> None:
        with self._lock:
            if len(self._consistency) >= CONSISTENCY_CACHE:
                self._consistency.pop(next(iter(self._consistency)))  # the oldest
            self._consistency[(old, new)] = proof


def as_utc(value: datetime | str) -> datetime:
    """A TIMESTAMP column as the driver returns it (SQLite: text) as an aware datetime."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC)
