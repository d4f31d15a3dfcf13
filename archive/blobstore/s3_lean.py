"""A lean S3 data path for the hot operations: PutObject, GetObject and HeadObject.

Why it exists: botocore spends 2.7-2.9 ms of CPU on one 4 KiB PutObject (request model,
event hooks, its HTTP layer), more than the rest of a write; boto3 from 16 threads reaches
a third of the PUT rate presigned requests get from the same server (issue #20). Here a
request is a few headers, one SigV4 signature and one urllib3 round trip on a pool sized
to the concurrency. Everything rare (bucket setup, retention changes, deletes, listing)
stays on boto3 (:mod:`archive.blobstore.s3`).

Choices, with their reasons:

- **Signed payload, not UNSIGNED-PAYLOAD.** Every PUT already carries
  ``x-amz-checksum-sha256`` of its bytes; that one SHA-256 digest also gives the hex
  ``x-amz-content-sha256`` the signature covers, so signing the payload costs nothing
  extra, and a body changed in transit fails both the signature and the checksum.
- **The signing key is derived once per (secret, day, region)**: four HMACs saved per
  request; each request then costs one SHA-256 of the canonical request and one HMAC.
- **Synchronous, on urllib3.** On PostgreSQL the write path runs in a worker thread anyway
  (the index driver blocks), so an async client would add a hop back to the event loop
  instead of removing one. urllib3 is already installed (botocore runs on it) and its
  pool costs far less per request than httpx's sync client.
- **Errors look like botocore's** (:class:`botocore.exceptions.ClientError` with the same
  ``Error``/``ResponseMetadata`` shape), so one classification
  (:func:`archive.blobstore.s3_client.is_transient`) and one retry loop serve both paths.
  No retries here: ``S3BlobStore._retry`` is the only loop.
- **Short bodies are caught twice**: urllib3 enforces Content-Length, and the length read
  is compared with the header once more; a short read raises :class:`TruncatedBody`,
  which is transient (the GET is re-issued), never returned.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import certifi
import urllib3
from botocore.exceptions import ClientError, NoCredentialsError

from archive.blobstore.loophttp import LoopConnections, Response

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_ALGORITHM = "AWS4-HMAC-SHA256"
_SERVICE = "s3"
_ERROR_FIELD = re.compile(rb"<(Code|Message)>([^<]*)</\1>")


class TruncatedBody(Exception):
    """The server announced more bytes than arrived: the read is worth another attempt."""


class Credentials(Protocol):
    """What the signer needs of botocore's (possibly refreshing) credentials."""

    def get_frozen_credentials(self) -> Any: ...


# How a request goes out: (method, path with query, headers, body) -> Response. A seam the
# fault-injection tests wrap; :meth:`LeanS3.send` is the real one.
Send = Callable[[str, str, dict[str, str], bytes | None], Response]
# The same on the caller's event loop (PutObject only): :meth:`LeanS3.put_object_async`.
AsyncSend = Callable[[str, str, dict[str, str], bytes], Awaitable[Response]]


class SigningKeys:
    """SigV4 signing keys, derived once per (secret, day, region) and remembered."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._key: tuple[str, str, bytes] | None = None
        self._guard = threading.Lock()

    def key(self, secret: str, day: str) -> bytes:
        cached = self._key
        if cached is not None and cached[0] == secret and cached[1] == day:
            return cached[2]
        key = _hmac(("AWS4" + secret).encode(), day)
        for part in (self.region, _SERVICE, "aws4_request"):
            key = _hmac(key, part)
        with self._guard:
            self._key = (secret, day, key)
        return key


class LeanS3:
    """PutObject, GetObject and HeadObject on one bucket, path-style, SigV4-signed."""

    def __init__(
        self,
        endpoint_url: str | None,
        region: str,
        bucket: str,
        credentials: Credentials | None,
        *,
        pool_size: int,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
        parts = urlsplit(endpoint_url or f"https://s3.{region}.amazonaws.com")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the S3 endpoint must be an http(s) URL")
        self.region = region
        self.bucket = bucket
        self._credentials = credentials
        self._keys = SigningKeys(region)
        default_port = 443 if parts.scheme == "https" else 80
        self._host = parts.netloc.rsplit("@", 1)[-1]  # as urllib3 would send it
        if parts.port == default_port:
            self._host = self._host.removesuffix(f":{default_port}")
        self._bucket_path = f"{parts.path.rstrip('/')}/{_quote(bucket)}/"
        options: dict[str, Any] = {}
        if parts.scheme == "https":
            options["ca_certs"] = certifi.where()  # the same trust store as botocore
        self._pool = urllib3.connection_from_url(
            f"{parts.scheme}://{parts.netloc}",
            maxsize=pool_size,
            block=False,
            timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            retries=False,
            **options,
        )
        self.send: Send = self._send
        self._loop_connections = LoopConnections(
            f"{parts.scheme}://{parts.netloc}",
            max_idle=pool_size,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )
        self.send_async: AsyncSend = self._loop_connections.request

    def close(self) -> None:
        self._pool.close()
        self._loop_connections.close()

    # -- operations ---------------------------------------------------------------------

    def put_object(
        self, key: str, data: bytes, digest: bytes, headers: Mapping[str, str]
    ) -> str | None:
        """Conditional create of ``key``; ``digest`` is the SHA-256 of ``data``. Returns
        the VersionId (None on an unversioned bucket). Raises ClientError on refusal."""
        target, signed = self._put_request(key, digest, headers)
        return _put_answer(self.send("PUT", target, signed, data))

    async def put_object_async(
        self, key: str, data: bytes, digest: bytes, headers: Mapping[str, str]
    ) -> str | None:
        """:meth:`put_object` from an event loop, on a connection that loop owns; raises
        ClientError on refusal and OSError or TimeoutError when the answer never came."""
        target, signed = self._put_request(key, digest, headers)
        return _put_answer(await self.send_async("PUT", target, signed, data))

    def get_object(self, key: str, version_id: str | None) -> bytes:
        """The object's bytes, complete; ClientError (NoSuchKey …) when refused."""
        response = self._call("GetObject", "GET", key, version_id, {}, None, EMPTY_SHA256)
        announced = response.headers.get("content-length")
        if announced is not None and int(announced) != len(response.data):
            raise TruncatedBody(f"{len(response.data)} of {announced} bytes arrived")
        return response.data

    def head_object(self, key: str, version_id: str | None) -> dict[str, Any]:
        """HeadObject with checksum mode on, in botocore's response shape (the fields
        Amber reads); ClientError with code "404" when absent."""
        response = self._call(
            "HeadObject",
            "HEAD",
            key,
            version_id,
            {"x-amz-checksum-mode": "ENABLED"},
            None,
            EMPTY_SHA256,
        )
        return head_fields(response.headers)

    # -- one request --------------------------------------------------------------------

    def _put_request(
        self, key: str, digest: bytes, headers: Mapping[str, str]
    ) -> tuple[str, dict[str, str]]:
        """The conditional create's target and signed headers (the body is sent as is)."""
        sent = {
            "content-type": "application/octet-stream",
            "if-none-match": "*",
            "x-amz-checksum-sha256": base64.b64encode(digest).decode("ascii"),
            "x-amz-sdk-checksum-algorithm": "SHA256",
            **headers,
        }
        path = self._bucket_path + _quote(key)
        return path, self._sign("PUT", path, "", sent, digest.hex())

    def _call(
        self,
        operation: str,
        method: str,
        key: str,
        version_id: str | None,
        headers: dict[str, str],
        body: bytes | None,
        payload_hash: str,
    ) -> Response:
        path = self._bucket_path + _quote(key)
        query = f"versionId={_quote(version_id, safe='')}" if version_id else ""
        signed = self._sign(method, path, query, headers, payload_hash)
        response = self.send(method, f"{path}?{query}" if query else path, signed, body)
        if response.status >= 300:
            raise _client_error(operation, response)
        return response

    def _sign(
        self, method: str, path: str, query: str, headers: dict[str, str], payload_hash: str
    ) -> dict[str, str]:
        frozen = self._credentials.get_frozen_credentials() if self._credentials else None
        if frozen is None or not frozen.access_key:
            raise NoCredentialsError()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        day = stamp[:8]
        signed = {
            **headers,
            "host": self._host,
            "x-amz-content-sha256": payload_hash,
            "x-amz-date": stamp,
        }
        if frozen.token:
            signed["x-amz-security-token"] = frozen.token
        names = sorted(signed)
        canonical = "\n".join(
            (
                method,
                path,
                query,
                "".join(f"{name}:{signed[name].strip()}\n" for name in names),
                ";".join(names),
                payload_hash,
            )
        )
        scope = f"{day}/{self.region}/{_SERVICE}/aws4_request"
        to_sign = f"{_ALGORITHM}\n{stamp}\n{scope}\n{_sha256_hex(canonical)}"
        signature = hmac.new(
            self._keys.key(frozen.secret_key, day), to_sign.encode(), hashlib.sha256
        ).hexdigest()
        signed["authorization"] = (
            f"{_ALGORITHM} Credential={frozen.access_key}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}"
        )
        return signed

    def _send(self, method: str, url: str, headers: dict[str, str], body: bytes | None) -> Response:
        # retries=False: urllib3 raises the transport error itself (timeouts, refused or
        # broken connections: all transient to is_transient); the whole body is read here,
        # and urllib3 raises ProtocolError when it is shorter than Content-Length.
        answer = self._pool.urlopen(
            method,
            url,
            body=body,
            headers=headers,
            retries=False,
            redirect=False,
            assert_same_host=False,
            preload_content=True,
            decode_content=False,  # the stored bytes as they are: verify() hashes them
        )
        return Response(answer.status, answer.headers, answer.data)


def _put_answer(response: Response) -> str | None:
    if response.status >= 300:
        raise _client_error("PutObject", response)
    return response.headers.get("x-amz-version-id")


def head_fields(headers: Mapping[str, str]) -> dict[str, Any]:
    """botocore's HeadObject fields, from the response headers."""
    found: dict[str, Any] = {"ContentLength": int(headers.get("content-length") or 0)}
    for header, name in (
        ("x-amz-checksum-sha256", "ChecksumSHA256"),
        ("x-amz-version-id", "VersionId"),
        ("x-amz-object-lock-mode", "ObjectLockMode"),
        ("x-amz-object-lock-legal-hold", "ObjectLockLegalHoldStatus"),
        ("etag", "ETag"),
    ):
        value = headers.get(header)
        if value:
            found[name] = value
    modified = headers.get("last-modified")
    if modified:
        found["LastModified"] = parsedate_to_datetime(modified)
    until = headers.get("x-amz-object-lock-retain-until-date")
    if until:
        found["ObjectLockRetainUntilDate"] = datetime.fromisoformat(until.replace("Z", "+00:00"))
    return found


def lock_headers(mode: str, until: datetime) -> dict[str, str]:
    """The PutObject headers that lock the new version (``until`` in whole seconds)."""
    return {
        "x-amz-object-lock-mode": mode,
        "x-amz-object-lock-retain-until-date": until.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def encryption_headers(params: Mapping[str, str]) -> dict[str, str]:
    """PutObject headers for the SSE parameters of :func:`s3_client.encryption_params`."""
    names = {
        "ServerSideEncryption": "x-amz-server-side-encryption",
        "SSEKMSKeyId": "x-amz-server-side-encryption-aws-kms-key-id",
    }
    return {names[name]: value for name, value in params.items()}


def _client_error(operation: str, response: Response) -> ClientError:
    """botocore's error shape; a body-less answer (HEAD) is coded by its status, as there."""
    fields = {
        name.decode(): value.decode("utf-8", "replace")
        for name, value in _ERROR_FIELD.findall(response.data[:4096])
    }
    error = {
        "Code": fields.get("Code") or str(response.status),
        "Message": fields.get("Message", ""),
    }
    metadata = {"HTTPStatusCode": response.status, "HTTPHeaders": dict(response.headers)}
    return ClientError({"Error": error, "ResponseMetadata": metadata}, operation)


def _quote(value: str, safe: str = "/") -> str:
    return quote(value, safe=safe + "-_.~")


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()
