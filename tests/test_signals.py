"""Change signals: verified API keys are reused only while nothing was revoked since, live
mementos only while nothing was deleted since, in any process; a changer that dies, or a torn
read, only ever makes readers more careful."""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from live_server import amber_command, clean_environ

from archive.access.keys import Role
from archive.archive import Archive
from archive.config import Settings
from archive.dates import utc_now
from archive.exceptions import ConfigurationError, Unauthenticated
from archive.index import signals
from archive.index.signals import ChangeSignal, ReadCache
from archive.writes import MementoRequest


def _write_copies(path: Path, first: int, second: int) -> None:
    with open(path, "r+b") as handle:
        handle.write(struct.pack("=QQ", first, second))


def test_a_revocation_moves_the_generation_through_odd_to_the_next_even(tmp_path: Path) -> None:
    signal = ChangeSignal(str(tmp_path / "index.revocations"), like=str(tmp_path / "index"))
    assert signal.settled_generation() == 0
    with signal.changing():
        assert signal.settled_generation() is None  # keys are checked while it commits
    assert signal.settled_generation() == 2
    with pytest.raises(RuntimeError), signal.changing():
        raise RuntimeError("the commit failed")
    assert signal.settled_generation() == 4  # settled again: caches flushed for nothing
    signal.close()
    assert signal.settled_generation() is None  # closed: keys are checked, no crash


@pytest.mark.parametrize("copies", [(3, 3), (4, 2), (6, 5)], ids=["odd", "torn", "torn-odd"])
def test_an_unsettled_signal_is_never_trusted_and_settled_by_the_next_process(
    tmp_path: Path, copies: tuple[int, int]
) -> None:
    """What a revoker killed mid-way leaves: an odd generation, or copies that differ."""
    path = tmp_path / "index.revocations"
    running = ChangeSignal(str(path), like=str(tmp_path / "index"))
    _write_copies(path, *copies)
    assert running.settled_generation() is None  # seen at once through the shared mapping
    opened = ChangeSignal(str(path), like=str(tmp_path / "index"))  # another process
    settled = opened.settled_generation()
    assert settled is not None and settled > max(copies)
    assert running.settled_generation() == settled
    running.close()
    opened.close()


def test_a_revocation_in_progress_is_not_settled_by_a_process_opening_meanwhile(
    tmp_path: Path,
) -> None:
    path, like = str(tmp_path / "index.revocations"), str(tmp_path / "index")
    revoker = ChangeSignal(path, like=like)
    inside, release = threading.Event(), threading.Event()

    def revoke() -> None:
        with revoker.changing():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=revoke)
    thread.start()
    try:
        assert inside.wait(10)
        opened = ChangeSignal(path, like=like)
        assert opened.settled_generation() is None  # still committing: left alone
    finally:
        release.set()
        thread.join()
    assert opened.settled_generation() == 2
    opened.close()
    revoker.close()


def test_the_signal_file_takes_the_databases_mode(tmp_path: Path) -> None:
    """Like SQLite's -wal and -shm files: whoever opens the index first must not lock the
    server's user out of the signal."""
    database = tmp_path / "index.sqlite3"
    database.write_bytes(b"")
    database.chmod(0o660)
    signal = ChangeSignal(str(tmp_path / "index.sqlite3.revocations"), like=str(database))
    assert (tmp_path / "index.sqlite3.revocations").stat().st_mode & 0o777 == 0o660
    signal.close()


@pytest.fixture()
def umask_022() -> Iterator[None]:
    """The usual umask, under which files are created readable by every user."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_a_new_index_and_every_file_beside_it_are_private(tmp_path: Path, umask_022: None) -> None:
    """The index holds quotes, labels and key digests: a new one, its -wal and -shm files
    and its change signals are readable by their owner only, like the blobs."""
    settings = Settings(data_dir=tmp_path / "amber-data")
    archive = Archive.open(settings)
    try:
        archive.write_memento(
            MementoRequest(uri_r="https://ex.org/a", content=b"quote", content_type="text/plain")
        )
        archive.keys.revoke(archive.keys.create("default", Role.AGENT).info.key_id)
        files = {
            path.name: path.stat().st_mode & 0o777
            for path in settings.data_dir.iterdir()
            if path.name.startswith("amber.sqlite3")
        }
    finally:
        archive.close()
    assert files == dict.fromkeys(
        [
            "amber.sqlite3",
            "amber.sqlite3-wal",
            "amber.sqlite3-shm",
            "amber.sqlite3.deletions",
            "amber.sqlite3.erasures",
            "amber.sqlite3.revocations",
            "amber.sqlite3.timemaps",
        ],
        0o600,
    )


def test_an_existing_index_keeps_its_mode_and_a_world_readable_one_is_reported(
    tmp_path: Path, umask_022: None, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "amber-data"
    Archive.open(Settings(data_dir=data_dir)).close()
    database = data_dir / "amber.sqlite3"
    database.chmod(0o640)  # an operator's choice: a backup group may read it
    Archive.open(Settings(data_dir=data_dir)).close()
    assert database.stat().st_mode & 0o777 == 0o640
    assert "readable by every user" not in caplog.text
    database.chmod(0o644)  # as an older version created it
    Archive.open(Settings(data_dir=data_dir)).close()
    assert database.stat().st_mode & 0o777 == 0o644
    assert "readable by every user" in caplog.text and "chmod 600" in caplog.text


def test_a_process_that_cannot_open_the_signal_checks_every_key_and_cannot_revoke(
    tmp_path: Path, monkeypatch: Any
) -> None:
    archive = Archive.open(Settings(data_dir=tmp_path / "amber"))
    issued = archive.keys.create("default", Role.AGENT)
    archive.close()
    _refuse_to_open(monkeypatch, ".revocations")
    reader = Archive.open(Settings(data_dir=tmp_path / "amber"))
    try:
        lookups = _count_lookups(reader, monkeypatch)
        for _ in range(2):
            assert reader.keys.authenticate(issued.key).key_id == issued.info.key_id
        assert len(lookups) == 2  # nothing remembered without the signal
        with pytest.raises(ConfigurationError):
            reader.keys.revoke(issued.info.key_id)  # others would never hear of it
        assert reader.keys.authenticate(issued.key).key_id == issued.info.key_id  # not revoked
    finally:
        reader.close()


@pytest.fixture()
def embedded(tmp_path: Path) -> Iterator[Archive]:
    archive = Archive.open(Settings(data_dir=tmp_path / "amber"))
    yield archive
    archive.close()


def _count_lookups(
    archive: Archive, monkeypatch: Any, of: str = "key_id", meanwhile: Any = None
) -> list[str]:
    """The ``of`` values (key ids, memento ids) of the index look-ups from now on; after
    each, ``meanwhile()`` runs (a change committing between the read and what follows)."""
    calls: list[str] = []
    real = archive.index.lookups.first

    def counting(lookup: Any, **values: Any) -> Any:
        row = real(lookup, **values)
        if of in values:
            calls.append(values[of])
            if meanwhile is not None:
                meanwhile()
        return row

    monkeypatch.setattr(archive.index.lookups, "first", counting)
    return calls


def _in_another_process(tmp_path: Path, action: Any) -> None:
    elsewhere = Archive.open(Settings(data_dir=tmp_path / "amber"))
    try:
        action(elsewhere)
    finally:
        elsewhere.close()


def _refuse_to_open(monkeypatch: Any, suffix: str) -> None:
    """Opening the signal file ending in ``suffix`` fails, as for another user's 0600 file."""
    real_open = os.open

    def refusing(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(suffix):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(signals.os, "open", refusing)


def test_verified_keys_are_reused_until_any_revocation(
    embedded: Archive, tmp_path: Path, monkeypatch: Any
) -> None:
    kept = embedded.keys.create("default", Role.AGENT)
    other = embedded.keys.create("default", Role.AGENT)
    lookups = _count_lookups(embedded, monkeypatch)
    for _ in range(3):
        assert embedded.keys.authenticate(kept.key).key_id == kept.info.key_id
    assert lookups == [kept.info.key_id]  # checked once, then remembered
    _in_another_process(tmp_path, lambda elsewhere: elsewhere.keys.revoke(other.info.key_id))
    assert embedded.keys.authenticate(kept.key).key_id == kept.info.key_id
    assert lookups == [kept.info.key_id] * 2  # a revocation, of any key: checked again
    with pytest.raises(Unauthenticated):
        embedded.keys.authenticate(other.key)


def test_while_a_revocation_commits_every_request_checks_its_key(
    embedded: Archive, monkeypatch: Any
) -> None:
    issued = embedded.keys.create("default", Role.AGENT)
    embedded.keys.authenticate(issued.key)
    lookups = _count_lookups(embedded, monkeypatch)
    database = str(embedded.index.sqlite_path)
    signal = ChangeSignal(database + ".revocations", like=database)
    with signal.changing():
        for _ in range(3):
            embedded.keys.authenticate(issued.key)
    assert len(lookups) == 3
    signal.close()


def test_a_key_revoked_by_the_cli_in_another_process_stops_at_once(
    embedded: Archive, tmp_path: Path
) -> None:
    issued = embedded.keys.create("default", Role.AUDITOR)
    for _ in range(2):
        embedded.keys.authenticate(issued.key)  # verified and remembered
    done = subprocess.run(
        [*amber_command(), "keys", "revoke", issued.info.key_id],
        env=clean_environ({"AMBER_DATA_DIR": str(tmp_path / "amber")}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with pytest.raises(Unauthenticated):
        embedded.keys.authenticate(issued.key)
    assert os.path.exists(str(embedded.index.sqlite_path) + ".revocations")


def test_a_key_is_remembered_once_verified_and_until_the_next_revocation(
    embedded: Archive, tmp_path: Path
) -> None:
    issued = embedded.keys.create("default", Role.AGENT)
    other = embedded.keys.create("default", Role.AGENT)
    assert embedded.keys.remembered(issued.key) is None  # never verified here
    embedded.keys.verify(issued.key)
    remembered = embedded.keys.remembered(issued.key)
    assert remembered is not None and remembered.key_id == issued.info.key_id
    altered = issued.key[:-1] + ("A" if issued.key[-1] != "A" else "B")  # never the key itself
    assert embedded.keys.remembered(altered) is None
    assert embedded.keys.remembered("x" * 1000) is None
    _in_another_process(tmp_path, lambda elsewhere: elsewhere.keys.revoke(other.info.key_id))
    assert embedded.keys.remembered(issued.key) is None  # any revocation: verify again


def test_a_key_verified_while_a_revocation_commits_is_not_remembered_after_it(
    embedded: Archive, tmp_path: Path, monkeypatch: Any
) -> None:
    """The generation is read before the index: a check that raced a revocation cannot be
    remembered under the generation that revocation ended with."""
    issued = embedded.keys.create("default", Role.AGENT)
    other = embedded.keys.create("default", Role.AGENT)
    _count_lookups(
        embedded,
        monkeypatch,
        meanwhile=lambda: _in_another_process(
            tmp_path, lambda elsewhere: elsewhere.keys.revoke(other.info.key_id)
        ),
    )
    assert embedded.keys.verify(issued.key).key_id == issued.info.key_id
    assert embedded.keys.remembered(issued.key) is None


def _serving(archive: Archive) -> Any:
    """A test client of the app serving ``archive`` (authentication off)."""
    from fastapi.testclient import TestClient

    from api.app import create_app

    return TestClient(create_app(archive.settings, archive=archive, auth=False))


def _passage(archive: Archive, text: str = "kept for a while") -> Any:
    return archive.write_memento(
        MementoRequest(uri_r="https://ex.org/p", content=text.encode(), content_type="text/plain")
    ).memento


@pytest.mark.parametrize("deletion", ["erasure", "expiry sweep"])
def test_a_served_memento_deleted_in_another_process_is_gone_at_once(
    embedded: Archive, tmp_path: Path, monkeypatch: Any, deletion: str
) -> None:
    kept, doomed = _passage(embedded, "kept"), _passage(embedded, "doomed")
    lookups = _count_lookups(embedded, monkeypatch, of="id")
    with _serving(embedded) as client:
        for _ in range(3):
            for memento in (kept, doomed):
                assert client.get(f"/memento/{memento.id}").status_code == 200
        assert sorted(lookups) == sorted([kept.id, doomed.id])  # read once, then remembered

        def delete(archive: Archive) -> None:
            if deletion == "erasure":
                archive.retention.erase("default", doomed.id, "takedown", "admin")
            else:
                archive.retention.sweep(now=utc_now() + timedelta(days=400))

        _in_another_process(tmp_path, delete)
        gone = client.get(f"/memento/{doomed.id}")
        assert gone.status_code == 410, gone.text
        if deletion == "erasure":
            assert client.get(f"/memento/{kept.id}").status_code == 200  # read again, still live


@pytest.mark.parametrize("megabytes,reads", [(0, 3), (1, 1)])
def test_the_uri_m_cache_remembers_answers_within_its_configured_memory(
    tmp_path: Path, monkeypatch: Any, megabytes: int, reads: int
) -> None:
    settings = Settings(data_dir=tmp_path / "amber", uri_m_cache_mb=megabytes)
    archive = Archive.open(settings)
    try:
        memento = _passage(archive)
        lookups = _count_lookups(archive, monkeypatch, of="id")
        with _serving(archive) as client:
            answers = [client.get(f"/memento/{memento.id}") for _ in range(3)]
        assert [answer.status_code for answer in answers] == [200, 200, 200]
        assert len({answer.headers["link"] for answer in answers}) == 1
        assert lookups == [memento.id] * reads
    finally:
        archive.close()


def test_a_memento_read_while_a_deletion_commits_is_not_remembered_after_it(
    embedded: Archive, tmp_path: Path, monkeypatch: Any
) -> None:
    memento = _passage(embedded)
    erase = lambda: _in_another_process(  # noqa: E731
        tmp_path, lambda other: other.retention.erase("default", memento.id, "takedown", "admin")
    )
    lookups = _count_lookups(embedded, monkeypatch, of="id", meanwhile=erase)
    with _serving(embedded) as client:
        # Its row was read just before the erasure committed; its bytes went with it.
        assert client.get(f"/memento/{memento.id}").status_code == 404
        monkeypatch.undo()
        assert client.get(f"/memento/{memento.id}").status_code == 410
    assert lookups == [memento.id]


def test_a_process_that_cannot_open_the_deletion_signal_reads_every_memento_and_cannot_delete(
    tmp_path: Path, monkeypatch: Any
) -> None:
    archive = Archive.open(Settings(data_dir=tmp_path / "amber"))
    memento = _passage(archive)
    archive.close()
    _refuse_to_open(monkeypatch, ".deletions")
    reader = Archive.open(Settings(data_dir=tmp_path / "amber"))
    try:
        lookups = _count_lookups(reader, monkeypatch, of="id")
        with _serving(reader) as client:
            for _ in range(2):
                assert client.get(f"/memento/{memento.id}").status_code == 200
        assert len(lookups) == 2  # nothing remembered without the signal
        with pytest.raises(ConfigurationError):
            reader.retention.erase("default", memento.id, "takedown", "admin")
        with pytest.raises(ConfigurationError):
            reader.retention.sweep(now=utc_now() + timedelta(days=400))
        assert reader.get_memento("default", memento.id).deleted_at is None
    finally:
        reader.close()


def test_a_read_cache_past_its_budget_forgets_its_oldest_values_and_never_holds_an_outsize_one(
    tmp_path: Path,
) -> None:
    cache: ReadCache[str, str] = ReadCache(
        str(tmp_path / "index"), "deletions", budget=10, weigh=len
    )
    generation = cache.generation()
    cache.put(generation, "a", "xxxx")
    cache.put(generation, "b", "yyyy")
    cache.put(generation, "b", "yyyy")  # remembered once, weighed once
    assert (cache.get("a"), cache.get("b")) == ("xxxx", "yyyy")
    cache.put(generation, "c", "zzzz")  # 12 > 10: the oldest goes, the rest stays
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, "yyyy", "zzzz")
    cache.put(generation, "d", "ww")  # 10: fits beside both
    assert (cache.get("b"), cache.get("c"), cache.get("d")) == ("yyyy", "zzzz", "ww")
    cache.put(generation, "e", "vvvvvvv")  # 17 > 10: b and c go, d stays
    assert (cache.get("b"), cache.get("c"), cache.get("d"), cache.get("e")) == (
        None,
        None,
        "ww",
        "vvvvvvv",
    )
    cache.put(generation, "f", "u" * 11)
    assert cache.get("f") is None and cache.get("e") == "vvvvvvv"
    cache.close()


def test_processes_reaching_one_database_through_a_link_share_its_signal(tmp_path: Path) -> None:
    real = tmp_path / "data" / "index.sqlite3"
    real.parent.mkdir()
    real.write_bytes(b"")
    linked = tmp_path / "elsewhere.sqlite3"
    linked.symlink_to(real)
    server: ReadCache[str, str] = ReadCache(str(real), "deletions", budget=10)
    cron: ReadCache[str, str] = ReadCache(str(linked), "deletions", budget=10)
    server.put(server.generation(), "memento", "live")
    with cron.changing():
        pass
    assert server.get("memento") is None
    assert sorted(p.name for p in real.parent.iterdir()) == [
        "index.sqlite3",
        "index.sqlite3.deletions",
    ]
    server.close()
    cron.close()


def test_a_served_memento_swept_by_the_cli_in_another_process_is_gone_at_once(
    tmp_path: Path,
) -> None:
    config = tmp_path / "amber.toml"
    config.write_text("[citations]\nretention_days = 0\n")
    environ = {"AMBER_DATA_DIR": str(tmp_path / "amber"), "AMBER_CONFIG": str(config)}
    settings = Settings.from_env(environ)
    served = Archive.open(settings)
    try:
        memento = _passage(served)  # uncited, no grace: expired as soon as it is written
        with _serving(served) as client:
            for _ in range(2):
                assert client.get(f"/memento/{memento.id}").status_code == 200
            done = subprocess.run(
                [*amber_command(), "retention", "sweep", "--json"],
                env=clean_environ(environ),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert '"mementos_deleted": 1' in done.stdout
            assert client.get(f"/memento/{memento.id}").status_code == 410
    finally:
        served.close()


# -- ReadCache.get_or_load: the read-then-remember protocol, run by the cache itself ------


@pytest.fixture()
def read_cache(tmp_path: Path) -> Iterator[ReadCache[str, str]]:
    cache: ReadCache[str, str] = ReadCache(str(tmp_path / "index"), "deletions", budget=10)
    yield cache
    cache.close()


def _changer(tmp_path: Path) -> ChangeSignal:
    """The same signal as another process maps it."""
    database = str(tmp_path / "index")
    return ChangeSignal(database + ".deletions", like=database)


def test_get_or_load_remembers_a_settled_read_and_loads_it_once(
    read_cache: ReadCache[str, str],
) -> None:
    loads: list[str] = []
    load = lambda: (loads.append("read"), "live")[1]  # noqa: E731
    assert read_cache.get_or_load("memento", load) == "live"
    assert read_cache.get_or_load("memento", load) == "live"
    assert loads == ["read"]
    assert read_cache.get("memento") == "live"


def test_get_or_load_does_not_remember_a_value_read_while_a_change_was_committing(
    read_cache: ReadCache[str, str], tmp_path: Path
) -> None:
    changer = _changer(tmp_path)

    def read_as_a_change_commits() -> str:
        with changer.changing():
            pass  # committed in another process between the read and what follows
        return "read before the change"

    assert read_cache.get_or_load("memento", read_as_a_change_commits) == "read before the change"
    assert read_cache.get("memento") is None
    assert read_cache.get_or_load("memento", lambda: "read after it") == "read after it"
    assert read_cache.get("memento") == "read after it"  # settled since: remembered
    changer.close()


def test_get_or_load_remembers_nothing_read_while_a_change_is_committing(
    read_cache: ReadCache[str, str], tmp_path: Path
) -> None:
    changer = _changer(tmp_path)
    with changer.changing():
        assert read_cache.get_or_load("memento", lambda: "mid-change") == "mid-change"
        assert read_cache.get("memento") is None
    assert read_cache.get("memento") is None
    changer.close()


def test_get_or_load_async_follows_the_same_protocol_with_an_awaited_loader(
    read_cache: ReadCache[str, str], tmp_path: Path
) -> None:
    changer = _changer(tmp_path)
    loads: list[str] = []

    async def settled() -> str:
        loads.append("settled")
        return "live"

    async def racing() -> str:
        with changer.changing():
            pass
        return "stale"

    async def scenario() -> None:
        assert await read_cache.get_or_load_async("raced", racing) == "stale"
        assert read_cache.get("raced") is None
        assert await read_cache.get_or_load_async("kept", settled) == "live"
        assert await read_cache.get_or_load_async("kept", settled) == "live"

    asyncio.run(scenario())
    assert loads == ["settled"]
    assert read_cache.get("kept") == "live"
    changer.close()


def test_refresh_reads_even_a_remembered_value_and_remembers_a_settled_read(
    read_cache: ReadCache[str, str], tmp_path: Path
) -> None:
    assert read_cache.refresh("key", lambda: "first") == "first"
    assert read_cache.get("key") == "first"
    loads: list[str] = []
    assert read_cache.refresh("key", lambda: (loads.append("read"), "first")[1]) == "first"
    assert loads == ["read"]  # read again: refresh never answers from memory
    changer = _changer(tmp_path)

    def racing() -> str:
        with changer.changing():
            pass
        return "stale"

    assert read_cache.refresh("other", racing) == "stale"
    assert read_cache.get("other") is None and read_cache.get("key") is None  # all forgotten
    changer.close()


def test_a_read_cache_without_a_signal_loads_every_time_and_remembers_nothing() -> None:
    cache: ReadCache[str, str] = ReadCache(None, "deletions", budget=10)  # PostgreSQL
    loads: list[str] = []
    for _ in range(2):
        assert cache.get_or_load("key", lambda: (loads.append("read"), "value")[1]) == "value"
    assert loads == ["read", "read"]
    cache.close()
