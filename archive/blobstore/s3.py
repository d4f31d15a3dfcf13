"""S3 backend: any S3-compatible endpoint (AWS, SeaweedFS, MinIO, Ceph RGW) via boto3.

Layout: ``<prefix>/blobs/<2 hex>/<2 hex>/<64 hex>`` (no leading slash when the prefix is
empty), mirroring the local store.

Why it is built this way:

- A PUT is a conditional create (``If-None-Match: *``), so bytes under an address are never
  overwritten; ``412 Precondition Failed`` means "already stored", confirmed by a HEAD.
- Every PUT carries ``x-amz-checksum-sha256`` computed from the very bytes we hashed, so the
  server rejects anything damaged in transit (``BadDigest``) instead of storing it.
- S3 PUTs are atomic: an object is either absent or complete. So a PUT that stored the
  object but whose answer was lost (a 500, a timeout) is simply retried; the retry gets a
  412 and the HEAD confirms size and checksum. There is no half state to clean up.
- Retries live in exactly one place, :meth:`S3BlobStore._retry` (botocore's own are turned
  off), bounded, with exponential backoff and jitter. A GET whose body broke mid-read is
  re-issued from scratch; short bytes are never returned.
- S3 Object Lock (``lock_mode`` GOVERNANCE or COMPLIANCE, bucket created with Object Lock):
  a put may lock the new version until a date; :meth:`S3BlobStore.set_retention` only ever
  extends it (HEAD first, and a refused shortening is never retried with a bypass);
  the legal-hold flag mirrors Amber's holds. The store then refuses an early delete with
  403 AccessDenied, which :meth:`S3BlobStore.delete` raises as ``RetentionLocked``: "not
  yet", the sweep retries later. Lock state is read with HeadObject (moto's
  GetObjectRetention is unreliable). Dates are whole seconds, always rounded up.
- On a versioned bucket (every Object Lock bucket is one) deletes need the recorded
  VersionId: a versionless DeleteObject only adds a delete marker, hiding the evidence
  instead of deleting it, so :meth:`S3BlobStore.delete` refuses it with ``ValueError``.
- PutObject, GetObject and HeadObject go through :class:`~archive.blobstore.s3_lean.LeanS3`
  when given (``AMBER_S3_CLIENT=lean``), else through boto3; everything else is boto3's.

Over 500 lines: one class whose single attempts and retry loop belong together.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar, cast

import anyio
import boto3
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)

from archive.blobstore.base import BlobStoreCapabilities, StagedBlob, StoredBlob
from archive.blobstore.inflight import InFlight
from archive.blobstore.loopputs import LoopPuts
from archive.blobstore.objectlock import S3ObjectLock, lock_state
from archive.blobstore.s3_client import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_POOL_CONNECTIONS,
    DEFAULT_READ_TIMEOUT,
    NOT_FOUND_CODES,
    PRECONDITION_CODES,
    ObjectVanished,
    client_config,
    describe,
    encryption_params,
    error_code,
    is_lock_refusal,
    is_transient,
)
from archive.blobstore.s3_lean import LeanS3, encryption_headers, lock_headers
from archive.config import OBJECT_LOCK_MODES, Settings
from archive.exceptions import (
    AmberError,
    BlobNotFound,
    IntegrityError,
    StorageError,
)
from archive.hashing import ALGORITHM, content_address, parse_address, verify

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ATTEMPTS = 5
DEFAULT_BACKOFF_BASE = 0.2  # seconds before the first retry (before jitter)
DEFAULT_BACKOFF_MAX = 5.0
PARALLEL_PUTS = 8  # concurrent uploads of one stage_many

_BLOBS = "blobs"
_RELATIVE_KEY = re.compile(r"([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})")


class S3BlobStore(S3ObjectLock):
    """Immutable, content-addressed blobs in one bucket under one key prefix."""

    # Every get and delete is a network round trip; each put is made durable by itself.
    capabilities = BlobStoreCapabilities(
        reads_in_process=False, shared_sync=False, local_deletes=False, loop_puts=False
    )

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff_base: float = DEFAULT_BACKOFF_BASE,
        backoff_max: float = DEFAULT_BACKOFF_MAX,
        sleep: Callable[[float], None] = time.sleep,
        owns_client: bool = False,
        encryption: dict[str, str] | None = None,
        lock_mode: str | None = None,
        lean: LeanS3 | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        if lock_mode is not None and lock_mode not in OBJECT_LOCK_MODES:
            raise ValueError(f"lock_mode must be one of {', '.join(OBJECT_LOCK_MODES)} or None")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.attempts = attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._owns_client = owns_client
        # Several blobs of one request go up concurrently (each put is its own round trip).
        self._uploads = ThreadPoolExecutor(
            max_workers=PARALLEL_PUTS, thread_name_prefix="amber-s3-put"
        )
        # Extra PutObject parameters for server-side encryption (SSE-S3 or SSE-KMS).
        self.encryption = dict(encryption or {})
        self._blobs_prefix = f"{self.prefix}/{_BLOBS}/" if self.prefix else f"{_BLOBS}/"
        self._lock_mode = lock_mode
        # Object Lock buckets are always versioned; otherwise asked once (GetBucketVersioning).
        self._versioned: bool | None = True if lock_mode else None
        # Puts in progress by address, with their lock date (see put).
        self._putting: InFlight[str, StoredBlob] = InFlight()
        # PutObject, GetObject and HeadObject without botocore (s3_lean.py says why);
        # None: every call goes through ``client``.
        self.lean = lean
        self._lean_put_headers = encryption_headers(self.encryption)
        # With the lean client, a write's PutObject goes from the event loop (loopputs.py).
        self.loop_puts: LoopPuts | None = None
        if lean is not None:
            self.loop_puts = LoopPuts(
                lean, self.key_for, self._lean_headers, self._initial_lock, self.put
            )
            self.capabilities = replace(self.capabilities, loop_puts=True)

    @classmethod
    def from_settings(
        cls, *, bucket: str, prefix: str, settings: Settings, **options: Any
    ) -> S3BlobStore:
        """Build a client for ``settings``; credentials come from the standard AWS chain.
        ``AMBER_S3_CLIENT=lean`` (the default) puts, gets and heads through :class:`LeanS3`
        with the same credentials; ``botocore`` sends everything through boto3."""
        session = boto3.session.Session()
        client = session.client(
            "s3",
            endpoint_url=settings.s3_endpoint_url,
            region_name=settings.s3_region,
            config=client_config(),
        )
        lean = None
        if settings.s3_client == "lean":
            lean = LeanS3(
                settings.s3_endpoint_url,
                settings.s3_region,
                bucket,
                session.get_credentials(),
                pool_size=DEFAULT_MAX_POOL_CONNECTIONS,
                connect_timeout=DEFAULT_CONNECT_TIMEOUT,
                read_timeout=DEFAULT_READ_TIMEOUT,
            )
        return cls(
            client,
            bucket,
            prefix,
            owns_client=True,
            lean=lean,
            encryption=encryption_params(settings.s3_sse, settings.s3_sse_kms_key_id),
            **{"lock_mode": settings.s3_object_lock_mode, **options},
        )

    # -- the BlobStore interface -------------------------------------------------------

    def key_for(self, address: str) -> str:
        digest = parse_address(address)
        return f"{self._blobs_prefix}{digest[:2]}/{digest[2:4]}/{digest}"

    def put(self, data: bytes, *, retain_until: datetime | None = None) -> StoredBlob:
        """Store ``data`` (conditional create); with ``retain_until`` and a lock mode, lock it.

        The new version gets ``ObjectLockMode`` / ``ObjectLockRetainUntilDate`` (rounded up
        to the second) in the PutObject itself, so it is never stored unlocked. When the
        bytes were already stored, their version's retention is extended if shorter.
        A date not in the future locks nothing (S3 would refuse the write).
        """
        address = content_address(data)
        key = self.key_for(address)
        digest = hashlib.sha256(data).digest()
        lock = self._initial_lock(retain_until)

        def put_retrying() -> StoredBlob:
            return self._retry(
                "PUT", address, lambda: self._put_once(key, address, data, digest, lock)
            )

        # Identical bytes put concurrently by this process go up once: S3 servers answer
        # concurrent conditional creates of one key with 409 ConditionalRequestConflict
        # (SeaweedFS does), and each loser then waited out a backoff (~1 s in all).
        return self._putting.run(
            address, lock, put_retrying, lambda stored: replace(stored, created=False)
        )

    def stage_many(
        self, blobs: Sequence[bytes], *, retain_until: datetime | None = None
    ) -> list[StagedBlob]:
        """``stage`` (a durable put) of each blob, concurrently; in order. The first failure
        is raised once every upload has finished (blobs already stored stay: they are
        addressed, not owned)."""
        if len(blobs) <= 1:
            return [self.stage(data, retain_until=retain_until) for data in blobs]
        return list(
            self._uploads.map(functools.partial(self.stage, retain_until=retain_until), blobs)
        )

    def stage(self, data: bytes, *, retain_until: datetime | None = None) -> StagedBlob:
        """A put: each object is durable on its own once S3 answers."""
        return StagedBlob(self.put(data, retain_until=retain_until))

    async def stage_async(self, data: bytes, *, retain_until: datetime | None = None) -> StagedBlob:
        """:meth:`stage` from an event loop: the PutObject goes from the loop itself when
        the lean client is on (``capabilities.loop_puts``), else from a worker thread."""
        if self.loop_puts is None:
            return await anyio.to_thread.run_sync(
                functools.partial(self.stage, data, retain_until=retain_until)
            )
        return StagedBlob(await self.loop_puts.put(data, retain_until))

    def publish(self, staged: Sequence[StagedBlob]) -> None:
        return None  # staged blobs were stored by stage()

    def discard(self, staged: Sequence[StagedBlob]) -> None:
        # Stored by stage(): bytes no row points at are `amber gc`'s to collect (orphans),
        # as after any write that failed past its upload.
        return None

    def get(self, address: str, version_id: str | None = None) -> bytes:
        key = self.key_for(address)
        data = self._retry("GET", address, lambda: self._get_once(key, address, version_id))
        try:
            return verify(address, data)
        except IntegrityError:
            # Read once more before raising the alarm: bytes damaged on the wire (an
            # endpoint without response checksums) are not damage at rest.
            log.warning("blob %s failed verification; reading it once more", address)
        data = self._retry("GET", address, lambda: self._get_once(key, address, version_id))
        return verify(address, data)

    def exists(self, address: str) -> bool:
        key = self.key_for(address)
        return self._retry("HEAD", address, lambda: self._head(key) is not None)

    def delete(self, address: str, version_id: str | None = None) -> None:
        """Delete that version of the blob for good (without a version: unversioned buckets).

        On a versioned bucket a delete without a version would only add a delete marker,
        hiding the evidence rather than deleting it: that raises :class:`ValueError`.
        Retention and GC pass the version they recorded. A version still under Object
        Lock retention or legal hold raises :class:`RetentionLocked` ("not yet").
        """
        key = self.key_for(address)
        self._require_version("delete", version_id)
        params = self._params(key, version_id)
        self._retry("DELETE", address, lambda: self._delete_once(params, address))

    def addresses(self) -> Iterator[str]:
        """Every blob address under the prefix (current versions), page by page."""
        token: str | None = None
        while True:
            page = self._retry("LIST", None, functools.partial(self._list_page, token))
            for item in page.get("Contents", []):
                address = self._address_of(item["Key"])
                if address is not None:
                    yield address
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def close(self) -> None:
        self._uploads.shutdown(wait=True)
        if self._owns_client:
            self.client.close()
        if self.lean is not None:
            self.lean.close()

    def versions_of(self, address: str) -> list[str | None]:
        """Every stored version of the blob, oldest first (``[None]`` on an unversioned
        bucket when it exists). For callers with no recorded VersionId, such as the GC of
        orphans a crashed write left behind: they delete each version explicitly."""
        key = self.key_for(address)
        if not self._is_versioned():
            return [None] if self.exists(address) else []
        found: list[tuple[datetime, str]] = []
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": key}
        while True:
            page = self._retry(
                "LIST", address, functools.partial(self.client.list_object_versions, **params)
            )
            for item in page.get("Versions", []):
                if item["Key"] == key and item.get("VersionId"):
                    found.append((item["LastModified"], item["VersionId"]))
            if not page.get("IsTruncated"):
                break
            params["KeyMarker"] = page.get("NextKeyMarker")
            params["VersionIdMarker"] = page.get("NextVersionIdMarker")
        return [version for _, version in sorted(found)]

    async def publish_async(
        self,
        staged: Sequence[StagedBlob],
        offload: Callable[[Callable[[], Any]], Awaitable[Any]],
        then: Callable[[], T],
    ) -> T:
        """Staged blobs are stored already (``stage`` puts them); ``then`` runs in a thread."""
        self.publish(staged)
        return cast(T, await offload(then))

    @contextmanager
    def batched_deletes(self) -> Iterator[None]:
        """Each delete is its own request: there is nothing to share."""
        yield

    def temp_files(self) -> Iterator[tuple[str, datetime]]:
        """None: S3 stages nothing outside the bucket's objects (orphans are found by key)."""
        return iter(())

    def remove_temp_file(self, path: str) -> None:
        raise ValueError("the S3 store keeps no temp files")

    def stored_at(self, address: str) -> datetime | None:
        """When the newest version was written (None if absent): GC's safety age."""
        head = self._head(self.key_for(address))
        if head is None:
            return None
        modified: datetime = head["LastModified"]
        return modified

    # -- single attempts (no retries here) --------------------------------------------

    def _put_once(
        self, key: str, address: str, data: bytes, digest: bytes, lock: datetime | None
    ) -> StoredBlob:
        checksum = base64.b64encode(digest).decode("ascii")
        try:
            version_id = self._send_put(key, data, digest, checksum, lock)
        except ClientError as exc:
            if error_code(exc) not in PRECONDITION_CODES:
                raise
            existing = self._confirm_existing(key, address, len(data), checksum)
            if lock is not None and (existing.retain_until is None or existing.retain_until < lock):
                applied = self._extend_once(key, address, existing.version_id, lock)
                existing = replace(existing, retain_until=applied)
            return existing
        return StoredBlob(
            address=address,
            size=len(data),
            version_id=version_id,
            created=True,
            retain_until=lock,
        )

    def _send_put(
        self, key: str, data: bytes, digest: bytes, checksum: str, lock: datetime | None
    ) -> str | None:
        """One conditional-create PutObject; its VersionId. Raises ClientError."""
        if self.lean is not None:
            return self.lean.put_object(key, data, digest, self._lean_headers(lock))
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "Body": data,
            "IfNoneMatch": "*",
            # The algorithm header too: AWS requires it (or Content-MD5) for any write to an
            # Object Lock bucket with a retention; botocore keeps our precomputed value.
            "ChecksumAlgorithm": "SHA256",
            "ChecksumSHA256": checksum,
            "ContentType": "application/octet-stream",
            **self.encryption,
        }
        if lock is not None:
            params["ObjectLockMode"] = self._lock_mode
            params["ObjectLockRetainUntilDate"] = lock
        version_id: str | None = self.client.put_object(**params).get("VersionId")
        return version_id

    def _lean_headers(self, lock: datetime | None) -> Mapping[str, str]:
        """The lean PutObject's extra headers: encryption, and the lock of the new version."""
        if lock is None or self._lock_mode is None:
            return self._lean_put_headers
        return {**self._lean_put_headers, **lock_headers(self._lock_mode, lock)}

    def _confirm_existing(self, key: str, address: str, size: int, checksum: str) -> StoredBlob:
        """After a 412: prove the stored object is our bytes before calling the put done."""
        head = self._head(key)
        if head is None:
            raise ObjectVanished(key)
        stored_checksum = head.get("ChecksumSHA256")
        if head.get("ContentLength") != size or (stored_checksum and stored_checksum != checksum):
            raise IntegrityError(
                "an object already stored under this address does not match its bytes",
                address=address,
            )
        return StoredBlob(
            address=address,
            size=size,
            version_id=head.get("VersionId"),
            created=False,
            retain_until=lock_state(head)[0],
        )

    def _get_once(self, key: str, address: str, version_id: str | None) -> bytes:
        try:
            if self.lean is not None:
                return self.lean.get_object(key, version_id)
            response = self.client.get_object(**self._params(key, version_id))
        except ClientError as exc:
            if error_code(exc) in NOT_FOUND_CODES:
                raise BlobNotFound("no blob at this address", address=address) from None
            raise
        body = response["Body"]
        try:
            # botocore checks the length against Content-Length: a short body raises.
            data: bytes = body.read()
        finally:
            body.close()
        return data

    def _head(self, key: str, version_id: str | None = None) -> dict[str, Any] | None:
        try:
            if self.lean is not None:
                return self.lean.head_object(key, version_id)
            head: dict[str, Any] = self.client.head_object(
                **self._params(key, version_id), ChecksumMode="ENABLED"
            )
        except ClientError as exc:
            if error_code(exc) in NOT_FOUND_CODES:
                return None
            raise
        return head

    def _delete_once(self, params: dict[str, Any], address: str) -> None:
        try:
            self.client.delete_object(**params)
        except ClientError as exc:
            if is_lock_refusal(exc):
                raise self._locked(params, address, exc) from None
            if error_code(exc) not in NOT_FOUND_CODES:
                raise

    def _require_version(self, operation: str, version_id: str | None) -> None:
        if version_id is None and self._is_versioned():
            raise ValueError(
                f"{operation} on the versioned bucket {self.bucket!r} needs the recorded"
                " version_id: without it S3 only adds a delete marker, hiding the evidence"
                " instead of deleting it"
            )

    def _is_versioned(self) -> bool:
        """Whether the bucket keeps versions (asked once; versioning never turns off)."""
        if self._versioned is None:
            answer = self._retry(
                "VERSIONING", None, lambda: self.client.get_bucket_versioning(Bucket=self.bucket)
            )
            self._versioned = answer.get("Status") in ("Enabled", "Suspended")
        return self._versioned

    def _list_page(self, token: str | None) -> dict[str, Any]:
        params = {"Bucket": self.bucket, "Prefix": self._blobs_prefix}
        if token:
            params["ContinuationToken"] = token
        page: dict[str, Any] = self.client.list_objects_v2(**params)
        return page

    def _params(self, key: str, version_id: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if version_id:
            params["VersionId"] = version_id
        return params

    def _address_of(self, key: str) -> str | None:
        """The address a key stores, or None for anything that is not a blob key."""
        match = _RELATIVE_KEY.fullmatch(key[len(self._blobs_prefix) :])
        if match is None or not match[3].startswith(match[1] + match[2]):
            return None
        return f"{ALGORITHM}:{match[3]}"

    # -- retries ------------------------------------------------------------------------

    def _retry(self, operation: str, address: str | None, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` until it succeeds, fails for good, or attempts run out."""
        for number in range(1, self.attempts + 1):
            try:
                return attempt()
            except AmberError:
                raise
            except Exception as exc:
                if not is_transient(exc):
                    if isinstance(exc, ClientError | BotoCoreError):
                        raise self._storage_error(operation, address, exc, number) from exc
                    raise
                if number == self.attempts:
                    raise self._storage_error(operation, address, exc, number) from exc
                delay = self._backoff(number)
                log.warning(
                    "S3 %s of %s failed (%s); retry %d of %d in %.2f s",
                    operation,
                    address or self.bucket,
                    describe(exc),
                    number,
                    self.attempts - 1,
                    delay,
                )
                self._sleep(delay)
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _backoff(self, number: int) -> float:
        """Exponential, capped, with "equal jitter" so concurrent clients spread out."""
        ceiling = float(min(self.backoff_max, self.backoff_base * 2 ** (number - 1)))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def _storage_error(
        self, operation: str, address: str | None, exc: BaseException, attempts: int
    ) -> StorageError:
        return StorageError(
            f"S3 {operation} failed after {attempts} attempt(s): {describe(exc)}",
            operation=operation,
            bucket=self.bucket,
            address=address,
        )
