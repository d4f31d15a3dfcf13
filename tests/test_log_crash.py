"""The evidence log under real processes: SIGKILL during concurrent writes leaves dense
indexes and no row without its leaf; two servers on one PostgreSQL make one linear log."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import httpx
import pytest
from live_server import LiveServer, env_for, free_port, start_server

from archive.archive import Archive
from archive.config import Settings
from archive.log.audit import audit

pytestmark = pytest.mark.slow

WRITERS = 6
LOAD_SECONDS = 0.8


@pytest.fixture()
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "amber-data", database_url=database_url)


def _load(servers: list[LiveServer], acked: list[str], *, kill: bool = False) -> tuple[int, int]:
    """Writers spread over ``servers`` for a while (``kill``: then SIGKILL the first, mid
    flight); ids of acknowledged mementos into ``acked``. (Requests in flight at the end,
    requests cut by the kill.)"""
    stop = threading.Event()
    in_flight = [0]
    cut = [0]
    counter = itertools.count()
    lock = threading.Lock()

    def writer(n: int) -> None:
        server = servers[n % len(servers)]
        with httpx.Client(
            base_url=server.base_url, headers=server.headers, timeout=20.0, trust_env=False
        ) as client:
            while not stop.is_set():
                i = next(counter)
                with lock:
                    in_flight[0] += 1
                try:
                    answer = client.post(
                        "/api/v1/mementos",
                        json={
                            "uri_r": f"https://log.example/{n}/{i}",
                            "content": f"content {n} {i}",
                            "content_type": "text/plain",
                            "captured_at": "2024-05-01T12:00:00Z",
                        },
                    )
                except httpx.TransportError:
                    with lock:
                        cut[0] += 1
                    return  # the server was killed mid-request
                finally:
                    with lock:
                        in_flight[0] -= 1
                assert answer.status_code == 201, answer.text
                with lock:
                    acked.append(answer.json()["id"])

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(WRITERS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while not acked and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(LOAD_SECONDS)
    with lock:
        at_end = in_flight[0]
        if kill:
            servers[0].kill()
        stop.set()
    for t in threads:
        t.join(timeout=30)
    return at_end, cut[0]


def _audited(settings: Settings, acked: list[str]) -> int:
    archive = Archive.open(settings)
    try:
        evidence = archive.evidence_log()
        evidence.step(force=True)
        report = audit(archive.index, evidence.signer.vkey())  # dense, one leaf per row
        for memento_id in acked[:50]:
            assert evidence.proof("memento", memento_id, "default")["index"] >= 0
        return report.leaves
    finally:
        archive.close()


def test_sigkill_during_concurrent_writes_leaves_no_gap(settings: Settings) -> None:
    port = free_port()
    env = {**env_for(settings, f"http://127.0.0.1:{port}"), "AMBER_RATE_LIMIT_PER_SECOND": "0"}
    server = start_server(env, port)
    acked: list[str] = []
    try:
        in_flight, cut = _load([server], acked, kill=True)
    finally:
        server.close()
    assert acked, "nothing was acknowledged before the kill"
    assert in_flight > 0 and cut > 0, "the kill interrupted no write: the test proves nothing"
    assert _audited(settings, acked) >= len(acked)


def test_two_servers_on_one_postgresql_make_one_linear_log(
    postgres_url: str, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "amber-data", database_url=postgres_url)
    base = f"http://127.0.0.1:{free_port()}"
    env = {**env_for(settings, base), "AMBER_RATE_LIMIT_PER_SECOND": "0"}
    first = start_server(env, free_port())
    second = start_server(env, free_port(), agent_key=True)
    acked: list[str] = []
    try:
        _load([first, second], acked)
        time.sleep(1.5)  # both integrate and sign while idle
    finally:
        first.close()
        second.close()
    assert len(acked) > 10
    leaves = _audited(settings, acked)  # every checkpoint matches one recomputed tree
    assert leaves == len(set(acked))
