"""Audit bundles (issue #24): export time and size for a transcript of 100 citations over
20 pages of 100 KiB, and the import rate of a 10,000-record WARC, each next to a baseline
measured in the same run (plain zip of the same bytes; direct memento writes).

The export's peak Python memory (tracemalloc) is printed for 100 KiB pages and again for
1 MiB pages (same citations): it must not grow with the pages' bytes (the bundle is streamed
through spooled files; see docs/design.md §13).

Usage: python benchmarks/bench_bundles.py [--pages 20] [--quotes 5] [--records 10000]
       [--big-page-kib 1024]
"""

from __future__ import annotations

import argparse
import io
import random
import tempfile
import time
import tracemalloc
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from archive.archive import Archive
from archive.bundles.export import export_bundle
from archive.bundles.importer import import_file
from archive.bundles.warcfile import http_block, record_bytes
from archive.citations import CitationRequest, QuoteRequest, SourceRequest
from archive.config import Settings
from archive.writes import MementoRequest

WORDS = "policy leave weeks paid parental team request ahead plan costs euros month yearly".split()


def open_archive(root: Path, *, keep_document: bool = False) -> Archive:
    return Archive.open(
        Settings(
            data_dir=root,
            public_base_url="http://bench",
            durability="relaxed",
            extra={"citations": {"keep_document": keep_document}},
        )
    )


def page(rng: random.Random, size: int) -> tuple[str, list[str]]:
    sentences, total = [], 0
    while total < size:
        sentence = " ".join(rng.choice(WORDS) for _ in range(12)) + f" n{len(sentences)}."
        sentences.append(sentence)
        total += len(sentence) + 8
    html = "<html><body>" + "".join(f"<p>{s}</p>" for s in sentences) + "</body></html>"
    return html, sentences


def bench_export(pages: int, quotes: int, page_kib: int) -> None:
    rng = random.Random(24)
    with tempfile.TemporaryDirectory() as tmp:
        archive = open_archive(Path(tmp) / "data", keep_document=True)  # pages in the bundle
        try:
            archive.transcripts.put("default", "t-bench", "P7Y", {})
            for number in range(pages):
                html, sentences = page(rng, page_kib * 1024)
                source = SourceRequest(
                    uri_r=f"https://bench.example/page/{number}",
                    content=html.encode(),
                    content_type="text/html; charset=utf-8",
                    tool="http.get",
                    http_status=200,
                    headers={"Content-Type": "text/html; charset=utf-8"},
                )
                chosen = rng.sample(sentences, quotes)
                archive.citations.cite(
                    "default",
                    "t-bench",
                    [CitationRequest(quote=QuoteRequest(s), source=source) for s in chosen],
                )
            export_bundle(archive, "default", "t-bench")  # warm: checkpoint, key, caches
            started = time.perf_counter()
            bundle = export_bundle(archive, "default", "t-bench")
            export_s = time.perf_counter() - started
            tracemalloc.start()
            export_bundle(archive, "default", "t-bench")
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            started = time.perf_counter()
            plain = io.BytesIO()
            with zipfile.ZipFile(plain, "w") as out:
                for memento_id in bundle.mementos:
                    memento = archive.get_memento("default", memento_id)
                    out.writestr(memento_id, archive.read_content(memento))
            baseline_s = time.perf_counter() - started
        finally:
            archive.close()
    citations = pages * quotes
    print(f"export: {citations} citations over {pages} pages of {page_kib} KiB")
    print(
        f"  bundle {len(bundle.data)} bytes ({len(bundle.data) / 1024:.0f} KiB), "
        f"{len(bundle.mementos)} mementos"
    )
    print(
        f"  peak Python memory of an export (tracemalloc) {peak / 1024 / 1024:.1f} MiB, "
        f"{peak / len(bundle.data):.2f}x the bundle (bounded: grows with citations, "
        "not with the pages' bytes)"
    )
    print(
        f"  export {export_s * 1000:.0f} ms; baseline (read the same mementos, plain zip) "
        f"{baseline_s * 1000:.0f} ms; ratio {export_s / baseline_s:.1f}x"
    )


def warc(records: int) -> bytes:
    out = io.BytesIO()
    start = datetime(2024, 1, 1, tzinfo=UTC)
    for number in range(records):
        body = (f"<html><body><p>record {number} " + "x" * 900 + "</p></body></html>").encode()
        block = http_block(200, "OK", [("Content-Type", "text/html")], body)
        when = (start + timedelta(seconds=number)).isoformat().replace("+00:00", "Z")
        headers = [
            ("WARC-Type", "response"),
            ("WARC-Record-ID", f"<urn:uuid:00000000-0000-4000-8000-{number:012d}>"),
            ("WARC-Date", when),
            ("WARC-Target-URI", f"https://bench.example/r/{number}"),
            ("Content-Type", "application/http; msgtype=response"),
        ]
        out.write(record_bytes(headers, block, body))
    return out.getvalue()


def bench_import(records: int) -> None:
    data = warc(records)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.warc.gz"
        path.write_bytes(data)
        archive = open_archive(Path(tmp) / "import")
        try:
            started = time.perf_counter()
            summary = import_file(archive, path, tenant="default")
            import_s = time.perf_counter() - started
        finally:
            archive.close()
        direct = open_archive(Path(tmp) / "direct")
        try:
            start = datetime(2024, 1, 1, tzinfo=UTC)
            started = time.perf_counter()
            for number in range(records):
                body = (
                    f"<html><body><p>record {number} " + "x" * 900 + "</p></body></html>"
                ).encode()
                direct.write_memento(
                    MementoRequest(
                        uri_r=f"https://bench.example/r/{number}",
                        content=body,
                        content_type="text/html",
                        captured_at=start + timedelta(seconds=number),
                    )
                )
            direct_s = time.perf_counter() - started
        finally:
            direct.close()
    print(
        f"import: a {records}-record WARC ({len(data) / 1024 / 1024:.1f} MiB), "
        f"stored {summary.stored}"
    )
    print(
        f"  import {records / import_s:.0f} records/s; baseline (write_memento of the same "
        f"bytes) {records / direct_s:.0f}/s; ratio {import_s / direct_s:.2f}x the time"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--quotes", type=int, default=5)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument(
        "--big-page-kib", type=int, default=1024, help="a second export, pages this large"
    )
    args = parser.parse_args()
    bench_export(args.pages, args.quotes, 100)
    if args.big_page_kib:
        bench_export(args.pages, args.quotes, args.big_page_kib)
    bench_import(args.records)


if __name__ == "__main__":
    main()
