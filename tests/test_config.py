"""Configuration: one place, environment over file over defaults, secrets masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from archive.config import Settings
from archive.exceptions import ConfigurationError


def test_defaults_are_the_embedded_store(tmp_path: Path) -> None:
    settings = Settings.from_env({"AMBER_DATA_DIR": str(tmp_path)})
    assert settings.resolved_database_url == f"sqlite:///{tmp_path.resolve() / 'amber.sqlite3'}"
    assert settings.resolved_blob_store == (tmp_path / "blobs").resolve().as_uri()
    assert settings.durable


def test_environment_overrides_file(tmp_path: Path) -> None:
    config = tmp_path / "amber.toml"
    config.write_text(
        'database_url = "postgresql://u:secret@db/amber"\n'
        "timemap_page_size = 50\n"
        'fetch_allow = ["10.0.0.0/8", "intranet.local"]\n'
        "[citations]\nkeep_document = true\n"
    )
    settings = Settings.from_env({"AMBER_CONFIG": str(config), "AMBER_TIMEMAP_PAGE_SIZE": "7"})
    assert settings.timemap_page_size == 7
    assert settings.fetch_allow == ("10.0.0.0/8", "intranet.local")
    assert settings.extra == {"citations": {"keep_document": True}}
    assert settings.describe()["database_url"] == "postgresql://u:***@db/amber"


def test_lists_from_environment() -> None:
    settings = Settings.from_env({"AMBER_FETCH_ALLOW": " 127.0.0.1, ::1/128 ,localhost,"})
    assert settings.fetch_allow == ("127.0.0.1", "::1/128", "localhost")


@pytest.mark.parametrize(
    "env",
    [
        {"AMBER_DURABILITY": "sometimes"},
        {"AMBER_TIMEMAP_PAGE_SIZE": "zero"},
        {"AMBER_TIMEMAP_PAGE_SIZE": "0"},
        {"AMBER_FETCH_ALLOW": "10.0.0.0/99"},
        {"AMBER_CONFIG": "/nonexistent/amber.toml"},
        {"AMBER_URI_M_CACHE_MB": "-1"},
        {"AMBER_URI_M_CACHE_MB": "lots"},
    ],
)
def test_invalid_settings_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        Settings.from_env(env)


def test_unknown_key_in_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "amber.toml"
    config.write_text("databse_url = 'typo'\n")
    with pytest.raises(ConfigurationError, match="databse_url"):
        Settings.from_env({"AMBER_CONFIG": str(config)})
