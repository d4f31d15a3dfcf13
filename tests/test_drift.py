"""The drift job end to end: cite via the API, change the live web, run the job, read verdicts.

A local fixture web server (threading ``http.server`` on 127.0.0.1, opened to the fetch guard
by ``fetch_allow``) first plays the documents as the agent captured them (the citations
carry them inline), then serves changed versions: identical, conditional 304, whitespace and
markup only, boilerplate, passage moved, other paragraphs edited, passage deleted, reworded,
negated, outcome reversed, numbers and dates changed, 301 to another document, 301 to the
home page, 404, 410, a soft 404 with 200, a catch-all host, a timeout, a 500, and PDFs.
Runs on both backend pairs (local + SQLite, S3 + PostgreSQL).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from live_server import env_for
from sqlalchemy import select, text
from test_text import make_pdf

from api.cli import main
from archive.archive import Archive
from archive.config import Settings
from archive.dates import utc_now
from archive.drift import VERDICTS, CheckRecord
from archive.index.schema import mementos

# Generous enough that a loaded CI machine (SeaweedFS and PostgreSQL beside the tests) never
# times out an answering origin -- at 0.5 s one did, once, and turned "identical" into
# "unreachable" -- and short enough that the timeout case stays quick.
FETCH_TIMEOUT = 2.0


# -- the fixture web ----------------------------------------------------------------------


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    etag: str | None = None


class Web:
    """A tiny origin: ``routes[path] = Reply``; unknown paths answer ``fallback``."""

    def __init__(self, fallback: Reply | None = None) -> None:
        self.routes: dict[str, Reply] = {}
        self.fallback = fallback or Reply(404, b"<html><body>nothing here</body></html>")
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                with web._lock:
                    web.requests.append(
                        (self.path, {k.lower(): v for k, v in self.headers.items()})
                    )
                    reply = web.routes.get(self.path, web.fallback)
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self._answer(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the job gave up waiting (the timeout case)

            def _answer(self, reply: Reply) -> None:
                if reply.etag is not None and self.headers.get("If-None-Match") == reply.etag:
                    self.send_response(304)
                    self.send_header("ETag", reply.etag)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                if reply.etag is not None:
                    self.send_header("ETag", reply.etag)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the job connects to many documents at once
            daemon_threads = True
            block_on_close = False  # a handler may still sleep in the timeout case

        self.server = Server(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def hits(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p == path)

    def __enter__(self) -> Web:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- documents: realistic regulatory, legal, news and documentation text ------------------

NAV = "Home | Guidance | Publications | Contact"
FOOTER = "Crown copyright 2025. All content is available under the Open Government Licence."
SCOPE = "This guidance applies to permanent and fixed-term staff employed by the agency."
LEAVE = "Employees are entitled to sixteen weeks of paid parental leave."
DEADLINE = "Applications must be submitted no later than 30 June 2025."
PROOF = "Applicants are required to provide proof of address."
DESK = "Questions about this policy go to the HR service desk on the intranet."
COURT = "The Court of Appeal upheld the lower court's ruling in the licensing dispute."
PORTAL = (
    "The new portal was launched by the Department of Health in partnership with local councils."
)
LIMIT = "The search endpoint returns at most 100 results per page."


def page(
    *paragraphs: str,
    title: str = "Parental leave policy",
    nav: str = NAV,
    footer: str = FOOTER,
    extra_head: str = "",
) -> bytes:
    body = "\n".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f"<!doctype html><html><head><title>{title}</title>{extra_head}</head><body>"
        f"<nav>{nav}</nav><main><h1>{title}</h1>\n{body}\n</main>"
        f"<footer>{footer}</footer></body></html>"
    ).encode()


ORIGINAL = page(SCOPE, LEAVE, DEADLINE, PROOF, DESK)
NEWS = page(
    "By our legal correspondent.",
    COURT,
    "The case concerned a licence granted to a waste operator in 2019.",
    title="Appeal ruling in licensing dispute",
)
LAUNCH = page(
    "Press release, 3 February 2025.",
    PORTAL,
    "Residents can book appointments and renew prescriptions online.",
    title="New health portal",
)
API_DOC = page(
    "Pagination",
    LIMIT,
    "Use the next link in the response to fetch more.",
    title="Search API reference",
)
HOME = page(
    "Welcome to the Example Agency.", "Find guidance, forms and news.", title="Example Agency"
)
PDF_ORIGINAL = make_pdf(
    [
        [
            b"Annual report 2024.",
            b"Operating costs rose by 12 percent in 2024.",
            b"The board approved the budget.",
        ]
    ]
)


@dataclass(frozen=True)
class Case:
    name: str
    original: bytes
    quote: str
    served: Reply | None  # None: served by a special route set up in the test
    verdict: str
    content_type: str = "text/html; charset=utf-8"
    capture_headers: dict[str, str] = field(default_factory=dict)
    redirect: str | None = None  # path the live URI-R redirects to

    @property
    def path(self) -> str:
        return f"/docs/{self.name}"


def _swap(original: bytes, old: str, new: str) -> bytes:
    assert old.encode() in original
    return original.replace(old.encode(), new.encode())


CASES = [
    Case("identical", ORIGINAL, LEAVE, Reply(body=ORIGINAL), "identical"),
    Case(
        "not-modified",
        ORIGINAL,
        DEADLINE,
        Reply(body=ORIGINAL, etag='"v7"'),
        "identical",
        capture_headers={"etag": '"v7"'},
    ),
    Case(
        "markup-only",
        ORIGINAL,
        LEAVE,
        Reply(
            body=_swap(
                ORIGINAL,
                LEAVE,
                "Employees are entitled to\n   <strong class='hl'>sixteen weeks</strong>"
                "   of <em>paid</em> parental leave.",
            )
        ),
        "cosmetic",
    ),
    Case(
        "boilerplate",
        ORIGINAL,
        LEAVE,
        Reply(
            body=page(
                SCOPE,
                LEAVE,
                DEADLINE,
                PROOF,
                DESK,
                nav="Home | Services | News | Sign in",
                footer="© 2025 Example Agency. Cookies help us improve this site.",
            )
        ),
        "cosmetic",
    ),
    Case(
        "moved", ORIGINAL, LEAVE, Reply(body=page(DESK, PROOF, DEADLINE, SCOPE, LEAVE)), "cosmetic"
    ),
    Case(
        "other-paragraph",
        ORIGINAL,
        LEAVE,
        Reply(
            body=page(
                SCOPE,
                LEAVE,
                DEADLINE,
                PROOF,
                "Questions about this policy go to your line manager.",
            )
        ),
        "cosmetic",
    ),
    Case("deleted", ORIGINAL, LEAVE, Reply(body=page(SCOPE, DEADLINE, PROOF, DESK)), "material"),
    Case(
        "reworded",
        LAUNCH,
        PORTAL,
        Reply(
            body=_swap(
                LAUNCH,
                PORTAL,
                "The Department of Health launched the new portal together with local councils.",
            )
        ),
        "material",
    ),
    Case(
        "negated",
        ORIGINAL,
        PROOF,
        Reply(
            body=_swap(ORIGINAL, PROOF, "Applicants are not required to provide proof of address.")
        ),
        "reversal",
    ),
    Case(
        "outcome-reversed",
        NEWS,
        COURT,
        Reply(
            body=_swap(
                NEWS,
                COURT,
                "The Court of Appeal overturned the lower court's ruling in the licensing dispute.",
            )
        ),
        "reversal",
    ),
    Case(
        "number-changed",
        ORIGINAL,
        LEAVE,
        Reply(
            body=_swap(
                ORIGINAL, LEAVE, "Employees are entitled to twelve weeks of paid parental leave."
            )
        ),
        "reversal",
    ),
    Case(
        "date-changed",
        ORIGINAL,
        DEADLINE,
        Reply(
            body=_swap(
                ORIGINAL, DEADLINE, "Applications must be submitted no later than 31 July 2025."
            )
        ),
        "reversal",
    ),
    Case(
        "limit-changed",
        API_DOC,
        LIMIT,
        Reply(
            body=_swap(API_DOC, LIMIT, "The search endpoint returns at most 50 results per page.")
        ),
        "reversal",
    ),
    Case(
        "moved-to-other-document",
        ORIGINAL,
        LEAVE,
        Reply(301, headers={"Location": "/docs/elsewhere"}),
        "material",
        redirect="/docs/elsewhere",
    ),
    Case(
        "moved-to-home",
        ORIGINAL,
        LEAVE,
        Reply(301, headers={"Location": "/"}),
        "soft_404",
        redirect="/",
    ),
    Case("not-found", ORIGINAL, LEAVE, Reply(404, b"<html><body>Not found</body></html>"), "gone"),
    Case("removed", ORIGINAL, LEAVE, Reply(410, b"<html><body>Gone</body></html>"), "gone"),
    Case(
        "soft-404",
        ORIGINAL,
        LEAVE,
        Reply(
            200,
            page(
                "Sorry, the page you were looking for could not be found.",
                "Try the search box above.",
                title="Page not found",
            ),
        ),
        "soft_404",
    ),
    Case(
        "timeout",
        ORIGINAL,
        LEAVE,
        Reply(body=ORIGINAL + b" ", delay=3 * FETCH_TIMEOUT),
        "unreachable",
    ),
    Case(
        "server-error",
        ORIGINAL,
        LEAVE,
        Reply(500, b"<html><body>Internal error</body></html>"),
        "unreachable",
    ),
    Case(
        "pdf-changed",
        PDF_ORIGINAL,
        "Operating costs rose by 12 percent in 2024.",
        Reply(
            body=make_pdf(
                [
                    [
                        b"Annual report 2024.",
                        b"Operating costs rose by 21 percent in 2024.",
                        b"The board approved the budget.",
                    ]
                ]
            ),
            content_type="application/pdf",
        ),
        "reversal",
        content_type="application/pdf",
    ),
    Case(
        "pdf-resaved",
        PDF_ORIGINAL,
        "The board approved the budget.",
        Reply(
            body=PDF_ORIGINAL + b"\n% re-saved by the publisher\n", content_type="application/pdf"
        ),
        "cosmetic",
        content_type="application/pdf",
    ),
]
REVIEWED = {c.name for c in CASES if c.verdict == "reversal"}


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture()
def settings(settings: Settings) -> Settings:
    """The backend pair's settings, with the loopback origin opened and a fast drift policy."""
    return settings.with_overrides(
        fetch_allow=("127.0.0.1:*",),
        extra={
            "drift": {
                "host_delay_seconds": 0.0,
                "host_concurrency": 8,
                "timeout_seconds": FETCH_TIMEOUT,
                "concurrency": 16,
            }
        },
    )


@pytest.fixture()
def web() -> Iterator[Web]:
    with Web() as origin:
        yield origin


@pytest.fixture()
def catch_all() -> Iterator[Web]:
    """A host that answers every path with its home page (a probe of any URL looks the same)."""
    with Web(fallback=Reply(body=HOME)) as origin:
        yield origin


def cite(
    client: Any,
    transcript: str,
    uri_r: str,
    original: bytes,
    quote: str,
    *,
    content_type: str = "text/html; charset=utf-8",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    client.put(f"/api/v1/transcripts/{transcript}", json={"retention": "P1Y"})
    import base64

    response = client.post(
        f"/api/v1/transcripts/{transcript}/citations",
        json={
            "citations": [
                {
                    "source": {
                        "uri_r": uri_r,
                        "content_base64": base64.b64encode(original).decode(),
                        "content_type": content_type,
                        "captured_at": "2025-03-01T10:00:00Z",
                        "tool": "http.get",
                        "http_status": 200,
                        "headers": headers or {},
                    },
                    "quote": {"exact": quote},
                }
            ]
        },
    )
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()["citations"][0]
    return made


@dataclass
class World:
    client: Any
    archive: Archive
    web: Web
    cited: dict[str, dict[str, Any]]  # case name → citation as the API answered


@pytest.fixture()
def world(client: Any, archive: Archive, web: Web) -> World:
    cited = {}
    for case in CASES:
        cited[case.name] = cite(
            client,
            f"t-{case.name}",
            web.base + case.path,
            case.original,
            case.quote,
            content_type=case.content_type,
            headers=case.capture_headers,
        )
        assert case.served is not None
        web.routes[case.path] = case.served
    web.routes["/docs/elsewhere"] = Reply(
        body=page(
            "Our offices are open Monday to Friday.",
            "Parking is available on site.",
            title="Visiting us",
        )
    )
    web.routes["/"] = Reply(body=HOME)
    return World(client, archive, web, cited)


def by_case(world: World, checks: list[CheckRecord]) -> dict[str, CheckRecord]:
    ids = {c["id"]: name for name, c in world.cited.items()}
    return {ids[c.citation_id]: c for c in checks if c.citation_id in ids}


# -- the verdicts -------------------------------------------------------------------------


def test_each_change_gets_its_verdict(world: World) -> None:
    started = time.monotonic()
    checks = world.archive.drift.run()
    elapsed = time.monotonic() - started
    found = by_case(world, checks)
    assert {name: c.verdict for name, c in found.items()} == {c.name: c.verdict for c in CASES}
    assert all(c.verdict in VERDICTS for c in checks)
    assert elapsed < 10, "the timeout case must not hold the run up"
    for case in CASES:
        check = found[case.name]
        expected = world.web.base + case.redirect if case.redirect else None
        assert check.redirected_to == expected, case.name
        assert check.memento_id == world.cited[case.name]["uri_m"].rsplit("/", 1)[1]
        assert check.uri_r == world.web.base + case.path
        assert check.rules_version.startswith("amber-drift-")
    assert found["not-modified"].http_status == 304
    assert (
        found["identical"].http_status == 200
        and found["identical"].live_hash == world.cited["identical"]["document_hash"]
    )
    assert found["not-found"].http_status == 404 and found["removed"].http_status == 410
    assert found["timeout"].http_status is None and "timed out" in (found["timeout"].error or "")
    assert found["server-error"].http_status == 500
    assert found["moved-to-other-document"].http_status == 200
    # Where the passage is now, or what replaced it.
    assert found["moved"].location is not None and found["moved"].location.method == "exact"
    assert found["number-changed"].location is not None
    assert found["number-changed"].location.method == "fuzzy"
    assert any("16" in r or "sixteen" in r for r in found["number-changed"].reasons)
    assert found["pdf-changed"].extractor == "amber-pdf"
    assert found["markup-only"].extractor == "amber-html"
    assert found["number-changed"].diff


def test_conditional_request_uses_the_capture_validators(world: World) -> None:
    world.archive.drift.run()
    [(_, headers)] = [r for r in world.web.requests if r[0] == "/docs/not-modified"]
    assert headers["if-none-match"] == '"v7"'
    [(_, plain)] = [r for r in world.web.requests if r[0] == "/docs/identical"]
    assert "if-none-match" not in plain


def test_checks_are_stored_with_history_and_shown_on_transcripts(world: World) -> None:
    checks = world.archive.drift.run()
    with world.archive.index.read() as connection:
        stored = connection.execute(text("SELECT COUNT(*) FROM drift_checks")).scalar_one()
    assert stored == len(checks) == len(CASES)
    cited = world.cited["negated"]
    history = world.client.get(f"/api/v1/citations/{cited['id']}/drift")
    assert history.status_code == 200, history.text
    body = history.json()
    assert body["latest"]["verdict"] == "reversal"
    assert body["latest"]["http_status"] == 200
    assert body["latest"]["found"]["method"] == "fuzzy"
    assert "negation_added:not" in body["latest"]["reasons"]
    assert body["latest"]["diff"]
    assert [c["id"] for c in body["checks"]] == [body["latest"]["id"]]
    transcript = world.client.get("/api/v1/transcripts/t-negated").json()
    assert transcript["citations"][0]["drift"]["verdict"] == "reversal"
    assert (
        transcript["citations"][0]["drift"]["new_passage_uri_m"]
        == body["latest"]["new_passage_uri_m"]
    )
    unchecked = cite(world.client, "t-fresh", world.web.base + "/docs/fresh", ORIGINAL, SCOPE)
    assert world.client.get("/api/v1/transcripts/t-fresh").json()["citations"][0]["drift"] is None
    assert world.client.get(f"/api/v1/citations/{unchecked['id']}/drift").json()["latest"] is None
    missing = world.client.get("/api/v1/citations/" + "0" * 32 + "/drift")
    assert missing.status_code == 404


def test_changed_passage_is_archived_as_a_new_memento_in_the_timemap(world: World) -> None:
    found = by_case(world, world.archive.drift.run())
    check = found["number-changed"]
    assert check.new_passage_memento_id is not None
    memento = world.archive.get_memento("default", check.new_passage_memento_id)
    assert memento.facts.tool == "drift" and memento.scope.value == "passage"
    assert memento.uri_r == world.web.base + "/docs/number-changed"
    content = world.archive.read_content(memento).decode()
    assert "twelve weeks of paid parental leave" in content
    assert "sixteen" not in content
    timemap = world.client.get(f"/timemap/json/{memento.uri_r}").json()
    listed = [m["id"] for m in timemap["mementos"]["list"]]
    assert listed == [world.cited["number-changed"]["uri_m"].rsplit("/", 1)[1], memento.id]
    # Nothing new is archived when the passage is intact, gone or unreachable.
    for name in ("identical", "moved", "not-found", "timeout", "soft-404", "deleted"):
        assert found[name].new_passage_memento_id is None, name
    # The whole live page is not kept (citations.keep_document is off).
    assert found["number-changed"].live_document_memento_id is None
    # What the check archived lives as long as the transcript it was checked for.
    with world.archive.index.read() as connection:
        expires = connection.execute(
            text("SELECT expires_at FROM mementos WHERE id = :i"), {"i": memento.id}
        ).scalar_one()
    assert expires is not None and str(expires)[:4] >= str(utc_now().year + 1)[:4]


def test_each_uri_r_is_fetched_once_and_probed_once_per_host(world: World) -> None:
    second = cite(world.client, "t-second", world.web.base + "/docs/identical", ORIGINAL, DESK)
    checks = world.archive.drift.run()
    assert world.web.hits("/docs/identical") == 1
    assert {c.citation_id for c in checks} >= {second["id"], world.cited["identical"]["id"]}
    probes = [p for p, _ in world.web.requests if "amber-drift-probe-" in p]
    assert len(probes) == 1 and probes[0].startswith("/docs/amber-drift-probe-")


def test_catch_all_host_is_a_soft_404_by_probe(
    client: Any, archive: Archive, catch_all: Web
) -> None:
    cited = cite(client, "t-catch", catch_all.base + "/news/2019/appeal-ruling", NEWS, COURT)
    [check] = archive.drift.run()
    assert check.citation_id == cited["id"]
    assert check.verdict == "soft_404"
    assert any(r.startswith("probe_similar") for r in check.reasons)


# -- review -------------------------------------------------------------------------------


def test_reversal_sets_needs_review_and_an_auditor_clears_it(world: World) -> None:
    checks = world.archive.drift.run()
    assert {c.transcript_id for c in checks if c.flagged} == {f"t-{n}" for n in REVIEWED}
    listed = world.client.get("/api/v1/transcripts", params={"needs_review": "true"})
    assert listed.status_code == 200, listed.text
    assert {t["id"] for t in listed.json()} == {f"t-{n}" for n in REVIEWED}
    flagged = next(t for t in listed.json() if t["id"] == "t-negated")["review"]
    assert flagged["needs_review"] is True and flagged["flagged_at"]
    [reason] = flagged["reasons"]
    assert reason["verdict"] == "reversal" and reason["citation_id"] == world.cited["negated"]["id"]
    assert "negation_added:not" in reason["reasons"]
    not_flagged = world.client.get("/api/v1/transcripts", params={"needs_review": "false"}).json()
    assert "t-identical" in {t["id"] for t in not_flagged}
    assert not {t["id"] for t in not_flagged} & {f"t-{n}" for n in REVIEWED}

    cleared = world.client.post(
        "/api/v1/transcripts/t-negated/review",
        json={"note": "Checked: the requirement was dropped in the 2025 revision."},
    )
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["needs_review"] is False
    assert cleared.json()["cleared_note"].startswith("Checked")
    assert cleared.json()["cleared_at"] and cleared.json()["cleared_by"]
    remaining = {t["id"] for t in world.client.get("/api/v1/transcripts?needs_review=true").json()}
    assert remaining == {f"t-{n}" for n in REVIEWED} - {"t-negated"}
    assert (
        world.client.post("/api/v1/transcripts/t-negated/review", json={"note": ""}).status_code
        == 422
    )
    assert (
        world.client.post(
            "/api/v1/transcripts/t-negated/review", json={"note": "a\x00b"}
        ).status_code
        == 400
    )
    assert world.client.get("/api/v1/citations/not-an-id/drift").status_code == 422
    assert (
        world.client.post("/api/v1/transcripts/t-nope/review", json={"note": "x"}).status_code
        == 404
    )
    # The same finding two days later does not re-open a cleared review.
    later = world.archive.drift.run(now=utc_now() + timedelta(days=2))
    assert by_case(world, later)["negated"].verdict == "reversal"
    assert not by_case(world, later)["negated"].flagged
    remaining = {t["id"] for t in world.client.get("/api/v1/transcripts?needs_review=true").json()}
    assert "t-negated" not in remaining


def test_review_on_is_configurable(
    client: Any, archive: Archive, settings: Settings, web: Web
) -> None:
    strict = settings.with_overrides(
        extra={"drift": {**settings.extra["drift"], "review_on": ["reversal", "material", "gone"]}}
    )
    cite(client, "t-del", web.base + "/docs/deleted", ORIGINAL, LEAVE)
    cite(client, "t-404", web.base + "/docs/404", ORIGINAL, LEAVE)
    web.routes["/docs/deleted"] = Reply(body=page(SCOPE, DEADLINE))
    other = Archive.open(strict)
    try:
        checks = other.drift.run()
    finally:
        other.close()
    assert {c.transcript_id: (c.verdict, c.flagged) for c in checks} == {
        "t-del": ("material", True),
        "t-404": ("gone", True),
    }


def test_a_passage_in_an_unread_language_is_flagged_not_guessed(
    client: Any, archive: Archive, web: Web
) -> None:
    """amber-drift-2: Russian has no data, so an edit is not judged: it says so and asks a
    person (needs_review), although review_on is only ``reversal``."""
    said = "Исполнительный комитет одобрил проект реконструкции площади."
    cite(client, "t-ru", web.base + "/ru/news", page("Новости.", said, title="Новости"), said)
    web.routes["/ru/news"] = Reply(
        body=page("Новости.", said.replace("одобрил", "отклонил"), title="Новости")
    )
    [check] = archive.drift.run()
    assert (check.verdict, check.flagged) == ("material", True)
    assert check.reasons == ("language_unsupported:ru",)


# -- scheduling, idempotency, kill-safety ---------------------------------------------------


def test_rerun_checks_nothing_until_the_interval_has_passed(world: World) -> None:
    first = world.archive.drift.run()
    assert len(first) == len(CASES)
    assert world.archive.drift.run() == []  # nothing due: idempotent
    later = world.archive.drift.run(now=utc_now() + timedelta(hours=7))
    assert {c.verdict for c in later} == {"unreachable"}  # only inconclusive checks retry soon
    much_later = world.archive.drift.run(now=utc_now() + timedelta(days=2))
    assert len(much_later) == len(CASES)
    # The same new wording is not archived twice: the later check links the same memento.
    before, after = (
        by_case(world, first)["number-changed"],
        by_case(world, much_later)["number-changed"],
    )
    assert (
        before.new_passage_memento_id
        and after.new_passage_memento_id == before.new_passage_memento_id
    )
    timemap = world.client.get(f"/timemap/json/{before.uri_r}").json()
    assert len(timemap["mementos"]["list"]) == 2
    history = world.client.get(f"/api/v1/citations/{world.cited['negated']['id']}/drift").json()
    assert len(history["checks"]) == 2
    assert history["checks"][0]["checked_at"] > history["checks"][1]["checked_at"]


def test_a_later_check_never_links_a_new_passage_deleted_since(world: World) -> None:
    """The same new wording is linked, not archived again; once that memento was erased
    (or expired), a later check must not point at the tombstone."""
    first = by_case(world, world.archive.drift.run())["number-changed"]
    assert first.new_passage_memento_id is not None
    world.archive.retention.erase("default", first.new_passage_memento_id, "takedown", "admin-key")
    later = by_case(world, world.archive.drift.run(now=utc_now() + timedelta(days=2)))[
        "number-changed"
    ]
    assert later.verdict == first.verdict and later.new_passage_hash == first.new_passage_hash
    assert later.new_passage_memento_id is None


@pytest.mark.seaweedfs
def test_drift_captures_are_locked_from_their_first_write(
    seaweedfs_settings: Settings, tmp_path: Path, web: Web
) -> None:
    """With S3 Object Lock, a passage a drift check archives is locked like any other new
    evidence at once, not only when a later lock sync reaches it."""
    from archive.citations import CitationRequest, QuoteRequest, SourceRequest

    locked = seaweedfs_settings.with_overrides(
        data_dir=tmp_path / "amber",
        database_url=f"sqlite:///{tmp_path / 'amber.sqlite3'}",
        s3_object_lock_mode="GOVERNANCE",
        fetch_allow=("127.0.0.1:*",),
        extra={"drift": {"host_delay_seconds": 0.0, "timeout_seconds": FETCH_TIMEOUT}},
    )
    archive = Archive.open(locked)
    try:
        archive.transcripts.put("default", "t-locked", "P1Y", {})
        archive.citations.cite(
            "default",
            "t-locked",
            [
                CitationRequest(
                    QuoteRequest(LEAVE),
                    source=SourceRequest(
                        uri_r=web.base + "/docs/locked",
                        content=ORIGINAL,
                        content_type="text/html; charset=utf-8",
                        tool="http.get",
                        http_status=200,
                    ),
                )
            ],
        )
        web.routes["/docs/locked"] = Reply(body=ORIGINAL.replace(b"sixteen", b"twelve"))
        [check] = archive.drift.run()
        assert check.new_passage_memento_id is not None
        archived = archive.get_memento("default", check.new_passage_memento_id)
        until, _ = archive.blobs.retention_of(archived.content_hash, archived.blob_version_id)
        assert until is not None and until >= archived.archived_at + timedelta(days=13)
    finally:
        archive.close()


def test_stable_sources_are_checked_less_often(client: Any, archive: Archive, web: Web) -> None:
    cite(client, "t-stable", web.base + "/docs/stable", ORIGINAL, LEAVE)
    web.routes["/docs/stable"] = Reply(body=ORIGINAL)
    now = utc_now()
    for day in range(3):  # stable_after = 3 consecutive identical/cosmetic checks
        assert len(archive.drift.run(now=now + timedelta(days=day))) == 1
    assert archive.drift.run(now=now + timedelta(days=4)) == []
    assert len(archive.drift.run(now=now + timedelta(days=10))) == 1


def test_limit_and_a_killed_run_resume_where_they_stopped(world: World) -> None:
    partial = world.archive.drift.run(limit=5)
    assert len(partial) == 5
    rest = world.archive.drift.run()
    assert len(rest) == len(CASES) - 5
    assert not {c.citation_id for c in partial} & {c.citation_id for c in rest}


def test_a_run_killed_before_its_commit_leaves_everything_due(
    world: World, monkeypatch: Any
) -> None:
    def crash(batch: Any) -> Any:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(world.archive.drift, "store", crash)
    with pytest.raises(KeyboardInterrupt):
        world.archive.drift.run()
    monkeypatch.undo()
    assert len(world.archive.drift.run()) == len(CASES)


def test_a_bug_on_one_page_leaves_it_due_and_the_rest_stored(
    world: World, monkeypatch: Any
) -> None:
    from archive.drift.rules import classify as real

    def flaky(**kwargs: Any) -> Any:
        if kwargs["old_exact"] == COURT:
            raise RuntimeError("a bug")
        return real(**kwargs)

    monkeypatch.setattr(world.archive.drift, "classify", flaky)
    summary = world.archive.drift.job().run_summary()
    assert summary.failed == 1 and len(summary.checks) == len(CASES) - 1
    monkeypatch.undo()
    [retried] = world.archive.drift.run()
    assert (
        retried.citation_id == world.cited["outcome-reversed"]["id"]
        and retried.verdict == "reversal"
    )


def test_non_web_uri_rs_are_not_checkable(client: Any, archive: Archive) -> None:
    cite(client, "t-kb", "kb:policies/parental-leave", ORIGINAL, LEAVE)
    summary = archive.drift.job().run_summary()
    assert summary.checks == [] and summary.not_checkable == 1


# -- rates per source ------------------------------------------------------------------------


def test_drift_rates_per_source_host(world: World, catch_all: Web) -> None:
    cite(world.client, "t-catch", catch_all.base + "/news/x", NEWS, COURT)
    world.archive.drift.run()
    report = world.client.get("/api/v1/drift/sources", params={"window_days": 30})
    assert report.status_code == 200, report.text
    sources = {s["host"]: s for s in report.json()["sources"]}
    host = world.web.base.split("://", 1)[1]
    conclusive = [c for c in CASES if c.verdict != "unreachable"]
    eroded = [c for c in conclusive if c.verdict in ("material", "reversal", "gone", "soft_404")]
    assert sources[host]["citations_checked"] == len(conclusive)
    assert sources[host]["eroded"] == len(eroded)
    assert sources[host]["rate"] == pytest.approx(len(eroded) / len(conclusive), abs=1e-4)
    catch_host = catch_all.base.split("://", 1)[1]
    assert sources[catch_host]["rate"] == 1.0
    # New citations from a known host carry its drift rate.
    made = cite(world.client, "t-new", world.web.base + "/docs/another", ORIGINAL, SCOPE)
    assert made["source_drift"]["host"] == host
    assert made["source_drift"]["rate"] == sources[host]["rate"]
    unknown = cite(world.client, "t-new", "https://unknown.example/a", ORIGINAL, SCOPE)
    assert unknown["source_drift"] is None


def test_keep_document_archives_the_live_page(client: Any, settings: Settings, web: Web) -> None:
    keeping = settings.with_overrides(
        extra={**settings.extra, "citations": {"keep_document": True}}
    )
    opened = Archive.open(keeping)
    try:
        cite(client, "t-keep", web.base + "/docs/keep", ORIGINAL, LEAVE)
        changed = _swap(
            ORIGINAL, LEAVE, "Employees are entitled to twelve weeks of paid parental leave."
        )
        web.routes["/docs/keep"] = Reply(body=changed)
        [check] = opened.drift.run()
        assert check.verdict == "reversal" and check.live_document_memento_id is not None
        whole = opened.get_memento("default", check.live_document_memento_id)
        assert opened.read_content(whole) == changed
        assert whole.scope.value == "document" and whole.facts.tool == "drift"
    finally:
        opened.close()


def test_keep_document_refuses_a_live_media_type_unsafe_in_headers(
    client: Any, settings: Settings, web: Web
) -> None:
    """A live page whose Content-Type holds a non-ASCII space is checked (its passage is
    archived) but not kept whole: that media type would go out raw at the URI-M."""
    keeping = settings.with_overrides(
        extra={**settings.extra, "citations": {"keep_document": True}}
    )
    opened = Archive.open(keeping)
    try:
        cite(client, "t-keep", web.base + "/docs/keep", ORIGINAL, LEAVE)
        changed = _swap(
            ORIGINAL, LEAVE, "Employees are entitled to twelve weeks of paid parental leave."
        )
        web.routes["/docs/keep"] = Reply(body=changed, content_type="text/html;\xa0charset=utf-8")
        [check] = opened.drift.run()
        assert check.verdict == "reversal" and check.new_passage_memento_id is not None
        assert check.live_document_memento_id is None
        with opened.index.read() as connection:
            stored = connection.execute(select(mementos.c.media_type)).scalars().all()
        assert stored and all(t.isascii() and t.isprintable() for t in stored)
    finally:
        opened.close()


# -- CLI --------------------------------------------------------------------------------------


def _cli_env(settings: Settings, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "amber.toml"
    config.write_text(
        f"[drift]\nhost_delay_seconds = 0.0\nhost_concurrency = 8\ntimeout_seconds = {FETCH_TIMEOUT}\n"
    )
    env = env_for(settings)
    env["AMBER_CONFIG"] = str(config)
    return env


def test_cli_drift_run_json_and_report(world: World, settings: Settings, tmp_path: Path) -> None:
    env = _cli_env(settings, tmp_path)
    result = CliRunner().invoke(main, ["drift", "run", "--json", "--limit", "6"], env=env)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 6
    for line in lines:
        assert {
            "citation_id",
            "memento_id",
            "uri_r",
            "verdict",
            "redirected_to",
            "http_status",
            "checked_at",
        } <= set(line)
        assert line["verdict"] in VERDICTS
    result = CliRunner().invoke(main, ["drift", "run"], env=env)
    assert result.exit_code == 0, result.output
    assert f"{len(CASES) - 6} citation(s) checked" in result.stdout
    assert "reversal" in result.stdout
    report = CliRunner().invoke(main, ["drift", "report", "--window-days", "7"], env=env)
    assert report.exit_code == 0, report.output
    assert world.web.base.split("://", 1)[1] in report.stdout
    as_json = CliRunner().invoke(main, ["drift", "report", "--json"], env=env)
    assert json.loads(as_json.stdout)["sources"][0]["citations_checked"] > 0


@pytest.mark.parametrize(
    "command", [["drift", "--help"], ["drift", "run", "--help"], ["drift", "report", "--help"]]
)
def test_cli_help_has_examples(command: list[str]) -> None:
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0 and "Example" in result.output
