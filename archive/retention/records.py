"""What retention hands back: a sweep's report, and each evaluated memento's verdict."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from archive.dates import to_rfc3339


def shown_deletion_reason(stored: str | None) -> str:
    """A tombstone's reason as shown to whoever reads the memento (any role of its tenant).

    An erasure's reason names its admin-log entry, not the admin: who erased, and why, is
    in the admin log, for admins. Tombstones written before that choice hold the erasing
    key id under ``by``; it is left out here, so nobody but an admin sees it."""
    if not stored:
        return ""
    try:
        reason = json.loads(stored)
    except ValueError:
        return stored
    if isinstance(reason, dict) and reason.get("kind") == "erasure" and "by" in reason:
        reason = {k: v for k, v in reason.items() if k != "by"}
        return json.dumps(reason)
    return stored


@dataclass
class SweepReport:
    """What one retention sweep decided and deleted (or, on a dry run, would have)."""

    dry_run: bool
    evaluated: int = 0
    mementos_deleted: int = 0
    blobs_deleted: int = 0
    bytes_deleted: int = 0
    held: int = 0
    not_yet: int = 0  # blobs the store refused: their Object Lock date is later (see report)
    extended: int = 0  # candidates whose cached expiry was stale (now fixed)
    next_expiry: datetime | None = None
    deleted_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "evaluated": self.evaluated,
            "mementos_deleted": self.mementos_deleted,
            "blobs_deleted": self.blobs_deleted,
            "bytes_deleted": self.bytes_deleted,
            "held": self.held,
            "not_yet": self.not_yet,
            "extended": self.extended,
            "next_expiry": to_rfc3339(self.next_expiry) if self.next_expiry else None,
        }


class Verdict(NamedTuple):  # a tuple: built once per evaluated memento, cheaply
    memento_id: str
    until: datetime  # the expiry the citations (or the grace period) give, holds aside
    held: bool  # under a legal hold: kept whatever ``until`` says
    cited: bool  # some transcript reaches it (else the grace period applies)

    @property
    def expiry(self) -> datetime | None:
        """When it may be deleted; None while held."""
        return None if self.held else self.until

    def reason(self, grace: timedelta, policies: Iterable[str]) -> dict[str, object]:
        """Why it expired: dates and policy only (built for deleted mementos alone).

        ``policies``: ``transcript id:retention`` of each transcript reaching it."""
        assert self.expiry is not None
        if not self.cited:
            return {
                "kind": "retention",
                "policy": "uncited-grace",
                "grace_days": grace.days,
                "expired_at": to_rfc3339(self.expiry),
            }
        return {
            "kind": "retention",
            "policy": "transcripts",
            "expired_at": to_rfc3339(self.expiry),
            "transcripts": sorted(set(policies))[:20],
        }
