"""RFC 3161 timestamps over checkpoints, from the TSA at ``AMBER_TSA_URL``.

Requests and responses are built and checked with ``rfc3161-client``; a response is stored
only once it answers this very request (nonce, message imprint) and its signature checks
out against the certificates it carries. Whether that TSA is to be trusted is the
verifier's decision (``amber proof verify --tsa-ca``), never the archive's.
"""

from __future__ import annotations

import httpx
from rfc3161_client import HashAlgorithm, TimestampRequestBuilder, decode_timestamp_response
from rfc3161_client.tsp import PKIStatus

from archive.exceptions import StorageError


class Timestamper:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout

    def stamp(self, data: bytes) -> bytes:
        """The DER RFC 3161 response over SHA-256 of ``data``."""
        request = (
            TimestampRequestBuilder()
            .data(data)
            .hash_algorithm(HashAlgorithm.SHA256)  # what external tools check
            .nonce(nonce=True)
            .cert_request(cert_request=True)
            .build()
        )
        try:
            answer = httpx.post(
                self.url,
                content=request.as_bytes(),
                headers={"Content-Type": "application/timestamp-query"},
                timeout=self.timeout,
            )
        except httpx.HTTPError as exc:
            raise StorageError("the time-stamping authority did not answer", url=self.url) from exc
        if answer.status_code != 200:
            raise StorageError("the time-stamping authority refused", status=answer.status_code)
        try:
            response = decode_timestamp_response(answer.content)
        except ValueError as exc:
            raise StorageError("the time-stamping authority's answer is not RFC 3161") from exc
        if response.status != PKIStatus.GRANTED and response.status != PKIStatus.GRANTED_WITH_MODS:
            raise StorageError("the time-stamping authority did not grant a timestamp")
        info = response.tst_info
        if info.nonce != request.nonce or info.message_imprint.message != (
            request.message_imprint.message
        ):
            raise StorageError("the timestamp does not answer this request")
        return answer.content
