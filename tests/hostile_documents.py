"""Documents that are cheap to send and expensive to read (issue #18, findings 2 and 5),
built in memory: used by tests/test_extraction_limits.py and
benchmarks/bench_extraction_limits.py."""

from __future__ import annotations

import zlib

from pdf_builder import build_pdf

_MIB = 1024 * 1024


def pdf_with_content(content_stream: bytes, *, flate: bool = False, pages: int = 1) -> bytes:
    """A PDF 1.4 whose ``pages`` pages all draw ``content_stream`` (already Flate-compressed
    when ``flate``) with Helvetica as /F1."""
    return build_pdf([(content_stream, flate)] * pages)


def flate_spaces(mib: int) -> bytes:
    """A zlib stream of ``mib`` MiB of spaces, about 1 KB per MiB: one compressed MiB
    (flushed so that it stands alone) repeated, then the checksum of the whole."""
    squeezer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = squeezer.compress(b" " * _MIB) + squeezer.flush(zlib.Z_FULL_FLUSH)
    # Adler-32 of n spaces in closed form: a = 1 + 32n, b = n + 32 n(n+1)/2 (mod 65521).
    n = mib * _MIB
    a = (1 + 32 * n) % 65521
    b = (n + 32 * n * (n + 1) // 2) % 65521
    # zlib header, the blocks, an empty final fixed-Huffman block, the checksum.
    return b"\x78\x9c" + block * mib + b"\x03\x00" + ((b << 16) | a).to_bytes(4, "big")


def flate_bomb_pdf(mib: int) -> bytes:
    """One page whose content stream inflates to ``mib`` MiB of spaces (finding 2: 1,000 MiB
    in a 0.97 MB file)."""
    return pdf_with_content(flate_spaces(mib), flate=True)


def text_operators_pdf(operators: int) -> bytes:
    """One page drawing ``operators`` one-letter text runs (finding 2: 6 million), varied so
    that the file does not compress to nothing."""
    runs = b"".join(b"(%c) Tj " % (97 + n % 26) for n in range(operators))
    return pdf_with_content(zlib.compress(b"BT /F1 1 Tf " + runs + b"ET", 9), flate=True)


def deep_html(levels: int, text: str = "needle text") -> bytes:
    """``levels`` nested ``<div>``s around ``text`` (finding 5: 80,000 levels, 400 KB)."""
    return ("<div>" * levels + text).encode()


def pages_pdf(pages: int, line: bytes = b"A page.") -> bytes:
    return pdf_with_content(b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % line, pages=pages)
