"""The auditors' pages and browser sessions over HTTP (no browser): sign-in and its cookie,
CSRF and cross-site refusals, the session cookie on URI-Ms, TimeGates and TimeMaps, the
sign-in redirect and its ``next``, tenants, escaping, re-hashing on view and the read audit.
tests/test_ui_browser.py drives the same pages in a real browser."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.browser import SESSION_COOKIE, prefers_html, safe_next
from archive.archive import Archive
from archive.config import Settings

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
TRANSCRIPT = "t-ui"
# '<', '>', '"' and '\\' are refused in URI-Rs; a quote and an ampersand are not.
HOSTILE_URI_R = "https://evil.example/page?q='onmouseover='alert(3)'&x=1"
CAPTURED = "Profits <script>alert(1)</script> rose 5% in 2024, the board said on Tuesday."
QUOTE = "<script>alert(1)</script> rose 5% in 2024"


@dataclass
class World:
    archive: Archive
    settings: Settings
    auditor: str  # keys
    agent: str
    stranger: str  # an auditor of another tenant
    passage_id: str
    citation_id: str
    uri_r: str

    def client(self, base_url: str = "http://testserver", **overrides: object) -> TestClient:
        settings = self.settings.with_overrides(rate_limit_per_second=0, **overrides)
        app = create_app(settings, archive=self.archive)
        return TestClient(app, base_url=base_url, follow_redirects=False)


@pytest.fixture()
def world(settings: Settings, archive: Archive) -> Iterator[World]:
    auditor = archive.keys.create("acme", "auditor").key
    agent = archive.keys.create("acme", "agent").key
    stranger = archive.keys.create("other", "auditor").key
    bearer = {"Authorization": f"Bearer {agent}"}
    app = create_app(settings.with_overrides(rate_limit_per_second=0), archive=archive)
    with TestClient(app) as client:
        assert client.put(f"/api/v1/transcripts/{TRANSCRIPT}", json={}, headers=bearer).is_success
        cited = client.post(
            f"/api/v1/transcripts/{TRANSCRIPT}/citations",
            json={
                "citations": [
                    {
                        "source": {
                            "uri_r": HOSTILE_URI_R,
                            "content": CAPTURED,
                            "content_type": "text/plain",
                            "captured_at": "2024-05-01T12:00:00Z",
                            "tool": "http.get",
                        },
                        "quote": {"exact": QUOTE},
                    }
                ]
            },
            headers=bearer,
        )
        assert cited.status_code == 201, cited.text
        citation = cited.json()["citations"][0]
    yield World(
        archive,
        settings,
        auditor,
        agent,
        stranger,
        citation["uri_m"].rsplit("/", 1)[1],
        citation["id"],
        citation["uri_r"],
    )


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def sign_in(client: TestClient, key: str, next_path: str = "/ui/") -> httpx.Response:
    form = client.get("/ui/login", params={"next": next_path})
    assert form.status_code == 200
    return client.post(
        "/ui/login",
        data={"key": key, "csrf": _csrf(form.text), "next": next_path},
        headers={"Origin": str(client.base_url).rstrip("/")},
    )


def test_signing_in_sets_a_session_cookie_and_never_echoes_the_key(world: World) -> None:
    with world.client() as client:
        done = sign_in(client, world.auditor, "/ui/transcripts/t-ui")
        assert done.status_code == 303
        assert done.headers["location"] == "/ui/transcripts/t-ui"
        cookie = next(
            v for k, v in done.headers.multi_items() if k == "set-cookie" and SESSION_COOKIE in v
        )
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie  # http base URL
        assert world.auditor not in cookie and world.auditor not in done.headers["location"]
        page = client.get("/ui/transcripts/t-ui")
        assert page.status_code == 200
        assert world.auditor not in page.text
        assert "Content-Security-Policy" in page.headers
        assert "script-src 'self'" in page.headers["content-security-policy"]
        refused = client.post(
            "/ui/login", data={"key": world.auditor, "csrf": "x"}, headers={"Origin": "x"}
        )
        assert world.auditor not in refused.text


def test_the_cookie_is_secure_when_the_public_base_url_is_https(tmp_path: Path) -> None:
    # Its own archive: the base URL an index first records is the one it keeps.
    settings = Settings(data_dir=tmp_path / "https", public_base_url="https://testserver")
    archive = Archive.open(settings)
    try:
        key = archive.keys.create("acme", "auditor").key
        app = create_app(settings, archive=archive)
        with TestClient(app, base_url="https://testserver", follow_redirects=False) as client:
            done = sign_in(client, key)
            assert done.status_code == 303
            assert "Secure" in done.headers["set-cookie"]
    finally:
        archive.close()


def test_a_wrong_key_is_refused_without_saying_why(world: World) -> None:
    with world.client() as client:
        wrong = sign_in(client, world.auditor[:-4] + "AAAA")
        assert wrong.status_code == 401
        assert "not accepted" in wrong.text
        assert SESSION_COOKIE not in wrong.headers.get("set-cookie", "")


def test_sign_in_without_its_csrf_token_or_cross_site_is_refused(world: World) -> None:
    with world.client() as client:
        form = client.get("/ui/login")
        token = _csrf(form.text)
        no_token = client.post("/ui/login", data={"key": world.auditor})
        assert no_token.status_code == 403
        cross_site = client.post(
            "/ui/login",
            data={"key": world.auditor, "csrf": token},
            headers={"Origin": "https://attacker.example"},
        )
        assert cross_site.status_code == 403
        fetch_site = client.post(
            "/ui/login",
            data={"key": world.auditor, "csrf": token},
            headers={"Sec-Fetch-Site": "cross-site"},
        )
        assert fetch_site.status_code == 403
        assert SESSION_COOKIE not in str(client.cookies)


def test_sign_out_needs_the_session_csrf_token_and_ends_the_session(world: World) -> None:
    with world.client() as client:
        sign_in(client, world.auditor)
        page = client.get("/ui/")
        assert page.status_code == 200
        forged = client.post("/ui/logout", data={"csrf": "forged"})
        assert forged.status_code == 403
        assert client.get("/ui/").status_code == 200  # still signed in
        session_id = client.cookies[SESSION_COOKIE]
        out = client.post("/ui/logout", data={"csrf": _csrf(page.text)})
        assert out.status_code == 303
        # Even presented again, the old id signs nobody in: it ended server-side.
        client.cookies.set(SESSION_COOKIE, session_id)
        assert client.get("/ui/").status_code == 303
        again = client.post("/ui/logout", data={"csrf": _csrf(page.text)})
        assert again.status_code == 303  # a form cannot be replayed: sign in, then home
        assert again.headers["location"] == "/ui/login?next=%2Fui%2F"


def test_login_attempts_are_rate_limited(world: World) -> None:
    with world.client(login_attempts_per_minute=2) as client:
        form = client.get("/ui/login").text
        answers = []
        for _ in range(3):  # each refusal is a fresh form with a fresh token
            answer = client.post("/ui/login", data={"key": "amber_x", "csrf": _csrf(form)})
            answers.append(answer.status_code)
            form = answer.text
        assert answers[:2] == [401, 401]
        assert answers[2] == 429


def test_uri_m_timegate_and_timemap_accept_the_session_cookie(world: World) -> None:
    with world.client() as client:
        sign_in(client, world.auditor)
        content = client.get(f"/memento/{world.passage_id}", headers=BROWSER)
        assert content.status_code == 200
        assert QUOTE.encode() in content.content
        assert content.headers["content-security-policy"] == "sandbox"
        assert client.head(f"/memento/{world.passage_id}").status_code == 200
        gate = client.get(f"/timegate/{world.uri_r}")
        assert gate.status_code == 302
        assert client.get(f"/timemap/json/{world.uri_r}").status_code == 200
        assert client.get(f"/timemap/link/{world.uri_r}").status_code == 200


def test_signed_out_browsers_are_sent_to_sign_in_and_other_clients_get_401(world: World) -> None:
    with world.client() as client:
        path = f"/memento/{world.passage_id}"
        browser = client.get(path, headers=BROWSER)
        assert browser.status_code == 303
        location = urlsplit(browser.headers["location"])
        assert location.path == "/ui/login"
        assert parse_qs(location.query)["next"] == [path]
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"Accept": "application/json"}).status_code == 401
        gate = client.get(f"/timegate/{world.uri_r}", headers=BROWSER)
        assert gate.status_code == 303
        assert client.get(f"/timemap/json/{world.uri_r}").status_code == 401
        back = sign_in(client, world.auditor, path)
        assert back.headers["location"] == path
        assert client.get(path, headers=BROWSER).status_code == 200


OPEN_REDIRECTS = [
    "https://attacker.example/",
    "//attacker.example/x",
    "/\\attacker.example",
    "\\\\attacker.example",
    "javascript:alert(1)",
    "/\t/attacker.example",
    " //attacker.example",
    "http:attacker.example",
]


def test_next_never_leaves_the_site(world: World) -> None:
    # One world for every attempt: a fresh one each would cost seconds apiece on S3.
    for attempt in OPEN_REDIRECTS:
        assert safe_next(attempt) == "/ui/", attempt
        with world.client() as client:
            done = sign_in(client, world.auditor, attempt)
            assert done.status_code == 303
            assert done.headers["location"] == "/ui/", attempt


def test_prefers_html_reads_accept_as_browsers_send_it() -> None:
    assert prefers_html(BROWSER["Accept"])
    assert not prefers_html("*/*")
    assert not prefers_html("application/json, text/html;q=0.5")
    assert not prefers_html(None)


def test_a_revoked_key_ends_its_sessions(world: World) -> None:
    with world.client() as client:
        sign_in(client, world.auditor)
        assert client.get(f"/memento/{world.passage_id}").status_code == 200
        key_id = world.auditor.split("_")[1]
        world.archive.keys.revoke(key_id)
        assert client.get(f"/memento/{world.passage_id}").status_code == 401
        assert client.get("/ui/").status_code == 303


def test_another_tenants_transcript_and_pages_are_404(world: World) -> None:
    with world.client() as client:
        sign_in(client, world.stranger)
        assert client.get(f"/ui/transcripts/{TRANSCRIPT}").status_code == 404
        assert client.get(f"/ui/mementos/{world.passage_id}").status_code == 404
        assert client.get(f"/ui/citations/{world.citation_id}/drift").status_code == 404
        assert client.get(f"/memento/{world.passage_id}").status_code == 404


def test_pages_escape_captured_text_and_uri_rs(world: World) -> None:
    with world.client() as client:
        sign_in(client, world.auditor)
        for path in (
            f"/ui/transcripts/{TRANSCRIPT}",
            f"/ui/mementos/{world.passage_id}",
            f"/ui/timemaps/{world.uri_r}",
        ):
            page = client.get(path)
            assert page.status_code == 200, (path, page.text)
            assert "<script>alert" not in page.text
            assert "'onmouseover='" not in page.text
        memento_page = client.get(f"/ui/mementos/{world.passage_id}").text
        assert "<mark>&lt;script&gt;alert(1)&lt;/script&gt; rose 5% in 2024</mark>" in memento_page


def test_the_transcript_page_rehashes_and_marks_each_citation(world: World) -> None:
    with world.client() as client:
        sign_in(client, world.auditor)
        page = client.get(f"/ui/transcripts/{TRANSCRIPT}").text
        assert f'data-citation-id="{world.citation_id}"' in page
        assert 'data-verified="true"' in page and 'data-drift="unchecked"' in page
        passage = world.archive.get_memento("acme", world.passage_id)
        if not world.archive.settings.resolved_blob_store.startswith("file:"):
            return  # corrupting bytes on disk needs the local store
        path = _blob_path(world.archive, passage.content_hash)
        path.chmod(0o644)
        path.write_bytes(b"tampered")
        page = client.get(f"/ui/transcripts/{TRANSCRIPT}").text
        assert 'data-verified="false"' in page and "✗" in page


def _blob_path(archive: Archive, address: str) -> Path:
    root = Path(urlsplit(archive.settings.resolved_blob_store).path)
    digest = address.split(":", 1)[1]
    found = [p for p in root.rglob("*") if p.is_file() and digest in p.name]
    assert len(found) == 1, found
    return found[0]


def test_page_views_are_read_audited_like_the_api(world: World) -> None:
    with world.client() as client:
        sign_in(client, world.auditor)
        client.get("/ui/")
        client.get(f"/ui/transcripts/{TRANSCRIPT}")
        client.get(f"/ui/mementos/{world.passage_id}")
        client.get(f"/ui/timemaps/{world.uri_r}")
        client.get("/ui/drift")
    reads = world.archive.read_audit.query("acme")
    actions = {(r.action, r.target) for r in reads}
    key_id = world.auditor.split("_")[1]
    assert all(r.key_id == key_id and r.role == "auditor" for r in reads)
    assert ("transcript.read", TRANSCRIPT) in actions
    assert ("memento.metadata", world.passage_id) in actions
    assert ("memento.content", world.passage_id) in actions
    assert ("timemap.json", world.uri_r) in actions
    assert any(a == "transcripts.list" for a, _ in actions)
    assert any(a == "drift.sources" for a, _ in actions)


def test_an_erased_passage_shows_its_tombstone_never_its_text(world: World) -> None:
    world.archive.retention.erase("acme", world.passage_id, "subject request 42", "admin-key")
    with world.client() as client:
        sign_in(client, world.auditor)
        tombstone = client.get(f"/ui/mementos/{world.passage_id}")
        assert tombstone.status_code == 410
        passage = world.archive.index.get_memento("acme", world.passage_id)
        assert passage is not None and passage.deleted_at is not None
        assert passage.content_hash in tombstone.text
        assert "rose 5%" not in tombstone.text and "Profits" not in tombstone.text
        transcript = client.get(f"/ui/transcripts/{TRANSCRIPT}").text
        assert 'data-verified="false"' in transcript
        assert "rose 5%" not in transcript


def test_lookup_sends_each_kind_of_thing_to_its_page(world: World) -> None:
    with world.client() as client:
        sign_in(client, world.auditor)
        for wanted, where in (
            (world.passage_id, f"/ui/mementos/{world.passage_id}"),
            (f"http://testserver/memento/{world.passage_id}", f"/ui/mementos/{world.passage_id}"),
            (TRANSCRIPT, f"/ui/transcripts/{TRANSCRIPT}"),
            ("https://news.example/a b", "/ui/timemaps/https://news.example/a%20b"),
        ):
            answer = client.get("/ui/lookup", params={"q": wanted})
            assert answer.status_code == 303 and answer.headers["location"] == where, wanted
        assert client.get("/ui/lookup").status_code == 422


def test_admin_pages_manage_keys_and_holds_with_csrf(world: World) -> None:
    admin = world.archive.keys.create("acme", "admin").key
    with world.client() as client:
        sign_in(client, world.auditor)
        assert client.get("/ui/admin/").status_code == 403
    with world.client() as client:
        sign_in(client, admin)
        home = client.get("/ui/admin/")
        assert home.status_code == 200
        token = _csrf(home.text)
        assert client.post("/ui/admin/keys", data={"role": "auditor"}).status_code == 403
        made = client.post("/ui/admin/keys", data={"role": "auditor", "csrf": token})
        assert made.status_code == 200
        new_key = re.search(r'value="(amber_[0-9a-f]{12}_[^"]+)"', made.text)
        assert new_key is not None
        assert world.archive.keys.verify(new_key.group(1)).tenant == "acme"
        key_id = new_key.group(1).split("_")[1]
        revoked = client.post(f"/ui/admin/keys/{key_id}/revoke", data={"csrf": token})
        assert revoked.status_code == 303
        assert next(k for k in world.archive.keys.list("acme") if k.key_id == key_id).revoked_at
        held = client.post(
            "/ui/admin/holds",
            data={
                "csrf": token,
                "kind": "transcript",
                "target": TRANSCRIPT,
                "on": "true",
                "reason": "litigation <b>7</b>",
            },
        )
        assert held.status_code == 303
        assert world.archive.transcripts.get("acme", TRANSCRIPT).legal_hold
        page = client.get("/ui/admin/").text
        assert "litigation &lt;b&gt;7&lt;/b&gt;" in page
        no_reason = client.post(
            "/ui/admin/holds",
            data={"csrf": token, "kind": "transcript", "target": TRANSCRIPT, "reason": ""},
        )
        assert no_reason.status_code == 400


def test_the_diff_view_splits_removed_and_added_words() -> None:
    from api.ui.pages import diff_segments

    assert diff_segments("rates [-rose-] {+fell+} by 5%") == [
        ("same", "rates "),
        ("del", "rose"),
        ("same", " "),
        ("ins", "fell"),
        ("same", " by 5%"),
    ]
