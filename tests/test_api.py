"""The HTTP surface, on both backend pairs (local+SQLite and SeaweedFS+PostgreSQL)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from archive.archive import Archive
from archive.dates import to_rfc1123
from archive.hashing import content_address
from archive.index import DEFAULT_TENANT

URI_R = "https://ex.org/a?b=1&c=%2F"


def post(client: Any, **fields: Any) -> Any:
    body = {"uri_r": URI_R, "content": "hello", "content_type": "text/plain", **fields}
    # ensure_ascii keeps lone surrogates as \uXXXX escapes, as a hostile client would send them
    return client.post(
        "/api/v1/mementos",
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )


def memento_count(archive: Archive) -> int:
    return len(archive.index.all_memento_blobs())


def stored_blob_count(archive: Archive) -> int:
    return sum(1 for _ in archive.blobs.addresses())


# -- writing -----------------------------------------------------------------------------


def test_write_returns_201_with_contract_fields(client: Any) -> None:
    response = post(client, captured_at="2024-05-01T12:00:00Z")
    assert response.status_code == 201
    body = response.json()
    assert body["uri_r"] == URI_R
    assert body["uri_m"].startswith("http://testserver/")
    assert body["memento_datetime"] == "2024-05-01T12:00:00Z"
    assert body["content_hash"] == content_address(b"hello")
    assert body["timegate"] == f"http://testserver/timegate/{URI_R}"
    assert body["timemap"] == f"http://testserver/timemap/link/{URI_R}"
    assert response.headers["location"] == body["uri_m"]


def test_exact_repeat_is_200_with_same_body(client: Any, archive: Archive) -> None:
    first = post(client, captured_at="2024-05-01T12:00:00Z")
    again = post(client, captured_at="2024-05-01T12:00:00Z")
    assert (first.status_code, again.status_code) == (201, 200)
    assert {k: v for k, v in again.json().items() if k != "archived_at"} == {
        k: v for k, v in first.json().items() if k != "archived_at"
    }
    assert memento_count(archive) == 1


def test_same_capture_with_other_facts_is_a_conflict_not_an_edit(client: Any) -> None:
    post(client, captured_at="2024-05-01T12:00:00Z", tool="http.get")
    clash = post(client, captured_at="2024-05-01T12:00:00Z", tool="kb.read")
    assert clash.status_code == 409
    shown = client.get(f"/api/v1/mementos/{clash.json()['error']['detail']['memento_id']}")
    assert shown.json()["capture"]["tool"] == "http.get"


def test_idempotency_key_replays_first_answer(client: Any, archive: Archive) -> None:
    headers = {"Idempotency-Key": "req-1"}
    body = {"uri_r": URI_R, "content": "hello", "content_type": "text/plain"}  # captured_at: now
    first = client.post("/api/v1/mementos", json=body, headers=headers)
    retry = client.post("/api/v1/mementos", json=body, headers=headers)
    assert first.status_code == retry.status_code == 201
    assert retry.json()["id"] == first.json()["id"]
    assert memento_count(archive) == 1


def test_idempotency_key_reused_for_other_request_is_refused(client: Any, archive: Archive) -> None:
    headers = {"Idempotency-Key": "req-2"}
    assert post(client, content="one").status_code == 201
    first = client.post(
        "/api/v1/mementos",
        headers=headers,
        json={"uri_r": URI_R, "content": "two", "content_type": "text/plain"},
    )
    other = client.post(
        "/api/v1/mementos",
        headers=headers,
        json={"uri_r": URI_R, "content": "three", "content_type": "text/plain"},
    )
    assert first.status_code == 201
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    assert memento_count(archive) == 2


def test_base64_content_keeps_exact_bytes(client: Any) -> None:
    raw = bytes(range(256)) * 4
    response = post(
        client,
        content=None,
        content_base64=base64.b64encode(raw).decode(),
        content_type="application/octet-stream",
    )
    assert response.status_code == 201
    assert response.json()["content_hash"] == content_address(raw)
    assert client.get(response.json()["uri_m"]).content == raw


def test_selected_capture_headers_only(client: Any) -> None:
    response = post(
        client,
        headers={"ETag": '"abc"', "Set-Cookie": "secret=1", "Last-Modified": "x"},
        http_status=200,
        final_url="https://ex.org/final",
        tool="http.get",
    )
    capture = response.json()["capture"]
    assert capture["headers"] == {"etag": '"abc"', "last-modified": "x"}
    assert capture["final_url"] == "https://ex.org/final"


# -- URI-M ---------------------------------------------------------------------------------


def test_uri_m_serves_bytes_with_memento_headers(client: Any) -> None:
    created = post(
        client, captured_at="2024-05-01T12:00:00Z", content_type="text/plain; charset=latin-1"
    ).json()
    response = client.get(created["uri_m"])
    assert response.status_code == 200
    assert response.content == b"hello"
    assert response.headers["content-type"] == "text/plain; charset=latin-1"
    assert response.headers["memento-datetime"] == "Wed, 01 May 2024 12:00:00 GMT"
    link = response.headers["link"]
    assert f'<{URI_R}>; rel="original"' in link
    assert f'<http://testserver/timegate/{URI_R}>; rel="timegate"' in link
    assert 'rel="timemap"; type="application/link-format"' in link
    assert f'<{created["uri_m"]}>; rel="memento"; datetime="Wed, 01 May 2024 12:00:00 GMT"' in link
    assert response.headers["etag"] == '"' + created["content_hash"].replace(":", "-") + '"'
    assert response.headers["cache-control"].startswith("private, max-age=")
    assert "vary" not in response.headers


def test_remembered_uri_m_answers_are_those_of_the_first(client: Any) -> None:
    """The second and later answers come from memory (MementoRoute's ServedMemento);
    a 304 in between must not take anything out of what is remembered."""
    created = post(client).json()
    first = client.get(created["uri_m"])
    assert (
        client.get(created["uri_m"], headers={"If-None-Match": first.headers["etag"]}).status_code
        == 304
    )
    again = client.get(created["uri_m"])
    assert again.status_code == 200
    assert again.content == first.content
    assert dict(again.headers) == dict(first.headers)


def test_uri_m_head_and_conditional_get(client: Any) -> None:
    created = post(client).json()
    head = client.head(created["uri_m"])
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == "5"
    assert "memento-datetime" in head.headers
    etag = head.headers["etag"]
    assert client.get(created["uri_m"], headers={"If-None-Match": etag}).status_code == 304


def test_tampered_blob_is_never_served_as_evidence(client: Any, archive: Archive) -> None:
    from archive.blobstore.local import LocalBlobStore
    from archive.blobstore.s3 import S3BlobStore

    created = post(client).json()
    memento = archive.get_memento(DEFAULT_TENANT, created["id"])
    store = archive.blobs
    if isinstance(store, LocalBlobStore):
        store.path_for(memento.content_hash).write_bytes(b"tampered")
        response = client.get(created["uri_m"])
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "integrity_error"
        assert b"hello" not in response.content
    else:
        # A versioned bucket keeps the captured version: reads pin the recorded VersionId,
        # so overwriting the key does not change the evidence.
        assert isinstance(store, S3BlobStore)
        assert memento.blob_version_id is not None
        store.client.put_object(
            Bucket=store.bucket, Key=store.key_for(memento.content_hash), Body=b"tampered"
        )
        response = client.get(created["uri_m"])
        assert response.status_code == 200
        assert response.content == b"hello"


def test_metadata_route_and_unknown_ids(client: Any) -> None:
    created = post(client).json()
    assert (
        client.get(f"/api/v1/mementos/{created['id']}").json()["content_hash"]
        == created["content_hash"]
    )
    assert client.head(f"/api/v1/mementos/{created['id']}").status_code == 200
    unknown = "0" * 32
    assert client.get(f"/api/v1/mementos/{unknown}").status_code == 404
    assert client.get(f"/memento/{unknown}").status_code == 404
    # Decoded, this is a path with slashes: no route matches it, so it is a plain 404.
    assert client.get("/memento/..%2F..%2Fetc%2Fpasswd").status_code == 404
    assert client.get("/memento/..%5C..%5Cetc").json()["error"]["code"] == "invalid_address"
    assert client.get("/memento/not-an-id").json()["error"]["code"] == "invalid_address"


def framework_only(app: Any) -> Any:
    """The same app with the URI-M and write fast paths bypassed, so FastAPI's own routes
    answer."""
    from fastapi import FastAPI

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        await FastAPI.__call__(app, scope, receive, send)

    return asgi


@pytest.mark.parametrize(
    "method,path,headers",
    [
        ("GET", None, {}),
        ("HEAD", None, {}),
        ("GET", None, {"If-None-Match": "*"}),
        ("GET", "/memento/" + "0" * 32, {}),
        ("HEAD", "/memento/not-an-id", {}),
        ("GET", "/memento/..%5C..%5Cetc", {}),
    ],
)
def test_uri_m_fast_path_answers_exactly_as_the_documented_route(
    client: Any, method: str, path: str | None, headers: dict[str, str]
) -> None:
    from fastapi.testclient import TestClient

    target = path or post(client).json()["uri_m"]
    fast = client.request(method, target, headers=headers)
    with TestClient(framework_only(client.app)) as documented:
        slow = documented.request(method, target, headers=headers)
    assert fast.status_code == slow.status_code
    assert fast.content == slow.content
    assert sorted(fast.headers.multi_items()) == sorted(slow.headers.multi_items())


def test_uri_m_fast_path_turns_a_bug_into_a_json_500(
    client: Any, archive: Archive, monkeypatch: Any
) -> None:
    created = post(client).json()

    def broken(address: str, version_id: str | None = None) -> bytes:
        raise RuntimeError("boom")

    monkeypatch.setattr(archive, "read_blob", broken)
    response = client.get(created["uri_m"])
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "internal error", "detail": {}}
    }


WRITE = {"uri_r": URI_R, "content": "hello", "content_type": "text/plain"}


@pytest.mark.parametrize(
    "body,headers",
    [
        (b'{"uri_r": ', {"Content-Type": "application/json"}),
        (b'{"uri_r": "\xff"}', {"Content-Type": "application/json"}),
        (b"[" * 100_000, {"Content-Type": "application/json"}),
        (b"", {"Content-Type": "application/json"}),
        (b"[1, 2]", {"Content-Type": "application/json"}),
        (json.dumps({**WRITE, "scope": "page"}).encode(), {"Content-Type": "application/json"}),
        (json.dumps({**WRITE, "content": None}).encode(), {"Content-Type": "application/json"}),
        (json.dumps(WRITE).encode(), {"Content-Type": "text/plain"}),
        (
            json.dumps(WRITE).encode(),
            {"Content-Type": "application/json", "Idempotency-Key": "a" * 300},
        ),
        (
            json.dumps(WRITE).encode(),
            {"Content-Type": "application/json", "Idempotency-Key": "with space"},
        ),
        (
            json.dumps({**WRITE, "content_type": "not a type"}).encode(),
            {"Content-Type": "application/json"},
        ),
        (
            json.dumps({**WRITE, "tool": "http\x00get"}).encode(),
            {"Content-Type": "application/json"},
        ),
    ],
)
def test_write_fast_path_refuses_exactly_as_the_documented_route(
    client: Any, archive: Archive, body: bytes, headers: dict[str, str]
) -> None:
    from fastapi.testclient import TestClient

    fast = client.post("/api/v1/mementos", content=body, headers=headers)
    with TestClient(framework_only(client.app)) as documented:
        slow = documented.post("/api/v1/mementos", content=body, headers=headers)
    assert 400 <= fast.status_code < 500, fast.text
    assert (fast.status_code, fast.content) == (slow.status_code, slow.content)
    assert sorted(fast.headers.multi_items()) == sorted(slow.headers.multi_items())
    assert memento_count(archive) == 0
    assert stored_blob_count(archive) == 0


def test_written_memento_answers_as_its_metadata_and_the_documented_route(client: Any) -> None:
    from fastapi.testclient import TestClient

    fast = post(
        client,
        captured_at="2024-05-01T12:00:00Z",
        tool="http.get",
        final_url=URI_R,
        http_status=200,
        headers={"ETag": '"v1"'},
    )
    assert fast.status_code == 201
    with TestClient(framework_only(client.app)) as documented:
        again = documented.post(
            "/api/v1/mementos",
            json={
                **WRITE,
                "captured_at": "2024-05-01T12:00:00Z",
                "tool": "http.get",
                "final_url": URI_R,
                "http_status": 200,
                "headers": {"ETag": '"v1"'},
            },
        )
    assert again.status_code == 200  # the same capture, through FastAPI's own route
    stored = client.get(f"/api/v1/mementos/{fast.json()['id']}").json()
    assert fast.json() == stored
    assert {k: v for k, v in again.json().items() if k != "archived_at"} == {
        k: v for k, v in stored.items() if k != "archived_at"
    }


def test_a_tool_name_with_control_characters_is_refused(client: Any, archive: Archive) -> None:
    response = post(client, tool="http.get\x00")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_content"
    assert memento_count(archive) == 0


# -- TimeGate --------------------------------------------------------------------------------

DATES = ["2024-01-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-05-01T00:00:00Z"]


@pytest.fixture()
def three(client: Any) -> list[dict[str, Any]]:
    return [post(client, content=f"v{i}", captured_at=d).json() for i, d in enumerate(DATES)]


def gate(client: Any, uri_r: str = URI_R, accept: str | None = None) -> Any:
    headers = {"Accept-Datetime": accept} if accept is not None else {}
    return client.get(f"/timegate/{uri_r}", headers=headers, follow_redirects=False)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, 2),
        ("Mon, 01 Jan 2018 00:00:00 GMT", 0),  # before the first → first
        ("Mon, 01 Jan 2024 00:00:00 GMT", 0),
        ("Wed, 31 Jan 2024 00:00:00 GMT", 0),
        ("Fri, 02 Feb 2024 00:00:00 GMT", 1),  # nearer the next one
        ("Sun, 31 Mar 2024 12:00:00 GMT", 1),  # tie between 1 and 2 → the earlier
        ("Fri, 01 Jan 2049 00:00:00 GMT", 2),  # after the last → last
    ],
)
def test_timegate_chooses_nearest(
    client: Any, three: list[dict[str, Any]], accept: str | None, expected: int
) -> None:
    response = gate(client, accept=accept)
    assert response.status_code == 302
    assert response.headers["location"] == three[expected]["uri_m"]
    assert response.headers["vary"] == "accept-datetime"


def test_timegate_link_header_names_neighbours(client: Any, three: list[dict[str, Any]]) -> None:
    link = gate(client, accept="Fri, 01 Mar 2024 00:00:00 GMT").headers["link"]
    assert f'<{URI_R}>; rel="original"' in link
    assert 'rel="timemap"; type="application/link-format"' in link
    assert (
        f'<{three[0]["uri_m"]}>; rel="first prev memento"; datetime="Mon, 01 Jan 2024 00:00:00 GMT"'
        in link
    )
    assert f'<{three[1]["uri_m"]}>; rel="memento"; datetime="Fri, 01 Mar 2024 00:00:00 GMT"' in link
    assert (
        f'<{three[2]["uri_m"]}>; rel="next last memento"; datetime="Wed, 01 May 2024 00:00:00 GMT"'
        in link
    )


def test_timegate_equivalent_spelling_and_head(client: Any, three: list[dict[str, Any]]) -> None:
    response = client.head("/timegate/HTTPS://EX.org:443/a?c=%2f&b=1", follow_redirects=False)
    assert response.status_code == 302
    assert response.headers["location"] == three[2]["uri_m"]


def test_timegate_prefers_document_over_passage_at_same_datetime(client: Any) -> None:
    passage = post(client, content="passage", scope="passage", captured_at=DATES[0]).json()
    document = post(client, content="document", captured_at=DATES[0]).json()
    assert gate(client).headers["location"] == document["uri_m"]
    assert passage["uri_m"] != document["uri_m"]


@pytest.mark.parametrize(
    "accept",
    [
        "Wed, 01 May 2024 12:00:00 +0000",
        "2024-05-01T12:00:00Z",
        "Thu, 01 May 2024 12:00:00 GMT",  # wrong weekday
        "01 May 2024 12:00:00 GMT",
        "Wed, 1 May 2024 12:00:00 GMT",
        "garbage",
    ],
)
def test_timegate_refuses_malformed_accept_datetime(
    client: Any, three: list[dict[str, Any]], accept: str
) -> None:
    response = gate(client, accept=accept)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_datetime"


def test_timegate_unknown_uri_r_and_bad_uri(client: Any, three: list[dict[str, Any]]) -> None:
    assert gate(client, uri_r="https://ex.org/never").status_code == 404
    assert gate(client, uri_r="https://ex.org/a?b=1&c=%2f&d=").status_code == 404
    assert gate(client, uri_r="ftp://ex.org/a").status_code == 400
    assert gate(client, uri_r="https%3A%2F%2Fex.org%2Fa%3Fb%3D1%26c%3D%252F").status_code == 302


# -- TimeMaps --------------------------------------------------------------------------------


def test_timemap_link_format(client: Any, three: list[dict[str, Any]]) -> None:
    response = client.get(f"/timemap/link/{URI_R}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/link-format")
    lines = response.text.strip().split(",\n")
    assert lines[0] == f'<{URI_R}>; rel="original"'
    assert 'rel="self"; type="application/link-format"' in lines[1]
    assert 'from="Mon, 01 Jan 2024 00:00:00 GMT"; until="Wed, 01 May 2024 00:00:00 GMT"' in lines[1]
    assert lines[2] == f'<http://testserver/timegate/{URI_R}>; rel="timegate"'
    assert (
        lines[3]
        == f'<{three[0]["uri_m"]}>; rel="first memento"; datetime="Mon, 01 Jan 2024 00:00:00 GMT"'
    )
    assert (
        lines[4]
        == f'<{three[1]["uri_m"]}>; rel="memento"; datetime="Fri, 01 Mar 2024 00:00:00 GMT"'
    )
    assert (
        lines[5]
        == f'<{three[2]["uri_m"]}>; rel="last memento"; datetime="Wed, 01 May 2024 00:00:00 GMT"'
    )
    assert client.head(f"/timemap/link/{URI_R}").status_code == 200


def test_timemap_json_mementoweb_shape(client: Any, three: list[dict[str, Any]]) -> None:
    body = client.get(f"/timemap/json/{URI_R}").json()
    assert body["original_uri"] == URI_R
    assert body["timegate_uri"] == f"http://testserver/timegate/{URI_R}"
    assert body["timemap_uri"]["link_format"] == f"http://testserver/timemap/link/{URI_R}"
    assert body["mementos"]["first"] == {
        "datetime": "Mon, 01 Jan 2024 00:00:00 GMT",
        "uri": three[0]["uri_m"],
    }
    assert body["mementos"]["last"]["uri"] == three[2]["uri_m"]
    assert [m["uri"] for m in body["mementos"]["list"]] == [t["uri_m"] for t in three]
    assert all(m["scope"] == "document" for m in body["mementos"]["list"])


def test_timemap_pages_live_in_the_path(settings: Any, tmp_path: Any) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    small = settings.with_overrides(timemap_page_size=2)
    opened = Archive.open(small)
    try:
        with TestClient(create_app(small, archive=opened, auth=False)) as paged:
            made = [
                post(paged, content=f"p{i}", captured_at=f"2024-0{i + 1}-01T00:00:00Z").json()
                for i in range(5)
            ]
            first = paged.get(f"/timemap/json/{URI_R}").json()
            assert first["pages"]["total_pages"] == 3
            assert [m["uri"] for m in first["mementos"]["list"]] == [m["uri_m"] for m in made[:2]]
            next_uri = first["pages"]["next"]["uri"]
            assert next_uri == f"http://testserver/timemap/json/page/2/{URI_R}"
            second = paged.get(next_uri.removeprefix("http://testserver")).json()
            assert [m["uri"] for m in second["mementos"]["list"]] == [m["uri_m"] for m in made[2:4]]
            assert second["mementos"]["last"]["uri"] == made[4]["uri_m"]
            link_page = paged.get(f"/timemap/link/page/3/{URI_R}").text
            assert 'rel="prev"' in link_page and made[4]["uri_m"] in link_page
            assert paged.get(f"/timemap/json/page/9/{URI_R}").status_code == 404
            assert paged.get(f"/timemap/json/page/0/{URI_R}").status_code == 400
    finally:
        opened.close()


def test_timemap_unknown(client: Any) -> None:
    assert client.get("/timemap/json/https://nothing.example/").status_code == 404
    assert client.get("/timemap/link/https://nothing.example/").status_code == 404


# -- bad input: precise 4xx, nothing stored ------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        ({"uri_r": "/relative/path"}, 400, "invalid_uri"),
        ({"uri_r": "javascript:alert(1)"}, 400, "invalid_uri"),
        ({"uri_r": "file:///etc/passwd"}, 400, "invalid_uri"),
        ({"uri_r": "https://ex.org/a b"}, 400, "invalid_uri"),
        ({"uri_r": "https://user:pw@ex.org/"}, 400, "invalid_uri"),
        ({"uri_r": "https://ex.org/" + "a" * 9000}, 422, "invalid_request"),
        ({"content": None, "content_base64": "not base64!"}, 400, "invalid_content"),
        ({"content_base64": "aGVsbG8="}, 422, "invalid_request"),  # both given
        ({"content": None}, 422, "invalid_request"),  # neither given
        ({"captured_at": "yesterday"}, 400, "invalid_datetime"),
        ({"captured_at": "2024-05-01T12:00:00"}, 400, "invalid_datetime"),  # no offset
        ({"captured_at": "2024-02-30T12:00:00Z"}, 400, "invalid_datetime"),
        ({"captured_at": "2999-01-01T00:00:00Z"}, 400, "invalid_datetime"),
        ({"content_type": "text/html\r\nX-Evil: 1"}, 400, "invalid_content"),
        ({"content_type": ""}, 400, "invalid_content"),
        ({"scope": "everything"}, 422, "invalid_request"),
        ({"http_status": 99}, 422, "invalid_request"),
        ({"headers": {"etag": "a\r\nb"}}, 400, "invalid_content"),
        ({"unknown_field": 1}, 422, "invalid_request"),
        ({"content": "\ud800"}, 400, "invalid_content"),
        ({"headers": {"etag": "\ud800"}}, 422, "invalid_request"),
        ({"headers": {"\udfff": "x"}}, 422, "invalid_request"),
    ],
)
def test_bad_input_is_a_precise_4xx_and_stores_nothing(
    client: Any, archive: Archive, fields: dict[str, Any], status: int, code: str
) -> None:
    response = post(client, **fields)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert memento_count(archive) == 0
    assert stored_blob_count(archive) == 0


@pytest.mark.parametrize("labels", [{"run": "\ud800"}, {"\ud800": "run"}])
def test_lone_surrogates_in_transcript_labels_are_refused(
    client: Any, labels: dict[str, str]
) -> None:
    """Pydantic refuses lone surrogates in plain string fields, not in maps: a label one was
    stored, then every read of the transcript failed to encode its answer (500)."""
    body = json.dumps({"retention": "P1D", "labels": labels}).encode()
    response = client.put(
        "/api/v1/transcripts/t-labels", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert client.get("/api/v1/transcripts/t-labels").status_code == 404


def test_malformed_json_and_wrong_types(client: Any, archive: Archive) -> None:
    bad = client.post(
        "/api/v1/mementos", content=b'{"uri_r": ', headers={"Content-Type": "application/json"}
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "malformed_json"
    not_utf8 = client.post(
        "/api/v1/mementos",
        content=b'{"uri_r": "\xff"}',
        headers={"Content-Type": "application/json"},
    )
    assert 400 <= not_utf8.status_code < 500
    listed = client.post("/api/v1/mementos", json=[1, 2])
    assert listed.status_code == 422
    assert memento_count(archive) == 0


def test_body_over_limit_is_413(settings: Any) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    small = settings.with_overrides(max_body_bytes=1024)
    opened = Archive.open(small)
    try:
        with TestClient(create_app(small, archive=opened, auth=False)) as limited:
            response = post(limited, content="x" * 4096)
            assert response.status_code == 413
            assert response.json()["error"]["code"] == "payload_too_large"

            def chunks() -> Any:  # no Content-Length: the stream itself is counted
                yield b'{"uri_r": "https://ex.org/", "content_type": "text/plain", "content": "'
                for _ in range(10):
                    yield b"x" * 512
                yield b'"}'

            streamed = limited.post(
                "/api/v1/mementos", content=chunks(), headers={"Content-Type": "application/json"}
            )
            assert streamed.status_code == 413
            assert len(opened.index.all_memento_blobs()) == 0
    finally:
        opened.close()


def test_bad_idempotency_key(client: Any, archive: Archive) -> None:
    response = client.post(
        "/api/v1/mementos",
        headers={"Idempotency-Key": "a" * 300},
        json={"uri_r": URI_R, "content": "x", "content_type": "text/plain"},
    )
    assert 400 <= response.status_code < 500
    assert memento_count(archive) == 0


def test_kb_scheme_is_allowed_other_internal_not(client: Any) -> None:
    assert post(client, uri_r="kb:policies/leave-2024").status_code == 201
    assert post(client, uri_r="wiki:policies").status_code == 400


def test_openapi_documents_every_route(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in [
        "/api/v1/mementos",
        "/api/v1/mementos/{memento_id}",
        "/memento/{memento_id}",
        "/timegate/{uri_r}",
        "/timemap/link/{uri_r}",
        "/timemap/json/{uri_r}",
        "/healthz",
    ]:
        assert path in paths, path
    timegate_params = paths["/timegate/{uri_r}"]["get"]["parameters"]
    assert any("raw" in (p.get("description") or "") for p in timegate_params)


def test_healthz(client: Any) -> None:
    assert client.get("/healthz").json()["status"] == "ok"


def test_rfc1123_in_link_matches_memento_datetime(client: Any, three: list[dict[str, Any]]) -> None:
    from archive.dates import parse_rfc3339

    for made in three:
        response = client.get(made["uri_m"])
        assert response.headers["memento-datetime"] == to_rfc1123(
            parse_rfc3339(made["memento_datetime"])
        )


def test_write_fast_path_answers_byte_for_byte_as_the_documented_route(client: Any) -> None:
    """The fast path sends its answer without a Response object: the same capture written
    again through it and through FastAPI's route must get the same bytes and headers."""
    from fastapi.testclient import TestClient

    body = {**WRITE, "captured_at": "2024-06-01T08:00:00+02:00", "headers": {"ETag": '"é"'}}
    assert client.post("/api/v1/mementos", json=body).status_code == 201
    fast = client.post("/api/v1/mementos", json=body)
    with TestClient(framework_only(client.app)) as documented:
        slow = documented.post("/api/v1/mementos", json=body)
    assert fast.status_code == slow.status_code == 200
    assert fast.content == slow.content
    assert fast.headers.multi_items() == slow.headers.multi_items()
