"""Interoperability: the PyPI ``memento-client`` (an independent RFC 7089 client) against a
live ``amber serve``, on both backends.

The client HEADs the URI-R (to look for ``rel=original``), then HEADs
``<timegate>/<URI-R>`` with ``Accept-Datetime``, follows the 302 to the URI-M and reads its
``Memento-Datetime`` and the TimeGate's ``Link`` header. The URI-R therefore points at a
small local origin server, so the client's first HEAD gets an answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
import requests
from live_server import LiveServer, env_for, free_port, origin_server, running_server
from memento_client import MementoClient

from archive.config import Settings
from archive.dates import to_rfc1123

pytestmark = pytest.mark.slow

# Three captures of one URI-R. Between the first two, the midpoint is 2020-08-31T00:00:00Z
# (365 days apart), a tie that the Contracts resolve to the earlier memento.
CAPTURES = (
    datetime(2020, 3, 1, 12, 0, 0, tzinfo=UTC),
    datetime(2021, 3, 1, 12, 0, 0, tzinfo=UTC),
    datetime(2023, 3, 1, 12, 0, 0, tzinfo=UTC),
)

# (label, Accept-Datetime, index of the memento the TimeGate must choose)
TARGETS = (
    ("long before the first", datetime(1999, 1, 1, tzinfo=UTC), 0),
    ("one second before the first", CAPTURES[0] - timedelta(seconds=1), 0),
    ("exactly the first", CAPTURES[0], 0),
    ("between, nearer the first", datetime(2020, 6, 1, tzinfo=UTC), 0),
    ("between, equidistant: the earlier", datetime(2020, 8, 31, tzinfo=UTC), 0),
    ("between, one second past the midpoint", datetime(2020, 8, 31, 0, 0, 1, tzinfo=UTC), 1),
    ("exactly the second", CAPTURES[1], 1),
    ("one second after the second", CAPTURES[1] + timedelta(seconds=1), 1),
    ("between, nearer the third", datetime(2022, 12, 31, tzinfo=UTC), 2),
    ("exactly the last", CAPTURES[2], 2),
    ("after the last", datetime(2030, 1, 1, tzinfo=UTC), 2),
)


class _Origin(BaseHTTPRequestHandler):
    """The live resource: 200 for any path, no Memento headers of its own."""

    body = b"<html><body>the page as it is today</body></html>"

    def do_HEAD(self) -> None:
        self._head()

    def do_GET(self) -> None:
        self._head()
        self.wfile.write(self.body)

    def _head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture()
def origin_url() -> Iterator[str]:
    with origin_server(_Origin) as url:
        yield url


@pytest.fixture()
def live_server(settings: Settings) -> Iterator[LiveServer]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running_server(env_for(settings, base), port) as server:
        assert server.base_url == base
        yield server


@pytest.fixture()
def live(live_server: LiveServer) -> str:
    return live_server.base_url


@pytest.fixture()
def session(live_server: LiveServer) -> requests.Session:
    """What a Memento client sends: the agent key on every request, no proxies."""
    http = requests.Session()
    http.trust_env = False  # never route loopback through a proxy from the environment
    http.headers.update(live_server.headers)
    return http


@pytest.fixture()
def auth(live_server: LiveServer) -> dict[str, str]:
    return live_server.headers


def _write(base: str, uri_r: str, headers: dict[str, str]) -> list[dict[str, object]]:
    written = []
    with httpx.Client(base_url=base, headers=headers, timeout=10.0, trust_env=False) as client:
        for number, captured_at in enumerate(CAPTURES):
            response = client.post(
                "/api/v1/mementos",
                json={
                    "uri_r": uri_r,
                    "content": f"capture {number} of the page, {captured_at.isoformat()}",
                    "content_type": "text/plain; charset=utf-8",
                    "captured_at": captured_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "tool": "http.get",
                },
            )
            assert response.status_code == 201, response.text
            written.append(response.json())
    return written


def _naive_utc(moment: datetime) -> datetime:
    # memento-client formats and parses HTTP dates with naive datetimes meaning UTC.
    return moment.astimezone(UTC).replace(tzinfo=None)


def test_memento_client_resolves_each_datetime_to_the_right_memento(
    live: str, origin_url: str, session: requests.Session, auth: dict[str, str]
) -> None:
    uri_r = f"{origin_url}/article?id=7&lang=en"
    written = _write(live, uri_r, auth)
    uris = [str(m["uri_m"]) for m in written]
    assert len(set(uris)) == 3
    assert all(uri.startswith(f"{live}/") for uri in uris)

    client = MementoClient(
        timegate_uri=f"{live}/timegate/", check_native_timegate=False, session=session
    )
    with httpx.Client(headers=auth, timeout=10.0, trust_env=False) as http:
        for label, target, expected in TARGETS:
            info = client.get_memento_info(uri_r, _naive_utc(target))
            assert info["original_uri"] == uri_r, label
            assert info["timegate_uri"] == f"{live}/timegate/{uri_r}", label
            mementos = info["mementos"]
            closest = mementos["closest"]
            assert closest["uri"] == [uris[expected]], label
            assert closest["http_status_code"] == 200, label
            assert closest["datetime"] == _naive_utc(CAPTURES[expected]), label
            assert mementos["first"]["uri"] == [uris[0]], label
            assert mementos["first"]["datetime"] == _naive_utc(CAPTURES[0]), label
            assert mementos["last"]["uri"] == [uris[2]], label
            assert mementos["last"]["datetime"] == _naive_utc(CAPTURES[2]), label
            if expected > 0:
                assert mementos["prev"]["uri"] == [uris[expected - 1]], label
            else:
                assert "prev" not in mementos, label
            if expected < 2:
                assert mementos["next"]["uri"] == [uris[expected + 1]], label
            else:
                assert "next" not in mementos, label

            # The URI-M the client landed on answers with exactly the chosen datetime.
            answer = http.get(closest["uri"][0])
            assert answer.status_code == 200, label
            assert answer.headers["Memento-Datetime"] == to_rfc1123(CAPTURES[expected]), label
            assert written[expected]["memento_datetime"] == (
                CAPTURES[expected].strftime("%Y-%m-%dT%H:%M:%SZ")
            ), label
            assert answer.content.decode() == (
                f"capture {expected} of the page, {CAPTURES[expected].isoformat()}"
            ), label


def test_memento_client_without_accept_datetime_gets_the_latest(
    live: str, origin_url: str, session: requests.Session, auth: dict[str, str]
) -> None:
    uri_r = f"{origin_url}/latest"
    written = _write(live, uri_r, auth)
    client = MementoClient(
        timegate_uri=f"{live}/timegate/", check_native_timegate=False, session=session
    )
    # The client sends "now" when given no datetime: the nearest memento is the last one.
    info = client.get_memento_info(uri_r)
    assert info["mementos"]["closest"]["uri"] == [written[2]["uri_m"]]
    assert info["mementos"]["closest"]["datetime"] == _naive_utc(CAPTURES[2])


def test_memento_client_from_a_uri_m_finds_the_original(
    live: str, origin_url: str, session: requests.Session, auth: dict[str, str]
) -> None:
    """Given a URI-M instead of a URI-R, the client follows ``rel=original`` back."""
    uri_r = f"{origin_url}/from-memento"
    written = _write(live, uri_r, auth)
    client = MementoClient(
        timegate_uri=f"{live}/timegate/", check_native_timegate=False, session=session
    )
    info = client.get_memento_info(str(written[0]["uri_m"]), _naive_utc(CAPTURES[1]))
    assert info["original_uri"] == uri_r
    assert info["mementos"]["closest"]["uri"] == [written[1]["uri_m"]]


# URI-R spellings that must survive the trip through the TimeGate path raw: an encoded
# slash, encoded and literal non-ASCII, an encoded '&', matrix parameters, repeated names,
# a URL inside the query, an encoded space, '+'.
AWKWARD_PATHS = (
    "/a%2Fb?x=1",
    "/caf%C3%A9?q=%26and",
    "/café?q=ü",
    "/p;param?a=1&a=2",
    "/x?u=http://y.z/?k=v",
    "/sp%20ace",
    "/t?x=a+b",
)


def test_memento_client_with_awkward_uri_rs(
    live: str, origin_url: str, session: requests.Session, auth: dict[str, str]
) -> None:
    client = MementoClient(
        timegate_uri=f"{live}/timegate/", check_native_timegate=False, session=session
    )
    with httpx.Client(base_url=live, headers=auth, timeout=10.0, trust_env=False) as http:
        for path in AWKWARD_PATHS:
            uri_r = origin_url + path
            response = http.post(
                "/api/v1/mementos",
                json={
                    "uri_r": uri_r,
                    "content": path,
                    "content_type": "text/plain",
                    "captured_at": "2022-01-01T00:00:00Z",
                },
            )
            assert response.status_code == 201, (path, response.text)
            info = client.get_memento_info(uri_r, datetime(2023, 1, 1))
            assert info.get("mementos", {}).get("closest", {}).get("uri") == [
                response.json()["uri_m"]
            ], (path, info)


@pytest.fixture()
def local_live(tmp_path: Path) -> Iterator[LiveServer]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running_server(env_for(Settings(data_dir=tmp_path / "amber-data"), base), port) as server:
        yield server


def test_uri_r_with_an_empty_query_is_reachable_through_its_own_links(
    local_live: LiveServer,
) -> None:
    with httpx.Client(headers=local_live.headers, timeout=10.0, trust_env=False) as http:
        written = http.post(
            f"{local_live.base_url}/api/v1/mementos",
            json={
                "uri_r": "https://example.org/search?",
                "content": "results",
                "content_type": "text/plain",
                "captured_at": "2022-01-01T00:00:00Z",
            },
        )
        assert written.status_code == 201, written.text
        memento = written.json()
        gate = http.get(memento["timegate"])
        assert gate.status_code == 302, gate.text
        assert gate.headers["Location"] == memento["uri_m"]
        assert http.get(memento["timemap"]).status_code == 200
        assert http.get(memento["timemap_json"]).status_code == 200
