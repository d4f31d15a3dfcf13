"""Replicas on one PostgreSQL remember what they read, and forget it at the next change made
by any of them (archive/index/generations.py).

Two real ``amber serve`` processes share one PostgreSQL schema and one S3 bucket, every
cache on. Each test first makes the second replica answer from memory (its counters say
so), then changes something through the first, and asks the second again at once: its
very next answer must already reflect the change.
"""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from live_server import LiveServer, create_key, start_server
from sqlalchemy import create_engine, text

from infra import seaweedfs as seaweedfs_infra

pytestmark = [pytest.mark.postgres, pytest.mark.seaweedfs]


class Replicas:
    def __init__(
        self, first: LiveServer, second: LiveServer, admin_key: str, env: dict[str, str]
    ) -> None:
        self.first, self.second = first, second
        self.admin = {"Authorization": f"Bearer {admin_key}"}
        self.env = env  # of the first: for the CLI

    def metric(self, server: LiveServer, name: str) -> float:
        answer = httpx.get(f"{server.base_url}/metrics", headers=self.admin, timeout=10.0)
        assert answer.status_code == 200, answer.text
        for line in answer.text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == name:
                return float(parts[1])
        raise AssertionError(f"{name} not in /metrics")


@pytest.fixture(scope="module")
def replicas(
    postgres_server: str,
    seaweedfs_server: seaweedfs_infra.SeaweedFS,
    shared_seaweedfs_bucket: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replicas]:
    """Two servers for the module's tests (starting them is most of its time)."""
    schema = f"amber_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine("postgresql+psycopg://" + postgres_server.split("://", 1)[1])
    with admin.begin() as connection:
        connection.execute(text(f"CREATE SCHEMA {schema}"))
    separator = "&" if "?" in postgres_server else "?"
    shared = {
        **seaweedfs_server.env(),
        "AMBER_DATABASE_URL": f"{postgres_server}{separator}options=-csearch_path%3D{schema}",
        "AMBER_BLOB_STORE": f"s3://{shared_seaweedfs_bucket}/{schema}",
        "AMBER_PUBLIC_BASE_URL": "http://replicas.example",
        "AMBER_KEY_SECRET": secrets.token_urlsafe(32),
        "AMBER_RATE_LIMIT_PER_SECOND": "0",
    }
    root = tmp_path_factory.mktemp("replicas")
    envs = [{**shared, "AMBER_DATA_DIR": str(root / name)} for name in ("one", "two")]
    try:
        first = start_server(envs[0])
        try:
            second = start_server(envs[1], agent_key=False)
            try:
                second.agent_key = first.agent_key  # one key, verified by both
                yield Replicas(first, second, create_key(envs[0], "admin"), envs[0])
            finally:
                second.close()
        finally:
            first.close()
    finally:
        with admin.begin() as connection:
            connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def _write(server: LiveServer, uri_r: str, text: str, captured_at: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{server.base_url}/api/v1/mementos",
        headers=server.headers,
        json={
            "uri_r": uri_r,
            "content_base64": base64.b64encode(text.encode()).decode("ascii"),
            "content_type": "text/plain",
            "captured_at": captured_at,
            "scope": "passage",
        },
        timeout=30.0,
    )
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _path(uri_m: str) -> str:
    return httpx.URL(uri_m).path


def test_an_erasure_in_one_replica_is_seen_by_the_other_on_its_next_request(
    replicas: Replicas,
) -> None:
    first, second = replicas.first, replicas.second
    memento = _write(first, "https://replica.example/a", "erase me", "2024-01-01T00:00:00Z")
    path = _path(memento["uri_m"])
    for _ in range(3):
        answer = httpx.get(second.base_url + path, headers=second.headers)
        assert answer.status_code == 200 and answer.content == b"erase me"
    hits = replicas.metric(second, "amber_uri_m_cache_hits_total")
    assert hits >= 2, "the second replica answered from memory"

    erased = httpx.post(
        f"{first.base_url}/api/v1/mementos/{memento['id']}/erase",
        headers=replicas.admin,
        json={"reason": "replica cache test"},
        timeout=30.0,
    )
    assert erased.status_code == 200, erased.text

    answer = httpx.get(second.base_url + path, headers=second.headers)
    assert answer.status_code == 410, (answer.status_code, answer.content)
    assert b"erase me" not in answer.content


def test_a_revocation_in_one_replica_is_seen_by_the_other_on_its_next_request(
    replicas: Replicas,
) -> None:
    first, second = replicas.first, replicas.second
    memento = _write(first, "https://replica.example/k", "keyed", "2024-01-01T00:00:00Z")
    path = _path(memento["uri_m"])
    key = create_key(replicas.env, "auditor")  # its own: the other tests go on with theirs
    headers = {"Authorization": f"Bearer {key}"}
    for _ in range(3):
        assert httpx.get(second.base_url + path, headers=headers).status_code == 200
    key_id = key.split("_")[1]

    revoked = httpx.delete(f"{first.base_url}/api/v1/keys/{key_id}", headers=replicas.admin)
    assert revoked.status_code == 200, revoked.text

    answer = httpx.get(second.base_url + path, headers=headers)
    assert answer.status_code == 401, (answer.status_code, answer.content)
    answer = httpx.get(f"{second.base_url}/timegate/https://replica.example/k", headers=headers)
    assert answer.status_code == 401
    assert httpx.get(second.base_url + path, headers=second.headers).status_code == 200


def test_a_new_memento_or_a_deletion_in_one_replica_moves_the_others_timemaps_at_once(
    replicas: Replicas,
) -> None:
    first, second = replicas.first, replicas.second
    uri_r = "https://replica.example/timeline"
    early = _write(first, uri_r, "early", "2024-01-01T00:00:00Z")
    timemap = f"{second.base_url}/timemap/link/{uri_r}"
    timegate = f"{second.base_url}/timegate/{uri_r}"
    for _ in range(3):  # remembered by the second replica
        assert early["id"] in httpx.get(timemap, headers=second.headers).text
        latest = httpx.get(timegate, headers=second.headers)
        assert latest.status_code == 302 and early["id"] in latest.headers["location"]

    late = _write(first, uri_r, "late", "2024-06-01T00:00:00Z")
    links = httpx.get(timemap, headers=second.headers).text
    assert early["id"] in links and late["id"] in links
    latest = httpx.get(timegate, headers=second.headers)
    assert late["id"] in latest.headers["location"]

    erased = httpx.post(
        f"{first.base_url}/api/v1/mementos/{late['id']}/erase",
        headers=replicas.admin,
        json={"reason": "replica cache test"},
        timeout=30.0,
    )
    assert erased.status_code == 200, erased.text
    links = httpx.get(timemap, headers=second.headers).text
    assert early["id"] in links and late["id"] not in links
    latest = httpx.get(timegate, headers=second.headers)
    assert early["id"] in latest.headers["location"]


def test_an_erasure_in_one_replica_empties_the_others_text_caches_by_its_next_request(
    replicas: Replicas,
) -> None:
    """The second replica extracts a document's text for a citation and remembers it; the
    first erases the document; the second's very next request finds the text forgotten."""
    first, second = replicas.first, replicas.second
    transcript = f"t-{uuid.uuid4().hex[:8]}"
    made = httpx.put(
        f"{second.base_url}/api/v1/transcripts/{transcript}",
        headers=second.headers,
        json={"retention": "P7Y"},
    )
    assert made.status_code == 201, made.text
    document = httpx.post(
        f"{first.base_url}/api/v1/mementos",
        headers=first.headers,
        json={
            "uri_r": "https://replica.example/erased-text",
            "content": "The erased wording must leave every replica's memory.",
            "content_type": "text/plain",
            "tool": "http.get",
            "http_status": 200,
        },
        timeout=30.0,
    )
    assert document.status_code == 201, document.text
    cited = httpx.post(
        f"{second.base_url}/api/v1/transcripts/{transcript}/citations",
        headers=second.headers,
        json={
            "citations": [
                {"memento_id": document.json()["id"], "quote": {"exact": "erased wording"}}
            ]
        },
        timeout=30.0,
    )
    assert cited.status_code == 201, cited.text
    assert replicas.metric(second, "amber_text_cache_entries") >= 1

    erased = httpx.post(
        f"{first.base_url}/api/v1/mementos/{document.json()['id']}/erase",
        headers=replicas.admin,
        json={"reason": "replica text cache test"},
        timeout=30.0,
    )
    assert erased.status_code == 200, erased.text
    assert replicas.metric(second, "amber_text_cache_entries") == 0
