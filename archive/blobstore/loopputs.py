"""A write's bytes put to S3 from the event loop that received them.

The common case of a memento write on S3 is one conditional-create PutObject that S3
answers 200. That case runs here, on the caller's loop (:mod:`archive.blobstore.loophttp`
says why). Everything else — a 412 because the bytes are stored already, a 409 from a
concurrent create, a 5xx, a refusal, a timeout, a dropped connection — is handed, as it
is, to the store's complete synchronous ``put`` in a worker thread: its retry loop,
its HEAD check of an existing object and its lock extension are the only ones, and the
fault-injection suite holds them. A PUT that stored the bytes but lost its answer is
therefore met there by a 412 and confirmed, exactly as a retry of its own would be.

Identical bytes put concurrently from one loop go up once (S3 servers answer concurrent
conditional creates of one key with 409, and the loser would wait out a backoff).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import weakref
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

import anyio

from archive.blobstore.base import StoredBlob
from archive.blobstore.s3_client import describe
from archive.blobstore.s3_lean import LeanS3
from archive.exceptions import AmberError
from archive.hashing import content_address

log = logging.getLogger(__name__)

# What a put needs of the store: its key for an address, the extra PutObject headers for a
# lock date (Object Lock, server-side encryption), the lock date S3 would be asked for,
# and the complete synchronous put.
KeyFor = Callable[[str], str]
PutHeaders = Callable[[datetime | None], Mapping[str, str]]
InitialLock = Callable[[datetime | None], datetime | None]
CompletePut = Callable[..., StoredBlob]


class _LeaderGone(Exception):
    """The put others were waiting for was cancelled before it ended."""


class LoopPuts:
    """PutObject on the caller's event loop, with the complete path behind it."""

    def __init__(
        self,
        lean: LeanS3,
        key_for: KeyFor,
        put_headers: PutHeaders,
        initial_lock: InitialLock,
        complete_put: CompletePut,
    ) -> None:
        self._lean = lean
        self._key_for = key_for
        self._put_headers = put_headers
        self._initial_lock = initial_lock
        self._complete_put = complete_put
        # Puts in flight, per loop, by (address, lock date).
        self._running: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, datetime | None], asyncio.Future[StoredBlob]]
        ] = weakref.WeakKeyDictionary()
        self.on_loop = 0  # puts answered on the loop (for tests and benchmarks)
        self.handed_over = 0  # puts the complete path finished

    async def put(self, data: bytes, retain_until: datetime | None) -> StoredBlob:
        """``data`` stored durably; like the store's ``put``, from an event loop."""
        address = content_address(data)
        lock = self._initial_lock(retain_until)
        running = self._running.setdefault(asyncio.get_running_loop(), {})
        first = running.get((address, lock))
        if first is not None:
            try:
                return replace(await asyncio.shield(first), created=False)
            except Exception:  # the first one's failure is its own: try for ourselves
                return await self._complete(data, retain_until)
        mine: asyncio.Future[StoredBlob] = asyncio.get_running_loop().create_future()
        running[(address, lock)] = mine
        try:
            stored = await self._put(address, data, lock, retain_until)
        except BaseException as error:
            # A cancelled leader's cancellation is its own: those waiting put for themselves.
            mine.set_exception(error if isinstance(error, Exception) else _LeaderGone())
            mine.exception()  # retrieved: nobody may be waiting for it
            raise
        else:
            mine.set_result(stored)
            return stored
        finally:
            del running[(address, lock)]

    async def _put(
        self, address: str, data: bytes, lock: datetime | None, retain_until: datetime | None
    ) -> StoredBlob:
        digest = hashlib.sha256(data).digest()
        try:
            version_id = await self._lean.put_object_async(
                self._key_for(address), data, digest, self._put_headers(lock)
            )
        except AmberError:
            raise
        except Exception as error:
            # Never the bytes: describe() names the error, not what was sent.
            log.debug(
                "S3 PUT of %s on the loop: %s; the complete path takes it", address, describe(error)
            )
            return await self._complete(data, retain_until)
        self.on_loop += 1
        return StoredBlob(
            address=address,
            size=len(data),
            version_id=version_id,
            created=True,
            retain_until=lock,
        )

    async def _complete(self, data: bytes, retain_until: datetime | None) -> StoredBlob:
        stored = await anyio.to_thread.run_sync(
            functools.partial(self._complete_put, data, retain_until=retain_until)
        )
        self.handed_over += 1
        return stored
