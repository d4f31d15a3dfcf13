"""Hostile input: each gets a precise 4xx, never a 500, and changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from archive.archive import Archive

URI_R = "https://ex.org/page"


def nothing_stored(archive: Archive) -> bool:
    return not archive.index.all_memento_blobs() and not list(archive.blobs.addresses())


def post_raw(client: Any, body: bytes, content_type: str = "application/json") -> Any:
    return client.post("/api/v1/mementos", content=body, headers={"Content-Type": content_type})


@pytest.mark.parametrize(
    "uri_r",
    [
        "https://ex.org/" + "a" * 10_000,
        "https://ex.org/a\x00b",
        "https://ex.org/a\r\nSet-Cookie: x=1",
        "https://ex.org/a b",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "data:text/html,<script>",
        "https://xn--/",
        "https://exa mple.org/",
        "https://ex..org/%",
        "https://\u200b.example/",
        "http://[::1/",
        "https://ex.org:99999/",
        "//ex.org/no-scheme",
    ],
)
def test_hostile_uri_r_on_write(client: Any, archive: Archive, uri_r: str) -> None:
    response = post_raw(
        client, json.dumps({"uri_r": uri_r, "content": "x", "content_type": "text/plain"}).encode()
    )
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]["code"] in {"invalid_uri", "invalid_request"}
    assert nothing_stored(archive)


@pytest.mark.parametrize(
    "path",
    [
        "/timegate/" + "https://ex.org/" + "a" * 10_000,
        "/timegate/javascript:alert(1)",
        "/timegate/file:///etc/passwd",
        "/timegate/https://ex.org/%0d%0aSet-Cookie:%20x",
        "/timegate/https://ex.org/a%",
        "/timemap/json/page/-1/https://ex.org/",
        "/timemap/json/page/99999999999999999999/https://ex.org/",
        "/timemap/link/page/0/https://ex.org/",
        "/timemap/link/",
        "/timegate/",
    ],
)
def test_hostile_paths_are_4xx(client: Any, path: str) -> None:
    response = client.get(path, follow_redirects=False)
    assert 400 <= response.status_code < 500, (path, response.status_code, response.text[:200])


def test_header_injection_through_stored_uri_r_cannot_break_headers(client: Any) -> None:
    # Characters that are legal in a URI-R but dangerous in headers are percent-encoded.
    uri_r = 'https://ex.org/a?q=<x>,"y";rel=evil'
    created = client.post(
        "/api/v1/mementos", json={"uri_r": uri_r, "content": "x", "content_type": "text/plain"}
    )
    assert created.status_code == 400  # '<', '>' and '"' are not allowed in a URI-R at all
    uri_r = "https://ex.org/a?q=x,y;rel=evil&z=é"
    created = client.post(
        "/api/v1/mementos", json={"uri_r": uri_r, "content": "x", "content_type": "text/plain"}
    )
    assert created.status_code == 201
    link = client.get(created.json()["uri_m"]).headers["link"]
    assert link.isascii() and "\r" not in link and "\n" not in link
    assert '<https://ex.org/a?q=x,y;rel=evil&z=%C3%A9>; rel="original"' in link
    gate = client.get("/timegate/https://ex.org/a?q=x,y;rel=evil&z=%C3%A9", follow_redirects=False)
    assert gate.status_code == 302
    assert gate.headers["location"] == created.json()["uri_m"]


@pytest.mark.parametrize(
    "content_type",
    [
        "text/html\r\nX-Injected: 1",
        "text/html\nX: 1",
        "../../etc",
        'text/html; charset="utf\r\n-8"',
        "a" * 300,
        # Whitespace between parameters is spaces and tabs only: anything else that regular
        # expressions call whitespace would reach the URI-M's Content-Type header.
        "text/plain\r\n;x=y",
        "text/plain\n;x=y",
        "text/plain\x0b;x=y",
        "text/plain\x1c;x=y",
        "text/plain;\u2028x=y",
        "text/plain;\x85x=y",
        "text/plain;\xa0x=y",
        "\ntext/plain",
        "text/plain\u2028",
        'text/plain; x="\x85"',
        'text/plain; x="\u00e9"',
    ],
)
def test_content_type_cannot_inject_headers(
    client: Any, archive: Archive, content_type: str
) -> None:
    response = client.post(
        "/api/v1/mementos", json={"uri_r": URI_R, "content": "x", "content_type": content_type}
    )
    assert response.status_code in (400, 422)
    assert response.json()["error"]["code"] in {"invalid_content", "invalid_request"}
    assert nothing_stored(archive)


def test_media_types_within_the_rules_are_kept() -> None:
    from archive.mementos import check_media_type

    assert check_media_type(" text/html;charset=utf-8\t") == "text/html;charset=utf-8"
    assert check_media_type('text/plain;\tq="a b"') == 'text/plain;\tq="a b"'


# Media types an older, looser check stored: each must still be answered, as bytes.
LEGACY_MEDIA_TYPES = [
    "text/plain\r\n;x=y",
    "text/plain\n;x=y",
    "text/plain\x0b;x=y",
    "text/plain\x1c;x=y",
    "text/plain;\u2028x=y",
    "text/plain;\x85x=y",
    "text/plain;\xa0x=y",
    'text/plain; x="\x85"',
]


def store_with_media_type(archive: Archive, media_type: str, content: str = "legacy") -> str:
    """A memento whose stored media type is ``media_type``, written into the index directly
    as an older version could have stored it. Its id."""
    from sqlalchemy import update

    from archive.index.schema import mementos
    from archive.writes import MementoRequest

    written = archive.write_memento(
        MementoRequest(uri_r=URI_R, content=content.encode(), content_type="text/plain")
    )
    with archive.index.write() as connection:
        connection.execute(
            update(mementos)
            .where(mementos.c.id == written.memento.id)
            .values(media_type=media_type)
        )
    return written.memento.id


def framework_only(app: Any) -> Any:
    """The app with its plain-ASGI fast paths bypassed: FastAPI's own routes answer."""
    from fastapi import FastAPI

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        await FastAPI.__call__(app, scope, receive, send)

    return asgi


@pytest.mark.parametrize("media_type", LEGACY_MEDIA_TYPES)
def test_stored_media_type_with_controls_is_served_as_bytes(
    client: Any, archive: Archive, media_type: str
) -> None:
    from fastapi.testclient import TestClient

    memento_id = store_with_media_type(archive, media_type)
    with TestClient(framework_only(client.app)) as documented:
        for http in (client, documented):
            for method in ("GET", "HEAD"):
                response = http.request(method, f"/memento/{memento_id}")
                assert response.status_code == 200, (method, response.text[:200])
                assert response.headers["content-type"] == "application/octet-stream"
                assert response.content == (b"legacy" if method == "GET" else b"")
            shown = http.get(f"/api/v1/mementos/{memento_id}")
            assert shown.status_code == 200
            assert shown.json()["content_type"] == "application/octet-stream"
    timemap = client.get(f"/timemap/json/{URI_R}")
    assert timemap.status_code == 200
    assert [m["content_type"] for m in timemap.json()["mementos"]["list"]] == [
        "application/octet-stream"
    ]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"\xff\xfe\x00garbage", "application/json"),
        (
            b'{"uri_r": "https://ex.org/", "content": "\xc3\x28", "content_type": "text/plain"}',
            "application/json",
        ),
        (b"[" * 100_000 + b"]" * 100_000, "application/json"),
        (b'{"a":' * 5000 + b"1" + b"}" * 5000, "application/json"),
        (b"uri_r=https://ex.org/&content=x", "application/x-www-form-urlencoded"),
        (b"<memento/>", "application/xml"),
        (b"", "application/json"),
        (b"null", "application/json"),
        (b'"a string"', "application/json"),
        (b'{"uri_r": 5, "content": [], "content_type": {}}', "application/json"),
    ],
)
def test_malformed_bodies(client: Any, archive: Archive, body: bytes, content_type: str) -> None:
    response = post_raw(client, body, content_type)
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json")
    assert nothing_stored(archive)


def test_error_bodies_never_echo_captured_text(client: Any) -> None:
    secret = "SSN 078-05-1120 belongs to Jane Roe"
    responses = [
        client.post(
            "/api/v1/mementos",
            json={"uri_r": "bad uri", "content": secret, "content_type": "text/plain"},
        ),
        client.post(
            "/api/v1/mementos", json={"uri_r": URI_R, "content": secret, "content_type": "bad type"}
        ),
        client.post(
            "/api/v1/mementos",
            json={
                "uri_r": URI_R,
                "content": secret,
                "content_base64": secret,
                "content_type": "text/plain",
            },
        ),
        client.post(
            "/api/v1/mementos",
            json={"uri_r": URI_R, "content": secret, "content_type": "text/plain", "extra": secret},
        ),
        client.post(
            "/api/v1/mementos", json={"uri_r": URI_R, "content": 5, "content_type": secret}
        ),
    ]
    for response in responses:
        assert 400 <= response.status_code < 500
        assert secret not in response.text
        assert "078-05-1120" not in response.text


def test_captured_text_never_reaches_logs(
    client: Any, archive: Archive, caplog: pytest.LogCaptureFixture
) -> None:
    """Every path that logs (success, refusals, integrity failure) stays free of content."""
    import logging

    from archive.blobstore.local import LocalBlobStore

    secret = "PATIENT Jane Roe, DOB 1970-01-01, diagnosis confidential"
    caplog.set_level(logging.DEBUG)
    made = client.post(
        "/api/v1/mementos", json={"uri_r": URI_R, "content": secret, "content_type": "text/plain"}
    )
    assert made.status_code == 201
    client.get(made.json()["uri_m"])
    client.post(
        "/api/v1/mementos", json={"uri_r": "bad", "content": secret, "content_type": "text/plain"}
    )
    client.post(
        "/api/v1/mementos",
        json={
            "uri_r": URI_R,
            "content": secret,
            "content_type": "text/plain",
            "captured_at": "2999-01-01T00:00:00Z",
        },
    )
    if isinstance(archive.blobs, LocalBlobStore):  # force the loudest path: an integrity error
        memento = archive.get_memento("default", made.json()["id"])
        archive.blobs.path_for(memento.content_hash).write_bytes(secret.encode() + b" tampered")
        assert client.get(made.json()["uri_m"]).status_code == 500
        assert any(r.levelno >= logging.ERROR for r in caplog.records)
    assert caplog.records, "nothing was logged: the test would prove nothing"
    assert "Jane Roe" not in caplog.text
    assert "diagnosis" not in caplog.text
