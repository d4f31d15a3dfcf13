"""Pathological documents and quotes, built by hand, for the fuzzing suite and the benchmark.

Not a pytest plugin: import it (``tests/`` is on ``sys.path`` for the tests; the benchmark
adds it). Every builder is deterministic in its arguments, so a failing case can be named
and rebuilt.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from pdf_builder import build_pdf, text_stream


def pdf(streams: Sequence[bytes], *, flate: bool = False) -> bytes:
    """A valid PDF 1.4: one page per content stream, Helvetica as /F1, optionally Flate."""
    return build_pdf([(zlib.compress(s, 9), True) if flate else (s, False) for s in streams])


def pdf_hyphen_line(repeats: int = 8_000) -> bytes:
    """One PDF line of ``"- "`` repeated: the normalisation's worst case before it was linear."""
    return pdf([text_stream([b"- " * repeats], size=0.03)])


def pdf_many_operators(operators: int) -> bytes:
    """One page with ``operators`` tiny text-showing operators, Flate-compressed."""
    ops = b"BT /F1 1 Tf " + b"(a) Tj 0 0 Td " * operators + b"ET"
    return pdf([ops], flate=True)


def pdf_flate_bomb(inflated: int, chunk: bytes = b"(a) Tj ") -> bytes:
    """One page whose Flate stream inflates to about ``inflated`` bytes of ``chunk`` repeated.

    Built without ever holding or compressing the inflated bytes: once a block of whole
    chunks has been compressed after an identical block, the window its back-references
    reach holds the same bytes every time, so its compressed form can simply be repeated.
    """
    block = chunk * (1_048_576 // len(chunk))
    head, end = b"BT /F1 1 Tf ", b" ET"
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: we write the zlib frame
    first = packer.compress(head + block) + packer.flush(zlib.Z_SYNC_FLUSH)
    again = packer.compress(block) + packer.flush(zlib.Z_SYNC_FLUSH)
    tail = packer.compress(end) + packer.flush()
    blocks = max(2, inflated // len(block))
    checksum = zlib.adler32(head)
    for _ in range(blocks):
        checksum = zlib.adler32(block, checksum)
    checksum = zlib.adler32(end, checksum)
    data = b"\x78\xda" + first + again * (blocks - 1) + tail + struct.pack(">I", checksum)
    return build_pdf([(data, True)])


def pdf_many_pages(pages: int) -> bytes:
    return pdf([text_stream([b"page %d" % n]) for n in range(pages)])


def html_nested(depth: int, tag: str = "div") -> bytes:
    return (f"<{tag}>" * depth + "deep text" + f"</{tag}>" * depth).encode()


def html_many_attributes(count: int) -> bytes:
    attributes = " ".join(f'a{i}="{i}"' for i in range(count))
    return f"<html><body><p {attributes}>attributes</p></body></html>".encode()


def html_single_line(size: int) -> bytes:
    return b"<html><body><p>" + b"word " * (size // 5) + b"</p></body></html>"


def spaced_text(repeats: int = 100_000) -> bytes:
    """``"a  "`` repeated: a quote of ``"a a"`` occurs at every third character."""
    return b"a  " * repeats
