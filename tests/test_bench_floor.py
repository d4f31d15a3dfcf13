"""The write floor of benchmarks/bench_floor.py stays a fair floor: it really stores each
write durably in Amber's own schema (so a migration that it no longer satisfies fails here,
not as a quietly broken benchmark), and its verdict follows from its figures."""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
import sys
from pathlib import Path
from typing import Any

import blake3
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def benchmark_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))

    def load(name: str) -> Any:
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    yield load
    for name in ("floor_app", "bench_floor", "bench_http", "baseline_app"):
        sys.modules.pop(name, None)


def _writes(count: int) -> list[dict[str, str]]:
    return [
        {
            "uri_r": f"https://floor.example/doc/{i % 3}?v=1",
            "content": f"passage {i} " * 50,
            "content_type": "text/plain",
            "scope": "passage",
            "tool": "test",
        }
        for i in range(count)
    ]


async def _write_all(floor: Any, bodies: list[dict[str, str]]) -> list[dict[str, str]]:
    try:
        return list(await asyncio.gather(*(floor.write(body) for body in bodies)))
    finally:
        floor.close()


@pytest.mark.parametrize("blobs", ["files", "packed"])
def test_the_floor_stores_every_write_in_ambers_schema(
    tmp_path: Path, benchmark_module: Any, blobs: str
) -> None:
    floor = benchmark_module("floor_app").Floor(tmp_path, packed=blobs == "packed")
    bodies = _writes(40)
    answers = asyncio.run(_write_all(floor, bodies))

    index = sqlite3.connect(tmp_path / "index.sqlite3")
    stored = dict(index.execute("SELECT id, content_hash FROM mementos"))
    migrated = index.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
    from archive.index.migrations import MIGRATIONS

    assert migrated == MIGRATIONS[-1].version
    assert len(stored) == 40
    for body, answer in zip(bodies, answers, strict=True):
        address = blake3.blake3(body["content"].encode()).hexdigest()
        assert answer["content_hash"] == f"blake3:{address}"
        assert stored[answer["id"]] == address
        if blobs == "files":
            assert (tmp_path / "blobs" / address[:2] / address).read_bytes() == body[
                "content"
            ].encode()
    if blobs == "files":
        assert not list((tmp_path / "blobs").glob("*/*.tmp"))  # every temp file was published
    else:
        assert (tmp_path / "pack").stat().st_size == sum(len(b["content"].encode()) for b in bodies)


def test_the_verdict_compares_the_floors_cpu_with_the_budget(benchmark_module: Any) -> None:
    bench_floor = benchmark_module("bench_floor")
    phase = bench_floor.PhaseResult

    def result(target: str, rps: float, server: float, load: float, other: float) -> Any:
        return phase(
            mode="round-1",
            target=target,
            kind="write",
            requests=1,
            errors=0,
            seconds=1.0,
            rps=rps,
            p50_ms=1.0,
            p99_ms=1.0,
            mean_ms=1.0,
            max_ms=1.0,
            server_cpu=server,
            load_cpu=load,
            other_cpu=other,
        )

    phases = {
        "baseline": result("baseline", 10_000, 1.0, 0.5, 0.0),
        "floor": result("floor", 4_000, 0.8, 0.2, 0.2),
        "packed": result("packed", 5_000, 0.8, 0.2, 0.0),
        "amber": result("amber", 2_000, 0.8, 0.1, 0.0),
    }
    (row,) = bench_floor.ratios_of([phases], cpus=2)
    assert row["floor/baseline"] == pytest.approx(0.4)
    assert row["amber/floor"] == pytest.approx(0.5)
    assert row["floor us/write"] == pytest.approx(250)  # (0.8 + 0.2) cores / 4,000 per second
    # At 8,000 writes/s the load process needs 0.4 cores: 1.6 cores left, 200 µs per write.
    assert row["budget us/write"] == pytest.approx(200)
