"""The read audit: who read which evidence, when. Auditors and admins are audited.

An audited read is every read, by an auditor or an admin, of anything derived from captured
evidence or its metadata that the server answered: a URI-M, a memento's metadata, a TimeGate,
a TimeMap, a transcript with its citations, a listing of transcripts, a citation's drift
history, drift rates. :data:`READ_ACTIONS` names each kind of read and what its ``target``
holds (an id, a URI-R, or the query of a listing; never captured text).

Rows are append-only (database triggers refuse UPDATE and DELETE). Writes are buffered and
flushed by a background thread in batches, so recording a read costs the request an append
to a list, not a transaction; :meth:`ReadAudit.close` flushes what is left, so a clean
shutdown loses nothing. (A crash can lose at most the last flush interval's rows.)
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select

from archive.dates import utc_now
from archive.index import Index
from archive.index.schema import read_audit

log = logging.getLogger(__name__)

FLUSH_INTERVAL_SECONDS = 0.5
FLUSH_AT_ROWS = 500

# action -> what the row's target names. A read recorded under any other action is refused,
# so a new kind of read has to say here what it records.
READ_ACTIONS: dict[str, str] = {
    "memento.content": "memento id",
    "memento.metadata": "memento id",
    "timegate.read": "URI-R",
    "timemap.link": "URI-R",
    "timemap.json": "URI-R",
    "transcript.read": "transcript id",
    "transcripts.list": "the listing's query (needs_review, after, limit)",
    "citation.drift": "citation id",
    "drift.sources": "the window (window_days=N)",
    "memento.proof": "memento id",
    "citation.proof": "citation id",
    "transcript.export": "transcript id",
    "memento.export": "memento id (one row per memento in an exported bundle)",
}


@dataclass(frozen=True)
class ReadRecord:
    id: str
    tenant: str
    key_id: str
    role: str
    action: str  # one of READ_ACTIONS
    target: str  # what was read, as READ_ACTIONS says for the action
    at: datetime


class ReadAudit:
    def __init__(self, index: Index, *, interval: float = FLUSH_INTERVAL_SECONDS) -> None:
        self.index = index
        self._pending: list[ReadRecord] = []
        self._lock = threading.Lock()
        # Held across a whole flush: a flush (say, query's) that finds nothing pending must
        # still wait for rows another thread took a moment ago and is committing.
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._interval = interval
        self._thread = threading.Thread(target=self._run, name="amber-read-audit", daemon=True)
        self._thread.start()

    def record(self, tenant: str, key_id: str, role: str, action: str, target: str) -> None:
        if action not in READ_ACTIONS:
            raise ValueError(f"unknown read audit action {action!r}")
        entry = ReadRecord(uuid.uuid4().hex, tenant, key_id, role, action, target, utc_now())
        with self._lock:
            self._pending.append(entry)
            full = len(self._pending) >= FLUSH_AT_ROWS
        if full:
            self._wake.set()

    def flush(self) -> int:
        with self._flushing:
            with self._lock:
                batch, self._pending = self._pending, []
            if not batch:
                return 0
            try:
                with self.index.write() as connection:
                    connection.execute(insert(read_audit), [vars(r) for r in batch])
            except Exception:
                # Put them back so the next flush retries; never drop audit rows silently.
                with self._lock:
                    self._pending[:0] = batch
                log.exception("read audit flush failed; %d rows kept for retry", len(batch))
                raise
            return len(batch)

    def query(
        self,
        tenant: str,
        *,
        since: datetime | None = None,
        limit: int = 100,
        key_id: str | None = None,
    ) -> list[ReadRecord]:
        self.flush()  # an admin asking sees everything recorded so far
        conditions = [read_audit.c.tenant == tenant]
        if since is not None:
            conditions.append(read_audit.c.at >= since)
        if key_id is not None:
            conditions.append(read_audit.c.key_id == key_id)
        query = (
            select(read_audit)
            .where(*conditions)
            .order_by(read_audit.c.at, read_audit.c.id)
            .limit(limit)
        )
        with self.index.read() as connection:
            return [
                ReadRecord(r.id, r.tenant, r.key_id, r.role, r.action, r.target, r.at)
                for r in connection.execute(query)
            ]

    def close(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()
        self.flush()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception:
                pass
