"""Sequencing: every memento, citation and tombstone gets its leaf in the transaction that
writes its row, so neither exists without the other.

Indexes come from one counter row (``log_counters.sequenced``), incremented in the same
transaction: a transaction that rolls back (or a process killed mid-way) takes its
increment with it, so the indexes stay dense, with no gaps, whatever happens. On PostgreSQL
the increment locks that row until commit, which orders concurrent writers' leaves; on
SQLite the one writer already holds the database's write lock.

Inside :meth:`Index.write` (and ``open_write``) the statements wait in the transaction and
are sequenced by :meth:`LeafSequencer.flush`, the last statement before the commit: on
PostgreSQL it goes out with the COMMIT (archive/index/roundtrips.py), so the counter's row
is locked while the server runs that one message, not for the whole transaction, and
concurrent writers overlap everything else (docs/design.md §12.2).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, or_, select, update

from archive.dates import utc_now
from archive.exceptions import ConfigurationError
from archive.index.roundtrips import defer_to_commit
from archive.index.schema import citations, log_leaves
from archive.log.statements import (
    CITATION,
    MEMENTO,
    Statement,
    memento_statement,
    sha256_hex,
    tombstone_statement,
)
from archive.mementos import Memento

_NEXT_SQLITE = "UPDATE log_counters SET value = value + ? WHERE name = 'sequenced' RETURNING value"
_INSERT = (
    "INSERT INTO log_leaves (idx, kind, subject, tenant, statement, leaf_hash, sequenced_at) "
    "VALUES ({0}, {0}, {0}, {0}, {0}, {0}, {0})"
)
_INSERT_SQLITE = _INSERT.format("?")
# PostgreSQL: the increment and the rows in one statement, one round trip under the lock.
_SEQUENCE_PG = (
    "WITH counter AS (UPDATE log_counters SET value = value + %(n)s "
    "WHERE name = 'sequenced' RETURNING value) "
    "INSERT INTO log_leaves (idx, kind, subject, tenant, statement, leaf_hash, sequenced_at) "
    "SELECT counter.value - %(n)s + leaf.o - 1, leaf.kind, leaf.subject, leaf.tenant, "
    "leaf.statement, leaf.leaf_hash, %(at)s FROM counter, "
    "unnest(%(kind)b::text[], %(subject)b::text[], %(tenant)b::text[], %(statement)b::text[], "
    "%(leaf_hash)b::text[]) WITH ORDINALITY AS leaf(kind, subject, tenant, statement, leaf_hash, o)"
)
# connection.info: the statements a write transaction waits to sequence at its commit.
PENDING = "amber.log_pending"


class LeafSequencer:
    """Appends leaves inside the caller's write transaction (never commits itself)."""

    def defer(self, connection: Connection) -> None:
        """From now on, :meth:`append` in this transaction waits for :meth:`flush`, which
        the caller promises to run just before committing (Index.write does)."""
        connection.info[PENDING] = []

    def flush(self, connection: Connection) -> None:
        """Sequence what this transaction appended: its last statement before the commit
        (on PostgreSQL sent with the COMMIT, roundtrips.defer_to_commit)."""
        pending: list[Statement] | None = connection.info.pop(PENDING, None)
        if not pending:
            return
        if connection.dialect.name != "sqlite":
            defer_to_commit(connection, _SEQUENCE_PG, _sequence_parameters(pending, _now()))
            return
        self.sequence(connection, pending)

    def append(self, connection: Connection, statements: Sequence[Statement]) -> None:
        """Sequence ``statements`` in order in this transaction: at its commit when it was
        :meth:`defer`-red, else now."""
        pending: list[Statement] | None = connection.info.get(PENDING)
        if pending is None:
            self.sequence(connection, statements)
        else:
            pending.extend(statements)

    def sequence(self, connection: Connection, statements: Sequence[Statement]) -> None:
        """Give ``statements`` the next indexes, in order, now."""
        if not statements:
            return
        # On the driver: this runs in every write transaction, and SQLAlchemy's statement
        # handling would cost more than the two statements themselves.
        now = _now()
        if connection.dialect.name != "sqlite":
            connection.exec_driver_sql(_SEQUENCE_PG, _sequence_parameters(statements, now))
            return
        end = int(connection.exec_driver_sql(_NEXT_SQLITE, (len(statements),)).scalar_one())
        first = end - len(statements)
        at = now.isoformat(" ", "microseconds")
        connection.exec_driver_sql(
            _INSERT_SQLITE,
            [
                (first + i, s.kind, s.subject, s.tenant, s.text, s.leaf_hash.hex(), at)
                for i, s in enumerate(statements)
            ],
        )

    def log_mementos(
        self, connection: Connection, created: Sequence[Memento], contents: Mapping[str, bytes]
    ) -> None:
        """Leaves for mementos inserted just now; ``contents``: their bytes by address."""
        statements = []
        for memento in created:
            data = contents.get(memento.content_hash)
            if data is None:
                raise ConfigurationError("a memento's bytes are needed to log its SHA-256")
            statements.append(memento_statement(memento, sha256_hex(data)))
        self.append(connection, statements)

    def log_tombstones(
        self, connection: Connection, memento_ids: Collection[str], deleted_at: datetime
    ) -> None:
        """Leaves for the mementos among ``memento_ids`` this transaction tombstoned (their
        ``deleted_at`` is ``deleted_at``): the deletion kind and its policy, as the index
        records them."""
        from archive.index.schema import mementos

        if not memento_ids:
            return
        rows = connection.execute(
            select(mementos.c.id, mementos.c.tenant, mementos.c.deletion_reason)
            .where(mementos.c.id.in_(sorted(memento_ids)), mementos.c.deleted_at == deleted_at)
            .order_by(mementos.c.id)
        ).all()
        self.append(
            connection,
            [
                tombstone_statement(r.id, r.tenant, deleted_at, *deletion_of(r.deletion_reason))
                for r in rows
            ],
        )

    def blank(self, connection: Connection, memento_ids: Collection[str]) -> int:
        """Erase the statements of these mementos' leaves and of the citations whose passage
        or document they are: bodies go, leaf hashes stay (the one change the table's
        triggers allow). Tombstone leaves stay: they hold dates and policy, never content."""
        if not memento_ids:
            return 0
        ids = sorted(memento_ids)
        cited = select(citations.c.id).where(
            or_(citations.c.passage_memento_id.in_(ids), citations.c.document_memento_id.in_(ids))
        )
        result = connection.execute(
            update(log_leaves)
            .where(
                log_leaves.c.statement.is_not(None),
                or_(
                    (log_leaves.c.kind == MEMENTO) & log_leaves.c.subject.in_(ids),
                    (log_leaves.c.kind == CITATION) & log_leaves.c.subject.in_(cited),
                ),
            )
            .values(statement=None)
        )
        return int(result.rowcount or 0)


def _now() -> datetime:
    return utc_now().replace(tzinfo=None)  # naive UTC, as UTCDateTime stores it


def _sequence_parameters(statements: Sequence[Statement], at: datetime) -> dict[str, Any]:
    """:data:`_SEQUENCE_PG`'s parameters for ``statements``, sequenced at ``at``."""
    return {
        "n": len(statements),
        "at": at,
        "kind": [s.kind for s in statements],
        "subject": [s.subject for s in statements],
        "tenant": [s.tenant for s in statements],
        "statement": [s.text for s in statements],
        "leaf_hash": [s.leaf_hash.hex() for s in statements],
    }


def deletion_of(reason_json: str | None) -> tuple[str, Any]:
    """(``expiry`` or ``erasure``, the recorded reason) of a tombstone's deletion_reason."""
    import json

    reason = json.loads(reason_json) if reason_json else None
    kind = "erasure" if isinstance(reason, dict) and reason.get("kind") == "erasure" else "expiry"
    return kind, reason


def statement_rows(connection: Connection, subject: str, kind: str) -> list[dict[str, Any]]:
    """The leaves of one subject and kind, oldest first."""
    rows = connection.execute(
        select(log_leaves)
        .where(log_leaves.c.subject == subject, log_leaves.c.kind == kind)
        .order_by(log_leaves.c.idx)
    ).all()
    return [dict(r._mapping) for r in rows]
