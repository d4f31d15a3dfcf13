"""Invariant 2 under a real crash: SIGKILL the server in the middle of concurrent writes.

Eight writers post distinct mementos to a live ``amber serve`` as fast as it answers; after
about a second of load the server is killed with SIGKILL (no shutdown handlers, requests
cut mid-flight). Then, on both backends:

- every acknowledged memento (a 201 the client received) resolves, in a freshly opened
  Archive, to exactly the bytes that were sent;
- every index row points at a blob that exists and verifies (a crash may leave orphan
  blobs, never rows pointing at nothing);
- a restarted server serves the acknowledged mementos and accepts new writes.
"""

from __future__ import annotations

import base64
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from live_server import LiveServer, env_for, free_port, start_server

from archive.archive import Archive
from archive.config import Settings
from archive.hashing import content_address
from archive.index import DEFAULT_TENANT

pytestmark = pytest.mark.slow

WRITERS = 8
LOAD_SECONDS = 0.8  # of load after the first acknowledgement, before the kill
FIRST_ACK_TIMEOUT = 15.0
CAPTURED_AT = "2024-05-01T12:00:00Z"
# In the "shared-blobs" run every other request reuses one of these contents under a new
# URI-R: writers race on the same blob address (the store's "already there" path).
SHARED_CONTENTS = tuple(
    f"shared content {n}\n".encode() + random.Random(1000 + n).randbytes(2048) for n in range(16)
)


@dataclass
class Load:
    """What the writers saw, shared between their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: list[tuple[bytes, dict[str, Any]]] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    cut: int = 0  # transport errors after the kill: requests that never got an answer
    in_flight: int = 0
    first_ack: threading.Event = field(default_factory=threading.Event)
    killed: threading.Event = field(default_factory=threading.Event)


def _writer(number: int, base_url: str, headers: dict[str, str], load: Load, shared: bool) -> None:
    rng = random.Random(number)
    sequence = 0
    with httpx.Client(base_url=base_url, headers=headers, timeout=20.0, trust_env=False) as client:
        while not load.killed.is_set():
            sequence += 1
            # Fresh content: a unique prefix, then 1-4 KiB of noise (or, half the time in the
            # shared-blobs run, a content other writers send too, under its own URI-R).
            if shared and sequence % 2 == 0:
                data = rng.choice(SHARED_CONTENTS)
            else:
                data = f"writer {number} request {sequence}\n".encode() + rng.randbytes(
                    rng.randint(1024, 4096)
                )
            body = {
                "uri_r": f"https://crash.example/w{number}/{sequence}?q=1",
                "content_base64": base64.b64encode(data).decode("ascii"),
                "content_type": "application/octet-stream",
                "captured_at": CAPTURED_AT,
                "tool": "http.get",
            }
            with load.lock:
                load.in_flight += 1
            try:
                response = client.post("/api/v1/mementos", json=body)
            except Exception as error:
                with load.lock:
                    load.in_flight -= 1
                    if load.killed.is_set() and isinstance(error, httpx.TransportError):
                        load.cut += 1
                    else:
                        load.unexpected.append(f"writer {number}: {type(error).__name__}")
                return
            with load.lock:
                load.in_flight -= 1
                if response.status_code == 201:
                    load.acked.append((data, response.json()))
                    load.first_ack.set()
                else:
                    load.unexpected.append(
                        f"writer {number}: HTTP {response.status_code} {response.text[:200]}"
                    )


def _run_load_and_kill(server: LiveServer, shared: bool) -> tuple[Load, int]:
    load = Load()
    threads = [
        threading.Thread(
            target=_writer, args=(n, server.base_url, server.headers, load, shared), daemon=True
        )
        for n in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    try:
        assert load.first_ack.wait(FIRST_ACK_TIMEOUT), (
            f"no write acknowledged within {FIRST_ACK_TIMEOUT} s: {load.unexpected[:5]}\n"
            f"{server.log_tail()}"
        )
        time.sleep(LOAD_SECONDS)
    finally:
        # Under the lock, so no writer files a transport error as "before the kill".
        with load.lock:
            load.killed.set()
            in_flight_at_kill = load.in_flight
            server.kill()
        for thread in threads:
            thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a writer hung after the server died"
    return load, in_flight_at_kill


def _check_archive(settings: Settings, load: Load) -> int:
    """Every ack resolves to its bytes; every index row to an existing, verifying blob."""
    archive = Archive.open(settings)
    try:
        for data, ack in load.acked:
            address = content_address(data)
            assert ack["content_hash"] == address
            memento = archive.get_memento(DEFAULT_TENANT, ack["id"])
            assert memento.content_hash == address
            assert memento.uri_r == ack["uri_r"]
            assert memento.size == len(data)
            assert archive.read_content(memento) == data

        rows = archive.index.all_memento_blobs()
        assert {ack["id"] for _, ack in load.acked} <= {memento_id for memento_id, _, _ in rows}
        for memento_id, address, version_id in rows:
            stored = archive.blobs.get(address, version_id)  # raises if missing or corrupt
            assert content_address(stored) == address, memento_id
        return len(rows)
    finally:
        archive.close()


@pytest.mark.parametrize("contents", ["distinct", "shared-blobs"])
def test_sigkill_during_concurrent_writes_keeps_every_acknowledged_memento(
    settings: Settings, contents: str
) -> None:
    started = time.monotonic()
    port = free_port()
    # Writers go as fast as they can; the per-key rate limit is not what this test is about.
    env = {**env_for(settings, f"http://127.0.0.1:{port}"), "AMBER_RATE_LIMIT_PER_SECOND": "0"}
    server = start_server(env, port)
    try:
        load, in_flight_at_kill = _run_load_and_kill(server, shared=contents == "shared-blobs")
    finally:
        server.close()
    assert server.process.returncode is not None

    assert not load.unexpected, load.unexpected[:10]
    assert len(load.acked) > 0, "no acknowledged write before the kill: the test proves nothing"
    assert in_flight_at_kill > 0, "the kill did not interrupt any request"

    rows = _check_archive(settings, load)
    assert rows >= len(load.acked)

    # The crashed store comes back: a new server serves what was acknowledged and writes.
    # It listens elsewhere but keeps the recorded public base URL: URI-Ms are permanent.
    restart_port = free_port()
    again = start_server(env, restart_port)
    with (
        again,
        httpx.Client(
            base_url=again.base_url, headers=again.headers, timeout=10.0, trust_env=False
        ) as client,
    ):
        sample = random.Random(0).sample(load.acked, min(25, len(load.acked)))
        for data, ack in sample:
            response = client.get(f"/memento/{ack['id']}")
            assert response.status_code == 200, response.text
            assert response.content == data
        after = client.post(
            "/api/v1/mementos",
            json={
                "uri_r": "https://crash.example/after",
                "content": "after the crash",
                "content_type": "text/plain",
                "captured_at": CAPTURED_AT,
            },
        )
        assert after.status_code == 201, after.text
        replay_data, replay_ack = load.acked[0]
        replay = client.post(
            "/api/v1/mementos",
            json={
                "uri_r": replay_ack["uri_r"],
                "content_base64": base64.b64encode(replay_data).decode("ascii"),
                "content_type": "application/octet-stream",
                "captured_at": CAPTURED_AT,
                "tool": "http.get",
            },
        )
        assert replay.status_code == 200, replay.text  # idempotent: already stored
        assert replay.json()["id"] == replay_ack["id"]
        assert replay.json()["uri_m"] == replay_ack["uri_m"]  # the same URI-M after restart

    elapsed = time.monotonic() - started
    print(
        f"\n{settings.resolved_blob_store.split(':', 1)[0]}/{contents}: {len(load.acked)} acked, "
        f"{in_flight_at_kill} in flight at the kill, {load.cut} cut, {rows} index rows, "
        f"{elapsed:.1f} s"
    )
