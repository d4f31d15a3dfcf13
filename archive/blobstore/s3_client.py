"""How Amber talks to S3 through botocore: client settings, and which errors mean what.

Retries live in one place (:meth:`~archive.blobstore.s3.S3BlobStore._retry`), so botocore's
own are turned off here; these functions tell that loop what is worth another attempt.
"""

from __future__ import annotations

import re

from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    SSLError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from urllib3.exceptions import HTTPError as URLLib3Error
from urllib3.exceptions import SSLError as URLLib3SSLError

from archive.blobstore.s3_lean import TruncatedBody

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0
# At least as many as threads that may call S3 at once: the API's worker threads (anyio's
# default limit, 40) and one stage_many's uploads (8). A smaller pool makes the extra
# threads open and close a connection per request (urllib3 discards what it cannot keep).
DEFAULT_MAX_POOL_CONNECTIONS = 64

NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchVersion", "NotFound", "404"})
PRECONDITION_CODES = frozenset({"PreconditionFailed", "412"})
# How S3 refuses to delete (or to shorten the retention of) a version under Object Lock:
# AWS, SeaweedFS, Ceph and MinIO answer 403 AccessDenied; some say ObjectLocked.
LOCK_REFUSAL_CODES = frozenset({"AccessDenied", "ObjectLocked", "ObjectLockedException"})
LOCK_WORDS = re.compile(r"lock|retention|retain|hold|worm", re.IGNORECASE)
# Error codes worth another attempt even though their status is below 500.
TRANSIENT_CODES = frozenset(
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


class ObjectVanished(Exception):
    """412 said the object exists, then HEAD did not find it (a delete raced us): retry."""


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
    if isinstance(exc, ObjectVanished):
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500 or status == 429 or error_code(exc) in TRANSIENT_CODES
    if isinstance(exc, SSLError | URLLib3SSLError):
        return False  # certificate problems do not heal by retrying
    if isinstance(exc, TruncatedBody | URLLib3Error):
        # The lean path's transport (s3_lean.py): timeouts, refused or broken connections,
        # bodies shorter than announced.
        return True
    # HTTPClientError covers ReadTimeoutError, ConnectionClosedError, ResponseStreamingError;
    # ConnectionError covers EndpointConnectionError and ConnectTimeoutError.
    return isinstance(
        exc, HTTPClientError | BotoConnectionError | IncompleteReadError | FlexibleChecksumError
    )


def describe(exc: BaseException) -> str:
    """A one-line reason for logs and errors; never includes request or response bodies."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{error_code(exc)} (HTTP {status})"
    return f"{type(exc).__name__}: {exc}"


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_lock_refusal(exc: ClientError) -> bool:
    """S3 refusing because of Object Lock (AccessDenied, or a lock-worded InvalidRequest)."""
    code = error_code(exc)
    if code in LOCK_REFUSAL_CODES:
        return True
    message = str(exc.response.get("Error", {}).get("Message", ""))
    return code == "InvalidRequest" and LOCK_WORDS.search(message) is not None
