"""Storage-level retention locks (S3 Object Lock): the store itself refuses early deletion.

Amber's own retention rules decide what expires; a lock makes the *store* refuse an early
delete too, so a buggy or compromised service cannot destroy evidence early. Dates only
ever move later: S3 cannot shorten a lock, and rounding a date down would shorten it, so
every date is rounded *up* to the whole second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import ClientError

from archive.blobstore.base import ceil_to_second
from archive.blobstore.s3_client import (
    LOCK_REFUSAL_CODES,
    NOT_FOUND_CODES,
    describe,
    error_code,
)
from archive.exceptions import BlobNotFound, RetentionLocked, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")


class S3ObjectLock:
    """The :class:`~archive.blobstore.base.RetentionLock` capability of :class:`~archive.blobstore.s3.S3BlobStore`:
    Object Lock retention and legal holds, read with HeadObject (moto's
    GetObjectRetention is unreliable), and the erasure that bypasses GOVERNANCE."""

    if TYPE_CHECKING:  # provided by S3BlobStore
        bucket: str
        client: Any
        _lock_mode: str | None

        def key_for(self, address: str) -> str: ...
        def _params(self, key: str, version_id: str | None) -> dict[str, Any]: ...
        def _head(self, key: str, version_id: str | None = None) -> dict[str, Any] | None: ...
        def _delete_once(self, params: dict[str, Any], address: str) -> None: ...
        def _require_version(self, operation: str, version_id: str | None) -> None: ...
        def _retry(self, operation: str, address: str | None, attempt: Callable[[], T]) -> T: ...

    @property
    def lock_mode(self) -> str | None:
        """The Object Lock mode: "GOVERNANCE", "COMPLIANCE", or None (no lock is set)."""
        return self._lock_mode

    def set_retention(
        self, address: str, version_id: str | None, retain_until: datetime
    ) -> datetime:
        """Extend the version's retain-until to ``retain_until`` (rounded up to the second).

        Never shortens: when the date in force is already as late, nothing is sent.
        Returns the date now in force (at least the rounded request). Without a lock mode,
        or for a date already past (which S3 refuses), nothing is sent either.
        """
        wanted = ceil_to_second(retain_until)
        if self._lock_mode is None:
            return wanted
        key = self.key_for(address)
        return self._retry(
            "RETENTION", address, lambda: self._extend_once(key, address, version_id, wanted)
        )

    def set_legal_hold(self, address: str, version_id: str | None, on: bool) -> None:
        """Turn the version's S3 legal hold on or off (no-op without a lock mode)."""
        if self._lock_mode is None:
            return
        key = self.key_for(address)
        params = self._params(key, version_id)
        self._retry("LEGAL_HOLD", address, lambda: self._legal_hold_once(params, address, on))

    def retention_of(self, address: str, version_id: str | None) -> tuple[datetime | None, bool]:
        """``(retain_until in UTC or None, legal hold on)`` of the version, via HeadObject."""
        key = self.key_for(address)
        head = self._retry("HEAD", address, lambda: self._head(key, version_id))
        if head is None:
            raise BlobNotFound("no blob at this address", address=address)
        until, _mode, hold = lock_state(head)
        return until, hold

    def erase(self, address: str, version_id: str | None, reason: str) -> None:
        """Admin erasure of one version, now: legal hold off, then delete.

        GOVERNANCE retention is bypassed (``BypassGovernanceRetention``; needs the
        ``s3:BypassGovernanceRetention`` permission). COMPLIANCE retention cannot be:
        :class:`RetentionLocked` says erasure is impossible until the date. Erasing a
        version that is already gone does nothing. ``reason`` is required but not logged
        (it may name a person); the caller records it in the admin log.
        """
        if not reason.strip():
            raise ValueError("an erasure needs a reason")
        key = self.key_for(address)
        self._require_version("erase", version_id)
        self._retry("ERASE", address, lambda: self._erase_once(key, address, version_id))

    def _locked(self, params: dict[str, Any], address: str, exc: ClientError) -> RetentionLocked:
        """The RetentionLocked for a refused delete, with the lock state when readable."""
        detail: dict[str, Any] = {"bucket": self.bucket, "address": address}
        if params.get("VersionId"):
            detail["version_id"] = params["VersionId"]
        try:
            head = self._head(params["Key"], params.get("VersionId"))
        except Exception:  # best effort: the refusal is what matters
            head = None
        until, mode, hold = lock_state(head) if head is not None else (None, None, False)
        if until is not None:
            detail["retain_until"] = until.isoformat()
        if mode is not None:
            detail["lock_mode"] = mode
        detail["legal_hold"] = hold
        what = "a legal hold" if hold else "Object Lock retention"
        if until is not None and not hold:
            what += f" until {until.isoformat()}"
        return RetentionLocked(
            f"S3 refused to delete this version ({describe(exc)}): {what} is still in force, or"
            " the store's clock is behind ours; not yet, retry later (persistent AccessDenied"
            " without a lock means missing permissions)",
            **detail,
        )

    def _initial_lock(self, retain_until: datetime | None) -> datetime | None:
        """The retain-until to set in a PutObject, or None for no lock."""
        if retain_until is None:
            return None
        wanted = ceil_to_second(retain_until)
        if self._lock_mode is None or wanted <= utc_clock():
            return None
        return wanted

    def _extend_once(
        self, key: str, address: str, version_id: str | None, wanted: datetime
    ) -> datetime:
        """One HEAD-then-PutObjectRetention; never sends a date earlier than the one in force."""
        head = self._head(key, version_id)
        if head is None:
            raise BlobNotFound("no blob at this address", address=address)
        current, current_mode, _hold = lock_state(head)
        if current is not None and current >= wanted:
            return current
        if wanted <= utc_clock():
            return wanted  # protects nothing, and S3 refuses retain-until dates in the past
        modes = [self._lock_mode]
        if current_mode is not None and current is not None and current > utc_clock():
            if current_mode == "COMPLIANCE":
                modes = ["COMPLIANCE"]  # never try to weaken: S3 would refuse it anyway
            elif current_mode != self._lock_mode:
                # GOVERNANCE -> COMPLIANCE is allowed by AWS but refused by some stores
                # (SeaweedFS 4.48): then at least extend the date in the mode in force.
                modes.append(current_mode)
        for number, mode in enumerate(modes, start=1):
            try:
                self.client.put_object_retention(
                    **self._params(key, version_id),
                    Retention={"Mode": mode, "RetainUntilDate": wanted},
                )
                return wanted
            except ClientError as exc:
                code = error_code(exc)
                if code in NOT_FOUND_CODES:
                    raise BlobNotFound("no blob at this address", address=address) from None
                if code not in LOCK_REFUSAL_CODES and code != "InvalidRequest":
                    raise
                # A concurrent extension may have gone further; otherwise this is for a human.
                again = self._head(key, version_id)
                in_force = lock_state(again)[0] if again is not None else None
                if in_force is not None and in_force >= wanted:
                    return in_force
                if number < len(modes):
                    log.warning(
                        "S3 refused to change the Object Lock mode of %s to %s (%s);"
                        " extending it in %s instead",
                        address,
                        mode,
                        describe(exc),
                        modes[number],
                    )
                    continue
                raise StorageError(
                    f"S3 refused to extend retention to {wanted.isoformat()} ({describe(exc)});"
                    " is Object Lock enabled on the bucket, and the mode change allowed?",
                    operation="RETENTION",
                    bucket=self.bucket,
                    address=address,
                ) from None
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _legal_hold_once(self, params: dict[str, Any], address: str, on: bool) -> None:
        try:
            self.client.put_object_legal_hold(**params, LegalHold={"Status": "ON" if on else "OFF"})
        except ClientError as exc:
            if error_code(exc) in NOT_FOUND_CODES:
                raise BlobNotFound("no blob at this address", address=address) from None
            raise

    def _erase_once(self, key: str, address: str, version_id: str | None) -> None:
        head = self._head(key, version_id)
        if head is None:
            return  # already gone: erasure is idempotent
        until, mode, hold = lock_state(head)
        if mode == "COMPLIANCE" and until is not None and until > utc_clock():
            raise RetentionLocked(
                f"erasure is impossible until {until.isoformat()}: this version is under S3"
                " Object Lock COMPLIANCE retention, which nobody can shorten or bypass",
                bucket=self.bucket,
                address=address,
                version_id=version_id or "",
                retain_until=until.isoformat(),
                lock_mode=mode,
            )
        params: dict[str, Any] = self._params(key, version_id)
        if hold:
            self._legal_hold_once(params, address, on=False)
        if mode == "GOVERNANCE" and until is not None:
            params = {**params, "BypassGovernanceRetention": True}
        self._delete_once(params, address)


def lock_state(head: dict[str, Any]) -> tuple[datetime | None, str | None, bool]:
    """(retain-until in UTC, mode, legal hold on) from a HeadObject answer."""
    until = head.get("ObjectLockRetainUntilDate")
    if isinstance(until, datetime):
        until = until.astimezone(UTC) if until.tzinfo else until.replace(tzinfo=UTC)
    else:
        until = None
    mode = head.get("ObjectLockMode") or None
    return until, mode, head.get("ObjectLockLegalHoldStatus") == "ON"


def utc_clock() -> datetime:
    return datetime.now(UTC)


class NoStorageLock:
    """The :class:`~archive.blobstore.base.RetentionLock` of a store that has no
    storage-level lock (the local directory): ``lock_mode`` None, dates and holds accepted
    and ignored, and erasure a plain delete. Early deletion is then prevented by Amber's
    retention rules alone."""

    if TYPE_CHECKING:  # provided by the store

        def path_for(self, address: str) -> Path: ...
        def exists(self, address: str) -> bool: ...
        def delete(self, address: str, version_id: str | None = None) -> None: ...

    @property
    def lock_mode(self) -> str | None:
        return None

    def set_retention(
        self, address: str, version_id: str | None, retain_until: datetime
    ) -> datetime:
        """Nothing to set; returns ``retain_until`` rounded up to the second, like S3."""
        self.path_for(address)  # validates the address
        return ceil_to_second(retain_until)

    def set_legal_hold(self, address: str, version_id: str | None, on: bool) -> None:
        self.path_for(address)

    def retention_of(self, address: str, version_id: str | None) -> tuple[datetime | None, bool]:
        """Always ``(None, False)``; raises BlobNotFound when the blob is absent."""
        if not self.exists(address):
            raise BlobNotFound("no blob at this address", address=address)
        return None, False

    def erase(self, address: str, version_id: str | None, reason: str) -> None:
        """Admin erasure: a plain delete (nothing at storage level can refuse it)."""
        if not reason.strip():
            raise ValueError("an erasure needs a reason")
        log.warning("erasing blob %s from the local store", address)
        self.delete(address, version_id)
