"""GET /metrics: the group commit's batches and the URI-M memory, in Prometheus text.
Who may read it (admins only) is in test_auth's route matrix."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_server import create_key, start_server

from api.app import create_app
from archive.access.keys import Role
from archive.archive import Archive
from archive.config import Settings
from archive.workermetrics import COUNTER, GAUGE, Figure, WorkerBoard, empty

SAMPLE = re.compile(r"^([a-z_]+) (\d+)$")


def _scrape(text: str) -> dict[str, int]:
    """Every sample of a Prometheus text page, checking each has its HELP and TYPE."""
    samples: dict[str, int] = {}
    described: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            described.add(line.split()[2])
        elif line.startswith("# TYPE "):
            assert line.split()[3] in ("counter", "gauge")
        else:
            matched = SAMPLE.match(line)
            assert matched, f"not a sample line: {line!r}"
            assert matched[1] in described
            samples[matched[1]] = int(matched[2])
    return samples


async def _exercise(settings: Settings, archive: Archive) -> tuple[list[Any], list[Any]]:
    app = create_app(settings.with_overrides(rate_limit_per_second=0), archive=archive, auth=True)
    agent = {"Authorization": f"Bearer {archive.keys.create('default', Role.AGENT).key}"}
    admin = {"Authorization": f"Bearer {archive.keys.create('default', Role.ADMIN).key}"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        ) as client,
    ):
        before = await client.get("/metrics", headers=admin)
        # Concurrent writes from one event loop: the loop's group commit batches them.
        written = await asyncio.gather(
            *(
                client.post(
                    "/api/v1/mementos",
                    headers=agent,
                    json={
                        "uri_r": f"https://ex.org/m/{n}",
                        "content": f"passage {n}",
                        "content_type": "text/plain",
                    },
                )
                for n in range(8)
            )
        )
        resolved = [await client.get(written[0].json()["uri_m"], headers=agent) for _ in range(3)]
        after = await client.get("/metrics", headers=admin)
        refused = await client.get("/metrics", headers=agent)
    return [before, after, refused], [*written, *resolved]


def test_metrics_count_write_batches_and_uri_m_answers_from_memory(
    settings: Settings, archive: Archive
) -> None:
    (before, after, refused), answers = asyncio.run(_exercise(settings, archive))
    assert [answer.status_code for answer in answers] == [201] * 8 + [200] * 3
    assert before.status_code == after.status_code == 200
    assert after.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert refused.status_code == 403
    first, last = _scrape(before.text), _scrape(after.text)
    writes = last["amber_write_batch_mementos_total"] - first["amber_write_batch_mementos_total"]
    batches = last["amber_write_batches_total"] - first["amber_write_batches_total"]
    assert writes == 8
    assert 1 <= batches < 8  # concurrent writers shared commits
    requests = (
        last["amber_uri_m_cache_hits_total"]
        + last["amber_uri_m_cache_misses_total"]
        - first["amber_uri_m_cache_hits_total"]
        - first["amber_uri_m_cache_misses_total"]
    )
    assert requests == 3
    # Both backends remember (SQLite: signal files; PostgreSQL: generation rows).
    assert last["amber_uri_m_cache_hits_total"] - first["amber_uri_m_cache_hits_total"] == 2
    assert last["amber_uri_m_cache_entries"] == 1
    assert 1000 < last["amber_uri_m_cache_bytes"] < 3000  # one ServedMemento, ~1.5 KB
    assert last["amber_uri_m_cache_budget_bytes"] == settings.uri_m_cache_mb * 1024 * 1024


# -- several workers on one host (archive/workermetrics.py) --------------------------------

LABELLED = re.compile(r'^([a-z_]+)\{worker="(\d+)"\} (\d+)$')


def _host_scrape(text: str) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Unlabelled samples, and the labelled ones by name and worker."""
    plain: dict[str, int] = {}
    labelled: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        matched = LABELLED.match(line)
        if matched:
            labelled.setdefault(matched[1], {})[matched[2]] = int(matched[3])
            continue
        sample = SAMPLE.match(line)
        assert sample, f"not a sample line: {line!r}"
        plain[sample[1]] = int(sample[2])
    return plain, labelled


def _figures(requests: int, entries: int) -> list[Figure]:
    return [
        Figure("amber_requests_total", COUNTER, "Requests.", requests),
        Figure("amber_entries", GAUGE, "Entries.", entries),
    ]


def test_one_board_answers_for_every_worker(tmp_path: Path) -> None:
    counts = {"a": (5, 1), "b": (7, 2)}
    first = WorkerBoard(tmp_path, lambda: _figures(*counts["a"]), interval=60)
    second = WorkerBoard(tmp_path, lambda: _figures(*counts["b"]), interval=60)
    try:
        assert {first.slot, second.slot} == {0, 1}
        second.publish()
        plain, labelled = _host_scrape(first.gather())
        assert plain["amber_requests_total"] == 12  # summed
        assert plain["amber_workers"] == 2
        assert labelled["amber_entries"] == {"0": 1, "1": 2}  # one per worker
        counts["a"] = counts["b"] = (6, 3)  # the scraped worker's own are read now, the
        plain, labelled = _host_scrape(second.gather())  # other's as last published
        assert plain["amber_requests_total"] == 5 + 6
        assert labelled["amber_entries"] == {"0": 1, "1": 3}
    finally:
        first.close()
        second.close()


def test_a_worker_that_died_keeps_its_counts_and_its_successor_carries_them(
    tmp_path: Path,
) -> None:
    gone = WorkerBoard(tmp_path, lambda: _figures(9, 4), interval=60)
    gone.close()  # its slot is free, its last figures stay
    # A dead worker's file whose slot nobody took again: counted, its gauges not shown.
    (tmp_path / "slot-7.json").write_text(
        json.dumps(
            {
                "pid": 0,
                "figures": [
                    {"name": "amber_requests_total", "kind": "counter", "help": "x", "value": 100},
                    {"name": "amber_entries", "kind": "gauge", "help": "x", "value": 50},
                ],
            }
        )
    )
    successor = WorkerBoard(tmp_path, lambda: _figures(1, 1), interval=60)
    try:
        assert successor.slot == 0
        plain, labelled = _host_scrape(successor.gather())
        assert plain["amber_requests_total"] == 9 + 1 + 100  # never goes down
        assert labelled["amber_entries"] == {"0": 1}
        assert plain["amber_workers"] == 1
    finally:
        successor.close()
    empty(tmp_path)
    assert list(tmp_path.iterdir()) == [] or all(
        not p.name.startswith("slot-") for p in tmp_path.iterdir()
    )


@pytest.mark.postgres
def test_one_scrape_of_two_real_workers_counts_every_request(
    postgres_url: str, tmp_path: Path
) -> None:
    """``amber serve --workers 2``: N URI-M requests over fresh connections (the kernel
    spreads them over both workers), then every scrape, whichever worker answers, counts N."""
    env = {
        "AMBER_DATA_DIR": str(tmp_path / "data"),
        "AMBER_DATABASE_URL": postgres_url,
        "AMBER_PUBLIC_BASE_URL": "http://workers.example",
        "AMBER_RATE_LIMIT_PER_SECOND": "0",
        "AMBER_METRICS_PUBLISH_SECONDS": "0.2",
        "AMBER_KEY_SECRET": "k" * 40,
    }
    with start_server(env, serve_args=("--workers", "2")) as server:
        admin = {"Authorization": f"Bearer {create_key(env, 'admin')}"}
        written = httpx.post(
            f"{server.base_url}/api/v1/mementos",
            headers=server.headers,
            json={"uri_r": "https://ex.org/w", "content": "x", "content_type": "text/plain"},
            timeout=30.0,
        )
        assert written.status_code == 201, written.text
        path = httpx.URL(written.json()["uri_m"]).path
        requests = 40
        for _ in range(requests):
            with httpx.Client(base_url=server.base_url, headers=server.headers) as fresh:
                assert fresh.get(path).status_code == 200
        time.sleep(1.0)  # every worker has published since (each 0.2 s)
        totals = []
        for _ in range(6):
            with httpx.Client(base_url=server.base_url, headers=admin) as fresh:
                answer = fresh.get("/metrics")
            assert answer.status_code == 200, answer.text
            plain, labelled = _host_scrape(answer.text)
            assert plain["amber_workers"] == 2
            assert set(labelled["amber_uri_m_cache_entries"]) == {"0", "1"}
            totals.append(
                (
                    plain["amber_uri_m_cache_hits_total"] + plain["amber_uri_m_cache_misses_total"],
                    plain["amber_write_batch_mementos_total"],
                )
            )
        assert totals == [(requests, 1)] * 6, totals
