"""Retention sweep throughput over a large index (not a test; prints figures).

Builds an embedded-default archive (local blobs + SQLite, durability on) holding N mementos
(default 1,000,000) of which E (default 10,000) have expired — rows inserted in bulk, blobs
written for the expired ones — then measures:

- expiry evaluation: mementos/s through the sweep's own per-batch step in dry-run mode (a
  write transaction, citations and other reach joined to transcripts, holds, grace, verdicts;
  rolled back), over 200,000 ids drawn at random from the whole index (a sweep's candidates
  are scattered over it: ids are hashes), 500 per batch;
- a dry-run sweep: candidates found and evaluated per second by the sweep itself (write
  transaction, verdicts), nothing deleted;
- a full sweep: mementos deleted/s and blobs deleted/s against the local store, durability
  on (the product default: blobs' directories fsync'd, SQLite ``synchronous=FULL``);
- scaling: the same sweep over an index 10x smaller with the same number expired — the
  ratio of the two sweep times shows the cost follows what expired, not the archive size.
  Each sweep's time is also split into the blob store's share (unlink, directory fsync:
  filesystem I/O, the same per blob whatever the index size, and the noisiest part on a
  shared disk) and the rest (candidates, evaluation, tombstones, blob bookkeeping), with
  the ratio of the rest printed too.

Usage: python benchmarks/bench_retention.py [--mementos N] [--expired E]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from archive.archive import Archive
from archive.config import Settings
from archive.dates import utc_now
from archive.hashing import content_address
from archive.index.schema import blobs, citations, mementos, transcripts
from archive.retention import SweepReport

CHUNK = 20_000


def build(root: Path, total: int, expired: int) -> Archive:
    archive = Archive.open(Settings(data_dir=root))  # the embedded default, durability "full"
    assert archive.settings.durable
    now = utc_now()
    old = now - timedelta(days=400)
    archive.transcripts.put("default", "long", "P7Y", {"customer": "bench"})
    with archive.index.write() as connection:
        connection.execute(
            insert(transcripts).values(
                tenant="default",
                id="expired-t",
                created_at=old,
                updated_at=old,
                retention="P30D",
                retain_until=old + timedelta(days=30),
                labels_json="{}",
                legal_hold=0,
            )
        )
    rows: list[dict[str, Any]] = []
    blob_rows: list[dict[str, Any]] = []
    cite_rows: list[dict[str, Any]] = []
    for number in range(total):
        is_expired = number < expired
        if is_expired:
            stored = archive.blobs.put(f"expired blob {number}".encode())
            address, size = stored.address, stored.size
        else:
            address, size = content_address(f"live {number}".encode()), 100  # rows only
        memento_id = f"{number:032x}"
        rows.append(
            {
                "id": memento_id,
                "tenant": "default",
                "uri_r": f"https://bench.example/{number % 5000}",
                "urir_key": f"https://bench.example/{number % 5000}",
                "captured_at": old,
                "archived_at": old if is_expired else now,
                "content_hash": address,
                "blob_version_id": None,
                "media_type": "text/plain",
                "size": size,
                "scope": "document",
                "tool": "http.get",
                "final_url": None,
                "http_status": 200,
                "headers_json": "{}",
                "expires_at": old + timedelta(days=14)
                if is_expired
                else now + timedelta(days=3650),
                "deleted_at": None,
                "deletion_reason": None,
                "legal_hold": 0,
            }
        )
        blob_rows.append(
            {
                "address": address,
                "size": size,
                "version_id": None,
                "stored_at": old,
                "state": "live",
                "lock_legal_hold": 0,
            }
        )
        if (
            number % 10 == 0
        ):  # a tenth of everything is cited (expired ones by an expired transcript)
            cite_rows.append(
                {
                    "id": f"c{number:031x}",
                    "tenant": "default",
                    "transcript_id": "expired-t" if is_expired else "long",
                    "passage_memento_id": memento_id,
                    "document_memento_id": None,
                    "document_hash": address,
                    "document_size": size,
                    "document_media_type": "text/plain",
                    "document_uri_r": "https://bench.example/",
                    "document_captured_at": old,
                    "document_tool": "http.get",
                    "document_final_url": None,
                    "document_http_status": 200,
                    "document_headers_json": "{}",
                    "quote_hash": address,
                    "selector_json": '{"exact": "x", "prefix": "", "suffix": ""}',
                    "position_start": 0,
                    "position_end": 1,
                    "extractor": "amber-plain",
                    "extractor_version": "1",
                    "normalisation": "amber-norm-1",
                    "match_method": "exact",
                    "run_id": None,
                    "source_ids_json": "[]",
                    "created_at": old,
                }
            )
        if len(rows) >= CHUNK:
            _flush(archive, rows, blob_rows, cite_rows)
    _flush(archive, rows, blob_rows, cite_rows)
    return archive


def _flush(archive: Archive, rows: list[Any], blob_rows: list[Any], cite_rows: list[Any]) -> None:
    with archive.index.write() as connection:
        if blob_rows:
            archive.index.inserts.insert_ignoring(
                connection, blobs, blob_rows, conflict=["address"]
            )
        if rows:
            connection.execute(insert(mementos), rows)
        if cite_rows:
            connection.execute(insert(citations), cite_rows)
    rows.clear()
    blob_rows.clear()
    cite_rows.clear()


class StoreClock:
    """Wall time spent inside the local store's deletions: each ``delete`` (unlink) and the
    end of each ``batched_deletes`` block (one fsync per directory touched)."""

    def __init__(self, store: Any) -> None:
        self.seconds = 0.0
        real_delete, real_batched = store.delete, store.batched_deletes

        def delete(address: str, version_id: str | None = None) -> None:
            started = time.perf_counter()
            try:
                real_delete(address, version_id)
            finally:
                self.seconds += time.perf_counter() - started

        @contextmanager
        def batched_deletes() -> Iterator[None]:
            syncing_from: float | None = None
            try:
                with real_batched():
                    try:
                        yield
                    finally:
                        syncing_from = time.perf_counter()  # the block's exit syncs
            finally:
                if syncing_from is not None:
                    self.seconds += time.perf_counter() - syncing_from

        store.delete, store.batched_deletes = delete, batched_deletes


def measure(total: int, expired: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as root:
        started = time.perf_counter()
        archive = build(Path(root), total, expired)
        built = time.perf_counter() - started
        # Write back what the build left dirty, so no phase pays for the build's I/O (an fsync
        # in a sweep would otherwise flush hundreds of MB of freshly built index).
        os.sync()
        try:
            sample = [
                f"{n:032x}" for n in random.Random(0).sample(range(total), min(total, 200_000))
            ]
            evaluated = SweepReport(dry_run=True)
            started = time.perf_counter()
            with archive.retention.mapped_index():  # as the sweep runs it
                for start in range(0, len(sample), 500):
                    archive.retention.sweeper.settle(
                        sample[start : start + 500], utc_now(), True, evaluated
                    )
            evaluation = time.perf_counter() - started
            assert evaluated.evaluated == len(sample), evaluated.as_dict()
            started = time.perf_counter()
            dry = archive.retention.sweep(batch_size=500, dry_run=True)
            dry_seconds = time.perf_counter() - started
            os.sync()
            assert dry.evaluated == expired and dry.mementos_deleted == expired, dry.as_dict()
            clock = StoreClock(archive.blobs)
            started = time.perf_counter()
            report = archive.retention.sweep(batch_size=500)
            sweep = time.perf_counter() - started
            assert report.mementos_deleted == expired, report.as_dict()
            assert report.blobs_deleted == expired, report.as_dict()
        finally:
            archive.close()
    return {
        "mementos": total,
        "expired": expired,
        "build_seconds": round(built, 1),
        "evaluated_per_second": round(len(sample) / evaluation),
        "dry_run_sweep_evaluated_per_second": round(dry.evaluated / dry_seconds),
        "sweep_seconds": round(sweep, 2),
        "sweep_store_seconds": round(clock.seconds, 2),
        "sweep_index_seconds": round(sweep - clock.seconds, 2),
        "deleted_mementos_per_second": round(expired / sweep),
        "deleted_blobs_per_second": round(report.blobs_deleted / sweep),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mementos", type=int, default=1_000_000)
    parser.add_argument("--expired", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    large = measure(args.mementos, args.expired)
    small = measure(max(args.expired * 2, args.mementos // 10), args.expired)
    result: dict[str, Any] = {
        "large": large,
        "small": small,
        "sweep_time_ratio_large_over_small": round(
            large["sweep_seconds"] / small["sweep_seconds"], 2
        ),
        "sweep_index_time_ratio_large_over_small": round(
            large["sweep_index_seconds"] / small["sweep_index_seconds"], 2
        ),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name in ("large", "small"):
        figures = result[name]
        print(
            f"{name:>6}: {figures['mementos']:>9,} mementos, {figures['expired']:,} expired | "
            f"evaluate {figures['evaluated_per_second']:>8,}/s | sweep {figures['sweep_seconds']} s "
            f"[store {figures['sweep_store_seconds']} s, rest {figures['sweep_index_seconds']} s] "
            f"({figures['deleted_mementos_per_second']:,} mementos/s, "
            f"{figures['deleted_blobs_per_second']:,} blobs/s) | dry-run sweep "
            f"{figures['dry_run_sweep_evaluated_per_second']:,} evaluated/s | build {figures['build_seconds']} s"
        )
    print(
        f"sweep time, 10x larger index / smaller index: {result['sweep_time_ratio_large_over_small']} "
        f"(without the store's unlink+fsync: {result['sweep_index_time_ratio_large_over_small']}; "
        "≈1 means cost follows what expired, not archive size)"
    )


if __name__ == "__main__":
    main()
