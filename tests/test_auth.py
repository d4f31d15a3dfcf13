"""Access control: every route × every role × own and other tenant; keys; audit; limits."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from archive.access.keys import Role
from archive.archive import Archive
from archive.config import Settings

URI_R = "https://ex.org/doc?x=1"
ROLES = [Role.AGENT, Role.AUDITOR, Role.ADMIN]


@dataclass
class World:
    client: TestClient
    archive: Archive
    keys: dict[tuple[str, Role], str]  # (tenant, role) → key
    memento: dict[str, Any]

    def as_(self, tenant: str, role: Role) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[(tenant, role)]}"}


@pytest.fixture()
def world(settings: Settings, archive: Archive) -> Iterator[World]:
    keys = {(t, r): archive.keys.create(t, r).key for t in ("default", "other") for r in ROLES}
    app = create_app(settings.with_overrides(rate_limit_per_second=0), archive=archive, auth=True)
    with TestClient(app) as client:
        made = client.post(
            "/api/v1/mementos",
            json={
                "uri_r": URI_R,
                "content": "evidence",
                "content_type": "text/plain",
                "captured_at": "2024-05-01T12:00:00Z",
            },
            headers={"Authorization": f"Bearer {keys[('default', Role.AGENT)]}"},
        )
        assert made.status_code == 201
        opened = client.put(
            "/api/v1/transcripts/t-auth",
            json={},
            headers={"Authorization": f"Bearer {keys[('default', Role.AGENT)]}"},
        )
        assert opened.status_code == 201
        yield World(client, archive, keys, made.json())


@dataclass(frozen=True)
class RouteCase:
    method: str
    template: str  # the route's path as FastAPI knows it
    path: str  # a concrete path (may use {id}, {key_id})
    allowed: frozenset[Role]
    own: int  # status for an allowed role of the data's tenant
    other: int  # status for an allowed role of another tenant
    body: dict[str, Any] | None = None


READERS = frozenset(ROLES)
AGENT = frozenset({Role.AGENT})
ADMIN = frozenset({Role.ADMIN})
NEW_MEMENTO = {"uri_r": "https://ex.org/new", "content": "n", "content_type": "text/plain"}

CASES = [
    RouteCase("POST", "/api/v1/mementos", "/api/v1/mementos", AGENT, 201, 201, NEW_MEMENTO),
    RouteCase("GET", "/api/v1/mementos/{memento_id}", "/api/v1/mementos/{id}", READERS, 200, 404),
    RouteCase("HEAD", "/api/v1/mementos/{memento_id}", "/api/v1/mementos/{id}", READERS, 200, 404),
    RouteCase("GET", "/memento/{memento_id}", "/memento/{id}", READERS, 200, 404),
    RouteCase("HEAD", "/memento/{memento_id}", "/memento/{id}", READERS, 200, 404),
    RouteCase("GET", "/timegate/{uri_r:path}", f"/timegate/{URI_R}", READERS, 302, 404),
    RouteCase("HEAD", "/timegate/{uri_r:path}", f"/timegate/{URI_R}", READERS, 302, 404),
    RouteCase("GET", "/timemap/link/{uri_r:path}", f"/timemap/link/{URI_R}", READERS, 200, 404),
    RouteCase("HEAD", "/timemap/link/{uri_r:path}", f"/timemap/link/{URI_R}", READERS, 200, 404),
    RouteCase("GET", "/timemap/json/{uri_r:path}", f"/timemap/json/{URI_R}", READERS, 200, 404),
    RouteCase("HEAD", "/timemap/json/{uri_r:path}", f"/timemap/json/{URI_R}", READERS, 200, 404),
    RouteCase(
        "PUT",
        "/api/v1/transcripts/{transcript_id}",
        "/api/v1/transcripts/t-auth",
        AGENT,
        200,
        201,
        {},
    ),
    RouteCase(
        "GET",
        "/api/v1/transcripts/{transcript_id}",
        "/api/v1/transcripts/t-auth",
        READERS,
        200,
        404,
    ),
    RouteCase(
        "POST",
        "/api/v1/transcripts/{transcript_id}/citations",
        "/api/v1/transcripts/t-auth/citations",
        AGENT,
        201,
        404,
        {
            "citations": [
                {
                    "quote": {"exact": "evidence"},
                    "source": {
                        "uri_r": "https://ex.org/e",
                        "content": "the evidence",
                        "content_type": "text/plain",
                        "tool": "http.get",
                    },
                }
            ]
        },
    ),
    RouteCase("POST", "/api/v1/keys", "/api/v1/keys", ADMIN, 201, 201, {"role": "auditor"}),
    RouteCase(
        "PUT",
        "/api/v1/transcripts/{transcript_id}/legal-hold",
        "/api/v1/transcripts/t-auth/legal-hold",
        ADMIN,
        200,
        404,
        {"on": True, "reason": "litigation"},
    ),
    RouteCase(
        "PUT",
        "/api/v1/mementos/{memento_id}/legal-hold",
        "/api/v1/mementos/{id}/legal-hold",
        ADMIN,
        200,
        404,
        {"on": True, "reason": "litigation"},
    ),
    RouteCase(
        "PUT",
        "/api/v1/transcripts/{transcript_id}/retention",
        "/api/v1/transcripts/t-auth/retention",
        ADMIN,
        200,
        404,
        {"retention": "P8Y", "reason": "audit request"},
    ),
    RouteCase(
        "POST",
        "/api/v1/mementos/{memento_id}/erase",
        "/api/v1/mementos/{id}/erase",
        ADMIN,
        200,
        404,
        {"reason": "court order"},
    ),
    RouteCase("GET", "/api/v1/admin/log", "/api/v1/admin/log", ADMIN, 200, 200),
    RouteCase("GET", "/api/v1/keys", "/api/v1/keys", ADMIN, 200, 200),
    RouteCase("DELETE", "/api/v1/keys/{key_id}", "/api/v1/keys/{key_id}", ADMIN, 200, 404),
    RouteCase("GET", "/api/v1/audit/reads", "/api/v1/audit/reads", ADMIN, 200, 200),
    RouteCase("GET", "/metrics", "/metrics", ADMIN, 200, 200),
    RouteCase(
        "GET",
        "/api/v1/citations/{citation_id}/drift",
        "/api/v1/citations/" + "0" * 32 + "/drift",
        READERS,
        404,
        404,
    ),
    RouteCase("GET", "/api/v1/drift/sources", "/api/v1/drift/sources", READERS, 200, 200),
    RouteCase(
        "GET", "/api/v1/transcripts", "/api/v1/transcripts?needs_review=true", READERS, 200, 200
    ),
    RouteCase(
        "POST",
        "/api/v1/transcripts/{transcript_id}/review",
        "/api/v1/transcripts/t-auth/review",
        frozenset({Role.AUDITOR, Role.ADMIN}),
        200,
        404,
        {"note": "checked the live source"},
    ),
    RouteCase(
        "GET",
        "/api/v1/mementos/{memento_id}/proof",
        "/api/v1/mementos/{id}/proof",
        READERS,
        200,
        404,
    ),
    RouteCase(
        "GET",
        "/api/v1/citations/{citation_id}/proof",
        "/api/v1/citations/" + "0" * 32 + "/proof",
        READERS,
        404,
        404,
    ),
    RouteCase(
        "GET",
        "/api/v1/transcripts/{transcript_id}/export",
        "/api/v1/transcripts/t-auth/export",
        frozenset({Role.AUDITOR, Role.ADMIN}),
        200,
        404,
    ),
]
# The evidence log's checkpoint, tiles and consistency proofs are public by design: they
# carry hashes only, for witnesses and monitors (docs/design.md, the evidence log).
PUBLIC = (
    {("GET", "/healthz")}
    | {
        ("GET", "/log/checkpoint"),
        ("GET", "/log/consistency/{old}/{new}"),
        ("GET", "/log/tile/{tile:path}"),
    }
    | {
        (method, path)
        for method in ("GET", "HEAD")
        for path in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
    }
)


def test_matrix_covers_every_route(world: World) -> None:
    """Every operation the app documents (routers included) has a row in the matrix."""
    declared = {(c.method, c.template.replace(":path", "")) for c in CASES}
    documented = {
        (method.upper(), path)
        for path, operations in world.client.app.openapi()["paths"].items()  # type: ignore[attr-defined]
        for method in operations
    }
    public = {(m, p.replace(":path", "")) for m, p in PUBLIC}
    assert len(documented) >= 28  # guards against an empty enumeration
    missing = documented - declared - public
    assert not missing, f"routes missing from the role matrix: {sorted(missing)}"


def _send(world: World, case: RouteCase, headers: dict[str, str]) -> Any:
    victim = world.archive.keys.create("default", Role.AGENT, name="victim").info.key_id
    path = case.path.format(id=world.memento["id"], key_id=victim)
    return world.client.request(
        case.method, path, json=case.body, headers=headers, follow_redirects=False
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.method} {c.path}")
@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.value)
@pytest.mark.parametrize("tenant", ["default", "other"])
def test_role_route_tenant_matrix(world: World, case: RouteCase, role: Role, tenant: str) -> None:
    response = _send(world, case, world.as_(tenant, role))
    if role not in case.allowed:
        assert response.status_code == 403, response.text
    else:
        expected = case.own if tenant == "default" else case.other
        assert response.status_code == expected, response.text


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.method} {c.path}")
@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer",
        "Basic dXNlcjpwdw==",
        "Bearer not-a-key",
        "Bearer amber_000000000000_" + "A" * 43,
        "Bearer " + "x" * 10_000,
    ],
    ids=["missing", "empty", "basic", "garbage", "unknown", "huge"],
)
def test_no_valid_key_is_401_everywhere(
    world: World, case: RouteCase, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = _send(world, case, headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_other_tenant_sees_the_same_404_as_nonexistent(world: World) -> None:
    other = world.as_("other", Role.AUDITOR)
    hidden = world.client.get(f"/memento/{world.memento['id']}", headers=other)
    absent = world.client.get("/memento/" + "f" * 32, headers=other)
    assert hidden.status_code == absent.status_code == 404
    assert hidden.json() == absent.json()
    gate_hidden = world.client.get(f"/timegate/{URI_R}", headers=other, follow_redirects=False)
    gate_absent = world.client.get(
        "/timegate/https://nowhere.example/", headers=other, follow_redirects=False
    )
    assert gate_hidden.json() == gate_absent.json()


def test_repeated_write_is_201_in_another_tenant(world: World) -> None:
    body = {
        "uri_r": URI_R,
        "content": "evidence",
        "content_type": "text/plain",
        "captured_at": "2024-05-01T12:00:00Z",
    }
    own = world.client.post("/api/v1/mementos", json=body, headers=world.as_("default", Role.AGENT))
    other = world.client.post("/api/v1/mementos", json=body, headers=world.as_("other", Role.AGENT))
    assert own.status_code == 200  # the same capture, same tenant
    assert other.status_code == 201  # nothing reveals that tenant "default" holds it
    assert other.json()["id"] != world.memento["id"]
    assert other.json()["content_hash"] == world.memento["content_hash"]


@pytest.mark.parametrize("written", ["Bearer  {key}", "bearer {key}", "Bearer {key} "])
def test_the_uri_m_route_reads_a_key_as_the_other_routes_do(world: World, written: str) -> None:
    """The URI-M route parses Authorization itself (plain ASGI): it must accept exactly what
    FastAPI's bearer scheme accepts on every other route."""
    headers = {"Authorization": written.format(key=world.keys[("default", Role.AUDITOR)])}
    metadata = world.client.get(f"/api/v1/mementos/{world.memento['id']}", headers=headers)
    content = world.client.get(f"/memento/{world.memento['id']}", headers=headers)
    assert (metadata.status_code, content.status_code) == (200, 200)


def test_revoked_key_stops_at_once(world: World) -> None:
    issued = world.archive.keys.create("default", Role.AUDITOR)
    headers = {"Authorization": f"Bearer {issued.key}"}
    assert world.client.get(f"/memento/{world.memento['id']}", headers=headers).status_code == 200
    revoked = world.client.delete(
        f"/api/v1/keys/{issued.info.key_id}", headers=world.as_("default", Role.ADMIN)
    )
    assert revoked.json()["revoked_at"] is not None
    assert world.client.get(f"/memento/{world.memento['id']}", headers=headers).status_code == 401


def test_key_revoked_by_another_process_stops_at_once(world: World, settings: Settings) -> None:
    """The server remembers verified keys between commits; a revocation committed by another
    process (here another Archive with its own connections, as `amber keys revoke` is) must
    still refuse the very next request."""
    issued = world.archive.keys.create("default", Role.AUDITOR)
    headers = {"Authorization": f"Bearer {issued.key}"}
    for _ in range(3):  # verified, then served from what the server remembers
        assert (
            world.client.get(f"/memento/{world.memento['id']}", headers=headers).status_code == 200
        )
    elsewhere = Archive.open(settings)
    try:
        elsewhere.keys.revoke(issued.info.key_id)
    finally:
        elsewhere.close()
    assert world.client.get(f"/memento/{world.memento['id']}", headers=headers).status_code == 401


def test_created_key_works_and_listing_hides_secrets(world: World) -> None:
    admin = world.as_("default", Role.ADMIN)
    created = world.client.post(
        "/api/v1/keys", json={"role": "agent", "name": "bot"}, headers=admin
    ).json()
    assert created["key"].startswith("amber_" + created["key_id"])
    listed = world.client.get("/api/v1/keys", headers=admin).json()
    assert created["key_id"] in {k["key_id"] for k in listed}
    assert all("key" not in k and "key_hmac" not in k for k in listed)
    assert all(k["tenant"] == "default" for k in listed)
    use = world.client.get(
        f"/memento/{world.memento['id']}", headers={"Authorization": f"Bearer {created['key']}"}
    )
    assert use.status_code == 200


def test_keys_are_stored_only_as_hmac(world: World) -> None:
    key = world.keys[("default", Role.AGENT)]
    with world.archive.index.read() as connection:
        rows = connection.execute(text("SELECT key_id, key_hmac FROM api_keys")).all()
    assert rows
    assert all(key not in (r.key_hmac or "") and len(r.key_hmac) == 64 for r in rows)


def test_auditor_reads_are_audited_and_log_is_append_only(world: World) -> None:
    auditor = world.as_("default", Role.AUDITOR)
    world.client.get(f"/memento/{world.memento['id']}", headers=auditor)
    world.client.get(f"/api/v1/mementos/{world.memento['id']}", headers=auditor)
    world.client.get(f"/memento/{world.memento['id']}", headers=world.as_("default", Role.AGENT))
    records = world.client.get(
        "/api/v1/audit/reads", headers=world.as_("default", Role.ADMIN)
    ).json()
    auditor_id = world.keys[("default", Role.AUDITOR)].split("_")[1]
    mine = [r for r in records if r["key_id"] == auditor_id]
    assert [(r["action"], r["target"]) for r in mine] == [
        ("memento.content", world.memento["id"]),
        ("memento.metadata", world.memento["id"]),
    ]
    agent_id = world.keys[("default", Role.AGENT)].split("_")[1]
    assert not [r for r in records if r["key_id"] == agent_id]
    other_admin = world.as_("other", Role.ADMIN)
    assert world.client.get("/api/v1/audit/reads", headers=other_admin).json() == []
    with pytest.raises(Exception, match="append-only"), world.archive.index.write() as connection:
        connection.execute(text("DELETE FROM read_audit"))


def test_audit_survives_clean_shutdown(settings: Settings) -> None:
    opened = Archive.open(settings)
    auditor = opened.keys.create("default", Role.AUDITOR)
    opened.read_audit.record("default", auditor.info.key_id, "auditor", "memento.content", "x" * 32)
    opened.close()  # no explicit flush: close must not lose the buffered row
    reopened = Archive.open(settings)
    try:
        assert [r.target for r in reopened.read_audit.query("default")] == ["x" * 32]
    finally:
        reopened.close()


def test_rate_limit_answers_429_with_retry_after(settings: Settings, archive: Archive) -> None:
    key = archive.keys.create("default", Role.AUDITOR).key
    limited = settings.with_overrides(rate_limit_per_second=1, rate_limit_burst=3)
    with TestClient(create_app(limited, archive=archive, auth=True)) as client:
        headers = {"Authorization": f"Bearer {key}"}
        statuses = [
            client.get("/timemap/json/https://x.example/", headers=headers).status_code
            for _ in range(5)
        ]
        assert statuses[:3] == [404, 404, 404]
        assert statuses[3] == 429
        last = client.get("/timemap/json/https://x.example/", headers=headers)
        assert int(last.headers["retry-after"]) >= 1


def test_healthz_and_openapi_are_public(world: World) -> None:
    assert world.client.get("/healthz").status_code == 200
    spec = world.client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


@pytest.mark.parametrize("tenant", ["default", "other"])
def test_a_refused_role_is_told_the_command_that_makes_a_key_that_may(
    world: World, tenant: str
) -> None:
    """The newcomer's first 403: the admin key printed at first start cannot store evidence;
    the answer names the command that makes an agent key for the same tenant."""
    response = world.client.post(
        "/api/v1/mementos",
        json={"uri_r": URI_R, "content": "x", "content_type": "text/plain"},
        headers=world.as_(tenant, Role.ADMIN),
    )
    assert response.status_code == 403, response.text
    message = response.json()["error"]["message"]
    assert "role 'admin' may not do this; needs one of agent" in message
    assert f"amber keys create --tenant {tenant} --role agent" in message
