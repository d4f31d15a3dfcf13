"""Citations at citation time, over HTTP, on both backend pairs."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import pytest

from archive.archive import Archive
from archive.hashing import content_address

PAGE = """<!doctype html><html><head><title>Leave policy</title>
<style>p { color: red }</style><script>var secret = "not visible";</script></head>
<body><nav>Home | Policies</nav>
<article><h1>Parental leave</h1>
<p>Employees are entitled to <b>sixteen weeks</b> of paid parental leave.</p>
<p>The policy applies from 1&nbsp;January 2025 and “replaces” the 2019 rules.</p>
<table><caption>Table 1: Entitlements</caption><tr><td>Primary carer</td><td>16 weeks</td></tr></table>
<p>Requests must be made four weeks in advance. Requests must be made in writing.</p>
</article><aside>Related: sick leave</aside></body></html>"""
URI_R = "https://hr.example/policies/leave?v=3"


def source(**overrides: Any) -> dict[str, Any]:
    return {
        "uri_r": URI_R,
        "content": PAGE,
        "content_type": "text/html; charset=utf-8",
        "captured_at": "2025-03-01T10:00:00Z",
        "tool": "http.get",
        "http_status": 200,
        **overrides,
    }


def cite(client: Any, *citations: dict[str, Any], transcript: str = "t-1", **body: Any) -> Any:
    return client.post(
        f"/api/v1/transcripts/{transcript}/citations", json={"citations": list(citations), **body}
    )


def counts(archive: Archive) -> tuple[int, int]:
    with archive.index.read() as connection:
        from sqlalchemy import text

        cited = connection.execute(text("SELECT COUNT(*) FROM citations")).scalar_one()
    return len(archive.index.all_memento_blobs()), cited


@pytest.fixture()
def transcript(client: Any) -> str:
    response = client.put(
        "/api/v1/transcripts/t-1", json={"retention": "P7Y", "labels": {"run": "r1"}}
    )
    assert response.status_code == 201, response.text
    return "t-1"


def test_cite_inline_source_stores_passage_not_document(
    client: Any, archive: Archive, transcript: str
) -> None:
    response = cite(
        client,
        {
            "source": source(),
            "source_id": "ev-1",
            "quote": {"exact": "sixteen weeks of paid parental leave"},
        },
        run_id="run-9",
    )
    assert response.status_code == 201, response.text
    [made] = response.json()["citations"]
    assert made["document_hash"] == content_address(PAGE.encode())
    assert made["document_uri_m"] is None  # keep_document is off by default
    assert made["match_method"] == "exact"
    quote_selector, position = made["selector"]
    assert quote_selector["type"] == "TextQuoteSelector"
    assert quote_selector["exact"] == "sixteen weeks of paid parental leave"
    assert position["type"] == "TextPositionSelector"
    assert position["end"] - position["start"] == len("sixteen weeks of paid parental leave")
    passage = client.get(made["uri_m"])
    assert passage.status_code == 200
    assert b"sixteen weeks of paid parental leave" in passage.content
    assert content_address(passage.content) == made["passage_hash"]
    assert passage.content != PAGE.encode()
    assert made["run_id"] == "run-9" and made["source_ids"] == ["ev-1"]
    assert f'data-versionurl="{made["uri_m"]}"' in made["robust_link"]
    assert made["text_fragment_url"].startswith("https://hr.example/policies/leave?v=3#:~:text=")
    # The document's bytes are not stored: only the passage blob exists.
    assert not archive.blobs.exists(made["document_hash"])
    assert archive.blobs.exists(made["passage_hash"])
    timemap = client.get(f"/timemap/json/{URI_R}").json()
    assert [m["scope"] for m in timemap["mementos"]["list"]] == ["passage"]


def test_the_same_bytes_under_another_charset_are_matched_on_their_own_text(
    client: Any, transcript: str
) -> None:
    """The prepared text of a document was cached by its bytes alone: cited once as UTF-8,
    the same bytes declared ISO-8859-1 were searched in the UTF-8 text (and the other way
    round, selectors pointed into the wrong text)."""
    raw = base64.b64encode("caf\u00e9 au lait and more text".encode()).decode()
    as_latin1 = source(
        content=None, content_base64=raw, content_type="text/plain; charset=iso-8859-1"
    )
    first = cite(client, {"source": as_latin1, "quote": {"exact": "caf\u00c3\u00a9 au lait"}})
    assert first.status_code == 201, first.text
    as_utf8 = source(content=None, content_base64=raw, content_type="text/plain; charset=utf-8")
    second = cite(client, {"source": as_utf8, "quote": {"exact": "au lait and"}})
    assert second.status_code == 201, second.text
    position = second.json()["citations"][0]["selector"][1]
    assert (position["start"], position["end"]) == (5, 16)  # in "café au lait …", not "cafÃ© …"


def test_text_fragment_link_for_an_upper_case_scheme(client: Any, transcript: str) -> None:
    made = cite(
        client,
        {
            "source": source(uri_r="HTTPS://hr.example/policies/leave"),
            "quote": {"exact": "sixteen weeks of paid parental leave"},
        },
    )
    assert made.status_code == 201, made.text
    link = made.json()["citations"][0]["text_fragment_url"]
    assert link.startswith("HTTPS://hr.example/policies/leave#:~:text=")
    assert "sixteen%20weeks%20of%20paid%20parental%20leave" in link


def test_normalised_quotes_are_accepted(client: Any, transcript: str) -> None:
    quotes = [
        'applies from 1 January 2025 and "replaces" the 2019 rules',  # NBSP and curly quotes
        "Employees are entitled to sixteen weeks",  # inline markup removed
        "Primary carer",  # table cell
        "Table 1: Entitlements",  # caption
        "Related: sick leave",  # sidebar: no boilerplate removal
        "Employees   are\nentitled to",  # whitespace runs and line breaks
    ]
    response = cite(client, *({"source": source(), "quote": {"exact": q}} for q in quotes))
    assert response.status_code == 201, response.text
    methods = [c["match_method"] for c in response.json()["citations"]]
    assert methods[0] == "normalised" and methods[1] == "exact"


def test_quotes_in_other_scripts_match_under_amber_norm_2(client: Any, transcript: str) -> None:
    """Issue #25's cases through the API: the other width of a comma, straight quotes for
    guillemets, a sentence the HTML source breaks between two ideographs; ß is not ss."""
    page = (
        "<html><body><p>会议决定，票价为40元。</p>"
        "<p>市政府批准了地铁三号线的\n延伸工程。</p>"
        "<p>El ministro dijo: «la ley entra en vigor mañana».</p>"
        "<p>Die Straße ist gesperrt.</p></body></html>"
    )
    quotes = [
        "会议决定,票价为40元。",
        "市政府批准了地铁三号线的延伸工程。",
        'El ministro dijo: "la ley entra en vigor mañana".',
        "Die Strasse ist gesperrt.",
    ]
    response = cite(
        client,
        *({"source": source(content=page), "quote": {"exact": q}} for q in quotes),
        fail_closed=False,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    made = body["citations"]
    assert [c["match_method"] for c in made] == ["normalised"] * 3
    assert [c["normalisation"] for c in made] == ["amber-norm-2"] * 3
    assert [(e["index"], e["reason"]) for e in body["errors"]] == [(3, "quote_not_found")]


def test_repeated_quote_is_disambiguated_by_context(client: Any, transcript: str) -> None:
    first = cite(client, {"source": source(), "quote": {"exact": "Requests must be made"}})
    second = cite(
        client,
        {"source": source(), "quote": {"exact": "Requests must be made", "prefix": "in advance. "}},
    )
    start_first = first.json()["citations"][0]["selector"][1]["start"]
    start_second = second.json()["citations"][0]["selector"][1]["start"]
    assert start_second > start_first


@pytest.mark.parametrize(
    ("citation", "reason"),
    [
        ({"source": source(), "quote": {"exact": "thirty weeks of leave"}}, "quote_not_found"),
        ({"source": source(), "quote": {"exact": "   "}}, "empty_quote"),
        ({"source": source(), "quote": {"exact": "x" * 102_400}}, "quote_too_long"),
        ({"memento_id": "0" * 32, "quote": {"exact": "sixteen weeks"}}, "unknown_evidence"),
        (
            {"source": source(tool="search.web"), "quote": {"exact": "sixteen weeks"}},
            "disallowed_tool",
        ),
        (
            {"source": source(tool="shell.exec"), "quote": {"exact": "sixteen weeks"}},
            "disallowed_tool",
        ),
        ({"source": source(tool=None), "quote": {"exact": "sixteen weeks"}}, "disallowed_tool"),
        (
            {
                "source": source(
                    content=None,
                    content_base64=base64.b64encode(b"\xff\xfe caf\xe9").decode(),
                    content_type="text/plain; charset=utf-8",
                ),
                "quote": {"exact": "caf"},
            },
            "unreadable_document",
        ),
        (
            {"source": source(content_type="image/png"), "quote": {"exact": "sixteen"}},
            "unreadable_document",
        ),
        (
            {"source": source(uri_r="javascript:alert(1)"), "quote": {"exact": "sixteen"}},
            "invalid_source",
        ),
        (
            {"source": source(captured_at="2999-01-01T00:00:00Z"), "quote": {"exact": "sixteen"}},
            "invalid_source",
        ),
        (
            {
                "source": source(content_type="text/html\r\n;charset=utf-8"),
                "quote": {"exact": "sixteen"},
            },
            "invalid_source",
        ),
        (
            {
                "source": source(content_type="text/html;\xa0charset=utf-8"),
                "quote": {"exact": "sixteen"},
            },
            "invalid_source",
        ),
    ],
)
def test_invalid_citations_fail_closed(
    client: Any, archive: Archive, transcript: str, citation: dict[str, Any], reason: str
) -> None:
    good = {"source": source(), "quote": {"exact": "sixteen weeks"}}
    response = cite(client, good, citation)
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert errors == [{"index": 1, "reason": reason, "detail": errors[0]["detail"]}]
    assert counts(archive) == (0, 0)  # fail-closed: not even the valid one is stored


def test_a_quote_too_common_to_locate_cheaply_is_refused_not_a_500(
    client: Any, archive: Archive, transcript: str
) -> None:
    # "a a" occurs 20,000 times (overlapping) in this text: more than [citations]
    # max_quote_occurrences (10,000 by default) lets locating compare, context or not.
    flood = source(content="a " * 20_001, content_type="text/plain; charset=utf-8")
    for quote in (
        {"exact": "a a"},
        {"exact": "a\u00a0a", "prefix": "a a a", "suffix": "a b"},  # found only normalised
    ):
        response = cite(client, {"source": flood, "quote": quote})
        assert response.status_code == 422, response.text
        [error] = response.json()["errors"]
        assert error["reason"] == "quote_too_common"
        assert "max_quote_occurrences" in error["detail"]
        assert counts(archive) == (0, 0)
    rare = source(content="a " * 20_001 + "the one place", content_type="text/plain")
    assert cite(client, {"source": rare, "quote": {"exact": "one place"}}).status_code == 201


def test_fail_open_stores_the_valid_and_reports_the_invalid(
    client: Any, archive: Archive, transcript: str
) -> None:
    response = cite(
        client,
        {"source": source(), "quote": {"exact": "sixteen weeks"}},
        {"source": source(), "quote": {"exact": "no such words"}},
        fail_closed=False,
    )
    assert response.status_code == 201
    body = response.json()
    assert len(body["citations"]) == 1
    assert body["errors"][0]["index"] == 1 and body["errors"][0]["reason"] == "quote_not_found"
    assert counts(archive) == (1, 1)


def test_cite_by_memento_id_and_search_mementos_are_not_evidence(
    client: Any, transcript: str
) -> None:
    stored = client.post("/api/v1/mementos", json={**source(), "content": PAGE}).json()
    ok = cite(client, {"memento_id": stored["id"], "quote": {"exact": "Primary carer"}})
    assert ok.status_code == 201, ok.text
    assert ok.json()["citations"][0]["document_uri_m"] == stored["uri_m"]
    snippet = client.post(
        "/api/v1/mementos", json={**source(tool="search.web"), "uri_r": "https://hr.example/s"}
    ).json()
    refused = cite(client, {"memento_id": snippet["id"], "quote": {"exact": "Primary carer"}})
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["reason"] == "disallowed_tool"


def test_unknown_transcript_and_bad_bodies(client: Any, archive: Archive) -> None:
    missing = cite(
        client, {"source": source(), "quote": {"exact": "sixteen weeks"}}, transcript="nope"
    )
    assert missing.status_code == 404
    client.put("/api/v1/transcripts/t-1", json={})
    assert cite(client).status_code in (400, 422)
    assert (
        client.post("/api/v1/transcripts/t-1/citations", json={"citations": "x"}).status_code == 422
    )
    assert client.put("/api/v1/transcripts/bad%20id", json={}).status_code == 400
    assert counts(archive) == (0, 0)


def test_idempotency_key_replays_citations(client: Any, archive: Archive, transcript: str) -> None:
    body = {
        "citations": [
            {"source": {**source(), "captured_at": None}, "quote": {"exact": "sixteen weeks"}}
        ]
    }
    headers = {"Idempotency-Key": "cite-1"}
    first = client.post("/api/v1/transcripts/t-1/citations", json=body, headers=headers)
    again = client.post("/api/v1/transcripts/t-1/citations", json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json()["citations"][0]["id"] == again.json()["citations"][0]["id"]
    assert counts(archive) == (1, 1)


def test_keep_document_stores_it_as_a_memento(settings: Any) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    keeping = settings.with_overrides(extra={"citations": {"keep_document": True}})
    opened = Archive.open(keeping)
    try:
        with TestClient(create_app(keeping, archive=opened, auth=False)) as client:
            client.put("/api/v1/transcripts/t-1", json={})
            made = cite(client, {"source": source(), "quote": {"exact": "sixteen weeks"}}).json()[
                "citations"
            ][0]
            assert made["document_uri_m"] is not None
            assert client.get(made["document_uri_m"]).content == PAGE.encode()
    finally:
        opened.close()


def test_transcript_retention_and_listing(client: Any, transcript: str) -> None:
    cite(client, {"source": source(), "quote": {"exact": "sixteen weeks"}})
    shown = client.get("/api/v1/transcripts/t-1").json()
    assert shown["retention"] == "P7Y" and shown["labels"] == {"run": "r1"}
    assert len(shown["citations"]) == 1
    extended = client.put("/api/v1/transcripts/t-1", json={"retention": "P10Y"})
    assert extended.status_code == 200 and extended.json()["retain_until"] > shown["retain_until"]
    shortened = client.put("/api/v1/transcripts/t-1", json={"retention": "P1D"})
    assert shortened.status_code == 409
    assert client.put("/api/v1/transcripts/t-2", json={"retention": "forever"}).status_code == 400
    until = client.put(
        "/api/v1/transcripts/t-3", json={"retention": {"retain_until": "2040-01-01T00:00:00Z"}}
    )
    assert until.json()["retain_until"] == "2040-01-01T00:00:00Z"


def test_two_agents_citing_the_same_passage_store_one_blob(client: Any, archive: Archive) -> None:
    for name in ("a", "b"):
        client.put(f"/api/v1/transcripts/{name}", json={})
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def agent(name: str) -> None:
        barrier.wait()
        results.append(
            cite(client, {"source": source(), "quote": {"exact": "sixteen weeks"}}, transcript=name)
        )

    threads = [threading.Thread(target=agent, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status_code for r in results] == [201, 201]
    made = [r.json()["citations"][0] for r in results]
    assert made[0]["passage_hash"] == made[1]["passage_hash"]
    assert made[0]["id"] != made[1]["id"]
    assert counts(archive) == (1, 2)  # one passage memento (same capture), two citations


def test_audit_log_lines_carry_no_text(
    client: Any, transcript: str, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="amber.citations")
    cite(
        client,
        {"source": source(), "quote": {"exact": "sixteen weeks"}, "source_id": "ev-7"},
        run_id="r-5",
    )
    cite(client, {"source": source(), "quote": {"exact": "absent words here"}})
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "amber.citations"]
    assert [line["verdict"] for line in lines] == ["accepted", "quote_not_found"]
    assert lines[0]["run_id"] == "r-5" and lines[0]["source_id"] == "ev-7"
    assert lines[0]["quote_hash"].startswith("blake3:")
    assert "sixteen" not in caplog.text and "absent words" not in caplog.text


def test_sources_are_sent_once_and_cited_by_reference(
    client: Any, archive: Archive, transcript: str
) -> None:
    body = {
        "sources": {"page": source()},
        "citations": [
            {"source_ref": "page", "quote": {"exact": q}}
            for q in ("sixteen weeks", "Primary carer")
        ],
    }
    response = client.post("/api/v1/transcripts/t-1/citations", json=body)
    assert response.status_code == 201, response.text
    made = response.json()["citations"]
    assert {c["document_hash"] for c in made} == {content_address(PAGE.encode())}
    unknown = client.post(
        "/api/v1/transcripts/t-1/citations",
        json={"citations": [{"source_ref": "nope", "quote": {"exact": "x"}}]},
    )
    assert unknown.status_code == 422
    assert [(e["index"], e["reason"]) for e in unknown.json()["errors"]] == [
        (0, "unknown_evidence")
    ]
    assert counts(archive) == (2, 2)


@pytest.mark.parametrize(
    ("bad_source", "named"),
    [
        ({"content": None, "content_base64": "not base64!"}, "content_base64 is not valid base64"),
        ({"captured_at": "yesterday"}, "source: "),
        ({"content": "\ud800"}, "not valid Unicode"),
    ],
)
def test_unreadable_evidence_is_refused_by_index(
    client: Any, archive: Archive, transcript: str, bad_source: dict[str, Any], named: str
) -> None:
    """Evidence the API cannot even read is one invalid citation like any other: named by
    its index, and with fail_closed false its valid neighbours are stored."""
    citations = [
        {"source": source(), "quote": {"exact": "sixteen weeks"}},
        {"source": source(**bad_source), "quote": {"exact": "sixteen weeks"}},
    ]
    body = json.dumps({"citations": citations}).encode()  # keeps a lone surrogate escaped
    refused = client.post(
        "/api/v1/transcripts/t-1/citations",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert refused.status_code == 422, refused.text
    [error] = refused.json()["errors"]
    assert (error["index"], error["reason"]) == (1, "invalid_source") and named in error["detail"]
    assert counts(archive) == (0, 0)
    lenient = json.dumps({"citations": citations, "fail_closed": False}).encode()
    partly = client.post(
        "/api/v1/transcripts/t-1/citations",
        content=lenient,
        headers={"Content-Type": "application/json"},
    )
    assert partly.status_code == 201, partly.text
    assert len(partly.json()["citations"]) == 1 and partly.json()["errors"][0]["index"] == 1
    assert counts(archive) == (1, 1)


def test_concurrent_requests_commit_together_and_a_bad_one_fails_alone(archive: Archive) -> None:
    """Citation requests share one transaction (group commit); one that must fail there (two
    racing requests with one Idempotency-Key and different bodies) fails by itself, and its
    batch-mates commit."""
    import time

    from archive.citations import CitationRequest, QuoteRequest, SourceRequest
    from archive.exceptions import IdempotencyConflict

    archive.transcripts.put("default", "t-1", "P7Y", {})
    page = SourceRequest(
        uri_r=URI_R, content=PAGE.encode(), content_type="text/html", tool="http.get"
    )

    def request(quote: str) -> list[CitationRequest]:
        return [CitationRequest(quote=QuoteRequest(quote), source=page)]

    desk = archive.citations
    committer = desk.committer
    real_commit = committer._commit_batch
    gate, batches = threading.Event(), []

    def gated(jobs: Any) -> Any:
        batches.append(len(jobs))
        assert gate.wait(30)
        return real_commit(jobs)

    committer._commit_batch = gated  # type: ignore[method-assign]
    outcomes: dict[str, Any] = {}

    def call(name: str, quote: str, **options: Any) -> None:
        try:
            outcomes[name] = desk.cite("default", "t-1", request(quote), **options)
        except Exception as error:
            outcomes[name] = error

    def wait_for(condition: Any) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, "the committer never got there"
            time.sleep(0.01)

    threads = [threading.Thread(target=call, args=("blocker", "Primary carer"))]
    threads[0].start()
    wait_for(lambda: batches)  # held at the gate: what comes next queues up behind it
    threads += [
        threading.Thread(
            target=call,
            args=("a", "sixteen weeks"),
            kwargs={"idempotency_key": "k", "request_hash": "x"},
        ),
        threading.Thread(
            target=call,
            args=("b", "16 weeks"),
            kwargs={"idempotency_key": "k", "request_hash": "y"},
        ),
        threading.Thread(target=call, args=("c", "in writing")),
    ]
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: committer._queue.qsize() == 3)
    gate.set()
    for thread in threads:
        thread.join(30)
    assert batches[:2] == [1, 3]  # the three queued requests were first tried as one batch
    # Whichever of the two racing requests queued first wins the key; the other alone fails.
    [loser] = [n for n in ("a", "b") if isinstance(outcomes[n], IdempotencyConflict)]
    winner = "b" if loser == "a" else "a"
    committed = {outcomes[n].citations[0].id for n in ("blocker", winner, "c")}
    assert {c.id for c in desk.for_transcript("default", "t-1")} == committed
    assert len(committed) == 3
