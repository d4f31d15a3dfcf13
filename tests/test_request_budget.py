"""The request budget (issue #18, finding 1): a request with a body is authenticated from its
headers before the body is read, parsed under bounds (values, depth, members, member names)
and answered with a bounded error; other requests are served while a large one is judged."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_server import env_for, running_server

import archive.budget as budget_module
from archive.budget import JsonBudget
from archive.config import Settings
from archive.exceptions import OverBudget

WRITE = {"uri_r": "https://ex.org/budget", "content_type": "text/plain", "content": "evidence"}
ROUTES = [
    ("POST", "/api/v1/mementos"),
    ("POST", "/api/v1/transcripts/t-budget/citations"),
    ("PUT", "/api/v1/transcripts/t-budget"),
    ("POST", "/api/v1/keys"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("budget"))
    with running_server(env_for(settings)) as live:
        yield live


def raw_request(server: Any, head: str, body: bytes, *, close_after: float = 30.0) -> bytes:
    """Send ``head`` and ``body`` over a plain socket; the answer as far as it came."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=close_after) as sock:
        sock.sendall(head.encode("latin-1") + body)
        answer = b""
        while b"\r\n\r\n" not in answer or not _complete(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return False


# --- the library: bounds and parsing -----------------------------------------------------


def test_budget_refuses_each_bound_naming_it_and_where() -> None:
    budget = JsonBudget(max_nodes=50, max_depth=4, max_members=10, max_key_bytes=8)
    cases = [
        (json.dumps({"h": {str(i): 0 for i in range(11)}}), "max_json_members", "$.h"),
        (json.dumps({"a": [[[[1]]]]}), "max_json_depth", "$.a[0][0][0]"),
        (json.dumps({"list": list(range(9)) * 6}), "max_json_members", "$.list"),
        (json.dumps([[0] * 9 for _ in range(6)]), "max_json_nodes", "$[4][8]"),
        (json.dumps({"ok": {"a long name": 1}}), "max_json_key_bytes", '$.ok["a long name"]'),
    ]
    for text, limit, path in cases:
        with pytest.raises(OverBudget) as refused:
            budget.loads(text.encode())
        assert refused.value.detail["limit"] == limit, text
        assert refused.value.detail["setting"] == "AMBER_" + limit.upper()
        assert refused.value.detail["path"] == path, text
        assert limit.upper() in refused.value.message


def test_budget_counts_strings_as_json_does() -> None:
    # Brackets, commas and quotes inside strings are text, not structure.
    budget = JsonBudget(max_nodes=6, max_depth=2, max_members=3, max_key_bytes=64)
    text = json.dumps({"a": '[[[{,,,:"\\', "b\\\\": '\\"]]]', "c": ["x", "y"]})
    assert budget.loads(text.encode()) == json.loads(text)


def test_budget_parses_exactly_as_json_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Long strings are decoded apart, in pieces: make them short so the pieces are many.
    monkeypatch.setattr(budget_module, "LONG_STRING_BYTES", 40)
    monkeypatch.setattr(budget_module, "_WINDOW_BYTES", 16)
    alphabet = ["a", '"', "\\", "\n", "é", "😀", "\ud83d", " ", ",", "{", "]", ":", "\u2028"]
    rng = random.Random(18)
    budget = JsonBudget()
    for _ in range(500):
        texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 200))) for _ in range(3)]
        document = {"a": texts[0], "b": [texts[1], {"c": texts[2]}], "n": 1.5}
        raw = json.dumps(document, ensure_ascii=rng.random() < 0.5)
        encoded = raw.encode("utf-8", "surrogatepass")
        assert budget.loads(encoded) == json.loads(encoded)
    utf16 = json.dumps({"k": "é" * 100}).encode("utf-16")
    assert budget.loads(utf16) == json.loads(utf16)


def test_budget_leaves_malformed_json_to_the_parser() -> None:
    budget = JsonBudget()
    for text in (b'{"uri_r": ', b'{"a": "unterminated', b"]]]", b'{"a": 1}}'):
        with pytest.raises(ValueError):
            budget.loads(text)


def test_budget_skips_the_scan_only_where_the_scan_would_pass() -> None:
    """``plainly_within`` lets a body skip the token scan; it must never pass one the scan
    refuses, nor one with a long string. Tight bounds and a soup of JSON's structural bytes
    (valid or not) reach every bound's edge."""
    budget = JsonBudget(max_nodes=9, max_depth=3, max_members=6, max_key_bytes=4)
    alphabet = ['"', "\\", "{", "}", "[", "]", ",", ":", " ", "1", "ab", "abcdef", '"key":']
    rng = random.Random(19)
    skipped = 0
    for _ in range(20_000):
        text = "".join(rng.choices(alphabet, k=rng.randint(0, 14))).encode()
        if not budget.plainly_within(text):
            continue
        skipped += 1
        scan = budget_module._Scan(budget, text)
        scan.run()  # raises OverBudget if the shortcut was wrong
        assert not scan.long_strings
    assert skipped > 1000  # the shortcut is taken, at bounds' edges too


def test_a_memento_write_skips_the_scan() -> None:
    body = {**WRITE, "content": "x" * 4096, "scope": "passage", "tool": "http.get"}
    assert JsonBudget().plainly_within(json.dumps(body).encode())
    assert not JsonBudget().plainly_within(json.dumps({"a": [[[1]]] * 400}).encode())


# --- the HTTP edge: authenticate before reading -------------------------------------------


@pytest.mark.parametrize("method,path", ROUTES)
def test_no_key_is_401_before_the_body_is_read(server: Any, method: str, path: str) -> None:
    # Announce 50 MB, send 1 KB and wait: only an answer given without reading comes back.
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {50 * 1024 * 1024}\r\n\r\n"
    )
    started = time.monotonic()
    answer = raw_request(server, head, b'{"headers": {' + b'"0": 0, ' * 100, close_after=20)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert b'"unauthenticated"' in answer
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("method,path", ROUTES)
def test_bad_key_is_401_before_the_body_is_read(server: Any, method: str, path: str) -> None:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer amber_nope_0000\r\n"
        f"Content-Type: application/json\r\nContent-Length: {50 * 1024 * 1024}\r\n\r\n"
    )
    answer = raw_request(server, head, b"{", close_after=20)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]


@pytest.mark.parametrize("method,path", ROUTES)
def test_malformed_json_without_a_key_is_401(server: Any, method: str, path: str) -> None:
    response = httpx.request(
        method,
        server.base_url + path,
        content=b'{"uri_r": ',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "unauthenticated"


def test_wrong_role_is_403_before_the_body_is_read(server: Any) -> None:
    # An agent key on an admin route: refused from the headers alone.
    head = (
        f"POST /api/v1/keys HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: {server.headers['Authorization']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {50 * 1024 * 1024}\r\n\r\n"
    )
    answer = raw_request(server, head, b"{", close_after=20)
    assert answer.startswith(b"HTTP/1.1 403"), answer[:300]


def test_malformed_json_with_a_key_is_still_400(server: Any) -> None:
    response = httpx.post(
        server.base_url + "/api/v1/mementos",
        content=b'{"uri_r": ',
        headers={**server.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"


def test_body_over_the_byte_limit_is_413_once_authenticated(server: Any) -> None:
    head = (
        f"POST /api/v1/mementos HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: {server.headers['Authorization']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {64 * 1024 * 1024}\r\n\r\n"
    )
    answer = raw_request(server, head, b"{", close_after=20)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]


@pytest.mark.parametrize("path", ["/api/v1/mementos", "/api/v1/transcripts/t-budget/citations"])
@pytest.mark.parametrize("key", ["with space", "a" * 300])
def test_bad_idempotency_key_is_400_before_the_body_is_read(
    server: Any, path: str, key: str
) -> None:
    # Announce 1 MB (within the body limit), send 1 byte and wait: an answer comes back
    # only if the key was refused without waiting for the body.
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: {server.headers['Authorization']}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {1024 * 1024}\r\n\r\n"
    )
    started = time.monotonic()
    answer = raw_request(server, head, b"{", close_after=20)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    assert b'"invalid_input"' in answer and b"Idempotency-Key" in answer
    assert time.monotonic() - started < 15


def test_a_good_idempotency_key_still_writes(server: Any) -> None:
    response = httpx.post(
        server.base_url + "/api/v1/mementos",
        json={**WRITE, "content": "keyed evidence"},
        headers={**server.headers, "Idempotency-Key": "budget-key-1"},
    )
    assert response.status_code == 201, response.text


# --- the HTTP edge: bounds and bounded answers --------------------------------------------


@pytest.mark.parametrize(
    "body,limit",
    [
        ({**WRITE, "headers": {str(i): "v" for i in range(1001)}}, "max_json_members"),
        ({**WRITE, "headers": {"x" * 1025: "v"}}, "max_json_key_bytes"),
        (
            {
                **WRITE,
                "headers": {
                    "a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
                },
            },
            "max_json_depth",
        ),
    ],
)
def test_over_a_bound_is_422_naming_it(server: Any, body: dict[str, Any], limit: str) -> None:
    response = httpx.post(server.base_url + "/api/v1/mementos", json=body, headers=server.headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "over_budget"
    assert error["detail"]["limit"] == limit
    assert error["detail"]["setting"] == "AMBER_" + limit.upper()
    assert error["detail"]["path"].startswith("$.headers")


def test_too_many_values_on_a_fastapi_route_is_422(server: Any) -> None:
    # 7,000 values of citations and 15,500 of sources: over the 20,000 values of the budget.
    quote = {"exact": "a", "prefix": "b", "suffix": "c"}
    citations = [{"quote": quote, "source_ref": "0", "source_id": "s"} for _ in range(1000)]
    headers = {str(j): "v" for j in range(150)}
    source = {"uri_r": "kb:x", "content": "x", "content_type": "text/plain", "headers": headers}
    response = httpx.post(
        server.base_url + "/api/v1/transcripts/t-budget/citations",
        json={"citations": citations, "sources": {str(i): source for i in range(100)}},
        headers=server.headers,
        timeout=60,
    )
    assert response.status_code == 422, response.text[:500]
    assert response.json()["error"]["detail"]["limit"] == "max_json_nodes"
    assert response.json()["error"]["detail"]["path"].startswith("$.sources")


def test_error_answer_to_a_300000_member_body_is_small(server: Any) -> None:
    body = {**WRITE, "headers": {str(i): 0 for i in range(300_000)}}
    response = httpx.post(
        server.base_url + "/api/v1/mementos", json=body, headers=server.headers, timeout=120
    )
    assert response.status_code == 422
    assert len(response.content) < 2048
    assert response.json()["error"]["detail"]["limit"] == "max_json_members"


def test_many_invalid_values_are_listed_up_to_the_cap_and_counted(server: Any) -> None:
    # Within the budget, 1,000 wrong values: 20 problems listed, the rest counted.
    citations = [{"quote": {"exact": 1}} for _ in range(1000)]
    response = httpx.post(
        server.base_url + "/api/v1/transcripts/t-budget/citations",
        json={"citations": citations},
        headers=server.headers,
        timeout=60,
    )
    assert response.status_code == 422, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert len(error["detail"]["problems"]) == 20
    assert error["detail"]["problems_omitted"] == 980
    assert error["detail"]["problems"][0]["loc"] == ["body", "citations", 0, "quote", "exact"]
    assert len(response.content) < 20 * 1024


def test_long_member_names_are_cut_in_the_answer(server: Any) -> None:
    # A member name within budget (1 KB) is echoed in loc cut to 64 characters.
    name = "n" * 1000
    response = httpx.post(
        server.base_url + "/api/v1/mementos", json={**WRITE, name: 1}, headers=server.headers
    )
    assert response.status_code == 422
    (problem,) = response.json()["error"]["detail"]["problems"]
    assert problem["loc"] == ["body", "n" * 64]


def test_large_valid_content_is_still_written(server: Any) -> None:
    content = ('<p class="x">A line, with: "quotes" and \\ escapes.</p>\n' * 200_000)[:10_000_000]
    response = httpx.post(
        server.base_url + "/api/v1/mementos",
        json={**WRITE, "uri_r": "https://ex.org/big", "content": content},
        headers=server.headers,
        timeout=120,
    )
    assert response.status_code == 201, response.text[:300]
    assert response.json()["size"] == len(content.encode())


def test_healthz_answers_while_a_large_body_is_judged(server: Any) -> None:
    # 30 MB of values the budget must look at before refusing: the server keeps serving.
    body = json.dumps({**WRITE, "content": "x" * 29_000_000, "headers": {"a": 0}}).encode()
    done = threading.Event()
    status: list[int] = []

    def send() -> None:
        try:
            answer = httpx.post(
                server.base_url + "/api/v1/mementos",
                content=body,
                headers={**server.headers, "Content-Type": "application/json"},
                timeout=120,
            )
            status.append(answer.status_code)
        finally:
            done.set()

    sender = threading.Thread(target=send)
    sender.start()
    answered = 0
    while not done.is_set():
        health = httpx.get(server.base_url + "/healthz", timeout=10)  # generous on purpose
        assert health.status_code == 200
        answered += 1
        time.sleep(0.02)
    sender.join()
    assert status == [422]
    assert answered >= 1


def test_settings_bound_the_budget(tmp_path: Path) -> None:
    from archive.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError):
        Settings(data_dir=tmp_path, max_json_depth=0)
    settings = Settings.from_env({"AMBER_MAX_JSON_NODES": "7", "AMBER_MAX_ERROR_ITEMS": "3"})
    assert JsonBudget.of(settings).max_nodes == 7
    assert settings.max_error_items == 3


def test_rejected_citations_are_listed_up_to_the_cap_and_counted(server: Any) -> None:
    opened = httpx.put(
        server.base_url + "/api/v1/transcripts/t-rejected", json={}, headers=server.headers
    )
    assert opened.status_code in (200, 201)
    citations = [{"memento_id": f"{i:064x}", "quote": {"exact": "q"}} for i in range(30)]
    response = httpx.post(
        server.base_url + "/api/v1/transcripts/t-rejected/citations",
        json={"citations": citations},
        headers=server.headers,
        timeout=60,
    )
    assert response.status_code == 422, response.text[:300]
    body = response.json()
    assert body["error"]["code"] == "citations_rejected"
    assert [e["index"] for e in body["errors"]] == list(range(20))
    assert body["error"]["detail"]["errors_omitted"] == 10
