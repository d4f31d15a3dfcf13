"""GET /metrics: the group commit's batches and the URI-M memory, in Prometheus text.
Who may read it (admins only) is in test_auth's route matrix."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

from api.app import create_app
from archive.access.keys import Role
from archive.archive import Archive
from archive.config import Settings

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
