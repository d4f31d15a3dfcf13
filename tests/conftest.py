"""Shared fixtures. Backends: every API/archive test runs on the embedded default
(local directory + SQLite) and on the production shape (SeaweedFS S3 + PostgreSQL).

Servers that are absent make their tests skip with a reason; ``AMBER_REQUIRE_SERVICES=1``
(set by CI) turns those skips into failures.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from archive.archive import Archive
from archive.config import Settings

pytest_plugins = ["fixtures_s3"]

POSTGRES_URL = os.environ.get(
    "AMBER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
BASE_URL = "http://testserver"


def service_unavailable(reason: str) -> None:
    if os.environ.get("AMBER_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (AMBER_REQUIRE_SERVICES=1 forbids skipping)")
    pytest.skip(reason)


def _driver(url: str) -> str:
    return "postgresql+psycopg://" + url.split("://", 1)[1]


@pytest.fixture(scope="session")
def postgres_server() -> str:
    try:
        engine = create_engine(_driver(POSTGRES_URL), connect_args={"connect_timeout": 3})
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as error:
        service_unavailable(f"PostgreSQL not reachable at {POSTGRES_URL}: {type(error).__name__}")
    return POSTGRES_URL


@pytest.fixture()
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A private schema per test, so tests never see each other's rows."""
    schema = f"amber_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_driver(postgres_server))
    with admin.begin() as connection:
        connection.execute(text(f"CREATE SCHEMA {schema}"))
    separator = "&" if "?" in postgres_server else "?"
    yield f"{postgres_server}{separator}options=-csearch_path%3D{schema}"
    with admin.begin() as connection:
        connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'index.sqlite3'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture(
    params=[
        "local-sqlite",
        pytest.param("s3-postgres", marks=[pytest.mark.seaweedfs, pytest.mark.postgres]),
    ]
)
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings for one backend pair; the id says which."""
    local = Settings(data_dir=tmp_path / "amber-data", public_base_url=BASE_URL)
    if request.param == "local-sqlite":
        return local
    s3: Settings = request.getfixturevalue("seaweedfs_settings")
    return s3.with_overrides(
        data_dir=local.data_dir,
        database_url=request.getfixturevalue("postgres_url"),
        public_base_url=BASE_URL,
    )


@pytest.fixture()
def archive(settings: Settings) -> Iterator[Archive]:
    opened = Archive.open(settings)
    yield opened
    opened.close()


@pytest.fixture()
def client(settings: Settings, archive: Archive) -> Iterator[object]:
    from fastapi.testclient import TestClient

    from api.app import create_app

    with TestClient(create_app(settings, archive=archive, auth=False)) as test_client:
        yield test_client
