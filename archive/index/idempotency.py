"""Idempotency keys: the first answer to each ``(tenant, Idempotency-Key)``, recorded in the
transaction that writes what it describes.

A write claims its key *before* it inserts anything: the claim is the answer it will give,
inserted with ``ON CONFLICT DO NOTHING``. Whoever inserts it first owns the key; any other
request with that key (concurrent or later, in this process or another replica) meets the
recorded answer instead and writes nothing: it is a replay of that answer (same request
body) or refused (another body). On SQLite the write lock makes the claim exact; on
PostgreSQL a claim that meets another transaction's uncommitted one waits for that
transaction to end, then sees its answer, or (rolled back) inserts its own.

An answer is replayed for ``ttl`` (``AMBER_IDEMPOTENCY_TTL_HOURS``) after it was recorded,
as payment APIs do: after that the key is free again, and the next write with it takes the
row over with a conditional ``UPDATE`` (on PostgreSQL two takers of one expired key are
serialised by the row lock, and the loser sees the winner's fresh answer). ``forget``
removes expired answers for good (``amber gc``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, func, select, update

from archive.exceptions import StorageError
from archive.index.inserts import RowInserter
from archive.index.rows import StoredResponse, stored_response_from
from archive.index.schema import idempotency_keys


class IdempotencyKeys:
    """Claims, settles and releases first answers, inside a write transaction."""

    def __init__(self, inserts: RowInserter, dialect: str, ttl: timedelta) -> None:
        self._inserts = inserts
        self._dialect = dialect
        self.ttl = ttl

    def claim(
        self,
        connection: Connection,
        claims: Sequence[tuple[str, str, StoredResponse]],
        now: datetime,
    ) -> list[StoredResponse | None]:
        """Record each ``(tenant, key, answer)`` as the key's first answer. For each claim,
        None when it now owns the key; else the answer recorded first: by another
        transaction, or by an earlier claim of the same key in ``claims``."""
        first: dict[tuple[str, str], StoredResponse] = {}
        for tenant, key, answer in claims:
            first.setdefault((tenant, key), answer)
        recorded: dict[tuple[str, str], StoredResponse] = {}
        # Sorted: concurrent PostgreSQL transactions wait for each other's claims in one order.
        for tenant in sorted({tenant for tenant, _ in first}):
            keys = sorted(key for owner, key in first if owner == tenant)
            found = self._claim_keys(
                connection, tenant, {key: first[(tenant, key)] for key in keys}, now
            )
            recorded.update(((tenant, key), answer) for key, answer in found.items())
        answers: list[StoredResponse | None] = []
        owned: set[tuple[str, str]] = set()
        for tenant, key, _ in claims:
            pair = (tenant, key)
            if pair in recorded:
                answers.append(recorded[pair])
            elif pair in owned:
                answers.append(first[pair])  # claimed by an earlier write of this batch
            else:
                owned.add(pair)
                answers.append(None)
        return answers

    def _claim_keys(
        self,
        connection: Connection,
        tenant: str,
        answers: dict[str, StoredResponse],
        now: datetime,
    ) -> dict[str, StoredResponse]:
        """Insert the answers whose key is free; the answers recorded before, by key."""
        if self._dialect == "sqlite":
            # Under SQLite's write lock nobody else claims meanwhile: read, then insert.
            recorded, _ = self._recorded(connection, tenant, list(answers), now, answers)
            self._insert(connection, tenant, answers, now, skip=recorded)
            return recorded
        inserted = self._insert(connection, tenant, answers, now, skip={})
        taken = [key for key in answers if key not in inserted]
        recorded, taken_over = self._recorded(connection, tenant, taken, now, answers)
        if len(recorded) + taken_over != len(taken):
            # The claim that blocked ours was released as its transaction committed: rare;
            # the batch is retried (write by write), and then the key is free.
            raise StorageError("an idempotency key changed hands meanwhile; retry the write")
        return recorded

    def _insert(
        self,
        connection: Connection,
        tenant: str,
        answers: dict[str, StoredResponse],
        now: datetime,
        *,
        skip: dict[str, StoredResponse],
    ) -> set[str]:
        rows = [
            {
                "tenant": tenant,
                "key": key,
                "request_hash": answer.request_hash,
                "status_code": answer.status_code,
                "response_json": json.dumps(answer.body, separators=(",", ":")),
                "created_at": now,
            }
            for key, answer in answers.items()
            if key not in skip
        ]
        # One tenant per statement, so the keys returned name the rows unambiguously.
        returning = None if self._dialect == "sqlite" else idempotency_keys.c.key
        return self._inserts.insert_ignoring(
            connection, idempotency_keys, rows, conflict=["tenant", "key"], returning=returning
        )

    def _recorded(
        self,
        connection: Connection,
        tenant: str,
        keys: list[str],
        now: datetime,
        answers: dict[str, StoredResponse],
    ) -> tuple[dict[str, StoredResponse], int]:
        """The live answers recorded for ``keys``, and how many expired ones were taken over
        for our answer in ``answers`` (those keys are ours, and not in the result)."""
        if not keys:
            return {}, 0
        rows = connection.execute(
            select(idempotency_keys).where(
                idempotency_keys.c.tenant == tenant, idempotency_keys.c.key.in_(keys)
            )
        )
        cutoff = now - self.ttl
        recorded: dict[str, StoredResponse] = {}
        taken_over = 0
        for row in rows:
            if row.created_at < cutoff:
                self._take_over(connection, tenant, row.key, answers[row.key], now, cutoff)
                taken_over += 1
            else:
                recorded[row.key] = stored_response_from(row)
        return recorded, taken_over

    def _take_over(
        self,
        connection: Connection,
        tenant: str,
        key: str,
        answer: StoredResponse,
        now: datetime,
        cutoff: datetime,
    ) -> None:
        """Replace an expired answer with ours. If another claim took it over first (its
        transaction held the row until it committed), the write is retried and then meets
        that fresh answer."""
        taken = connection.execute(
            update(idempotency_keys)
            .where(
                idempotency_keys.c.tenant == tenant,
                idempotency_keys.c.key == key,
                idempotency_keys.c.created_at < cutoff,
            )
            .values(
                request_hash=answer.request_hash,
                status_code=answer.status_code,
                response_json=json.dumps(answer.body, separators=(",", ":")),
                created_at=now,
            )
        )
        if taken.rowcount != 1:
            raise StorageError("an idempotency key changed hands meanwhile; retry the write")

    def forget(self, connection: Connection, now: datetime, *, dry_run: bool = False) -> int:
        """Delete every answer older than the TTL; how many went (or would go)."""
        expired = idempotency_keys.c.created_at < now - self.ttl
        if dry_run:
            counted = connection.execute(
                select(func.count()).select_from(idempotency_keys).where(expired)
            )
            return int(counted.scalar_one())
        return int(connection.execute(delete(idempotency_keys).where(expired)).rowcount)

    def settle(self, connection: Connection, tenant: str, key: str, status_code: int) -> None:
        """Change the status of an answer this transaction claimed (say, 200: the memento
        was there already)."""
        connection.execute(
            update(idempotency_keys)
            .where(idempotency_keys.c.tenant == tenant, idempotency_keys.c.key == key)
            .values(status_code=status_code)
        )

    def release(self, connection: Connection, tenant: str, key: str) -> None:
        """Give up a claim this transaction made: the write was refused, and a refusal is
        not an answer to replay (a retry is checked again)."""
        connection.execute(
            delete(idempotency_keys).where(
                idempotency_keys.c.tenant == tenant, idempotency_keys.c.key == key
            )
        )
