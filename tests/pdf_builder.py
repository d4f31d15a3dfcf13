"""Minimal valid PDF 1.4 files built in memory, so tests need no PDF library to make them.

Shared by the extraction tests, the hostile-document builders and the benchmarks that
import them (``tests/`` is on ``sys.path`` for the tests; the benchmarks add it).
"""

from __future__ import annotations

from collections.abc import Sequence

# A page's content: the stream's bytes and whether they are already Flate-encoded.
PageContent = tuple[bytes, bool]


def text_stream(lines: Sequence[bytes], *, size: float = 12, leading: float | None = None) -> bytes:
    """A content stream showing each line with Tj, one under the other, in ``size`` points
    (pdfium keeps only what falls on the page: long lines need a small size)."""
    step = size * 1.2 if leading is None else leading
    ops = [b"BT /F1 %g Tf 72 720 Td %g TL" % (size, step)]
    for line in lines:
        escaped = line.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
        ops.append(b"(" + escaped + b") Tj T*")
    ops.append(b"ET")
    return b"\n".join(ops)


def build_pdf(pages: Sequence[PageContent], *, to_unicode: bytes | None = None) -> bytes:
    """A PDF with one page per content, Helvetica (WinAnsi) as /F1, and an optional
    ToUnicode CMap for it. Pages with identical content share one stream object, so a
    many-page document of one big stream stays small."""
    objects: list[bytes] = [b"", b""]  # 1: catalog, 2: page tree (filled in below)

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    cmap = b""
    if to_unicode is not None:
        stream = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(to_unicode), to_unicode))
        cmap = b" /ToUnicode %d 0 R" % stream
    font = add(
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding%s >>"
        % cmap
    )
    streams: dict[PageContent, int] = {}
    kids = []
    for data, flate in pages:
        if (data, flate) not in streams:
            flt = b" /Filter /FlateDecode" if flate else b""
            body = b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(data), flt, data)
            streams[(data, flate)] = add(body)
        kids.append(
            add(
                b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>"
                % (font, streams[(data, flate)])
            )
        )
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    return _serialise(objects)


def _serialise(objects: Sequence[bytes]) -> bytes:
    """The file: header, numbered objects, cross-reference table and trailer."""
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
