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
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import random
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    SSLError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from archive.blobstore.base import StoredBlob
from archive.config import Settings
from archive.exceptions import AmberError, BlobNotFound, IntegrityError, StorageError
from archive.hashing import ALGORITHM, content_address, parse_address, verify

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_ATTEMPTS = 5
DEFAULT_BACKOFF_BASE = 0.2  # seconds before the first retry (before jitter)
DEFAULT_BACKOFF_MAX = 5.0
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0
DEFAULT_MAX_POOL_CONNECTIONS = 32  # the API serves requests from a thread pool

_BLOBS = "blobs"
_RELATIVE_KEY = re.compile(r"([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})")
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchVersion", "NotFound", "404"})
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "412"})
# Error codes worth another attempt even though their status is below 500.
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "RequestLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",  # 409: a conflicting operation is in progress
        "ConditionalRequestConflict",  # 409: concurrent conditional writes to one key
    }
)


class _ObjectVanished(Exception):
    """412 said the object exists, then HEAD did not find it (a delete raced us): retry."""


class S3BlobStore:
    """Immutable, content-addressed blobs in one bucket under one key prefix."""

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
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.attempts = attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._owns_client = owns_client
        # Extra PutObject parameters for server-side encryption (SSE-S3 or SSE-KMS).
        self.encryption = dict(encryption or {})
        self._blobs_prefix = f"{self.prefix}/{_BLOBS}/" if self.prefix else f"{_BLOBS}/"

    @classmethod
    def from_settings(
        cls, *, bucket: str, prefix: str, settings: Settings, **options: Any
    ) -> S3BlobStore:
        """Build a client for ``settings``; credentials come from the standard AWS chain."""
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.s3_endpoint_url,
            region_name=settings.s3_region,
            config=client_config(),
        )
        return cls(
            client, bucket, prefix, owns_client=True,
            encryption=encryption_params(settings.s3_sse, settings.s3_sse_kms_key_id), **options,
        )

    # -- the BlobStore interface -------------------------------------------------------

    def key_for(self, address: str) -> str:
        digest = parse_address(address)
        return f"{self._blobs_prefix}{digest[:2]}/{digest[2:4]}/{digest}"

    def put(self, data: bytes) -> StoredBlob:
        address = content_address(data)
        key = self.key_for(address)
        checksum = _sha256_base64(data)
        return self._retry("PUT", address, lambda: self._put_once(key, address, data, checksum))

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
        """Delete the blob; with ``version_id``, that version for good.

        On a versioned bucket a delete without a version only adds a delete marker (the
        bytes stay recoverable); retention and GC pass the version they recorded.
        """
        key = self.key_for(address)
        params = self._params(key, version_id)
        self._retry("DELETE", address, lambda: self._delete_once(params))

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
        if self._owns_client:
            self.client.close()

    # -- single attempts (no retries here) --------------------------------------------

    def _put_once(self, key: str, address: str, data: bytes, checksum: str) -> StoredBlob:
        try:
            response = self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                IfNoneMatch="*",
                ChecksumSHA256=checksum,
                ContentType="application/octet-stream",
                **self.encryption,
            )
        except ClientError as exc:
            if _error_code(exc) not in _PRECONDITION_CODES:
                raise
            return self._confirm_existing(key, address, len(data), checksum)
        return StoredBlob(
            address=address, size=len(data), version_id=response.get("VersionId"), created=True
        )

    def _confirm_existing(self, key: str, address: str, size: int, checksum: str) -> StoredBlob:
        """After a 412: prove the stored object is our bytes before calling the put done."""
        head = self._head(key)
        if head is None:
            raise _ObjectVanished(key)
        stored_checksum = head.get("ChecksumSHA256")
        if head.get("ContentLength") != size or (stored_checksum and stored_checksum != checksum):
            raise IntegrityError(
                "an object already stored under this address does not match its bytes",
                address=address,
            )
        return StoredBlob(
            address=address, size=size, version_id=head.get("VersionId"), created=False
        )

    def _get_once(self, key: str, address: str, version_id: str | None) -> bytes:
        try:
            response = self.client.get_object(**self._params(key, version_id))
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND_CODES:
                raise BlobNotFound("no blob at this address", address=address) from None
            raise
        body = response["Body"]
        try:
            # botocore checks the length against Content-Length: a short body raises.
            data: bytes = body.read()
        finally:
            body.close()
        return data

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = self.client.head_object(
                Bucket=self.bucket, Key=key, ChecksumMode="ENABLED"
            )
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND_CODES:
                return None
            raise
        return head

    def _delete_once(self, params: dict[str, str]) -> None:
        try:
            self.client.delete_object(**params)
        except ClientError as exc:
            if _error_code(exc) not in _NOT_FOUND_CODES:
                raise

    def _list_page(self, token: str | None) -> dict[str, Any]:
        params = {"Bucket": self.bucket, "Prefix": self._blobs_prefix}
        if token:
            params["ContinuationToken"] = token
        page: dict[str, Any] = self.client.list_objects_v2(**params)
        return page

    def _params(self, key: str, version_id: str | None) -> dict[str, str]:
        params = {"Bucket": self.bucket, "Key": key}
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
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (number - 1))
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


def encryption_params(sse: str | None, kms_key_id: str | None) -> dict[str, str]:
    """PutObject parameters for ``AMBER_S3_SSE`` / ``AMBER_S3_SSE_KMS_KEY_ID``."""
    if sse is None:
        return {}
    params = {"ServerSideEncryption": sse}
    if kms_key_id:
        params["SSEKMSKeyId"] = kms_key_id
    return params


def client_config(
    *,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
) -> Config:
    """botocore settings: path-style (works everywhere), bounded timeouts, no own retries."""
    return Config(
        s3={"addressing_style": "path"},
        signature_version="s3v4",
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"max_attempts": 1, "mode": "standard"},  # 1 = no retry: ours is the loop
        max_pool_connections=DEFAULT_MAX_POOL_CONNECTIONS,
    )


def is_transient(exc: BaseException) -> bool:
    """Worth another attempt: 5xx, throttling, timeouts, broken connections or streams."""
    if isinstance(exc, _ObjectVanished):
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500 or status == 429 or _error_code(exc) in _TRANSIENT_CODES
    if isinstance(exc, SSLError):
        return False  # certificate problems do not heal by retrying
    # HTTPClientError covers ReadTimeoutError, ConnectionClosedError, ResponseStreamingError;
    # ConnectionError covers EndpointConnectionError and ConnectTimeoutError.
    return isinstance(
        exc, HTTPClientError | BotoConnectionError | IncompleteReadError | FlexibleChecksumError
    )


def describe(exc: BaseException) -> str:
    """A one-line reason for logs and errors; never includes request or response bodies."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{_error_code(exc)} (HTTP {status})"
    return f"{type(exc).__name__}: {exc}"


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _sha256_base64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")
