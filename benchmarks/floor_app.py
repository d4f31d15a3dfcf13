"""The floor of a durable write, for ``bench_floor.py``: the durable work the design
requires of one memento write, and nothing else, as a plain ASGI app.

It stores each request's content the way the design specifies for the embedded default (a
temp file per blob in a one-level shard, then, for a whole batch at once: a sync of the
bytes, the renames, a sync of the names), then inserts the blob and memento rows into an
index with Amber's own schema (made by Amber's migrations: same tables, indexes, triggers
and foreign keys) in one SQLite transaction per batch, WAL, ``synchronous=FULL``. Concurrent
requests share a group commit in one disk thread. It answers a JSON like Amber's.

What it leaves out is everything that makes it an archive: no authentication, no
validation of the URI-R, datetime, media type or tool, no URI-R normalisation, no
idempotency, no duplicate or conflict handling, no error answers, no metrics. So no
implementation of the specified design can be cheaper than this one by much; it is a
floor for Amber's write, not a competitor.

``FLOOR_BLOBS=packed`` measures the alternative design instead: every batch's blobs
appended to one pack file and made durable by one ``fdatasync``, no file per blob.

    FLOOR_DATA_DIR=/tmp/floor uvicorn floor_app:app --app-dir benchmarks --port 8002
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import blake3

from archive.blobstore.local import _sync_filesystem
from archive.index import Index

DATA_DIR = Path(os.environ.get("FLOOR_DATA_DIR", "floor-data"))
PACKED = os.environ.get("FLOOR_BLOBS", "files") == "packed"
TENANT = "default"

_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (address, size, stored_at) VALUES (?, ?, ?)"
_INSERT_MEMENTO = (
    "INSERT INTO mementos (id, tenant, uri_r, urir_key, captured_at, archived_at, content_hash,"
    " media_type, size, scope, tool, headers_json, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '{}', ?)"
)


@dataclass
class Write:
    memento_id: str
    address: str
    temp: str
    final: str
    size: int
    at: str
    uri_r: str
    media_type: str
    scope: str
    tool: str | None
    done: asyncio.Future[None]


class Floor:
    def __init__(self, data_dir: Path, *, packed: bool = False) -> None:
        self.packed = packed
        data_dir.mkdir(parents=True, exist_ok=True)
        database = data_dir / "index.sqlite3"
        Index(f"sqlite:///{database}", durable=True).close()  # Amber's schema, migrated
        self.db = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        for pragma in (
            "journal_mode=WAL",
            "busy_timeout=30000",
            "foreign_keys=ON",
            "synchronous=FULL",
        ):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.execute(
            "INSERT OR IGNORE INTO tenants (id, created_at) VALUES (?, ?)", (TENANT, _now())
        )
        self.blobs = data_dir / "blobs"
        for shard in range(256):
            (self.blobs / f"{shard:02x}").mkdir(parents=True, exist_ok=True)
        # The local store's own syncfs (Linux); the floor measures no other platform.
        if not packed and not _sync_filesystem(str(self.blobs)):
            raise RuntimeError("the files floor needs syncfs(2) (Linux)")
        self.pack = open(data_dir / "pack", "ab") if packed else None  # closed by close()
        self.disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="floor-disk")
        self.queue: list[Write] = []
        self.wakeup: asyncio.Future[None] | None = None
        self.committer: asyncio.Task[None] | None = None

    def close(self) -> None:
        if self.committer is not None:
            self.committer.cancel()
        self.disk.shutdown(wait=True)
        self.db.close()
        if self.pack is not None:
            self.pack.close()

    def stage(self, content: bytes, address: str) -> tuple[str, str]:
        final = f"{self.blobs}/{address[:2]}/{address}"
        if self.pack is not None:
            self.pack.write(content)
            return final, final
        temp = f"{final}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        return temp, final

    def commit(self, batch: list[Write]) -> None:
        """In the disk thread: the blobs durable, then the rows, in one transaction."""
        if self.pack is not None:
            self.pack.flush()
            os.fdatasync(self.pack.fileno())
        else:
            _sync_filesystem(str(self.blobs))
            for write in batch:
                os.rename(write.temp, write.final)
            _sync_filesystem(str(self.blobs))
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(_INSERT_BLOB, [(w.address, w.size, w.at) for w in batch])
            self.db.executemany(
                _INSERT_MEMENTO,
                [
                    (
                        w.memento_id,
                        TENANT,
                        w.uri_r,
                        w.uri_r,
                        w.at,
                        w.at,
                        w.address,
                        w.media_type,
                        w.size,
                        w.scope,
                        w.tool,
                        w.at,
                    )
                    for w in batch
                ],
            )
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    async def run_commits(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.queue:
                self.wakeup = loop.create_future()
                await self.wakeup
            batch, self.queue = self.queue, []
            try:
                await loop.run_in_executor(self.disk, self.commit, batch)
            except Exception as error:  # every writer of the batch hears it
                for write in batch:
                    write.done.set_exception(error)
            else:
                for write in batch:
                    write.done.set_result(None)

    async def write(self, body: dict[str, Any]) -> dict[str, str]:
        content = body["content"].encode("utf-8")
        address = blake3.blake3(content).hexdigest()
        at = _now()
        uri_r = body["uri_r"]
        memento_id = blake3.blake3(f"{TENANT}\n{uri_r}\n{at}\n{address}".encode()).hexdigest()
        temp, final = self.stage(content, address)
        loop = asyncio.get_running_loop()
        if self.committer is None:
            self.committer = loop.create_task(self.run_commits())
        done: asyncio.Future[None] = loop.create_future()
        self.queue.append(
            Write(
                memento_id,
                address,
                temp,
                final,
                len(content),
                at,
                uri_r,
                body["content_type"],
                body.get("scope", "document"),
                body.get("tool"),
                done,
            )
        )
        if self.wakeup is not None and not self.wakeup.done():
            self.wakeup.set_result(None)
        await done
        return {
            "id": memento_id,
            "uri_r": uri_r,
            "uri_m": f"/memento/{memento_id}",
            "memento_datetime": at,
            "content_hash": f"blake3:{address}",
            "timegate": f"/timegate/{uri_r}",
            "timemap": f"/timemap/link/{uri_r}",
        }


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def asgi(make_floor: Callable[[], Any]) -> Callable[..., Awaitable[None]]:
    """A plain ASGI app around a floor (``write(body)``, optional ``close()``): lifespan,
    ``/healthz``, and every other request a write. floor_s3_app.py serves its floor so too."""
    floor: Any = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal floor
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    floor = make_floor()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if floor is not None and hasattr(floor, "close"):
                        floor.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["path"] == "/healthz":
            await _answer(send, 200, {"status": "ok"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        assert floor is not None
        await _answer(send, 201, await floor.write(json.loads(b"".join(chunks))))

    return app


app = asgi(lambda: Floor(DATA_DIR, packed=PACKED))


async def _answer(send: Any, status: int, document: dict[str, str]) -> None:
    body = json.dumps(document).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
