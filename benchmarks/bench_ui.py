"""Server time to render a transcript's page (/ui/transcripts/{id}) with 100 citations.

Each view re-hashes every cited passage and reads the latest drift verdicts, so the page
costs more than the JSON the API answers for the same transcript; this prints both, and
their ratio, from the same run (the API read is the baseline). Requests go straight to the
ASGI app (httpx's ASGITransport): no network, no client process, the server's work only.

    python benchmarks/bench_ui.py [--citations 100] [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from api.app import create_app
from archive.archive import Archive
from archive.config import Settings

BASE = "http://bench.test"
TRANSCRIPT = "t-bench"


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _time(
    client: httpx.AsyncClient, path: str, headers: dict[str, str], n: int
) -> list[float]:
    for _ in range(10):  # warm up
        assert (await client.get(path, headers=headers)).status_code == 200
    timings = []
    for _ in range(n):
        started = time.perf_counter()
        response = await client.get(path, headers=headers)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return timings


async def _run(citations: int, requests: int, root: Path) -> None:
    settings = Settings(data_dir=root, public_base_url=BASE, rate_limit_per_second=0)
    archive = Archive.open(settings)
    try:
        agent = {"Authorization": f"Bearer {archive.keys.create('acme', 'agent').key}"}
        auditor_key = archive.keys.create("acme", "auditor").key
        app = create_app(settings, archive=archive)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            assert (
                await client.put(f"/api/v1/transcripts/{TRANSCRIPT}", json={}, headers=agent)
            ).is_success
            for batch in range(0, citations, 50):
                body = {
                    "citations": [
                        {
                            "source": {
                                "uri_r": f"https://site{i % 10}.example/article/{i}",
                                "content": f"Paragraph {i}: the figure for year {2000 + i} was "
                                f"{i * 7} units, according to the report. " * 20,
                                "content_type": "text/plain",
                                "captured_at": "2025-01-01T00:00:00Z",
                                "tool": "http.get",
                            },
                            "quote": {"exact": f"the figure for year {2000 + i} was {i * 7} units"},
                        }
                        for i in range(batch, min(citations, batch + 50))
                    ]
                }
                cited = await client.post(
                    f"/api/v1/transcripts/{TRANSCRIPT}/citations", json=body, headers=agent
                )
                assert cited.status_code == 201, cited.text
            form = await client.get("/ui/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None
            signed = await client.post(
                "/ui/login",
                data={"key": auditor_key, "csrf": csrf.group(1), "next": "/ui/"},
                headers={"Origin": BASE},
            )
            assert signed.status_code == 303, signed.text
            page = await client.get(f"/ui/transcripts/{TRANSCRIPT}")
            assert page.text.count("data-citation-id=") == citations
            page_ms = await _time(client, f"/ui/transcripts/{TRANSCRIPT}", {}, requests)
            client.cookies.clear()
            auditor = {"Authorization": f"Bearer {auditor_key}"}
            api_ms = await _time(client, f"/api/v1/transcripts/{TRANSCRIPT}", auditor, requests)
    finally:
        archive.close()
    print(f"transcript with {citations} citations, {requests} sequential requests each (ms)")
    print(f"{'':28}{'median':>10}{'p99':>10}")
    for name, values in (("page /ui/transcripts/{id}", page_ms), ("API JSON (baseline)", api_ms)):
        print(f"{name:28}{statistics.median(values):10.2f}{_percentile(values, 0.99):10.2f}")
    print(
        f"ratio page/API: median {statistics.median(page_ms) / statistics.median(api_ms):.2f}, "
        f"p99 {_percentile(page_ms, 0.99) / _percentile(api_ms, 0.99):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citations", type=int, default=100)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="amber-bench-ui-") as root:
        asyncio.run(_run(args.citations, args.requests, Path(root)))


if __name__ == "__main__":
    main()
