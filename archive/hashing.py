"""Content addresses: ``blake3:<64 lowercase hex>`` of the bytes, nothing else."""

from __future__ import annotations

import re

import blake3

from archive.exceptions import IntegrityError, InvalidAddress

ALGORITHM = "blake3"
_ADDRESS = re.compile(r"blake3:[0-9a-f]{64}")


def content_address(data: bytes) -> str:
    """The address of ``data``. Multithreaded hashing only pays off for large blobs."""
    hasher = (
        blake3.blake3(max_threads=blake3.blake3.AUTO) if len(data) > (1 << 20) else blake3.blake3()
    )
    hasher.update(data)
    return f"{ALGORITHM}:{hasher.hexdigest()}"


def parse_address(address: str) -> str:
    """Validate an address and return its hex digest.

    Strict on purpose: the digest becomes a file name or an object key, so anything but
    64 lowercase hex characters (``../``, ``%2F``, upper case) is refused here.
    """
    if not isinstance(address, str) or not _ADDRESS.fullmatch(address):
        raise InvalidAddress(
            "content address must be 'blake3:' followed by 64 lowercase hex digits"
        )
    return address[len(ALGORITHM) + 1 :]


def verify(address: str, data: bytes) -> bytes:
    """Return ``data`` if it hashes to ``address``; raise :class:`IntegrityError` otherwise."""
    actual = content_address(data)
    if actual != address:
        raise IntegrityError(
            "stored bytes do not match their content address",
            expected=address,
            actual=actual,
        )
    return data
