"""The agent SDK (``api/client/``): evidence capture, citing answers, retries.

Three layers of tests:

- units with no server (the locker, answer coercion, the retry loop over
  ``httpx.MockTransport``);
- in-process against the app (``TestClient`` for the sync client, ``ASGITransport`` for the
  async one), on both backend pairs — the citation rules, fast;
- against a live ``amber serve`` on both backend pairs — a real tool fetching a real page,
  the URI-M resolving, and a response dropped on the wire; plus the example script.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import BASE_URL
from live_server import LiveServer, base_url_for, env_for, free_port, running_server

from api.app import create_app
from api.client import (
    SAFE_ANSWER,
    AmberClient,
    AmberConnectionError,
    Answer,
    AsyncAmberClient,
    AuthError,
    CitationRejected,
    Claim,
    EvidenceLocker,
    NotFoundError,
    RateLimitedError,
    RetryPolicy,
    SearchHit,
    ServiceUnavailableError,
    Source,
    ToolResult,
    content_hash,
)
from archive.archive import Archive
from archive.config import Settings

# Windows-1252 bytes on purpose: the locker must keep the body as fetched, not re-encoded,
# so the server's document hash equals the hash of the bytes the tool saw.
PAGE = """<!doctype html><html><head><title>Parental leave &amp; caf\u00e9 policy</title></head>
<body><h1>Parental leave</h1>
<p>Employees are entitled to <b>sixteen weeks</b> of paid parental leave.</p>
<p>Requests must be made four weeks in advance. Caf\u00e9 vouchers are not leave.</p>
</body></html>""".encode("windows-1252")
CONTENT_TYPE = "text/html; charset=windows-1252"
URI_R = "https://hr.example/policies/leave?v=3"
QUOTE = "sixteen weeks of paid parental leave"
HALLUCINATED = "twenty weeks of paid parental leave"
FAST = RetryPolicy(max_retries=3, backoff=0.001, max_backoff=0.01)
FETCHED_AT = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)


def page_result(**overrides: Any) -> ToolResult:
    return ToolResult(
        **{
            "url": URI_R,
            "body": PAGE,
            "content_type": CONTENT_TYPE,
            "status": 200,
            "headers": {"ETag": '"v3"', "Set-Cookie": "secret"},
            **overrides,
        }
    )


def captured(locker: EvidenceLocker) -> tuple[Source, Source]:
    """One fetched page (evidence) and one search hit (not evidence), through wrapped tools."""
    fetch = locker.wrap_tool("http.get", lambda url: page_result(url=url))
    search = locker.wrap_tool(
        "search.web",
        lambda query: [
            {"url": URI_R, "title": "Leave policy", "snippet": "Parental leave is twenty weeks."}
        ],
    )
    page = fetch(URI_R)
    [hit] = search("parental leave")
    return page, hit


# -- units: no server ----------------------------------------------------------------------


def test_locker_keeps_raw_bytes_under_an_id_bound_to_the_capture() -> None:
    locker = EvidenceLocker(clock=lambda: FETCHED_AT)

    @locker.tool("http.get")
    def http_get(url: str) -> ToolResult:
        """Fetch a page."""
        return page_result(url=url)

    page = http_get(URI_R)
    assert http_get.__doc__ == "Fetch a page."  # functools.wraps: frameworks read it
    assert isinstance(page, Source) and locker[page.source_id] is page
    assert page.body == PAGE and page.content_hash == content_hash(PAGE)
    assert page.uri == URI_R and page.tool == "http.get" and page.fetched_at == FETCHED_AT
    assert page.title == "Parental leave & café policy"
    assert page.is_evidence and page.source_id.startswith("ev_")
    assert "sixteen weeks" in page.text and page.source_id in page.for_model()
    wire = page.wire_source()
    assert wire["captured_at"] == "2025-03-01T10:00:00.000000Z" and wire["tool"] == "http.get"
    assert wire["headers"] == {"etag": '"v3"'}  # capture facts only: no cookies on the wire
    # The same capture files under the same id; other bytes or another time do not.
    assert http_get(URI_R).source_id == page.source_id and len(locker) == 1
    other = locker.record("http.get", page_result(body=PAGE + b" "))
    later = locker.record("http.get", page_result(fetched_at=datetime(2025, 3, 2, tzinfo=UTC)))
    assert len({page.source_id, other.source_id, later.source_id}) == 3


def test_locker_adapts_httpx_responses_mappings_and_fetched_documents() -> None:
    locker = EvidenceLocker()
    request = httpx.Request("GET", "https://hr.example/final")
    response = httpx.Response(
        200, content=PAGE, headers={"content-type": CONTENT_TYPE}, request=request
    )
    from_httpx = locker.record_output("http.get", response)
    assert isinstance(from_httpx, Source) and from_httpx.body == PAGE
    assert from_httpx.content_type == CONTENT_TYPE and from_httpx.status == 200

    from_mapping = locker.record_output(
        "kb.read", {"uri": "kb:hr/leave", "content": "sixteen weeks", "content_type": "text/plain"}
    )
    assert isinstance(from_mapping, Source) and from_mapping.body == b"sixteen weeks"
    assert from_mapping.is_evidence

    @dataclass
    class FetchedDocument:  # the shape of archive.fetch.FetchedDocument
        url: str
        final_url: str
        status: int
        content_type: str | None
        headers: dict[str, str]
        body: bytes
        fetched_at: datetime

    doc = FetchedDocument(URI_R, URI_R + "&final", 200, CONTENT_TYPE, {}, PAGE, FETCHED_AT)
    from_doc = locker.record_output("http.get", doc)
    assert isinstance(from_doc, Source)
    assert from_doc.final_url == URI_R + "&final" and from_doc.fetched_at == FETCHED_AT
    with pytest.raises(TypeError):
        locker.record_output("http.get", "just text, no URL")


def test_search_results_are_recorded_but_flagged_as_not_evidence() -> None:
    locker = EvidenceLocker()
    search = locker.wrap_tool("search.web", lambda q: [SearchHit(URI_R, "Leave", "Twenty weeks.")])
    [hit] = search("leave")
    assert hit in locker and not hit.is_evidence and hit.source_id.startswith("sr_")
    assert hit.body == b"Twenty weeks." and hit.tool == "search.web"
    assert "NOT citable" in hit.for_model()
    # A tool outside the locker's evidence tools is kept but flagged, too.
    other = locker.record("browser.screenshot", page_result())
    assert not other.is_evidence


def test_async_tools_are_wrapped_as_async() -> None:
    locker = EvidenceLocker()

    async def fetch(url: str) -> ToolResult:
        await asyncio.sleep(0)
        return page_result(url=url)

    wrapped = locker.wrap_tool("http.get", fetch)
    assert asyncio.iscoroutinefunction(wrapped)
    page = asyncio.run(wrapped(URI_R))
    assert isinstance(page, Source) and page.source_id in locker


def test_answers_accept_claims_and_plain_mappings() -> None:
    answer = Answer(
        "text",
        [
            Claim("ev_1", "q"),
            {"source_id": "ev_2", "quote": "r", "prefix": "p"},
            {"source_id": "ev_3", "quote": {"exact": "s", "suffix": "x"}},
        ],
    )
    assert answer.citations == (
        Claim("ev_1", "q"),
        Claim("ev_2", "r", prefix="p"),
        Claim("ev_3", "s", suffix="x"),
    )
    assert Answer.coerce({"text": "t", "citations": [{"source_id": "a", "quote": "b"}]}) == Answer(
        "t", [Claim("a", "b")]
    )


MEMENTO_JSON = {
    "id": "0" * 32,
    "uri_r": URI_R,
    "uri_m": f"{BASE_URL}/memento/{'0' * 32}",
    "memento_datetime": "2025-03-01T10:00:00Z",
    "archived_at": "2025-03-01T10:00:01Z",
    "content_hash": content_hash(PAGE),
    "content_type": CONTENT_TYPE,
    "size": len(PAGE),
    "scope": "document",
    "capture": {"tool": "http.get", "final_url": None, "http_status": 200, "headers": {}},
    "timegate": "t",
    "timemap": "m",
    "timemap_json": "j",
}


def scripted_transport(
    *answers: httpx.Response | Exception,
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handle), seen


def error(status: int, code: str, **headers: str) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"code": code, "message": code, "detail": {}}}, headers=headers
    )


def test_retries_reuse_one_idempotency_key_and_the_same_body() -> None:
    transport, seen = scripted_transport(
        httpx.ConnectError("refused"),
        error(503, "storage_unavailable", **{"Retry-After": "0"}),
        error(429, "rate_limited", **{"Retry-After": "0"}),
        httpx.Response(201, json=MEMENTO_JSON),
    )
    with AmberClient(BASE_URL, "k", transport=transport, retry=FAST) as amber:
        memento = amber.write_memento(URI_R, PAGE, CONTENT_TYPE, tool="http.get")
        assert memento.id == "0" * 32 and memento.tool == "http.get"
        assert len(seen) == 4
        assert len({r.headers["idempotency-key"] for r in seen}) == 1
        assert len({r.content for r in seen}) == 1
        assert seen[0].headers["authorization"] == "Bearer k"
        body = json.loads(seen[0].content)
        assert body["content_base64"] and "content" not in body  # windows-1252 bytes as bytes


@pytest.mark.parametrize(
    "raw",
    [
        b"%PDF-1.7\n\xe2\xe3\xcf\xd3 binary",  # not UTF-8
        "caf\u00e9".encode("latin-1"),  # another charset
        b"\xed\xa0\x80",  # an encoded surrogate: not valid UTF-8
    ],
)
def test_bytes_that_are_not_utf8_travel_as_base64(raw: bytes) -> None:
    """Byte identity: what the server decodes is exactly what the tool fetched."""
    transport, seen = scripted_transport(httpx.Response(201, json=MEMENTO_JSON))
    with AmberClient(BASE_URL, transport=transport, retry=FAST) as amber:
        amber.write_memento(URI_R, raw, "application/octet-stream")
    body = json.loads(seen[0].content)
    assert "content" not in body and base64.b64decode(body["content_base64"]) == raw


def test_utf8_bytes_travel_as_text_that_encodes_back_to_them() -> None:
    raw = "<p>Caf\u00e9 \u2014 \ufeffBOM, NUL \x00, CR\r\n, \U0001f600</p>".encode()
    transport, seen = scripted_transport(httpx.Response(201, json=MEMENTO_JSON))
    with AmberClient(BASE_URL, transport=transport, retry=FAST) as amber:
        amber.write_memento(URI_R, raw, "text/html; charset=utf-8")
    body = json.loads(seen[0].content)
    assert "content_base64" not in body and body["content"].encode("utf-8") == raw
    wire = EvidenceLocker().record("http.get", page_result(body=raw)).wire_source()
    assert "content_base64" not in wire and wire["content"].encode("utf-8") == raw


def test_each_logical_call_has_its_own_key() -> None:
    transport, seen = scripted_transport(httpx.Response(201, json=MEMENTO_JSON))
    with AmberClient(BASE_URL, transport=transport, retry=FAST) as amber:
        amber.write_memento(URI_R, "a", "text/plain")
        amber.write_memento(URI_R, "a", "text/plain")
    assert seen[0].headers["idempotency-key"] != seen[1].headers["idempotency-key"]
    assert json.loads(seen[0].content)["content"] == "a"


def test_retries_are_bounded() -> None:
    transport, seen = scripted_transport(error(503, "storage_unavailable", **{"Retry-After": "0"}))
    with (
        AmberClient(BASE_URL, transport=transport, retry=FAST) as amber,
        pytest.raises(ServiceUnavailableError) as raised,
    ):
        amber.get_transcript("t")
    assert len(seen) == FAST.max_retries + 1 and raised.value.status == 503

    transport, seen = scripted_transport(httpx.ReadTimeout("slow"))
    with (
        AmberClient(BASE_URL, transport=transport, retry=FAST) as amber,
        pytest.raises(AmberConnectionError),
    ):
        amber.get_transcript("t")
    assert len(seen) == FAST.max_retries + 1


def test_a_long_retry_after_is_not_waited_for() -> None:
    transport, seen = scripted_transport(error(429, "rate_limited", **{"Retry-After": "3600"}))
    with (
        AmberClient(BASE_URL, transport=transport, retry=FAST) as amber,
        pytest.raises(RateLimitedError) as raised,
    ):
        amber.get_transcript("t")
    assert len(seen) == 1 and raised.value.retry_after == 3600


def test_client_errors_are_mapped_and_not_retried() -> None:
    for status, kind in ((401, AuthError), (404, NotFoundError)):
        transport, seen = scripted_transport(error(status, "nope"))
        with AmberClient(BASE_URL, transport=transport, retry=FAST) as amber, pytest.raises(kind):
            amber.get_transcript("t")
        assert len(seen) == 1


# -- in-process, both backends -------------------------------------------------------------


@pytest.fixture()
def sent() -> list[httpx.Request]:
    return []


@pytest.fixture()
def amber(client: Any, sent: list[httpx.Request]) -> Iterator[AmberClient]:
    """The sync client over the in-process app (auth off), recording what it sends."""
    client.event_hooks = {"request": [sent.append], "response": []}
    with AmberClient(BASE_URL, http_client=client, retry=FAST) as sdk:
        sdk.put_transcript("t-1", retention="P7Y", labels={"run": "r1"})
        sent.clear()
        yield sdk


def citations_stored(amber: AmberClient) -> int:
    return len(amber.get_transcript("t-1").citations)


def test_valid_answer_is_cited_with_uri_ms_and_robust_links(amber: AmberClient) -> None:
    locker = EvidenceLocker()
    page, _ = captured(locker)
    cited = amber.cite_answer(
        "t-1", Answer("Sixteen weeks [1].", [Claim(page.source_id, QUOTE)]), locker, run_id="run-9"
    )
    assert not cited.degraded and cited.text == "Sixteen weeks [1]." and cited.errors == ()
    [citation] = cited.citations
    assert citation.document_hash == page.content_hash  # the server hashed the tool's bytes
    assert citation.source_ids == (page.source_id,) and citation.run_id == "run-9"
    assert citation.exact == QUOTE and cited.uri_ms == (citation.uri_m,)
    assert f'data-versionurl="{citation.uri_m}"' in citation.robust_link
    assert citation.uri_m in cited.render_markdown() and citation.robust_link in cited.render_html()
    assert QUOTE.encode() in amber.fetch_memento(citation.uri_m).content
    assert citations_stored(amber) == 1


def test_hallucinated_quote_fails_closed_and_stores_nothing(amber: AmberClient) -> None:
    locker = EvidenceLocker()
    page, _ = captured(locker)
    answer = Answer("…", [Claim(page.source_id, QUOTE), Claim(page.source_id, HALLUCINATED)])
    with pytest.raises(CitationRejected) as raised:
        amber.cite_answer("t-1", answer, locker)
    assert raised.value.status == 422
    [problem] = raised.value.errors
    assert (problem.index, problem.reason, problem.source_id) == (
        1,
        "quote_not_found",
        page.source_id,
    )
    assert raised.value.safe_text is not None and raised.value.safe_text.startswith(SAFE_ANSWER)
    assert citations_stored(amber) == 0  # the valid citation was not stored either


def test_degrade_mode_returns_the_safe_form_with_reasons(amber: AmberClient) -> None:
    locker = EvidenceLocker()
    page, _ = captured(locker)
    answer = Answer("Twenty weeks.", [Claim(page.source_id, HALLUCINATED)])
    degraded = amber.cite_answer("t-1", answer, locker, mode="degrade")
    assert degraded.degraded and degraded.citations == ()
    assert degraded.text.startswith(SAFE_ANSWER) and "quote_not_found" in degraded.text
    assert degraded.original_text == "Twenty weeks." and degraded.render_markdown() == degraded.text
    assert [e.reason for e in degraded.errors] == ["quote_not_found"]
    assert citations_stored(amber) == 0


def test_citing_a_search_result_is_refused_by_the_server(
    amber: AmberClient, sent: list[httpx.Request]
) -> None:
    locker = EvidenceLocker()
    _, hit = captured(locker)
    with pytest.raises(CitationRejected) as raised:
        amber.cite_answer(
            "t-1",
            Answer("Twenty.", [Claim(hit.source_id, "Parental leave is twenty weeks")]),
            locker,
        )
    assert raised.value.reasons == ("disallowed_tool",)
    # Sent on purpose: the server's evidence policy decides, not a copy of it in the SDK.
    assert [r.url.path for r in sent] == ["/api/v1/transcripts/t-1/citations"]
    assert citations_stored(amber) == 0


def test_unknown_source_id_is_refused_without_asking_the_server(
    amber: AmberClient, sent: list[httpx.Request]
) -> None:
    locker = EvidenceLocker()
    page, _ = captured(locker)
    answer = Answer("…", [Claim(page.source_id, QUOTE), Claim("ev_never_fetched", "anything")])
    with pytest.raises(CitationRejected) as raised:
        amber.cite_answer("t-1", answer, locker)
    [problem] = raised.value.errors
    assert (problem.index, problem.reason, problem.source_id) == (
        1,
        "unknown_evidence",
        "ev_never_fetched",
    )
    assert raised.value.status is None and sent == []
    degraded = amber.cite_answer("t-1", answer, locker, mode="degrade")
    assert degraded.degraded and "unknown_evidence" in degraded.text and sent == []


def test_required_answer_without_citations(amber: AmberClient, sent: list[httpx.Request]) -> None:
    locker = EvidenceLocker()
    with pytest.raises(CitationRejected) as raised:
        amber.cite_answer("t-1", Answer("Trust me."), locker)
    assert raised.value.reasons == ("no_citations",) and raised.value.errors[0].index is None
    degraded = amber.cite_answer(
        "t-1", {"text": "Trust me.", "citations": []}, locker, mode="degrade"
    )
    assert degraded.degraded and degraded.text.startswith(SAFE_ANSWER)
    uncited = amber.cite_answer("t-1", Answer("Hello!"), locker, required=False)
    assert not uncited.degraded and uncited.text == "Hello!" and uncited.citations == ()
    assert sent == []


def test_a_document_cited_several_times_is_sent_once(
    amber: AmberClient, sent: list[httpx.Request]
) -> None:
    locker = EvidenceLocker()
    page, _ = captured(locker)
    answer = Answer(
        "…", [Claim(page.source_id, QUOTE), Claim(page.source_id, "four weeks in advance")]
    )
    cited = amber.cite_answer("t-1", answer, locker)
    assert not cited.degraded and [c.exact for c in cited.citations] == [
        QUOTE,
        "four weeks in advance",
    ]
    assert all(
        c.source_ids == (page.source_id,) and c.document_hash == page.content_hash
        for c in cited.citations
    )
    [request] = [r for r in sent if r.url.path.endswith("/citations")]
    body = json.loads(request.content)
    assert list(body["sources"]) == ["s0"] and body["sources"]["s0"] == page.wire_source()
    assert [c["source_ref"] for c in body["citations"]] == ["s0", "s0"]
    assert all("source" not in c for c in body["citations"])


def test_keep_valid_stores_the_valid_citations_and_reports_the_rest(amber: AmberClient) -> None:
    locker = EvidenceLocker()
    page, hit = captured(locker)
    answer = Answer(
        "…",
        [
            Claim(hit.source_id, "twenty weeks"),
            Claim(page.source_id, QUOTE),
            Claim("ev_unknown", "x"),
            Claim(page.source_id, HALLUCINATED),
        ],
    )
    cited = amber.cite_answer("t-1", answer, locker, keep_valid=True, run_id="r")
    assert not cited.degraded and [c.exact for c in cited.citations] == [QUOTE]
    assert [(e.index, e.reason) for e in cited.errors] == [
        (0, "disallowed_tool"),
        (2, "unknown_evidence"),
        (3, "quote_not_found"),
    ]
    assert citations_stored(amber) == 1
    # With nothing valid, keep_valid still fails closed (citations are required).
    with pytest.raises(CitationRejected):
        amber.cite_answer(
            "t-1", Answer("…", [Claim(page.source_id, HALLUCINATED)]), locker, keep_valid=True
        )


def test_low_level_calls(amber: AmberClient, archive: Archive) -> None:
    memento = amber.write_memento(
        URI_R,
        PAGE,
        CONTENT_TYPE,
        tool="http.get",
        http_status=200,
        captured_at=FETCHED_AT,
        headers={"ETag": '"v3"', "Set-Cookie": "x"},
    )
    assert memento.content_hash == content_hash(PAGE) and memento.headers == {"etag": '"v3"'}
    assert amber.get_memento(memento.uri_m) == memento
    assert amber.fetch_memento(memento.id).content == PAGE
    gate = amber.timegate(URI_R, datetime(2030, 1, 1, tzinfo=UTC))
    assert gate.uri_m == memento.uri_m and gate.memento_id == memento.id
    result = amber.cite("t-1", [{"memento_id": memento.id, "quote": {"exact": QUOTE}}], run_id="r")
    assert result.created and result.citations[0].run_id == "r"
    transcript = amber.put_transcript("t-1", retention=datetime(2040, 1, 1, tzinfo=UTC))
    assert transcript.retain_until == datetime(2040, 1, 1, tzinfo=UTC)
    assert [c.id for c in transcript.citations] == [result.citations[0].id]
    with pytest.raises(NotFoundError):
        amber.get_transcript("no-such-transcript")
    with pytest.raises(NotFoundError):
        amber.cite("no-such-transcript", [{"memento_id": memento.id, "quote": {"exact": QUOTE}}])


def test_async_client_happy_path(settings: Settings, archive: Archive) -> None:
    app = create_app(settings, archive=archive, auth=False)

    async def run() -> None:
        locker = EvidenceLocker()

        async def fetch(url: str) -> ToolResult:
            return page_result(url=url)

        http_get = locker.wrap_tool("http.get", fetch)
        transport = httpx.ASGITransport(app=app)
        async with AsyncAmberClient(BASE_URL, transport=transport, retry=FAST) as amber:
            await amber.put_transcript("t-async", retention="P7Y")
            page = await http_get(URI_R)
            cited = await amber.cite_answer(
                "t-async",
                Answer("16 weeks.", [Claim(page.source_id, QUOTE)]),
                locker,
                run_id="run-a",
            )
            [citation] = cited.citations
            assert citation.document_hash == page.content_hash and citation.run_id == "run-a"
            assert QUOTE.encode() in (await amber.fetch_memento(citation.uri_m)).content
            with pytest.raises(CitationRejected) as raised:
                await amber.cite_answer(
                    "t-async", Answer("20.", [Claim(page.source_id, HALLUCINATED)]), locker
                )
            assert raised.value.reasons == ("quote_not_found",)
            degraded = await amber.cite_answer(
                "t-async",
                Answer("20.", [Claim(page.source_id, HALLUCINATED)]),
                locker,
                mode="degrade",
            )
            assert degraded.degraded
            assert [c.id for c in (await amber.get_transcript("t-async")).citations] == [
                citation.id
            ]

    asyncio.run(run())


# -- live server, both backends -----------------------------------------------------------


@pytest.fixture()
def origin() -> Iterator[str]:
    """A local web server: what the agent's http.get tool fetches."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("ETag", '"leave-v3"')
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/policies/leave?v=3"
    server.shutdown()
    server.server_close()


@pytest.fixture()
def live(settings: Settings) -> Iterator[LiveServer]:
    port = free_port()
    with running_server(env_for(settings, base_url_for(port)), port) as server:
        yield server


@pytest.mark.slow
def test_live_capture_cite_and_resolve(live: LiveServer, origin: str) -> None:
    locker = EvidenceLocker()
    with httpx.Client() as web, AmberClient(live.base_url, live.agent_key, retry=FAST) as amber:
        http_get = locker.wrap_tool("http.get", lambda url: ToolResult.from_httpx(web.get(url)))
        page = http_get(origin)
        assert page.body == PAGE and page.status == 200
        amber.put_transcript("conv-1", retention="regulated", labels={"run_id": "run-1"})
        cited = amber.cite_answer(
            "conv-1",
            Answer("16 weeks [1].", [Claim(page.source_id, QUOTE)]),
            locker,
            run_id="run-1",
        )
        [citation] = cited.citations
        assert citation.document_hash == content_hash(PAGE) == page.content_hash
        assert citation.uri_m.startswith(live.base_url + "/")
        assert citation.text_fragment_url is not None and "#:~:text=" in citation.text_fragment_url
        passage = amber.fetch_memento(citation.uri_m)
        assert passage.verified and QUOTE.encode() in passage.content
        assert passage.content_hash == citation.passage_hash
        info = amber.get_memento(citation.uri_m)
        assert (info.scope, info.tool, info.http_status, info.uri_r) == (
            "passage",
            "http.get",
            200,
            origin,
        )
        assert amber.timegate(origin).uri_m == citation.uri_m

        with pytest.raises(CitationRejected) as raised:
            amber.cite_answer(
                "conv-1", Answer("20 weeks.", [Claim(page.source_id, HALLUCINATED)]), locker
            )
        assert raised.value.reasons == ("quote_not_found",)
        stored = amber.get_transcript("conv-1")
        assert [c.id for c in stored.citations] == [citation.id] and stored.labels == {
            "run_id": "run-1"
        }
    with (
        AmberClient(live.base_url, "amber_not-a-key", retry=FAST) as stranger,
        pytest.raises(AuthError),
    ):
        stranger.get_transcript("conv-1")


class DropFirstCitationResponse(httpx.BaseTransport):
    """Forwards every request; the first citation POST reaches the server, which commits and
    answers, but its answer is lost on the way back (a ReadError)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/citations"):
            self.keys.append(request.headers.get("idempotency-key"))
            if len(self.keys) == 1:
                response.read()
                response.close()
                raise httpx.ReadError("connection reset by peer", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


@pytest.mark.slow
def test_live_dropped_response_is_retried_safely(live: LiveServer) -> None:
    locker = EvidenceLocker()
    page, _ = captured(locker)
    transport = DropFirstCitationResponse()
    with AmberClient(live.base_url, live.agent_key, transport=transport, retry=FAST) as amber:
        amber.put_transcript("conv-r")
        cited = amber.cite_answer(
            "conv-r", Answer("16.", [Claim(page.source_id, QUOTE)]), locker, run_id="run-r"
        )
        assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1] is not None
        stored = amber.get_transcript("conv-r").citations
        assert [c.id for c in stored] == [c.id for c in cited.citations]
        assert len(stored) == 1
        # Replaying the same logical call by hand answers the same ids and stores nothing new.
        again = amber.cite(
            "conv-r",
            [
                {
                    "source": page.wire_source(),
                    "source_id": page.source_id,
                    "quote": {"exact": QUOTE},
                }
            ],
            fail_closed=True,
            run_id="run-r",
            idempotency_key="manual-1",
        )
        replay = amber.cite(
            "conv-r",
            [
                {
                    "source": page.wire_source(),
                    "source_id": page.source_id,
                    "quote": {"exact": QUOTE},
                }
            ],
            fail_closed=True,
            run_id="run-r",
            idempotency_key="manual-1",
        )
        assert [c.id for c in replay.citations] == [c.id for c in again.citations] == [stored[0].id]
        assert len(amber.get_transcript("conv-r").citations) == 1


@pytest.mark.slow
def test_example_agent_loop_runs_end_to_end() -> None:
    script = Path(__file__).resolve().parents[1] / "examples" / "agent_loop.py"
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "SCRIPTED" in out and "/memento/" in out and "data-versionurl=" in out
    assert "quote_not_found" in out and "disallowed_tool" in out and SAFE_ANSWER in out
    assert "1 citation(s) stored" in out
