"""TimeGates and TimeMaps from timelines: the same choice as the index's look-ups, the same
bytes as the documented FastAPI routes, and nothing remembered past a memento written or
deleted in any process."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from archive.access.keys import Role
from archive.archive import Archive
from archive.config import Settings
from archive.dates import to_rfc1123, utc_now
from archive.exceptions import ConfigurationError
from archive.index import signals
from archive.index.timeline import TimelineReader
from archive.mementos import Scope
from archive.writes import MementoRequest

URI_R = "https://ex.org/nav?x=1&y=%2F"
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def _write(
    archive: Archive,
    hours: float,
    *,
    text: str | None = None,
    scope: Scope = Scope.PASSAGE,
    uri_r: str = URI_R,
    tenant: str = "default",
) -> str:
    content = (text or f"at {hours} {scope.value} {random.random()}").encode()
    return archive.write_memento(
        MementoRequest(
            uri_r=uri_r,
            content=content,
            content_type="text/plain",
            captured_at=EPOCH + timedelta(hours=hours),
            scope=scope,
        ),
        tenant=tenant,
    ).memento.id


def _framework_only(app: Any) -> Any:
    """The same app with every fast path bypassed, so FastAPI's own routes answer."""
    from fastapi import FastAPI

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        await FastAPI.__call__(app, scope, receive, send)

    return asgi


# -- the choice: a timeline in memory agrees with the index's look-ups ---------------------


def test_a_timeline_chooses_exactly_as_the_index_look_ups(archive: Archive) -> None:
    rng = random.Random(7089)
    # Ties on purpose: several mementos per datetime, documents and passages among them.
    for _ in range(40):
        scope = rng.choice([Scope.DOCUMENT, Scope.PASSAGE])
        _write(archive, rng.choice([0, 1, 1, 2, 5, 5, 5, 9, 13.5, 20]), scope=scope)
    key = archive.original(URI_R).key
    timeline = archive.index.timeline("default", key)
    assert timeline is not None and len(timeline.entries) == 40
    targets: list[datetime | None] = [None]
    targets += [EPOCH + timedelta(minutes=m) for m in range(-90, 22 * 60, 15)]
    for target in targets:
        expected = archive.index.neighbours("default", key, target)
        got = timeline.neighbours(target)
        assert expected is not None
        for name in ("chosen", "first", "last", "prev", "next"):
            want, have = getattr(expected, name), getattr(got, name)
            assert (want and want.id) == (have and have.id), (name, target)
    listed = archive.index.list_mementos("default", key, offset=0, limit=100)
    assert [e.id for e in timeline.entries] == [m.id for m in listed]


def test_a_long_timeline_is_answered_by_the_look_ups(archive: Archive, monkeypatch: Any) -> None:
    monkeypatch.setattr(
        archive.index, "timelines", TimelineReader(archive.index.lookups, max_entries=3)
    )
    ids = [_write(archive, h) for h in range(5)]
    assert archive.index.timeline("default", archive.original(URI_R).key) is None
    assert archive.navigate("default", URI_R, None).chosen.id == ids[-1]
    view = archive.timemap_view("default", URI_R)
    assert [m.id for m in view.entries] == ids
    assert (view.first.id, view.last.id, view.total) == (ids[0], ids[-1], 5)


# -- the protocol: the fast path answers byte for byte as the documented routes -------------


@pytest.fixture()
def paged(settings: Settings) -> Iterator[Archive]:
    """An archive with TimeMap pages of 2 mementos."""
    opened = Archive.open(settings.with_overrides(timemap_page_size=2))
    yield opened
    opened.close()


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize(
    "path,headers",
    [
        ("/timegate/" + URI_R, {}),
        ("/timegate/" + URI_R, {"Accept-Datetime": "Mon, 01 Jan 2024 05:10:00 GMT"}),
        ("/timegate/" + URI_R, {"Accept-Datetime": "Sun, 31 Dec 2023 00:00:00 GMT"}),
        ("/timegate/" + URI_R, {"Accept-Datetime": "2024-01-01T00:00:00Z"}),
        ("/timegate/https://ex.org/never", {}),
        ("/timegate/", {}),
        ("/timegate/not a uri", {}),
        ("/timemap/link/" + URI_R, {}),
        ("/timemap/link/page/2/" + URI_R, {}),
        ("/timemap/link/page/3/" + URI_R, {}),
        ("/timemap/link/page/9/" + URI_R, {}),
        ("/timemap/json/" + URI_R, {}),
        ("/timemap/json/page/2/" + URI_R, {}),
        ("/timemap/json/page/0/" + URI_R, {}),
        ("/timemap/json/https://ex.org/never", {}),
        ("/timemap/json/https%3A%2F%2Fex.org%2Fnav%3Fx%3D1", {}),
    ],
)
def test_the_fast_path_answers_exactly_as_the_documented_routes(
    paged: Archive, settings: Settings, method: str, path: str, headers: dict[str, str]
) -> None:
    for hours, scope in (
        (0, Scope.PASSAGE),
        (3, Scope.DOCUMENT),
        (3, Scope.PASSAGE),
        (8, Scope.PASSAGE),
        (9, Scope.DOCUMENT),
    ):
        _write(paged, hours, scope=scope)
    app = create_app(paged.settings, archive=paged, auth=False)
    with TestClient(app) as fast, TestClient(_framework_only(app)) as documented:
        for _ in range(2):  # the second answer may come from memory
            quick = fast.request(method, path, headers=headers, follow_redirects=False)
            slow = documented.request(method, path, headers=headers, follow_redirects=False)
            assert quick.status_code == slow.status_code, quick.text
            assert quick.content == slow.content
            assert sorted(quick.headers.multi_items()) == sorted(slow.headers.multi_items())


def test_the_fast_path_refuses_and_audits_exactly_as_the_documented_routes(
    archive: Archive, settings: Settings
) -> None:
    _write(archive, 1)
    agent = archive.keys.create("default", Role.AGENT).key
    auditor = archive.keys.create("default", Role.AUDITOR).key
    other = archive.keys.create("elsewhere", Role.AUDITOR).key
    app = create_app(settings, archive=archive)
    paths = ["/timegate/" + URI_R, "/timemap/link/" + URI_R, "/timemap/json/" + URI_R]
    with TestClient(app) as fast, TestClient(_framework_only(app)) as documented:
        for path in paths:
            for headers in (
                {},
                {"Authorization": "Bearer nope"},
                {"Authorization": f"Bearer {other}"},
            ):
                quick = fast.get(path, headers=headers, follow_redirects=False)
                slow = documented.get(path, headers=headers, follow_redirects=False)
                assert quick.status_code in (401, 404)
                assert (quick.status_code, quick.content) == (slow.status_code, slow.content)
            for key in (agent, auditor, auditor):
                quick = fast.get(
                    path, headers={"Authorization": f"Bearer {key}"}, follow_redirects=False
                )
                assert quick.status_code in (200, 302)
    audited = [(r.action, r.target) for r in archive.read_audit.query("default", limit=1000)]
    for action in ("timegate.read", "timemap.link", "timemap.json"):
        # Auditors' reads only (agents' are not audited), each one, from memory or not.
        assert audited.count((action, URI_R)) == 2, audited


# -- what is remembered is forgotten when a URI-R's mementos change, in any process --------


@pytest.fixture()
def embedded(tmp_path: Path) -> Iterator[Archive]:
    archive = Archive.open(Settings(data_dir=tmp_path / "amber"))
    yield archive
    archive.close()


def _elsewhere(tmp_path: Path, action: Any) -> None:
    """``action`` on another Archive over the same data: its own signals, its own memory."""
    other = Archive.open(Settings(data_dir=tmp_path / "amber"))
    try:
        action(other)
    finally:
        other.close()


def _timeline_reads(archive: Archive, monkeypatch: Any) -> list[str]:
    reads: list[str] = []
    real = archive.index.timeline

    def counting(tenant: str, urir_key: str) -> Any:
        reads.append(urir_key)
        return real(tenant, urir_key)

    monkeypatch.setattr(archive.index, "timeline", counting)
    return reads


def _answers(client: TestClient) -> tuple[str, list[str], list[str]]:
    """(TimeGate's choice, TimeMap's link-format URI-Ms, JSON TimeMap's ids)."""
    gate = client.get("/timegate/" + URI_R, follow_redirects=False)
    assert gate.status_code == 302, gate.text
    link = client.get("/timemap/link/" + URI_R)
    assert link.status_code == 200
    listed = client.get("/timemap/json/" + URI_R).json()["mementos"]["list"]
    uris = [line.split(">")[0].lstrip("<") for line in link.text.splitlines() if "memento" in line]
    return gate.headers["location"].rsplit("/", 1)[1], uris, [m["id"] for m in listed]


@pytest.mark.parametrize("change", ["new memento", "erasure", "expiry sweep"])
def test_what_is_remembered_is_forgotten_at_a_change_in_another_archive(
    embedded: Archive, tmp_path: Path, monkeypatch: Any, change: str
) -> None:
    first, latest = _write(embedded, 1), _write(embedded, 2)
    reads = _timeline_reads(embedded, monkeypatch)
    with TestClient(create_app(embedded.settings, archive=embedded, auth=False)) as client:
        for _ in range(3):
            assert _answers(client) == (latest, [_uri_m(first), _uri_m(latest)], [first, latest])
        assert len(reads) == 1  # read once, then remembered

        def act(other: Archive) -> None:
            if change == "new memento":
                _write(other, 5, text="newer")
            elif change == "erasure":
                other.retention.erase("default", latest, "takedown", "admin")
            else:
                other.retention.sweep(now=utc_now() + timedelta(days=400))

        _elsewhere(tmp_path, act)
        if change == "new memento":
            newer = embedded.navigate("default", URI_R, None).chosen.id
            assert newer not in (first, latest)
            want = (newer, [_uri_m(m) for m in (first, latest, newer)], [first, latest, newer])
            assert _answers(client) == want
        elif change == "erasure":
            assert _answers(client) == (first, [_uri_m(first)], [first])
        else:
            assert client.get("/timegate/" + URI_R).status_code == 404
            assert client.get("/timemap/json/" + URI_R).status_code == 404
        assert len(reads) == 2  # read again once after the change, then remembered again


def _uri_m(memento_id: str) -> str:
    return f"http://127.0.0.1:8000/memento/{memento_id}"


def test_a_memento_written_by_another_process_shows_at_once(
    embedded: Archive, tmp_path: Path
) -> None:
    first = _write(embedded, 1)
    with TestClient(create_app(embedded.settings, archive=embedded, auth=False)) as client:
        for _ in range(2):
            assert _answers(client)[0] == first
        script = (
            "import sys; from datetime import datetime, UTC; from pathlib import Path;"
            "from archive.archive import Archive; from archive.config import Settings;"
            "from archive.writes import MementoRequest;"
            "a = Archive.open(Settings(data_dir=Path(sys.argv[1])));"
            "print(a.write_memento(MementoRequest(uri_r=sys.argv[2], content=b'later',"
            " content_type='text/plain', captured_at=datetime(2025, 1, 1, tzinfo=UTC))).memento.id);"
            "a.close()"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "amber"), URI_R],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        later = done.stdout.strip()
        assert _answers(client) == (later, [_uri_m(first), _uri_m(later)], [first, later])
        early = client.get(
            "/timegate/" + URI_R,
            headers={"Accept-Datetime": to_rfc1123(EPOCH)},
            follow_redirects=False,
        )
        assert early.headers["location"] == _uri_m(first)


def test_a_timeline_read_while_a_change_commits_is_not_remembered_after_it(
    embedded: Archive, tmp_path: Path, monkeypatch: Any
) -> None:
    first = _write(embedded, 1)
    real = embedded.index.timeline
    later: list[str] = []

    def read_then_change(tenant: str, urir_key: str) -> Any:
        timeline = real(tenant, urir_key)  # read before the other write commits
        if not later:
            _elsewhere(tmp_path, lambda other: later.append(_write(other, 7, text="raced")))
        return timeline

    monkeypatch.setattr(embedded.index, "timeline", read_then_change)
    assert embedded.navigate("default", URI_R, None).chosen.id == first  # the stale read
    assert embedded.navigate("default", URI_R, None).chosen.id == later[0]  # not remembered


def test_a_process_that_cannot_open_the_timemaps_signal_remembers_nothing_and_cannot_write(
    tmp_path: Path, monkeypatch: Any
) -> None:
    opened = Archive.open(Settings(data_dir=tmp_path / "amber"))
    _write(opened, 1)
    opened.close()
    real_open = signals.os.open

    def refusing(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".timemaps"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(signals.os, "open", refusing)
    blind = Archive.open(Settings(data_dir=tmp_path / "amber"))
    try:
        reads = _timeline_reads(blind, monkeypatch)
        for _ in range(3):
            blind.navigate("default", URI_R, None)
        assert len(reads) == 3
        with pytest.raises(ConfigurationError, match="timemaps"):
            _write(blind, 2)
        assert len(blind.timemap_view("default", URI_R).entries) == 1  # nothing half-written
    finally:
        blind.close()


def test_tenants_never_share_a_remembered_timemap(embedded: Archive) -> None:
    mine = _write(embedded, 1, tenant="alpha")
    theirs = _write(embedded, 1, text="theirs", tenant="beta")
    for _ in range(2):
        assert embedded.navigate("alpha", URI_R, None).chosen.id == mine
        assert embedded.navigate("beta", URI_R, None).chosen.id == theirs
        assert [m.id for m in embedded.timemap_view("alpha", URI_R).entries] == [mine]
