"""The cost of keeping evidence (``amber retention report``): bytes stored per policy and
per label, what expires when (by month), and expired evidence the store still keeps because
its S3 Object Lock date has not come yet."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Row, and_, func, select

from archive.dates import to_rfc3339, utc_now
from archive.index import Index
from archive.index.schema import blobs, citations, mementos, transcripts


def retention_report(index: Index, *, now: datetime | None = None) -> dict[str, object]:
    """Bytes stored per policy and per label, and what expires when (by month)."""
    now = now or utc_now()
    with index.read() as connection:
        live = connection.execute(
            select(
                mementos.c.id, mementos.c.size, mementos.c.expires_at, mementos.c.content_hash
            ).where(mementos.c.deleted_at.is_(None))
        ).all()
        reach: list[Row[str, str, str]] = []
        for column in (citations.c.passage_memento_id, citations.c.document_memento_id):
            reach += connection.execute(
                select(column, transcripts.c.retention, transcripts.c.labels_json)
                .join(
                    transcripts,
                    and_(
                        transcripts.c.tenant == citations.c.tenant,
                        transcripts.c.id == citations.c.transcript_id,
                    ),
                )
                .where(column.is_not(None))
            ).all()
    policies: dict[str, set[str]] = {}
    labels: dict[str, set[str]] = {}
    for memento_id, retention, labels_json in reach:
        policies.setdefault(retention, set()).add(memento_id)
        for key, value in json.loads(labels_json).items():
            labels.setdefault(f"{key}={value}", set()).add(memento_id)
    size = {row.id: int(row.size) for row in live}
    cited = set().union(*policies.values()) if policies else set()
    uncited = [i for i in size if i not in cited]
    by_month: dict[str, int] = {}
    for row in live:
        month = row.expires_at.strftime("%Y-%m") if row.expires_at else "unknown"
        by_month[month] = by_month.get(month, 0) + int(row.size)
    return {
        "generated_at": to_rfc3339(now),
        "mementos": len(live),
        "bytes": sum(size.values()),
        "distinct_blob_bytes": sum({row.content_hash: int(row.size) for row in live}.values()),
        "by_policy": {name: _sized(ids, size) for name, ids in sorted(policies.items())}
        | {"uncited (grace)": _sized(uncited, size)},
        "by_label": {name: _sized(ids, size) for name, ids in sorted(labels.items())},
        "expiring_bytes_by_month": dict(sorted(by_month.items())),
        "waiting_on_lock": waiting_on_lock(index, now=now),
    }


def waiting_on_lock(index: Index, *, now: datetime | None = None) -> dict[str, object]:
    """Blobs of expired evidence that the store will not delete yet: their mementos are
    tombstoned (no longer served) and a sweep marked them ``deleting``, but their S3 Object
    Lock, which can never be shortened, runs past now — typically the first lock, written at
    the grace date, of evidence whose transcripts were shorter. The first sweep after
    ``latest`` deletes them all. A blob's date is the one the store gave when it refused a
    sweep's delete, or the one Amber last applied (``sync_locks``).

    Reads only the ``deleting`` blobs (a partial index): the cost follows what expired.
    """
    now = now or utc_now()
    with index.read() as connection:
        row = connection.execute(
            select(
                func.count(),
                func.coalesce(func.sum(blobs.c.size), 0),
                func.min(blobs.c.lock_until),
                func.max(blobs.c.lock_until),
            ).where(blobs.c.state == "deleting", blobs.c.lock_until > now)
        ).one()
    count, size, earliest, latest = row
    return {
        "blobs": int(count),
        "bytes": int(size),
        "earliest": to_rfc3339(earliest) if earliest else None,
        "latest": to_rfc3339(latest) if latest else None,
    }


def _sized(ids: Iterable[str], size: dict[str, int]) -> dict[str, int]:
    live = [i for i in set(ids) if i in size]
    return {"mementos": len(live), "bytes": sum(size[i] for i in live)}
