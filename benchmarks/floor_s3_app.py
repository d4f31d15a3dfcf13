"""The floor of a durable write on PostgreSQL + S3, for ``bench_production.py --floor``: the
work the design requires of one memento write there, and nothing else, as a plain ASGI app.

Each request's content goes up as one conditional-create PutObject with its SHA-256
checksum, signed and sent from the event loop by Amber's own lean client (the cheapest
Python S3 path measured here: archive/blobstore/loophttp.py); then its blob and memento
rows are inserted into an index with Amber's schema (made by Amber's migrations) by a
group commit: one thread, one transaction per batch of concurrent writes, one
``INSERT … SELECT FROM unnest(…)`` per table with binary arrays, straight on psycopg. It
answers a JSON like Amber's.

What it leaves out is everything that makes it an archive: no authentication, no
validation, no URI-R normalisation, no idempotency, no duplicate or conflict handling, no
retention lock against sweeps, no change generations for other replicas' caches, no
evidence log, no metrics, no error answers. No implementation of the design can be much
cheaper, so Amber's write rate over this one's says what Amber's own code costs.

    FLOOR_DATABASE_URL=postgresql://… FLOOR_S3_ENDPOINT=http://… FLOOR_S3_BUCKET=b \\
    AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… uvicorn floor_s3_app:app --app-dir benchmarks
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import blake3
import psycopg
from botocore.credentials import Credentials
from floor_app import asgi  # the sibling script (--app-dir benchmarks)

from archive.blobstore.s3_lean import LeanS3
from archive.index import Index

TENANT = "default"
PREFIX = os.environ.get("FLOOR_S3_PREFIX", "floor/")
_INSERT_BLOBS = (
    "INSERT INTO blobs (address, size, stored_at, state, lock_legal_hold)"
    " SELECT a, s, t, 'live', 0 FROM unnest(%b::text[], %b::bigint[], %b::timestamp[]) AS u(a, s, t)"
    " ON CONFLICT (address) DO NOTHING"
)
_INSERT_MEMENTOS = (
    "INSERT INTO mementos (id, tenant, uri_r, urir_key, captured_at, archived_at, content_hash,"
    " media_type, size, scope, tool, headers_json, expires_at)"
    " SELECT i, %b, u, u, t, t, h, m, s, p, o, '{}', e FROM unnest(%b::text[], %b::text[],"
    " %b::timestamp[], %b::text[], %b::text[], %b::bigint[], %b::text[], %b::text[],"
    " %b::timestamp[]) AS r(i, u, t, h, m, s, p, o, e) ON CONFLICT (id) DO NOTHING"
)


@dataclass
class Write:
    memento_id: str
    address: str
    size: int
    at: datetime
    uri_r: str
    media_type: str
    scope: str
    tool: str | None


class Floor:
    def __init__(self) -> None:
        url = os.environ["FLOOR_DATABASE_URL"]
        Index(url).close()  # Amber's schema, by Amber's migrations
        self.db = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
        with self.db.transaction():
            self.db.execute(
                "INSERT INTO tenants (id, created_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (TENANT, datetime.now(UTC).replace(tzinfo=None)),
            )
        self.s3 = LeanS3(
            os.environ["FLOOR_S3_ENDPOINT"],
            "us-east-1",
            os.environ["FLOOR_S3_BUCKET"],
            Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]),
            pool_size=64,
            connect_timeout=5.0,
            read_timeout=30.0,
        )
        self.queue: queue.SimpleQueue[tuple[Write, Future[None]]] = queue.SimpleQueue()
        threading.Thread(target=self._commits, daemon=True).start()

    def _commits(self) -> None:
        while True:
            batch = [self.queue.get()]
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._commit([write for write, _ in batch])
            except Exception as error:  # every writer of the batch hears it
                for _, done in batch:
                    done.set_exception(error)
            else:
                for _, done in batch:
                    done.set_result(None)

    def _commit(self, batch: list[Write]) -> None:
        expires = [w.at + timedelta(days=14) for w in batch]
        with self.db.transaction():
            self.db.execute(
                _INSERT_BLOBS,
                (
                    [f"blake3:{w.address}" for w in batch],
                    [w.size for w in batch],
                    [w.at for w in batch],
                ),
            )
            self.db.execute(
                _INSERT_MEMENTOS,
                (
                    TENANT,
                    [w.memento_id for w in batch],
                    [w.uri_r for w in batch],
                    [w.at for w in batch],
                    [f"blake3:{w.address}" for w in batch],
                    [w.media_type for w in batch],
                    [w.size for w in batch],
                    [w.scope for w in batch],
                    [w.tool for w in batch],
                    expires,
                ),
            )

    async def write(self, body: dict[str, Any]) -> dict[str, str]:
        content = body["content"].encode("utf-8")
        address = blake3.blake3(content).hexdigest()
        at = datetime.now(UTC).replace(microsecond=0, tzinfo=None)
        uri_r = body["uri_r"]
        memento_id = blake3.blake3(f"{TENANT}\n{uri_r}\n{at}\n{address}".encode()).hexdigest()
        key = f"{PREFIX}blobs/{address[:2]}/{address[2:4]}/{address}"
        await self.s3.put_object_async(key, content, hashlib.sha256(content).digest(), {})
        done: Future[None] = Future()
        write = Write(
            memento_id,
            address,
            len(content),
            at,
            uri_r,
            body["content_type"],
            body.get("scope", "document"),
            body.get("tool"),
        )
        self.queue.put((write, done))
        await asyncio.wrap_future(done)
        stamp = at.replace(tzinfo=UTC).isoformat()
        return {
            "id": memento_id,
            "uri_r": uri_r,
            "uri_m": f"/memento/{memento_id}",
            "memento_datetime": stamp,
            "content_hash": f"blake3:{address}",
            "timegate": f"/timegate/{uri_r}",
            "timemap": f"/timemap/link/{uri_r}",
        }


app = asgi(Floor)
