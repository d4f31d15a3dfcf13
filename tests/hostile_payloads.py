"""Pathological documents and quotes, built by hand, for the fuzzing suite and the benchmark.

Not a pytest plugin: import it (``tests/`` is on ``sys.path`` for the tests; the benchmark
adds it). Every builder is deterministic in its arguments, so a failing case can be named
and rebuilt.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence


def pdf(streams: Sequence[bytes], *, flate: bool = False) -> bytes:
    """A valid PDF 1.4: one page per content stream, Helvetica as /F1, optionally Flate."""
    return _pdf([(zlib.compress(s, 9), True) if flate else (s, False) for s in streams])


def _pdf(contents: Sequence[tuple[bytes, bool]]) -> bytes:
    """A PDF with one page per ``(stream bytes, is Flate-encoded)``."""
    objects: list[bytes] = [b"", b""]  # 1: catalog, 2: page tree (filled in below)

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for data, flate in contents:
        flt = b" /Filter /FlateDecode" if flate else b""
        content = add(b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(data), flt, data))
        kids.append(
            add(
                b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>" % (font, content)
            )
        )
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def text_lines(lines: Sequence[bytes], size: float = 12) -> bytes:
    """A content stream showing each line with Tj, one under the other, in ``size`` points
    (pdfium keeps only what falls on the page: long lines need a small size)."""
    ops = [b"BT /F1 %g Tf 72 720 Td %g TL" % (size, size * 1.2)]
    for line in lines:
        escaped = line.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
        ops.append(b"(" + escaped + b") Tj T*")
    ops.append(b"ET")
    return b"\n".join(ops)


def pdf_hyphen_line(repeats: int = 8_000) -> bytes:
    """One PDF line of ``"- "`` repeated: the normalisation's worst case before it was linear."""
    return pdf([text_lines([b"- " * repeats], size=0.03)])


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
    return _pdf([(data, True)])


def pdf_many_pages(pages: int) -> bytes:
    return pdf([text_lines([b"page %d" % n]) for n in range(pages)])


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
