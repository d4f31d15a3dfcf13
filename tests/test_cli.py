"""The ``amber`` console script, run as a real subprocess with its data in ``tmp_path``.

The origin the CLI captures is a threading ``http.server`` on 127.0.0.1, which the fetch
guard refuses unless ``AMBER_FETCH_ALLOW`` opens it. ``--help`` checks use click's
``CliRunner`` (no process needed).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner
from live_server import (
    amber_command,
    clean_environ,
    create_key,
    free_port,
    origin_server,
    start_server,
)

from api.cli import main
from archive.archive import Archive
from archive.config import Settings
from archive.dates import utc_now
from archive.hashing import content_address

PUBLIC_BASE = "http://amber.test"
# Bytes that a text round trip would damage: CRLF, NUL, non-ASCII, no final newline.
BODY = b"<html><body>caf\xc3\xa9 \xe2\x9c\x93\r\nline two\x00\tend</body></html>"
CONTENT_TYPE = "text/html; charset=utf-8"


class _Origin(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("Set-Cookie", "session=secret")
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture()
def origin() -> Iterator[str]:
    with origin_server(_Origin) as url:
        yield url


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "amber-data"


def amber(
    *args: str, data_dir: Path, allow: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    extra = {"AMBER_DATA_DIR": str(data_dir), "AMBER_PUBLIC_BASE_URL": PUBLIC_BASE}
    if allow is not None:
        extra["AMBER_FETCH_ALLOW"] = allow
    return subprocess.run(
        [*amber_command(), *args],
        env=clean_environ(extra),
        cwd=cwd or data_dir.parent,
        capture_output=True,
        timeout=60,
        check=False,
    )


def text(completed: subprocess.CompletedProcess[bytes]) -> str:
    return completed.stdout.decode() + completed.stderr.decode()


def capture(url: str, data_dir: Path) -> str:
    """``amber capture`` with the origin allowed; returns the memento id."""
    done = amber("capture", url, data_dir=data_dir, allow="127.0.0.1:*")
    assert done.returncode == 0, text(done)
    lines = done.stdout.decode().strip().splitlines()
    assert len(lines) == 1, text(done)
    uri_m = lines[0]
    assert uri_m.startswith(f"{PUBLIC_BASE}/memento/"), uri_m
    return uri_m.rsplit("/", 1)[1]


def blob_path(data_dir: Path, address: str) -> Path:
    digest = address.split(":", 1)[1]
    return data_dir / "blobs" / digest[:2] / digest


# -- capture, show, timemap ----------------------------------------------------------------


def test_capture_prints_a_uri_m_and_show_reports_it(origin: str, data_dir: Path) -> None:
    url = f"{origin}/doc?x=1&y=2"
    memento_id = capture(url, data_dir)

    shown = amber("show", memento_id, data_dir=data_dir)
    assert shown.returncode == 0, text(shown)
    meta = json.loads(shown.stdout)
    assert meta["id"] == memento_id
    assert meta["uri_r"] == url
    assert meta["uri_m"] == f"{PUBLIC_BASE}/memento/{memento_id}"
    assert meta["content_hash"] == content_address(BODY)
    assert meta["size"] == len(BODY)
    assert meta["content_type"] == CONTENT_TYPE
    assert meta["http_status"] == 200
    assert meta["tool"] == "amber.capture"
    assert meta["scope"] == "document"

    content = amber("show", memento_id, "--content", data_dir=data_dir)
    assert content.returncode == 0, text(content)
    assert content.stdout == BODY

    listed = amber("timemap", url, data_dir=data_dir)
    assert listed.returncode == 0, text(listed)
    entries = [json.loads(line) for line in listed.stdout.decode().splitlines()]
    assert [e["id"] for e in entries] == [memento_id]
    assert entries[0]["content_hash"] == content_address(BODY)
    # The TimeMap matches equivalent spellings of the URI-R (query order, host case).
    reordered = amber("timemap", url.replace("x=1&y=2", "y=2&x=1"), data_dir=data_dir)
    assert reordered.returncode == 0, text(reordered)
    assert [json.loads(line)["id"] for line in reordered.stdout.decode().splitlines()] == [
        memento_id
    ]


def test_capture_json_flag_prints_the_memento(origin: str, data_dir: Path) -> None:
    done = amber("capture", "--json", f"{origin}/doc", data_dir=data_dir, allow="127.0.0.1/8:*")
    assert done.returncode == 0, text(done)
    meta = json.loads(done.stdout)
    assert meta["content_hash"] == content_address(BODY)
    assert meta["uri_m"] == f"{PUBLIC_BASE}/memento/{meta['id']}"


def test_capture_of_loopback_is_refused_without_allow(origin: str, data_dir: Path) -> None:
    url = f"{origin}/doc"
    done = amber("capture", url, data_dir=data_dir)
    assert done.returncode != 0
    assert "refused" in done.stderr.decode().lower(), text(done)
    assert "AMBER_FETCH_ALLOW" in done.stderr.decode(), text(done)
    assert "Traceback" not in text(done)
    assert done.stdout == b""
    # Nothing was stored.
    listed = amber("timemap", url, data_dir=data_dir)
    assert listed.returncode != 0
    assert listed.stdout == b""


def test_show_unknown_id_fails_cleanly(data_dir: Path) -> None:
    done = amber("show", "0" * 32, data_dir=data_dir)
    assert done.returncode != 0
    assert "Traceback" not in text(done)
    assert "no memento" in done.stderr.decode().lower(), text(done)


# -- verify -----------------------------------------------------------------------------------


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1])


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        (_flip_a_byte, "integrity_error"),
        (_truncate, "integrity_error"),
        (Path.unlink, "blob_not_found"),
    ],
    ids=["flipped-byte", "truncated", "deleted"],
)
def test_verify_passes_then_fails_on_a_damaged_blob(
    origin: str, data_dir: Path, damage: object, code: str
) -> None:
    memento_id = capture(f"{origin}/doc", data_dir)
    ok = amber("verify", data_dir=data_dir)
    assert ok.returncode == 0, text(ok)
    assert "1 mementos checked, 0 failed" in ok.stdout.decode()

    path = blob_path(data_dir, content_address(BODY))
    assert path.read_bytes() == BODY
    damage(path)  # type: ignore[operator]

    bad = amber("verify", data_dir=data_dir)
    assert bad.returncode == 1, text(bad)
    assert "1 mementos checked, 1 failed" in bad.stdout.decode()
    assert memento_id in bad.stderr.decode() and code in bad.stderr.decode(), text(bad)
    # Damaged bytes are never served as evidence (invariant 1).
    shown = amber("show", memento_id, "--content", data_dir=data_dir)
    assert shown.returncode != 0
    assert shown.stdout == b""
    assert "Traceback" not in text(shown)


def test_verify_on_an_empty_archive_passes(data_dir: Path) -> None:
    done = amber("verify", data_dir=data_dir)
    assert done.returncode == 0, text(done)
    assert "0 mementos checked, 0 failed" in done.stdout.decode()


def test_verify_skips_mementos_deleted_on_purpose(origin: str, data_dir: Path) -> None:
    """An expired memento's bytes are gone because retention deleted them: that is the
    promise kept, so ``verify`` must not report it as damage (it used to exit 1 after any
    sweep). A live memento captured afterwards is still checked."""
    expired_id = capture(f"{origin}/old", data_dir)
    archive = Archive.open(Settings(data_dir=data_dir))
    try:
        expired = archive.get_memento("default", expired_id)
        report = archive.retention.sweep(now=expired.archived_at + timedelta(days=365))
        assert report.mementos_deleted == 1 and report.blobs_deleted == 1
    finally:
        archive.close()
    assert not blob_path(data_dir, content_address(BODY)).exists()

    live_id = capture(f"{origin}/new", data_dir)
    done = amber("verify", data_dir=data_dir)
    assert done.returncode == 0, text(done)
    assert "1 mementos checked, 0 failed" in done.stdout.decode()

    blob_path(data_dir, content_address(BODY)).unlink()
    damaged = amber("verify", data_dir=data_dir)
    assert damaged.returncode == 1, text(damaged)
    assert live_id in damaged.stderr.decode()
    assert expired_id not in damaged.stderr.decode()


# -- erase ----------------------------------------------------------------------------------


def test_erase_needs_a_reason_and_refuses_under_a_hold(origin: str, data_dir: Path) -> None:
    memento_id = capture(f"{origin}/takedown", data_dir)
    no_reason = amber("erase", memento_id, data_dir=data_dir)
    assert no_reason.returncode == 2 and "--reason" in text(no_reason), text(no_reason)

    archive = Archive.open(Settings(data_dir=data_dir))
    try:
        archive.retention.set_memento_hold("default", memento_id, True, "litigation", "admin")
    finally:
        archive.close()
    held = amber("erase", memento_id, "--reason", "court order 114", data_dir=data_dir)
    assert held.returncode == 1, text(held)
    assert "not erased: the memento is under legal hold" in held.stderr.decode(), text(held)
    assert "Traceback" not in text(held)
    assert amber("show", memento_id, "--content", data_dir=data_dir).stdout == BODY

    archive = Archive.open(Settings(data_dir=data_dir))
    try:
        archive.retention.set_memento_hold("default", memento_id, False, "settled", "admin")
    finally:
        archive.close()
    done = amber("erase", memento_id, "--reason", "court order 114", "--json", data_dir=data_dir)
    assert done.returncode == 0, text(done)
    erased = json.loads(done.stdout)
    assert erased["erased_ids"] == [memento_id] and erased["blobs_deleted"] == 1
    assert not blob_path(data_dir, content_address(BODY)).exists()
    gone = amber("show", memento_id, data_dir=data_dir)
    assert gone.returncode == 1 and gone.stdout == b"", text(gone)

    archive = Archive.open(Settings(data_dir=data_dir))
    try:
        [entry] = [e for e in archive.retention.admin_log("default") if e["action"] == "erasure"]
    finally:
        archive.close()
    assert entry["reason"] == "court order 114" and entry["target_id"] == memento_id
    assert str(entry["key_id"]).startswith("cli")
    again = amber("erase", memento_id, "--reason", "twice", data_dir=data_dir)
    assert again.returncode == 1 and "Traceback" not in text(again), text(again)


# -- help -------------------------------------------------------------------------------------


def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += _leaf_commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


@pytest.mark.parametrize("path", _leaf_commands(main), ids=" ".join)
def test_every_command_help_has_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"], env={"AMBER_DATA_DIR": "/nonexistent"})
    assert result.exit_code == 0, result.output
    assert "Example" in result.output, result.output


def test_console_script_help_runs() -> None:
    done = subprocess.run(
        [*amber_command(), "--help"],
        env=clean_environ(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, text(done)
    assert "serve" in done.stdout.decode() and "capture" in done.stdout.decode()


def test_config_shows_effective_settings_with_secrets_masked(tmp_path: Path) -> None:
    env = {
        "AMBER_DATA_DIR": str(tmp_path / "d"),
        "AMBER_DATABASE_URL": "postgresql://amber:s3cret-pw@db.internal:5432/amber",
        "AMBER_FETCH_ALLOW": "127.0.0.1, 10.0.0.0/8",
    }
    result = CliRunner().invoke(main, ["config"], env=env)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert "s3cret-pw" not in result.output
    assert shown["database_url"] == "postgresql://amber:***@db.internal:5432/amber"
    assert shown["blob_store"] == (tmp_path / "d" / "blobs").resolve().as_uri()
    assert "10.0.0.0/8" in shown["fetch_allow"]


def test_invalid_configuration_is_a_clean_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [*amber_command(), "verify"],
        env=clean_environ({"AMBER_DATA_DIR": str(tmp_path), "AMBER_FETCH_ALLOW": "10.0.0.0/99"}),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "AMBER_FETCH_ALLOW" in done.stderr.decode(), text(done)
    assert "Traceback" not in text(done)


# -- serve from nothing -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("configured", [True, False], ids=["empty-AMBER_DATA_DIR", "no-config"])
def test_serve_starts_from_nothing(tmp_path: Path, configured: bool) -> None:
    """`amber serve` with an empty (not even existing) data dir, or no configuration at all
    in an empty working directory, answers /healthz, writes and serves a memento, and hands
    out URI-Ms under the address it listens on."""
    workdir = tmp_path / "empty"
    workdir.mkdir()
    data_dir = tmp_path / "fresh" / "amber-data" if configured else workdir / "amber-data"
    env = {"AMBER_DATA_DIR": str(data_dir)} if configured else {}
    port = free_port()
    server = start_server(env, port, cwd=workdir, agent_key=False)
    with server:
        health = httpx.get(f"{server.base_url}/healthz", timeout=10, trust_env=False)
        assert health.json()["status"] == "ok"
        # First start of the embedded default: one admin key, printed once.
        admin_keys = re.findall(
            r"^amber_[0-9a-f]{12}_\S{43}$", server.log_tail(20_000), re.MULTILINE
        )
        assert len(admin_keys) == 1, server.log_tail()
        listed = httpx.get(
            f"{server.base_url}/api/v1/keys",
            timeout=10,
            trust_env=False,
            headers={"Authorization": f"Bearer {admin_keys[0]}"},
        )
        assert listed.status_code == 200 and listed.json()[0]["role"] == "admin"
        unauthenticated = httpx.post(
            f"{server.base_url}/api/v1/mementos", json={}, timeout=10, trust_env=False
        )
        assert unauthenticated.status_code == 401
        agent = create_key(env, "agent", cwd=workdir)
        written = httpx.post(
            f"{server.base_url}/api/v1/mementos",
            json={
                "uri_r": "https://example.org/",
                "content": "hello",
                "content_type": "text/plain",
                "captured_at": "2024-05-01T12:00:00Z",
            },
            timeout=10,
            trust_env=False,
            headers={"Authorization": f"Bearer {agent}"},
        )
        assert written.status_code == 201, written.text
        uri_m = written.json()["uri_m"]
        assert uri_m.startswith(f"http://127.0.0.1:{port}/memento/")
        served = httpx.get(
            uri_m, timeout=10, trust_env=False, headers={"Authorization": f"Bearer {agent}"}
        )
        assert served.status_code == 200 and served.content == b"hello"
        server.stop()
        # Graceful: SIGTERM runs the shutdown (uvicorn then re-raises the signal it caught).
        assert server.process.returncode in (0, -signal.SIGTERM), server.log_tail()
        assert "Application shutdown complete" in server.log_tail(), server.log_tail()
    assert (data_dir / "amber.sqlite3").is_file()
    assert blob_path(data_dir, content_address(b"hello")).read_bytes() == b"hello"


@pytest.mark.slow
def test_second_start_prints_no_new_key_and_no_auth_is_loopback_only(tmp_path: Path) -> None:
    env = {"AMBER_DATA_DIR": str(tmp_path / "amber-data")}
    for expected_keys in (1, 0):
        server = start_server(env, free_port(), agent_key=False)
        with server:
            found = re.findall(
                r"^amber_[0-9a-f]{12}_\S{43}$", server.log_tail(20_000), re.MULTILINE
            )
            assert len(found) == expected_keys
    refused = subprocess.run(
        [
            *amber_command(),
            "serve",
            "--insecure-no-auth",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        env=clean_environ(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "loopback" in refused.stderr


def test_gc_collects_leftover_temp_files_and_says_so(tmp_path: Path) -> None:
    from archive.archive import Archive
    from archive.config import Settings

    archive = Archive.open(Settings(data_dir=tmp_path / "d"))
    try:
        staged = archive.blobs.stage(b"staged by a process that then died").pending.temp_name
    finally:
        archive.close()
    # Named as a dead process's temp file (the pid of a child that has exited), 3 hours old.
    child = subprocess.Popen(["true"])
    child.wait()
    directory, name = os.path.split(staged)
    _, digest, _, number = name.split(".")
    leftover = os.path.join(directory, f".{digest}.{child.pid}.{number}")
    os.rename(staged, leftover)
    old = time.time() - 3 * 3600
    os.utime(leftover, (old, old))
    env = {"AMBER_DATA_DIR": str(tmp_path / "d")}
    dry = CliRunner().invoke(main, ["gc", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert "1 leftover temp file(s) would be deleted" in dry.output and os.path.exists(leftover)
    done = CliRunner().invoke(main, ["gc"], env=env)
    assert done.exit_code == 0, done.output
    assert "1 leftover temp file(s) deleted" in done.output and not os.path.exists(leftover)


def test_gc_forgets_idempotency_answers_past_their_ttl(tmp_path: Path) -> None:
    from sqlalchemy import select, update

    from archive.index.schema import idempotency_keys
    from archive.writes import MementoRequest

    settings = Settings(data_dir=tmp_path / "d")
    archive = Archive.open(settings)
    try:
        for key in ("old", "new"):
            archive.write_memento(
                MementoRequest(
                    uri_r=f"https://ex.org/{key}", content=key.encode(), content_type="text/plain"
                ),
                idempotency_key=key,
                request_hash=key,
            )
        with archive.index.write() as connection:
            connection.execute(
                update(idempotency_keys)
                .where(idempotency_keys.c.key == "old")
                .values(created_at=utc_now() - timedelta(hours=25))
            )
    finally:
        archive.close()
    env = {"AMBER_DATA_DIR": str(tmp_path / "d")}
    dry = CliRunner().invoke(main, ["gc", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert "1 expired idempotency answer(s) would be deleted" in dry.output
    done = CliRunner().invoke(main, ["gc"], env=env)
    assert done.exit_code == 0, done.output
    assert "1 expired idempotency answer(s) deleted" in done.output
    archive = Archive.open(settings)
    try:
        with archive.index.read() as connection:
            left = connection.execute(select(idempotency_keys.c.key)).scalars().all()
    finally:
        archive.close()
    assert left == ["new"]
