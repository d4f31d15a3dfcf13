"""WARC 1.1 records, written and read by hand: one gzip member per record, SHA-256 digests.

warcio's writer computes ``sha1:`` digests unless every record is pre-sized and its digester
replaced; writing the few header lines ourselves gives SHA-256 digests, a fixed header order
and no clock, which the bundle's determinism needs. Reading is the standard library only, so
the offline checker can use it. Tests hold both to ``warcio check`` and warcio's reader.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

CRLF = b"\r\n"


class WarcError(Exception):
    """The WARC data is not well formed."""


@dataclass(frozen=True)
class WarcRecord:
    headers: list[tuple[str, str]]
    block: bytes
    offset: int  # of its gzip member in the file
    length: int  # of its gzip member

    def get(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers:
            if key.lower() == lowered:
                return value
        return None

    @property
    def type(self) -> str:
        return self.get("WARC-Type") or ""

    @property
    def payload(self) -> bytes:
        """The HTTP body of a response record; the whole block otherwise."""
        if self.type in ("response", "request") and (self.get("Content-Type") or "").startswith(
            "application/http"
        ):
            return split_http(self.block)[2]
        return self.block


def sha256_label(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def http_block(status: int, reason: str, headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    head = f"HTTP/1.1 {status} {reason}\r\n".encode("latin-1")
    for name, value in headers:
        head += f"{name}: {value}\r\n".encode()
    return head + CRLF + body


def split_http(block: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of an HTTP/1.x response block."""
    head, sep, body = block.partition(b"\r\n\r\n")
    if not sep:
        raise WarcError("an HTTP response block has no end of headers")
    lines = head.decode("utf-8", "replace").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise WarcError("an HTTP response block has no status line")
    return int(parts[1]), _header_lines(lines[1:], "an HTTP"), body


def _header_lines(lines: Sequence[str], what: str) -> list[tuple[str, str]]:
    """``Name: value`` lines as pairs; ``what`` names the kind in the error."""
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise WarcError(f"{what} header line has no colon")
        headers.append((name.strip(), value.strip()))
    return headers


def record_bytes(headers: Sequence[tuple[str, str]], block: bytes, payload: bytes) -> bytes:
    """One gzip member holding a WARC/1.1 record: the given headers, then the digests and
    length, then the block. ``mtime=0`` keeps the gzip header free of the clock."""
    lines = ["WARC/1.1", *(f"{k}: {v}" for k, v in headers)]
    lines.append(f"WARC-Block-Digest: {sha256_label(block)}")
    lines.append(f"WARC-Payload-Digest: {sha256_label(payload)}")
    lines.append(f"Content-Length: {len(block)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + block + CRLF + CRLF
    return gzip.compress(raw, compresslevel=6, mtime=0)


def read_records(data: bytes) -> Iterator[WarcRecord]:
    """Every record of a WARC file, gzipped per record (or not compressed at all)."""
    if data[:2] != b"\x1f\x8b":
        yield from _parse_stream(data, 0, len(data))
        return
    offset = 0
    while offset < len(data):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = inflater.decompress(data[offset:]) + inflater.flush()
        except zlib.error as exc:
            raise WarcError(f"a gzip member at offset {offset} is damaged: {exc}") from None
        if not inflater.eof:
            raise WarcError(f"the gzip member at offset {offset} is truncated")
        length = len(data) - offset - len(inflater.unused_data)
        yield from _parse_stream(raw, offset, length)
        offset += length


def _parse_stream(raw: bytes, offset: int, length: int) -> Iterator[WarcRecord]:
    position = 0
    while position < len(raw):
        if raw[position:].strip(b"\r\n") == b"":
            return
        end = raw.find(b"\r\n\r\n", position)
        if end < 0:
            raise WarcError("a WARC record has no end of headers")
        lines = raw[position:end].decode("utf-8", "replace").split("\r\n")
        if lines[0] not in ("WARC/1.1", "WARC/1.0"):
            raise WarcError("a WARC record does not start with WARC/1.1 or WARC/1.0")
        headers = _header_lines(lines[1:], "a WARC")
        record = WarcRecord(headers, b"", offset, length)
        size = record.get("Content-Length")
        if size is None or not size.isdigit():
            raise WarcError("a WARC record has no Content-Length")
        start = end + 4
        block = raw[start : start + int(size)]
        if len(block) != int(size):
            raise WarcError("a WARC record is shorter than its Content-Length")
        yield WarcRecord(headers, block, offset, length)
        position = start + int(size)
        while raw[position : position + 2] == CRLF:
            position += 2


def check_digests(record: WarcRecord) -> None:
    """Raise :class:`WarcError` unless the record's SHA-256 digests match its bytes."""
    for name, data in (("WARC-Block-Digest", record.block), ("WARC-Payload-Digest", None)):
        label = record.get(name)
        if label is None:
            raise WarcError(f"the record has no {name}")
        actual = sha256_label(record.payload if data is None else data)
        if label != actual:
            raise WarcError(f"the record's {name} does not match its bytes")
