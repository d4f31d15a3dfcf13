"""Extraction limits (issue #18, findings 2 and 5): PDF and HTML are read in worker processes
that are killed when they break a limit, and the document is refused with a 422 naming it.

The limits are lowered here so that each hostile document trips its limit in about a second;
the benchmark (benchmarks/bench_extraction_limits.py) replays the issue's full-size ones.
"""

from __future__ import annotations

import base64
import os
import resource
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hostile_documents import deep_html, flate_bomb_pdf, pages_pdf, text_operators_pdf
from test_drift import LEAVE, ORIGINAL, Reply, Web
from test_text import make_pdf

import archive.citations.extract as extract_module
from api.app import create_app
from archive.archive import Archive
from archive.citations import CitationRequest, QuoteRequest, SourceRequest, extract_text
from archive.citations.html_extractor import html_text
from archive.citations.pdf_extractor import pdf_text
from archive.citations.sandbox import worker_pool
from archive.config import ExtractionLimits, Settings
from archive.exceptions import ExtractionLimitExceeded, InvalidContent

# Two workers, so a runaway document never holds the only one. A Flate bomb needs a low
# memory limit and time to reach it; millions of operators a short time and enough memory
# (they cost ~0.7 KB each) that only time can stop them.
LIMITS = ExtractionLimits(workers=2, timeout_seconds=1.0, memory_mb=256)
BOMB_LIMITS = ExtractionLimits(workers=2, timeout_seconds=30.0, memory_mb=256)
SLOW_LIMITS = ExtractionLimits(workers=2, timeout_seconds=1.0, memory_mb=1024)
SMALL_PDF = make_pdf([[b"The board approved the budget."], [b"Page two."]])


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    extract_module.clear_cache()
    yield
    extract_module.clear_cache()


def refused(content: bytes, media_type: str, limits: ExtractionLimits) -> ExtractionLimitExceeded:
    with pytest.raises(ExtractionLimitExceeded) as caught:
        extract_text(content, media_type, limits=limits)
    assert caught.value.code == "extraction_limit"
    return caught.value


def parent_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the library ---------------------------------------------------------------------------


def test_flate_bomb_is_refused_for_memory_and_the_server_does_not_grow() -> None:
    bomb = flate_bomb_pdf(512)  # ~1 KB per MiB: ~0.5 MB inflating to 512 MiB
    assert len(bomb) < 1024 * 1024
    extract_text(SMALL_PDF, "application/pdf", limits=BOMB_LIMITS)  # a worker is up
    before = parent_peak_mib()
    error = refused(bomb, "application/pdf", BOMB_LIMITS)
    assert (error.limit, error.maximum) == ("memory", 256)
    assert "256 MiB" in error.message
    assert parent_peak_mib() - before < 64  # the inflated stream never entered this process


def test_millions_of_text_operators_are_refused_for_time() -> None:
    started = time.monotonic()
    error = refused(text_operators_pdf(1_000_000), "application/pdf", SLOW_LIMITS)
    assert (error.limit, error.maximum) == ("time", 1.0)
    assert time.monotonic() - started < 30  # killed at the deadline, not run to the end


def test_deep_html_is_refused_for_time() -> None:
    error = refused(deep_html(60_000), "text/html", LIMITS)
    assert (error.limit, error.maximum) == ("time", 1.0)
    assert "longer than 1 s" in error.message


def test_too_many_pages_are_refused_before_any_is_read() -> None:
    error = refused(pages_pdf(12), "application/pdf", ExtractionLimits(max_pages=10))
    assert (error.limit, error.maximum) == ("pages", 10)
    assert len(extract_text(pages_pdf(10), "application/pdf").text) > 0


@pytest.mark.parametrize(
    ("content", "media_type"),
    [
        (b"<p>" + b"many words " * 10_000, "text/html"),  # read in a worker
        (b"<p>" + b"some words " * 200, "text/html"),  # read in process
        (b"plain words " * 200, "text/plain"),
        (make_pdf([[b"words " * 40] * 20]), "application/pdf"),
    ],
)
def test_too_much_text_is_refused(content: bytes, media_type: str) -> None:
    limits = ExtractionLimits(max_text_chars=1000)
    error = refused(content, media_type, limits)
    assert (error.limit, error.maximum) == ("text", 1000)
    assert len(extract_text(content, media_type).text) > 1000  # under the default: read


def test_the_request_budget_is_shared() -> None:
    spent = time.monotonic() - 1
    error = refused_with_deadline(SMALL_PDF, spent)
    assert (error.limit, error.maximum) == ("time", LIMITS.request_seconds)
    assert "this request's documents" in error.message


def refused_with_deadline(content: bytes, deadline: float) -> ExtractionLimitExceeded:
    with pytest.raises(ExtractionLimitExceeded) as caught:
        extract_text(content, "application/pdf", limits=LIMITS, deadline=deadline)
    return caught.value


def test_a_small_document_is_read_while_a_runaway_one_runs() -> None:
    slow = ExtractionLimits(workers=2, timeout_seconds=15.0, memory_mb=256)
    outcome: list[BaseException] = []

    def runaway() -> None:
        try:
            extract_text(deep_html(200_000), "text/html", limits=slow)
        except BaseException as error:
            outcome.append(error)

    # One worker is up; the quick documents get the second while the runaway holds it.
    worker_pool(slow).extract("pdf", SMALL_PDF, None, slow, 60.0)
    thread = threading.Thread(target=runaway)
    thread.start()
    try:
        time.sleep(0.5)
        for n in range(3):
            text = extract_text(make_pdf([[b"Quick %d." % n]]), "application/pdf", limits=slow)
            assert text.text == f"Quick {n}."
            assert thread.is_alive()  # the runaway still holds its worker meanwhile
    finally:
        thread.join()
    assert len(outcome) == 1 and isinstance(outcome[0], ExtractionLimitExceeded)


def test_a_killed_worker_is_replaced_and_the_next_document_is_read() -> None:
    pool = worker_pool(LIMITS)
    extract_text(SMALL_PDF, "application/pdf", limits=LIMITS)
    for pid in pool.worker_pids():
        os.kill(pid, signal.SIGKILL)
        while _state(pid) not in ("Z", "X", None):  # dead, not yet reaped by the pool
            time.sleep(0.01)
    extract_module.clear_cache()
    assert extract_text(SMALL_PDF, "application/pdf", limits=LIMITS).text.startswith("The board")
    # and after a worker killed for its deadline
    refused(deep_html(60_000), "text/html", LIMITS)
    extract_module.clear_cache()
    assert extract_text(SMALL_PDF, "application/pdf", limits=LIMITS).text.startswith("The board")


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_worker_reads_exactly_what_the_extractors_read_in_process() -> None:
    page = (
        "<html><head><title>T</title></head><body>"
        + "<p>Caf\u00e9 <b>bold</b> &amp; <i>it</i></p><table><tr><td>a</td><td>b</td></tr></table>"
        * 3000
        + "<pre>  kept   as is </pre></body></html>"
    ).encode()
    assert len(page) > extract_module.INLINE_HTML_BYTES  # so it goes to a worker
    assert extract_text(page, "text/html").text == html_text(page, None)
    pdf = make_pdf([[b"The evi-", b"dence is clear."], [b"Page two."]])
    assert extract_text(pdf, "application/pdf").text == pdf_text(pdf)


def test_an_unreadable_pdf_is_still_invalid_content() -> None:
    with pytest.raises(InvalidContent, match="cannot read PDF"):
        extract_text(b"%PDF-1.4 not really", "application/pdf", limits=LIMITS)


# -- over HTTP -----------------------------------------------------------------------------


@contextmanager
def limited(tmp_path: Path, **limits: Any) -> Iterator[tuple[TestClient, Archive]]:
    settings = Settings(
        data_dir=tmp_path / "amber-data", public_base_url="http://amber.test", **limits
    )
    archive = Archive.open(settings)
    try:
        with TestClient(create_app(settings, archive=archive, auth=False)) as client:
            assert client.put("/api/v1/transcripts/t-1", json={}).status_code == 201
            yield client, archive
    finally:
        archive.close()


def cite(client: TestClient, content: bytes, media_type: str, quote: str) -> Any:
    return client.post(
        "/api/v1/transcripts/t-1/citations",
        json={
            "citations": [
                {
                    "quote": {"exact": quote},
                    "source": {
                        "uri_r": "https://hostile.example/doc",
                        "content_base64": base64.b64encode(content).decode(),
                        "content_type": media_type,
                        "captured_at": "2025-03-01T10:00:00Z",
                        "tool": "http.get",
                    },
                }
            ]
        },
    )


@pytest.mark.parametrize(
    ("content", "media_type", "limit", "settings"),
    [
        (
            flate_bomb_pdf(512),
            "application/pdf",
            "memory",
            {"extract_memory_mb": 256, "extract_timeout_seconds": 30.0},
        ),
        (
            text_operators_pdf(1_000_000),
            "application/pdf",
            "time",
            {"extract_timeout_seconds": 1.0},
        ),
        (deep_html(60_000), "text/html", "time", {"extract_timeout_seconds": 1.0}),
        (pages_pdf(11), "application/pdf", "pages", {"extract_max_pages": 10}),
        (b"needle text " * 1000, "text/plain", "text", {"extract_max_text_chars": 5000}),
    ],
    ids=["flate-bomb", "text-operators", "deep-html", "pages", "text"],
)
def test_a_document_over_a_limit_is_refused_with_422(
    tmp_path: Path, content: bytes, media_type: str, limit: str, settings: dict[str, Any]
) -> None:
    with limited(tmp_path, extract_workers=2, **settings) as (client, archive):
        answer = cite(client, content, media_type, "needle text")
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["code"] == "extraction_limit"
        assert error["detail"]["limit"] == limit
        assert error["detail"]["maximum"] == settings[f"extract_{_SETTING[limit]}"]
        assert error["detail"]["citation"] == 0
        assert archive.index.all_memento_blobs() == []  # nothing stored
        # The server goes on: the next small citation is read and stored.
        fine = cite(client, SMALL_PDF, "application/pdf", "approved the budget")
        assert fine.status_code == 201, fine.text


_SETTING = {
    "memory": "memory_mb",
    "time": "timeout_seconds",
    "pages": "max_pages",
    "text": "max_text_chars",
}


# -- drift ---------------------------------------------------------------------------------


def test_a_live_page_over_a_limit_is_unreachable_not_drift(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "amber-data",
        public_base_url="http://amber.test",
        fetch_allow=("127.0.0.1:*",),
        extract_workers=2,
        extract_timeout_seconds=1.0,
        extra={"drift": {"host_delay_seconds": 0.0, "soft_404_probe": False}},
    )
    archive = Archive.open(settings)
    try:
        with Web() as web:
            archive.transcripts.put("default", "t-drift", "P1Y", {})
            archive.citations.cite(
                "default",
                "t-drift",
                [
                    CitationRequest(
                        QuoteRequest(LEAVE),
                        source=SourceRequest(
                            uri_r=web.base + "/docs/deep",
                            content=ORIGINAL,
                            content_type="text/html; charset=utf-8",
                            tool="http.get",
                            http_status=200,
                        ),
                    )
                ],
            )
            web.routes["/docs/deep"] = Reply(body=deep_html(60_000, LEAVE))
            [check] = archive.drift.run()
        assert check.verdict == "unreachable"
        assert list(check.reasons) == ["error:extraction_limit: time"]
    finally:
        archive.close()
