"""The public base URL is recorded in the index the first time it is needed, and every
process sharing the index mints URI-Ms under the recorded one (archive/base_url.py)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from live_server import amber_command, clean_environ, env_for, free_port, start_server

from archive.base_url import move_base_url, settle_base_url
from archive.config import Settings, normalise_base_url
from archive.exceptions import BaseUrlMismatch, ConfigurationError
from archive.index import Index

URI_R = "https://example.org/a?b=1"


def test_the_first_base_is_recorded_and_every_later_process_uses_it(database_url: str) -> None:
    first, second = Index(database_url), Index(database_url)
    try:
        settled = settle_base_url(first.recorded, None, "http://127.0.0.1:8765")
        assert (settled.url, settled.recorded_now) == ("http://127.0.0.1:8765", True)
        # Another process, listening elsewhere, with AMBER_PUBLIC_BASE_URL unset.
        later = settle_base_url(second.recorded, None, "http://127.0.0.1:8000")
        assert later.url == "http://127.0.0.1:8765"
        assert not later.recorded_now
        assert later.ignored_fallback == "http://127.0.0.1:8000"
        # The same base configured explicitly (trailing slash and all) is accepted.
        same = settle_base_url(second.recorded, "http://127.0.0.1:8765/", None)
        assert (same.url, same.ignored_fallback) == ("http://127.0.0.1:8765", None)
    finally:
        first.close()
        second.close()


def test_a_configured_base_that_differs_from_the_recorded_one_is_refused(
    database_url: str,
) -> None:
    index = Index(database_url)
    try:
        settle_base_url(index.recorded, "https://amber.example.org", None)
        with pytest.raises(BaseUrlMismatch) as refused:
            settle_base_url(index.recorded, "https://other.example.org", "http://127.0.0.1:1")
        assert "amber config set-base-url https://other.example.org" in refused.value.message
        assert settle_base_url(index.recorded, None, None).url == "https://amber.example.org"
        # Told to move: every process then mints under the new base.
        assert move_base_url(index.recorded, "https://other.example.org/") == (
            "https://amber.example.org",
            "https://other.example.org",
        )
        assert settle_base_url(index.recorded, "https://other.example.org", None).url == (
            "https://other.example.org"
        )
    finally:
        index.close()


def test_nothing_recorded_and_nothing_to_record_is_a_clear_error(database_url: str) -> None:
    index = Index(database_url)
    try:
        with pytest.raises(ConfigurationError, match="AMBER_PUBLIC_BASE_URL"):
            settle_base_url(index.recorded, None, None)
        assert index.recorded.get("public_base_url") is None
    finally:
        index.close()


def test_processes_recording_at_the_same_moment_agree(database_url: str) -> None:
    indexes = [Index(database_url) for _ in range(6)]
    try:
        with ThreadPoolExecutor(len(indexes)) as pool:
            bases = list(
                pool.map(
                    lambda n: settle_base_url(
                        indexes[n].recorded, None, f"http://127.0.0.1:{9000 + n}"
                    ),
                    range(len(indexes)),
                )
            )
        assert len({b.url for b in bases}) == 1
        assert sum(b.recorded_now for b in bases) == 1
    finally:
        for index in indexes:
            index.close()


@pytest.mark.parametrize(
    "bad",
    [
        "127.0.0.1:8000",
        "ftp://a.example",
        "https://u:p@a.example",
        "https://a.example/?q=1",
        "https://a.example/#f",
        "https://a .example",
        "https://",
    ],
)
def test_a_base_url_that_cannot_prefix_uri_ms_is_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="AMBER_PUBLIC_BASE_URL"):
        Settings(public_base_url=bad)


def test_a_base_url_is_normalised_once() -> None:
    assert normalise_base_url("HTTPS://Amber.Example.org/archive/") == (
        "https://amber.example.org/archive"
    )


# -- every process of one index prints the same URI-M, on both backends --------------------


def _amber(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*amber_command(), *args],
        env=clean_environ(env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _timemap_uri_ms(env: Mapping[str, str]) -> list[str]:
    done = _amber(env, "timemap", URI_R)
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["uri_m"] for line in done.stdout.splitlines()]


@pytest.mark.slow
def test_server_cli_and_restarts_mint_the_same_uri_m(settings: Settings) -> None:
    """The issue's case: a server on a port other than 8000 with AMBER_PUBLIC_BASE_URL unset;
    `amber timemap` used to print URI-Ms under :8000. Now the first server records its
    address and the CLI, a restart on another port and a replica all use it."""
    env = env_for(settings)
    del env["AMBER_PUBLIC_BASE_URL"]
    port = free_port()
    first = start_server(env, port)
    with first:
        written = httpx.post(
            f"{first.base_url}/api/v1/mementos",
            json={"uri_r": URI_R, "content": "hello", "content_type": "text/plain"},
            headers=first.headers,
            timeout=10,
            trust_env=False,
        )
        assert written.status_code == 201, written.text
        uri_m = written.json()["uri_m"]
        assert uri_m.startswith(f"http://127.0.0.1:{port}/memento/"), uri_m
        assert _timemap_uri_ms(env) == [uri_m]
        # A second server (a replica, or the next start) listening elsewhere.
        with start_server(env, free_port(), agent_key=False) as second:
            assert f"URI-Ms stay under http://127.0.0.1:{port}" in second.log_tail()
            shown = httpx.get(
                f"{second.base_url}/api/v1/mementos/{written.json()['id']}",
                headers=first.headers,
                timeout=10,
                trust_env=False,
            )
            assert shown.status_code == 200, shown.text
            assert shown.json()["uri_m"] == uri_m
    # An explicit, different AMBER_PUBLIC_BASE_URL: refused, with the way out.
    other = "https://amber.example.org"
    refused = _amber({**env, "AMBER_PUBLIC_BASE_URL": other}, "serve", "--port", str(free_port()))
    assert refused.returncode != 0
    assert f"amber config set-base-url {other}" in refused.stderr
    assert _amber({**env, "AMBER_PUBLIC_BASE_URL": other}, "timemap", URI_R).returncode != 0
    # Told to move: every process follows.
    moved = _amber(env, "config", "set-base-url", other + "/")
    assert moved.returncode == 0, moved.stderr
    assert re.search(
        rf"now under {re.escape(other)} \(were under http://127\.0\.0\.1:{port}\)", moved.stdout
    )
    assert _timemap_uri_ms(env) == [uri_m.replace(f"http://127.0.0.1:{port}", other)]
    assert _timemap_uri_ms({**env, "AMBER_PUBLIC_BASE_URL": other}) == _timemap_uri_ms(env)


@pytest.mark.slow
def test_a_server_bound_to_every_address_needs_a_configured_base(tmp_path: Path) -> None:
    env = {"AMBER_DATA_DIR": str(tmp_path / "amber-data")}
    refused = _amber(env, "serve", "--host", "0.0.0.0", "--port", str(free_port()))
    assert refused.returncode != 0
    assert "AMBER_PUBLIC_BASE_URL" in refused.stderr


@pytest.mark.slow
def test_a_cli_command_before_any_server_records_the_default_and_says_so(tmp_path: Path) -> None:
    env = {"AMBER_DATA_DIR": str(tmp_path / "amber-data")}
    first = _amber(env, "timemap", URI_R)  # an empty TimeMap: exit 1, base recorded first
    assert "Recorded http://127.0.0.1:8000 as the base of every URI-M" in first.stderr
    assert "no mementos of this URI-R" in first.stderr
    again = _amber(env, "timemap", URI_R)
    assert "Recorded" not in again.stderr and "no mementos" in again.stderr
    refused = _amber({**env, "AMBER_PUBLIC_BASE_URL": "http://127.0.0.1:8765"}, "timemap", URI_R)
    assert refused.returncode != 0
    assert "URI-Ms are under http://127.0.0.1:8000" in refused.stderr
