"""Every read of evidence by an auditor or admin leaves a read-audit row: walked route by route.

The walk takes the routes from the app's own OpenAPI description, so a read route added later
is either audited or named below as not reading evidence, with the reason; it cannot be
forgotten.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from archive.access.audit import READ_ACTIONS
from archive.access.keys import Role
from archive.archive import Archive
from archive.config import Settings

URI_R = "https://audit.example/report?q=1"
CAPTURED = "The board approved the merger on Tuesday after a long debate."
QUOTE = "approved the merger on Tuesday"
TRANSCRIPT = "t-audit"

# Reads that are not of evidence or its metadata, and why they are not audited.
NOT_EVIDENCE = {
    "/healthz": "liveness: no data",
    "/openapi.json": "the API's description: no data",
    "/docs": "the API's description: no data",
    "/docs/oauth2-redirect": "the API's description: no data",
    "/redoc": "the API's description: no data",
    "/metrics": "process counters, no ids or URI-Rs",
    "/api/v1/keys": "API key metadata: who may read, not what was read",
    "/api/v1/audit/reads": "the read audit itself (auditing it would grow it with every look)",
    "/api/v1/admin/log": "admin actions and their reasons, itself an append-only record",
    "/log/checkpoint": "the evidence log's signed tree head: hashes, no tenant data",
    "/log/tile/{tile}": "the evidence log's hash tiles: hashes, no tenant data",
    "/log/consistency/{old}/{new}": "hashes between two tree sizes, no tenant data",
}

# What a route reads, by its path parameter: the action recorded and what the target names.
EXPECTED_ACTION = {
    ("GET", "/memento/{memento_id}"): "memento.content",
    ("GET", "/api/v1/mementos/{memento_id}"): "memento.metadata",
    ("GET", "/timegate/{uri_r}"): "timegate.read",
    ("GET", "/timemap/link/{uri_r}"): "timemap.link",
    ("GET", "/timemap/json/{uri_r}"): "timemap.json",
    ("GET", "/api/v1/transcripts/{transcript_id}"): "transcript.read",
    ("GET", "/api/v1/transcripts"): "transcripts.list",
    ("GET", "/api/v1/citations/{citation_id}/drift"): "citation.drift",
    ("GET", "/api/v1/drift/sources"): "drift.sources",
    ("GET", "/api/v1/mementos/{memento_id}/proof"): "memento.proof",
    ("GET", "/api/v1/citations/{citation_id}/proof"): "citation.proof",
    ("GET", "/api/v1/transcripts/{transcript_id}/export"): "transcript.export",
}


@dataclass
class World:
    client: TestClient
    archive: Archive
    keys: dict[Role, str]
    values: dict[str, str]  # path parameter -> a value naming evidence of the tenant

    def key_id(self, role: Role) -> str:
        return self.keys[role].split("_")[1]


@pytest.fixture()
def world(settings: Settings, archive: Archive) -> Iterator[World]:
    keys = {role: archive.keys.create("default", role).key for role in Role}
    agent = {"Authorization": f"Bearer {keys[Role.AGENT]}"}
    app = create_app(settings.with_overrides(rate_limit_per_second=0), archive=archive, auth=True)
    with TestClient(app) as client:
        made = client.post(
            "/api/v1/mementos",
            json={
                "uri_r": URI_R,
                "content": CAPTURED,
                "content_type": "text/plain",
                "captured_at": "2024-05-01T12:00:00Z",
                "tool": "http.get",
            },
            headers=agent,
        )
        assert made.status_code == 201, made.text
        opened = client.put(f"/api/v1/transcripts/{TRANSCRIPT}", json={}, headers=agent)
        assert opened.status_code == 201, opened.text
        cited = client.post(
            f"/api/v1/transcripts/{TRANSCRIPT}/citations",
            json={"citations": [{"quote": {"exact": QUOTE}, "memento_id": made.json()["id"]}]},
            headers=agent,
        )
        assert cited.status_code == 201, cited.text
        values = {
            "memento_id": made.json()["id"],
            "uri_r": URI_R,
            "transcript_id": TRANSCRIPT,
            "citation_id": cited.json()["citations"][0]["id"],
        }
        yield World(client, archive, keys, values)


def _read_routes(world: World) -> list[tuple[str, str]]:
    """Every GET and HEAD operation the app documents, as (method, path template)."""
    spec: dict[str, Any] = world.client.app.openapi()  # type: ignore[attr-defined]
    routes = [
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method in operations
        if method in ("get", "head")
    ]
    public = {path for path in NOT_EVIDENCE if path.startswith(("/docs", "/redoc", "/openapi"))}
    return routes + [(m, p) for p in sorted(public) for m in ("GET", "HEAD")]


def _concrete(world: World, template: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1).split(":")[0]
        assert name in world.values, f"the walk needs a value for path parameter {name!r}"
        return world.values[name]

    return re.sub(r"\{([^}]+)\}", value, template)


def test_every_evidence_read_leaves_an_audit_row(world: World) -> None:
    routes = _read_routes(world)
    assert len({p for _, p in routes} - set(NOT_EVIDENCE)) >= 9  # the enumeration is not empty
    audited: set[tuple[str, str]] = set()
    for method, template in routes:
        if template in NOT_EVIDENCE:
            continue
        path = _concrete(world, template)
        for role in (Role.AUDITOR, Role.ADMIN):
            before = world.archive.read_audit.query(
                "default", key_id=world.key_id(role), limit=10_000
            )
            response = world.client.request(
                method,
                path,
                headers={"Authorization": f"Bearer {world.keys[role]}"},
                follow_redirects=False,
            )
            assert response.status_code < 400, (method, template, role, response.text)
            after = world.archive.read_audit.query(
                "default", key_id=world.key_id(role), limit=10_000
            )
            added = after[len(before) :]
            if template.endswith("/export"):  # a bundle: the transcript, then each memento
                added = _export_rows(world, added)
            assert len(added) == 1, f"{method} {template} as {role.value}: {len(added)} rows"
            row = added[0]
            assert row.role == role.value
            assert row.action in READ_ACTIONS
            expected = EXPECTED_ACTION.get(("GET", template))
            assert expected is None or row.action == expected, (template, row.action)
            parameters = re.findall(r"\{([^}:]+)", template)
            if parameters:  # the target names what the path named
                assert row.target == world.values[parameters[0]], (template, row.target)
            assert CAPTURED not in row.target and QUOTE not in row.target
            audited.add(("GET", template))
    assert audited >= set(EXPECTED_ACTION)


def _export_rows(world: World, added: list[Any]) -> list[Any]:
    """The export's transcript row, once the rest are exactly one per memento in it."""
    from archive.bundles.export import export_bundle

    mementos = export_bundle(world.archive, "default", TRANSCRIPT).mementos
    exported = sorted(r.target for r in added if r.action == "memento.export")
    assert exported == mementos and len(mementos) >= 1
    return [r for r in added if r.action != "memento.export"]


def test_agents_reads_and_refused_reads_are_not_audited(world: World) -> None:
    agent = {"Authorization": f"Bearer {world.keys[Role.AGENT]}"}
    auditor = {"Authorization": f"Bearer {world.keys[Role.AUDITOR]}"}
    assert world.client.get(f"/timemap/json/{URI_R}", headers=agent).status_code == 200
    absent = world.client.get("/timemap/json/https://nowhere.example/", headers=auditor)
    assert absent.status_code == 404
    assert world.archive.read_audit.query("default", key_id=world.key_id(Role.AGENT)) == []
    assert world.archive.read_audit.query("default", key_id=world.key_id(Role.AUDITOR)) == []


def test_listings_record_their_query(world: World) -> None:
    auditor = {"Authorization": f"Bearer {world.keys[Role.AUDITOR]}"}
    world.client.get("/api/v1/transcripts?needs_review=false&limit=5", headers=auditor)
    world.client.get("/api/v1/drift/sources?window_days=7", headers=auditor)
    rows = world.archive.read_audit.query("default", key_id=world.key_id(Role.AUDITOR))
    assert [(r.action, r.target) for r in rows] == [
        ("transcripts.list", "needs_review=False&limit=5"),
        ("drift.sources", "window_days=7"),
    ]


def test_an_unknown_action_is_refused(archive: Archive) -> None:
    with pytest.raises(ValueError, match="unknown read audit action"):
        archive.read_audit.record("default", "k" * 12, "auditor", "memento.peek", "x")
