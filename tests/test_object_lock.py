"""S3 Object Lock: the store itself refuses to delete evidence early (DESIGN.md invariant 5).

Two halves:

- Against SeaweedFS, which enforces Object Lock (moto only partly does), with *real*,
  short waits: a retention of 2-4 seconds, then the clock must pass it. These are the
  ``slow`` tests; they are kept separate from the fake-clock property tests on purpose.
  SeaweedFS truncates retain-until dates to the whole second, so the store rounds *up*.
- Against moto, the parameter plumbing: which S3 calls the store makes, with which
  parameters (recorded with a botocore ``provide-client-params`` hook), and how it reads
  refusals (injected with a ``before-call`` hook). moto's GetObjectRetention is broken
  (HTTP 500), which is one more reason the store reads lock state with HeadObject.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from fixtures_s3 import S3Bucket, s3_settings_for, unique_bucket_name

from archive.blobstore import open_blob_store
from archive.blobstore.base import BlobStore, RetentionLock, StoredBlob, ceil_to_second
from archive.blobstore.local import LocalBlobStore
from archive.blobstore.s3 import S3BlobStore
from archive.config import Settings
from archive.exceptions import (
    BlobNotFound,
    ConfigurationError,
    RetentionLocked,
    StorageError,
)

DATA = b"<html><body>evidence that must outlive its citations</body></html>"
SAFETY = 0.4  # seconds past a retain-until before we expect the server to agree it passed


def now() -> datetime:
    return datetime.now(UTC)


def soon(seconds: float) -> datetime:
    """A date ``seconds`` from now, deliberately with a fractional second."""
    return now() + timedelta(seconds=seconds, microseconds=1)


def wait_past(moment: datetime) -> None:
    """Sleep (for real) until ``moment`` has passed by a small safety margin."""
    remaining = (moment - now()).total_seconds() + SAFETY
    if remaining > 0:
        time.sleep(remaining)


def blob(tag: str = "") -> bytes:
    """Distinct bytes per call, so no test dedups onto another test's locked object."""
    return DATA + f"<!-- {tag} {uuid.uuid4().hex} -->".encode()


class Calls:
    """Every S3 API call a client makes, with its parameters (as the caller passed them)."""

    def __init__(self, client: Any) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []
        client.meta.events.register("provide-client-params.s3", self._record)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.log.append((model.name, dict(params)))

    def of(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.log if name == operation]

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    def clear(self) -> None:
        self.log.clear()


def refuse(client: Any, operation: str, code: str, message: str = "Access Denied.") -> None:
    """Every ``operation`` on ``client`` is answered with ``code`` (never sent)."""
    status = 403 if code == "AccessDenied" else 400

    def answer(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        parsed = {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
        }
        return AWSResponse("injected", status, {}, None), parsed

    client.meta.events.register(f"before-call.s3.{operation}", answer)


def versions(bucket: S3Bucket, store: S3BlobStore, address: str) -> tuple[list[str], list[str]]:
    """(version ids, delete-marker ids) stored at the address."""
    key = store.key_for(address)
    listing = bucket.client.list_object_versions(Bucket=bucket.name, Prefix=key)
    kept = [v["VersionId"] for v in listing.get("Versions", []) if v["Key"] == key]
    markers = [m["VersionId"] for m in listing.get("DeleteMarkers", []) if m["Key"] == key]
    return kept, markers


def head(bucket: S3Bucket, store: S3BlobStore, stored: StoredBlob) -> dict[str, Any]:
    answer: dict[str, Any] = bucket.client.head_object(
        Bucket=bucket.name, Key=store.key_for(stored.address), VersionId=stored.version_id
    )
    return answer


def lock_store(bucket: S3Bucket, mode: str | None = "GOVERNANCE") -> tuple[S3BlobStore, Calls]:
    """A store with its own client (so the recorded calls are only the store's)."""
    client = bucket.new_client()
    return bucket.store(client=client, lock_mode=mode), Calls(client)


# -- SeaweedFS: the server enforces the lock --------------------------------------------


@pytest.mark.seaweedfs
@pytest.mark.slow
def test_put_with_retain_until_locks_the_version_until_the_date(
    seaweedfs_bucket: S3Bucket,
) -> None:
    store, calls = lock_store(seaweedfs_bucket)
    wanted = soon(2.5)
    stored = store.put(blob("put-lock"), retain_until=wanted)
    expected = ceil_to_second(wanted)
    assert expected > wanted and expected.microsecond == 0
    assert stored.created is True and stored.version_id
    assert stored.retain_until == expected
    # Locked in the PutObject itself: no window in which the version was unlocked.
    assert calls.of("PutObjectRetention") == []
    assert calls.of("PutObject")[0]["ObjectLockRetainUntilDate"] == expected
    assert store.retention_of(stored.address, stored.version_id) == (expected, False)
    assert head(seaweedfs_bucket, store, stored)["ObjectLockMode"] == "GOVERNANCE"

    calls.clear()
    with pytest.raises(RetentionLocked) as refused:
        store.delete(stored.address, stored.version_id)
    assert refused.value.code == "retention_locked"
    assert isinstance(refused.value, StorageError)
    assert refused.value.detail["retain_until"] == expected.isoformat()
    assert refused.value.detail["legal_hold"] is False
    assert len(calls.of("DeleteObject")) == 1  # "not yet" is not retried on the spot
    assert store.get(stored.address, stored.version_id) == blob_bytes(store, stored)
    assert versions(seaweedfs_bucket, store, stored.address) == ([stored.version_id], [])

    wait_past(expected)
    store.delete(stored.address, stored.version_id)
    with pytest.raises(BlobNotFound):
        store.get(stored.address, stored.version_id)
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


def blob_bytes(store: S3BlobStore, stored: StoredBlob) -> bytes:
    """The bytes as stored (read via the raw client, so the store's own get is tested)."""
    response = store.client.get_object(
        Bucket=store.bucket, Key=store.key_for(stored.address), VersionId=stored.version_id
    )
    data: bytes = response["Body"].read()
    return data


@pytest.mark.seaweedfs
@pytest.mark.slow
def test_sweep_style_retry_deletes_once_the_date_has_passed(seaweedfs_bucket: S3Bucket) -> None:
    """What the sweep does: RetentionLocked means "not yet", so it tries again later."""
    store, _ = lock_store(seaweedfs_bucket)
    stored = store.put(blob("sweep"), retain_until=soon(1.5))
    refusals = 0
    started = time.monotonic()
    while True:
        try:
            store.delete(stored.address, stored.version_id)
            break
        except RetentionLocked:
            refusals += 1
            assert time.monotonic() - started < 10, "never allowed to delete"
            time.sleep(0.25)
    assert refusals >= 1
    assert stored.retain_until is not None and now() >= stored.retain_until
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


@pytest.mark.seaweedfs
def test_set_retention_extends_and_never_shortens(seaweedfs_bucket: S3Bucket) -> None:
    store, calls = lock_store(seaweedfs_bucket)
    stored = store.put(blob("extend"))
    assert stored.retain_until is None
    assert store.retention_of(stored.address, stored.version_id) == (None, False)

    first = store.set_retention(stored.address, stored.version_id, soon(30))
    assert first.microsecond == 0 and first > now() + timedelta(seconds=29)
    assert store.retention_of(stored.address, stored.version_id) == (first, False)

    later = store.set_retention(stored.address, stored.version_id, first + timedelta(minutes=5))
    assert later == first + timedelta(minutes=5)
    assert store.retention_of(stored.address, stored.version_id) == (later, False)

    calls.clear()
    shorter = store.set_retention(stored.address, stored.version_id, first)
    assert shorter == later  # the date in force, not the shorter one asked for
    assert calls.of("PutObjectRetention") == []  # nothing even attempted
    assert store.retention_of(stored.address, stored.version_id) == (later, False)
    # The server refuses a shortening by itself, too (GOVERNANCE, without a bypass).
    with pytest.raises(Exception, match="AccessDenied"):
        seaweedfs_bucket.client.put_object_retention(
            Bucket=seaweedfs_bucket.name,
            Key=store.key_for(stored.address),
            VersionId=stored.version_id,
            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": first},
        )
    assert store.retention_of(stored.address, stored.version_id) == (later, False)

    # A date already past protects nothing: nothing is sent (S3 would refuse it).
    assert store.set_retention(stored.address, stored.version_id, now() - timedelta(days=1))
    assert calls.of("PutObjectRetention") == []
    # The bytes are untouched by retention changes.
    assert store.get(stored.address, stored.version_id) == blob_bytes(store, stored)
    store.erase(stored.address, stored.version_id, reason="test clean-up")


@pytest.mark.seaweedfs
def test_put_of_existing_bytes_extends_their_retention(seaweedfs_bucket: S3Bucket) -> None:
    store, calls = lock_store(seaweedfs_bucket)
    data = blob("dedup")
    first = store.put(data, retain_until=soon(60))
    assert first.retain_until is not None
    calls.clear()

    longer = first.retain_until + timedelta(hours=1)
    again = store.put(data, retain_until=longer)
    assert again.created is False and again.version_id == first.version_id
    assert again.retain_until == longer
    assert len(calls.of("PutObjectRetention")) == 1
    assert store.retention_of(first.address, first.version_id) == (longer, False)

    calls.clear()
    shorter = store.put(data, retain_until=soon(60))
    assert shorter.created is False and shorter.retain_until == longer
    assert calls.of("PutObjectRetention") == []
    store.erase(first.address, first.version_id, reason="test clean-up")


@pytest.mark.seaweedfs
@pytest.mark.slow
def test_legal_hold_refuses_delete_even_after_the_date(seaweedfs_bucket: S3Bucket) -> None:
    store, calls = lock_store(seaweedfs_bucket)
    stored = store.put(blob("hold"), retain_until=soon(1.5))
    assert stored.retain_until is not None
    store.set_legal_hold(stored.address, stored.version_id, True)
    assert calls.of("PutObjectLegalHold")[-1]["LegalHold"] == {"Status": "ON"}
    assert store.retention_of(stored.address, stored.version_id) == (stored.retain_until, True)

    wait_past(stored.retain_until)
    with pytest.raises(RetentionLocked) as refused:
        store.delete(stored.address, stored.version_id)
    assert refused.value.detail["legal_hold"] is True
    assert "legal hold" in refused.value.message
    assert store.get(stored.address, stored.version_id) == blob_bytes(store, stored)

    store.set_legal_hold(stored.address, stored.version_id, False)
    assert store.retention_of(stored.address, stored.version_id) == (stored.retain_until, False)
    store.delete(stored.address, stored.version_id)
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


@pytest.mark.seaweedfs
def test_legal_hold_alone_refuses_delete(seaweedfs_bucket: S3Bucket) -> None:
    store, _ = lock_store(seaweedfs_bucket)
    stored = store.put(blob("hold-only"))
    store.set_legal_hold(stored.address, stored.version_id, True)
    assert store.retention_of(stored.address, stored.version_id) == (None, True)
    with pytest.raises(RetentionLocked):
        store.delete(stored.address, stored.version_id)
    # A bypass does not lift a legal hold either (the server enforces this).
    with pytest.raises(Exception, match="AccessDenied"):
        seaweedfs_bucket.client.delete_object(
            Bucket=seaweedfs_bucket.name,
            Key=store.key_for(stored.address),
            VersionId=stored.version_id,
            BypassGovernanceRetention=True,
        )
    store.set_legal_hold(stored.address, stored.version_id, False)
    store.delete(stored.address, stored.version_id)
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


@pytest.mark.seaweedfs
def test_governance_erase_bypasses_retention_and_hold(seaweedfs_bucket: S3Bucket) -> None:
    store, calls = lock_store(seaweedfs_bucket, "GOVERNANCE")
    stored = store.put(blob("erase-gov"), retain_until=now() + timedelta(days=1))
    store.set_legal_hold(stored.address, stored.version_id, True)
    with pytest.raises(RetentionLocked):
        store.delete(stored.address, stored.version_id)

    calls.clear()
    store.erase(stored.address, stored.version_id, reason="court order 2024/17")
    assert calls.of("PutObjectLegalHold") == [
        {**_version_params(store, stored), "LegalHold": {"Status": "OFF"}}
    ]
    assert calls.of("DeleteObject") == [
        {**_version_params(store, stored), "BypassGovernanceRetention": True}
    ]
    with pytest.raises(BlobNotFound):
        store.get(stored.address, stored.version_id)
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])
    store.erase(stored.address, stored.version_id, reason="rerun after a crash")  # idempotent


def _version_params(store: S3BlobStore, stored: StoredBlob) -> dict[str, Any]:
    return {
        "Bucket": store.bucket,
        "Key": store.key_for(stored.address),
        "VersionId": stored.version_id,
    }


@pytest.mark.seaweedfs
@pytest.mark.slow
def test_compliance_refuses_erasure_until_the_date(seaweedfs_bucket: S3Bucket) -> None:
    store, calls = lock_store(seaweedfs_bucket, "COMPLIANCE")
    stored = store.put(blob("erase-compliance"), retain_until=soon(2))
    assert stored.retain_until is not None
    assert head(seaweedfs_bucket, store, stored)["ObjectLockMode"] == "COMPLIANCE"

    calls.clear()
    with pytest.raises(RetentionLocked) as refused:
        store.erase(stored.address, stored.version_id, reason="data-protection request")
    assert "impossible until " + stored.retain_until.isoformat() in refused.value.message
    assert "COMPLIANCE" in refused.value.message
    assert refused.value.detail["lock_mode"] == "COMPLIANCE"
    assert calls.of("DeleteObject") == []  # refused before trying, with the reason why
    with pytest.raises(RetentionLocked):
        store.delete(stored.address, stored.version_id)
    # Not even the bucket owner with a bypass, and no shortening either.
    with pytest.raises(Exception, match="AccessDenied"):
        seaweedfs_bucket.client.delete_object(
            **_version_params(store, stored), BypassGovernanceRetention=True
        )
    assert store.get(stored.address, stored.version_id) == blob_bytes(store, stored)

    # Extending a COMPLIANCE retention is allowed; it stays COMPLIANCE.
    extended = store.set_retention(
        stored.address, stored.version_id, stored.retain_until + timedelta(seconds=1)
    )
    assert extended == stored.retain_until + timedelta(seconds=1)
    assert head(seaweedfs_bucket, store, stored)["ObjectLockMode"] == "COMPLIANCE"

    wait_past(extended)
    store.erase(stored.address, stored.version_id, reason="data-protection request")
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


@pytest.mark.seaweedfs
def test_mode_switch_to_compliance_still_extends(seaweedfs_bucket: S3Bucket) -> None:
    """Switching the setting GOVERNANCE -> COMPLIANCE: AWS upgrades a version's mode on the
    next extension; SeaweedFS 4.48 refuses the upgrade (AccessDenied), so the store at
    least extends the date in the mode in force rather than leaving it short."""
    governance, _ = lock_store(seaweedfs_bucket, "GOVERNANCE")
    stored = governance.put(blob("mode-switch"), retain_until=now() + timedelta(hours=1))
    compliance, calls = lock_store(seaweedfs_bucket, "COMPLIANCE")
    assert stored.retain_until is not None
    longer = stored.retain_until + timedelta(hours=1)
    assert compliance.set_retention(stored.address, stored.version_id, longer) == longer
    modes = [p["Retention"]["Mode"] for p in calls.of("PutObjectRetention")]
    assert modes[0] == "COMPLIANCE" and modes[-1] in ("COMPLIANCE", "GOVERNANCE")
    assert compliance.retention_of(stored.address, stored.version_id) == (longer, False)
    if head(seaweedfs_bucket, compliance, stored)["ObjectLockMode"] == "GOVERNANCE":
        governance.erase(stored.address, stored.version_id, reason="test clean-up")


@pytest.mark.seaweedfs
def test_versionless_delete_is_refused_on_a_versioned_bucket(seaweedfs_bucket: S3Bucket) -> None:
    """A plain DeleteObject would only add a delete marker: the evidence hidden, not gone."""
    for mode in ("GOVERNANCE", None):
        store, calls = lock_store(seaweedfs_bucket, mode)
        stored = store.put(blob(f"versionless {mode}"))
        with pytest.raises(ValueError, match="version_id"):
            store.delete(stored.address)
        with pytest.raises(ValueError, match="version_id"):
            store.erase(stored.address, None, reason="no version")
        assert calls.of("DeleteObject") == []
        assert versions(seaweedfs_bucket, store, stored.address) == ([stored.version_id], [])
        assert store.exists(stored.address)
        store.delete(stored.address, stored.version_id)
        assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


@pytest.mark.seaweedfs
def test_versions_of_lists_every_version_for_callers_without_one(
    seaweedfs_bucket: S3Bucket,
) -> None:
    """GC of an orphan (never indexed, so no recorded VersionId) deletes each version."""
    store, _ = lock_store(seaweedfs_bucket, None)
    stored = store.put(blob("orphan"))
    assert store.versions_of(stored.address) == [stored.version_id]
    # A second version under the same key, written behind the store's back.
    extra = seaweedfs_bucket.client.put_object(
        Bucket=seaweedfs_bucket.name, Key=store.key_for(stored.address), Body=b"other bytes"
    )["VersionId"]
    assert set(store.versions_of(stored.address)) == {stored.version_id, extra}
    for version in store.versions_of(stored.address):
        store.delete(stored.address, version)
    assert store.versions_of(stored.address) == []
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


def test_versions_of_without_versioning(moto_bucket: S3Bucket, tmp_path: Path) -> None:
    for store in (moto_bucket.store(), LocalBlobStore(tmp_path)):
        stored = store.put(b"plain bytes")
        assert store.versions_of(stored.address) == [None]
        store.delete(stored.address, None)
        assert store.versions_of(stored.address) == []


@pytest.mark.seaweedfs
def test_without_lock_mode_nothing_is_locked(seaweedfs_bucket: S3Bucket) -> None:
    store, calls = lock_store(seaweedfs_bucket, None)
    assert store.lock_mode is None
    stored = store.put(blob("no-lock"), retain_until=now() + timedelta(days=1))
    assert stored.retain_until is None
    assert "ObjectLockMode" not in calls.of("PutObject")[0]
    wanted = now() + timedelta(days=2)
    assert store.set_retention(stored.address, stored.version_id, wanted) == ceil_to_second(wanted)
    store.set_legal_hold(stored.address, stored.version_id, True)
    assert calls.of("PutObjectRetention") == [] and calls.of("PutObjectLegalHold") == []
    assert store.retention_of(stored.address, stored.version_id) == (None, False)
    store.delete(stored.address, stored.version_id)  # nothing at storage level refuses
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


@pytest.mark.seaweedfs
def test_bucket_default_retention_is_read_back_and_enforced(seaweedfs_bucket: S3Bucket) -> None:
    """A bucket-level default retention (set by infra) locks plain puts too."""
    seaweedfs_bucket.client.put_object_lock_configuration(
        Bucket=seaweedfs_bucket.name,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
        },
    )
    store, _ = lock_store(seaweedfs_bucket, "GOVERNANCE")
    stored = store.put(blob("default"))
    until, hold = store.retention_of(stored.address, stored.version_id)
    assert until is not None and not hold
    assert timedelta(hours=23) < until - now() <= timedelta(days=1)
    assert store.put(blob_bytes(store, stored)).retain_until == until  # read back on dedup
    with pytest.raises(RetentionLocked):
        store.delete(stored.address, stored.version_id)
    store.erase(stored.address, stored.version_id, reason="default retention, governance")
    assert versions(seaweedfs_bucket, store, stored.address) == ([], [])


@pytest.mark.seaweedfs
def test_unknown_version_reads_as_not_found(seaweedfs_bucket: S3Bucket) -> None:
    store, _ = lock_store(seaweedfs_bucket)
    stored = store.put(blob("gone"))
    store.delete(stored.address, stored.version_id)
    with pytest.raises(BlobNotFound):
        store.retention_of(stored.address, stored.version_id)
    with pytest.raises(BlobNotFound):
        store.set_retention(stored.address, stored.version_id, soon(60))
    store.delete(stored.address, stored.version_id)  # deleting what is gone is not an error


# -- moto: the parameter plumbing -------------------------------------------------------


@pytest.fixture()
def moto_lock_bucket(moto_bucket: S3Bucket) -> S3Bucket:
    """A bucket with Object Lock (hence versioning) in the same moto mock."""
    name = unique_bucket_name()
    moto_bucket.client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return S3Bucket(moto_bucket.client, name, None, True, "testing", "testing")


def test_put_sends_the_lock_with_the_object(moto_lock_bucket: S3Bucket) -> None:
    store, calls = lock_store(moto_lock_bucket, "COMPLIANCE")
    wanted = datetime(2099, 1, 2, 3, 4, 5, 600_000, tzinfo=timezone(timedelta(hours=2)))
    stored = store.put(blob("moto-put"), retain_until=wanted)
    sent = calls.of("PutObject")
    assert len(sent) == 1
    assert sent[0]["ObjectLockMode"] == "COMPLIANCE"
    assert sent[0]["ObjectLockRetainUntilDate"] == datetime(2099, 1, 2, 1, 4, 6, tzinfo=UTC)
    # AWS requires Content-MD5 or the checksum-algorithm header on Object Lock writes.
    assert sent[0]["ChecksumAlgorithm"] == "SHA256" and sent[0]["IfNoneMatch"] == "*"
    assert stored.retain_until == datetime(2099, 1, 2, 1, 4, 6, tzinfo=UTC)
    assert store.retention_of(stored.address, stored.version_id) == (stored.retain_until, False)
    assert "GetObjectRetention" not in calls.names()  # moto answers it with HTTP 500


def test_put_without_retain_until_or_mode_sends_no_lock(moto_lock_bucket: S3Bucket) -> None:
    for mode, retain_until in (("GOVERNANCE", None), (None, soon(3600))):
        store, calls = lock_store(moto_lock_bucket, mode)
        stored = store.put(blob(f"moto-nolock {mode}"), retain_until=retain_until)
        assert not {"ObjectLockMode", "ObjectLockRetainUntilDate"} & set(calls.of("PutObject")[0])
        assert stored.retain_until is None
    past = lock_store(moto_lock_bucket, "GOVERNANCE")[0].put(
        blob("past"), retain_until=now() - timedelta(seconds=5)
    )
    assert past.retain_until is None  # S3 would refuse the write for a past date


def test_set_retention_sends_put_object_retention_once(moto_lock_bucket: S3Bucket) -> None:
    store, calls = lock_store(moto_lock_bucket, "GOVERNANCE")
    stored = store.put(blob("moto-retention"))
    calls.clear()
    wanted = datetime(2099, 6, 1, 12, 0, 0, 1, tzinfo=UTC)
    applied = store.set_retention(stored.address, stored.version_id, wanted)
    assert applied == datetime(2099, 6, 1, 12, 0, 1, tzinfo=UTC)
    assert calls.of("PutObjectRetention") == [
        {
            **_version_params(store, stored),
            "Retention": {"Mode": "GOVERNANCE", "RetainUntilDate": applied},
        }
    ]
    assert "HeadObject" in calls.names()  # read the date in force first, via HEAD
    calls.clear()
    assert store.set_retention(stored.address, stored.version_id, wanted) == applied
    assert store.set_retention(stored.address, stored.version_id, wanted.replace(year=2098)) == (
        applied
    )
    assert calls.of("PutObjectRetention") == []
    assert store.retention_of(stored.address, stored.version_id) == (applied, False)


def test_extension_refused_after_a_concurrent_longer_one_is_fine(
    moto_lock_bucket: S3Bucket,
) -> None:
    """HEAD-then-PUT races: if S3 refuses ours because another job went further, fine."""
    store, calls = lock_store(moto_lock_bucket, "GOVERNANCE")
    stored = store.put(blob("moto-race"), retain_until=datetime(2099, 1, 1, tzinfo=UTC))
    further = datetime(2099, 12, 31, tzinfo=UTC)

    def concurrent_job_then_refuse(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        moto_lock_bucket.client.put_object_retention(
            **_version_params(store, stored),
            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": further},
        )
        parsed = {
            "Error": {"Code": "AccessDenied", "Message": "Access Denied."},
            "ResponseMetadata": {"HTTPStatusCode": 403, "HTTPHeaders": {}},
        }
        return AWSResponse("injected", 403, {}, None), parsed

    store.client.meta.events.register(
        "before-call.s3.PutObjectRetention", concurrent_job_then_refuse
    )
    wanted = datetime(2099, 6, 1, tzinfo=UTC)
    assert store.set_retention(stored.address, stored.version_id, wanted) == further
    assert len(calls.of("PutObjectRetention")) == 1


def test_extension_refused_for_good_is_a_storage_error(moto_lock_bucket: S3Bucket) -> None:
    store, calls = lock_store(moto_lock_bucket, "GOVERNANCE")
    stored = store.put(blob("moto-refused"))
    refuse(store.client, "PutObjectRetention", "InvalidRequest", "Bucket is missing ObjectLock")
    with pytest.raises(StorageError, match="refused to extend retention") as raised:
        store.set_retention(stored.address, stored.version_id, soon(3600))
    assert not isinstance(raised.value, RetentionLocked)  # "not yet" is for deletes only
    assert len(calls.of("PutObjectRetention")) == 1


def test_legal_hold_sends_on_and_off(moto_lock_bucket: S3Bucket) -> None:
    store, calls = lock_store(moto_lock_bucket, "GOVERNANCE")
    stored = store.put(blob("moto-hold"))
    store.set_legal_hold(stored.address, stored.version_id, True)
    assert store.retention_of(stored.address, stored.version_id) == (None, True)
    store.set_legal_hold(stored.address, stored.version_id, False)
    assert [p["LegalHold"] for p in calls.of("PutObjectLegalHold")] == [
        {"Status": "ON"},
        {"Status": "OFF"},
    ]
    assert all(p["VersionId"] == stored.version_id for p in calls.of("PutObjectLegalHold"))
    assert store.retention_of(stored.address, stored.version_id) == (None, False)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("AccessDenied", "Access Denied."),
        ("ObjectLocked", "Object is WORM protected"),
        ("InvalidRequest", "Object is protected by object lock retention"),
    ],
)
def test_refused_delete_is_retention_locked_and_not_retried(
    moto_lock_bucket: S3Bucket, code: str, message: str
) -> None:
    store, calls = lock_store(moto_lock_bucket, "GOVERNANCE")
    stored = store.put(blob("moto-refuse"), retain_until=datetime(2099, 1, 1, 0, 0, 0, tzinfo=UTC))
    refuse(store.client, "DeleteObject", code, message)
    with pytest.raises(RetentionLocked) as raised:
        store.delete(stored.address, stored.version_id)
    assert raised.value.code == "retention_locked"
    assert raised.value.detail["version_id"] == stored.version_id
    assert raised.value.detail["retain_until"] == "2099-01-01T00:00:00+00:00"
    assert "not yet" in raised.value.message
    assert len(calls.of("DeleteObject")) == 1


def test_other_invalid_request_on_delete_is_a_plain_storage_error(
    moto_lock_bucket: S3Bucket,
) -> None:
    store, _ = lock_store(moto_lock_bucket, "GOVERNANCE")
    stored = store.put(blob("moto-invalid"))
    refuse(store.client, "DeleteObject", "InvalidRequest", "Invalid version id specified")
    with pytest.raises(StorageError) as raised:
        store.delete(stored.address, stored.version_id)
    assert not isinstance(raised.value, RetentionLocked)


def test_governance_erase_sends_hold_off_then_bypass_delete(moto_lock_bucket: S3Bucket) -> None:
    store, calls = lock_store(moto_lock_bucket, "GOVERNANCE")
    stored = store.put(blob("moto-erase"), retain_until=soon(3600))
    store.set_legal_hold(stored.address, stored.version_id, True)
    calls.clear()
    store.erase(stored.address, stored.version_id, reason="takedown")
    sent = [n for n in calls.names() if n in ("PutObjectLegalHold", "DeleteObject")]
    assert sent == ["PutObjectLegalHold", "DeleteObject"]
    assert calls.of("PutObjectLegalHold")[0]["LegalHold"] == {"Status": "OFF"}
    assert calls.of("DeleteObject")[0] == {
        **_version_params(store, stored),
        "BypassGovernanceRetention": True,
    }
    with pytest.raises(BlobNotFound):
        store.get(stored.address, stored.version_id)


def test_compliance_erase_is_refused_before_any_delete(moto_lock_bucket: S3Bucket) -> None:
    store, calls = lock_store(moto_lock_bucket, "COMPLIANCE")
    until = datetime(2099, 1, 1, tzinfo=UTC)
    stored = store.put(blob("moto-compliance"), retain_until=until)
    store.set_legal_hold(stored.address, stored.version_id, True)
    calls.clear()
    with pytest.raises(RetentionLocked, match="impossible until 2099-01-01T00:00:00"):
        store.erase(stored.address, stored.version_id, reason="data-protection request")
    assert calls.of("DeleteObject") == [] and calls.of("PutObjectLegalHold") == []
    assert store.retention_of(stored.address, stored.version_id) == (until, True)  # untouched


def test_erase_needs_a_reason(moto_lock_bucket: S3Bucket, tmp_path: Path) -> None:
    store, _ = lock_store(moto_lock_bucket)
    stored = store.put(blob("reason"))
    with pytest.raises(ValueError, match="reason"):
        store.erase(stored.address, stored.version_id, reason="  ")
    local = LocalBlobStore(tmp_path)
    with pytest.raises(ValueError, match="reason"):
        local.erase(local.put(b"x").address, None, reason="")


def test_versioned_bucket_is_detected_once_and_unversioned_deletes_still_work(
    moto_bucket: S3Bucket, moto_lock_bucket: S3Bucket
) -> None:
    plain, calls = lock_store(moto_bucket, None)
    for tag in ("a", "b"):
        stored = plain.put(blob(tag))
        assert stored.version_id is None
        plain.delete(stored.address)
        assert not plain.exists(stored.address)
    assert len(calls.of("GetBucketVersioning")) == 1  # asked once, remembered

    versioned, calls = lock_store(moto_lock_bucket, None)
    stored = versioned.put(blob("versioned"))
    with pytest.raises(ValueError, match="delete marker"):
        versioned.delete(stored.address)
    assert calls.of("DeleteObject") == []

    locked, calls = lock_store(moto_lock_bucket, "GOVERNANCE")
    with pytest.raises(ValueError):
        locked.delete(stored.address)
    assert calls.of("GetBucketVersioning") == []  # an Object Lock bucket is versioned


# -- settings, helpers, the local store -------------------------------------------------


def test_lock_mode_setting_reaches_the_store(
    moto_lock_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = s3_settings_for(
        None, moto_lock_bucket.name, monkeypatch, s3_object_lock_mode="compliance"
    )
    assert settings.s3_object_lock_mode == "COMPLIANCE"
    store = open_blob_store(settings)
    try:
        assert isinstance(store, S3BlobStore) and store.lock_mode == "COMPLIANCE"
        assert isinstance(store, RetentionLock)
    finally:
        store.close()
    plain = open_blob_store(s3_settings_for(None, moto_lock_bucket.name, monkeypatch))
    assert isinstance(plain, S3BlobStore) and plain.lock_mode is None


def test_lock_mode_setting_is_validated() -> None:
    env = {"AMBER_BLOB_STORE": "s3://bucket/prefix", "AMBER_S3_OBJECT_LOCK_MODE": "GOVERNANCE"}
    assert Settings.from_env(env).s3_object_lock_mode == "GOVERNANCE"
    assert Settings.from_env({**env, "AMBER_S3_OBJECT_LOCK_MODE": ""}).s3_object_lock_mode is None
    with pytest.raises(ConfigurationError, match="GOVERNANCE"):
        Settings.from_env({**env, "AMBER_S3_OBJECT_LOCK_MODE": "forever"})
    with pytest.raises(ConfigurationError, match="s3://"):
        Settings(s3_object_lock_mode="COMPLIANCE")  # a local store has no lock to set
    with pytest.raises(ValueError, match="lock_mode"):
        S3BlobStore(object(), "bucket", lock_mode="governance")


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC), datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC)),
        (datetime(2030, 1, 1, 0, 0, 0, 1, tzinfo=UTC), datetime(2030, 1, 1, 0, 0, 1, tzinfo=UTC)),
        (
            datetime(2030, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
            datetime(2031, 1, 1, 0, 0, 0, tzinfo=UTC),
        ),
        (
            datetime(2030, 1, 1, 1, 0, 0, 500, tzinfo=timezone(timedelta(hours=1))),
            datetime(2030, 1, 1, 0, 0, 1, tzinfo=UTC),
        ),
    ],
)
def test_ceil_to_second_rounds_up_in_utc(moment: datetime, expected: datetime) -> None:
    rounded = ceil_to_second(moment)
    assert rounded == expected and rounded.tzinfo is UTC and rounded >= moment


def test_naive_retention_dates_are_refused(moto_lock_bucket: S3Bucket, tmp_path: Path) -> None:
    naive = datetime(2099, 1, 1)
    store, calls = lock_store(moto_lock_bucket)
    with pytest.raises(ValueError, match="timezone"):
        store.put(blob("naive"), retain_until=naive)
    assert calls.of("PutObject") == []
    with pytest.raises(ValueError, match="timezone"):
        LocalBlobStore(tmp_path).put(b"naive", retain_until=naive)


def test_local_store_has_no_storage_level_lock(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    assert isinstance(store, RetentionLock) and isinstance(store, BlobStore)
    assert store.lock_mode is None
    wanted = datetime(2099, 1, 1, 0, 0, 0, 5, tzinfo=UTC)
    stored = store.put(b"local evidence", retain_until=wanted)
    assert stored.retain_until is None and stored.version_id is None
    assert store.set_retention(stored.address, None, wanted) == ceil_to_second(wanted)
    store.set_legal_hold(stored.address, None, True)
    assert store.retention_of(stored.address, None) == (None, False)
    store.delete(stored.address)  # no storage-level lock refuses it
    assert not store.exists(stored.address)
    with pytest.raises(BlobNotFound):
        store.retention_of(stored.address, None)
    again = store.put(b"local evidence")
    store.erase(again.address, None, reason="takedown")
    assert not store.exists(again.address)
    store.erase(again.address, None, reason="rerun")  # idempotent


def test_both_stores_offer_the_capability(moto_bucket: S3Bucket, tmp_path: Path) -> None:
    stores: list[Callable[[], Any]] = [
        lambda: LocalBlobStore(tmp_path / "b"),
        lambda: moto_bucket.store(),
    ]
    for make in stores:
        store = make()
        assert isinstance(store, RetentionLock)
        assert isinstance(store, BlobStore)
