"""Erasure: what is left of the erased text, how long an erasure takes, and what SQLite's
``secure_delete`` costs the write path.

Not a test: it measures, prints a table and exits 0. See benchmarks/README.md.

    python benchmarks/bench_erasure.py                       # about a minute
    python benchmarks/bench_erasure.py --citations 1 10 100 --writes 2000 --rounds 5
    python benchmarks/bench_erasure.py --durability full --writes 200
    PYTHONPATH=/tmp/amber-before python benchmarks/bench_erasure.py --rounds 0   # another checkout

Part 1, erasure. For each N in ``--citations``: a fresh embedded data directory (local
store, SQLite, durability full), one captured document whose N sentences each hold a
unique marker, N citations of it (one per sentence, so N passage mementos), then the
admin erasure of the document. It prints the erasure's wall time, how many of the N
passages still answer (not gone), how many stored values still hold the marker (any
column of any table), and which files of the data directory (database, -wal, -shm, blobs)
still hold its bytes. Run it against another checkout with ``PYTHONPATH=<checkout>`` to
compare: it only uses the library calls every version has.

Part 2, the write path with ``secure_delete``. Rounds alternate ON (Amber's setting) and
OFF (the same index, the pragma turned off on the writer's connection), by default with
``durability=relaxed`` (no syncs: the pragma's CPU cost shows, not hidden by the disk):
``--writes``
memento writes of 4 KiB, then citations of them, then a retention sweep deleting them all.
It prints the medians (writes, citations, and mementos tombstoned per second) and the
ratio ON/OFF of each (1.00 = free).
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Text, cast, select

from archive.archive import Archive
from archive.citations import CitationRequest, QuoteRequest
from archive.config import Settings
from archive.exceptions import Gone
from archive.index.schema import metadata
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

CAPTURED = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)


def open_archive(root: Path, durability: str = "full") -> Archive:
    return Archive.open(
        Settings(data_dir=root / "amber-data", public_base_url="http://b", durability=durability)
    )


def rows_holding(archive: Archive, marker: str) -> int:
    count = 0
    with archive.index.read() as connection:
        for table in metadata.sorted_tables:
            for column in table.columns:
                query = select(column).where(cast(column, Text).contains(marker))
                count += len(connection.execute(query).all())
    return count


def files_holding(root: Path, marker: str) -> list[str]:
    needle = marker.encode()
    found = set()
    for path in root.rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            name = str(path.relative_to(root / "amber-data"))
            found.add("blobs/…" if name.startswith("blobs/") else name)
    return sorted(found)


def erasure_case(citations: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="amber-bench-erasure-"))
    try:
        archive = open_archive(root)
        marker = "Quixmarker" + secrets.token_hex(6)
        sentences = [
            f"Clause {n}: the {marker} account number {n:05d} is closed." for n in range(citations)
        ]
        filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 4
        content = filler.join(sentences).encode() + filler.encode()
        document = archive.write_memento(
            MementoRequest(
                uri_r="https://bench.example/doc",
                content=content,
                content_type="text/plain; charset=utf-8",
                captured_at=CAPTURED,
                facts=CaptureFacts(tool="http.get", http_status=200),
            )
        ).memento
        archive.transcripts.put("default", "t", "P1Y", {})
        passages = []
        for start in range(0, citations, 100):
            result = archive.citations.cite(
                "default",
                "t",
                [
                    CitationRequest(quote=QuoteRequest(s), memento_id=document.id)
                    for s in sentences[start : start + 100]
                ],
            )
            passages += [c.passage.id for c in result.citations]
        began = time.perf_counter()
        archive.retention.erase("default", document.id, "benchmark", "admin")
        seconds = time.perf_counter() - began
        alive = 0
        for passage in passages:
            try:
                archive.get_memento("default", passage)
                alive += 1
            except Gone:
                pass
        rows = rows_holding(archive, marker)
        archive.close()  # what a reader of the files finds once Amber has stopped
        return {
            "citations": citations,
            "erase_ms": round(seconds * 1000, 1),
            "passages_still_served": alive,
            "values_holding_text": rows,
            "files_holding_text": files_holding(root, marker),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def secure_delete_off(archive: Archive) -> None:
    """Turn the pragma off on the writer's one pooled connection (every write uses it)."""
    connection = archive.index._writer.raw_connection()
    try:
        connection.cursor().execute("PRAGMA secure_delete=OFF")
    finally:
        connection.close()


def timed(work: Callable[[], object]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def write_path_round(writes: int, secure: bool, durability: str) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="amber-bench-securedelete-"))
    try:
        archive = open_archive(root, durability)
        if not secure:
            secure_delete_off(archive)
        bodies = [
            f"Passage {n} {secrets.token_hex(8)} ".encode()
            + secrets.token_bytes(2048).hex().encode()
            for n in range(writes)
        ]
        ids: list[str] = []

        def write() -> None:
            for n, body in enumerate(bodies):
                ids.append(
                    archive.write_memento(
                        MementoRequest(
                            uri_r=f"https://bench.example/{n}",
                            content=body,
                            content_type="text/plain",
                            facts=CaptureFacts(tool="http.get"),
                        )
                    ).memento.id
                )

        def cite() -> None:
            archive.transcripts.put("default", "t", "P1D", {})
            for n, memento_id in enumerate(ids[: writes // 4]):
                archive.citations.cite(
                    "default",
                    "t",
                    [CitationRequest(quote=QuoteRequest(f"Passage {n}"), memento_id=memento_id)],
                )

        figures = {"write": timed(write), "cite": timed(cite)}
        later = datetime.now(UTC) + timedelta(days=400)
        figures["sweep"] = timed(lambda: archive.retention.sweep(now=later))
        archive.close()
        counts = {"write": writes, "cite": writes // 4, "sweep": writes + writes // 4}
        return {name: counts[name] / seconds for name, seconds in figures.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--citations", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--durability",
        choices=["full", "relaxed"],
        default="relaxed",
        help="of the write-path rounds: relaxed (no syncs) shows the pragma's CPU cost, "
        "which syncs would otherwise hide",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    erasures = [erasure_case(n) for n in args.citations]
    rounds: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for number in range(args.rounds):
        for secure in (True, False) if number % 2 == 0 else (False, True):
            rounds[secure].append(write_path_round(args.writes, secure, args.durability))
    medians = {
        secure: {name: statistics.median(r[name] for r in found) for name in found[0]}
        for secure, found in rounds.items()
        if found  # --rounds 0: the erasure part only
    }
    if args.json:
        print(json.dumps({"erasures": erasures, "per_second": medians}, indent=2, default=str))
        return
    print("erasure of a cited document (local store, SQLite, durability full)")
    print(f"{'N':>5} {'erase ms':>9} {'passages served':>16} {'values w/ text':>15}  files w/ text")
    for e in erasures:
        print(
            f"{e['citations']:>5} {e['erase_ms']:>9} {e['passages_still_served']:>16} "
            f"{e['values_holding_text']:>15}  {', '.join(e['files_holding_text']) or '-'}"
        )
    if not medians:
        return
    print(
        f"\nwrite path ({args.durability}), {args.writes} writes per round, "
        f"median of {args.rounds} rounds, per second"
    )
    print(f"{'step':>6} {'secure_delete ON':>17} {'OFF':>9} {'ON/OFF':>7}")
    for name in medians[True]:
        on, off = medians[True][name], medians[False][name]
        print(f"{name:>6} {on:>17.0f} {off:>9.0f} {on / off:>7.2f}")


if __name__ == "__main__":
    main()
