"""The evidence log as a service: integrating sequenced leaves into the tree, signing
checkpoints, taking RFC 3161 timestamps, and answering proofs and tiles.

:meth:`EvidenceLog.step` does one round; :meth:`start` runs rounds in a background thread
(every server process may: the ``integrated`` counter row, locked in each round's
transaction, lets one process at a time extend the tree and sign).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, insert, or_, select, update

from archive.dates import to_rfc3339, utc_now
from archive.exceptions import NotFound, NotYetCheckpointed
from archive.index.schema import log_checkpoints, log_counters, log_leaves
from archive.log import tree
from archive.log.proofcheck import Checkpoint, format_tlog_proof, verify_consistency
from archive.log.signing import NoteSigner, load_signing_key, origin_from
from archive.log.timestamps import Timestamper

if TYPE_CHECKING:
    from archive.config import Settings
    from archive.index import Index

log = logging.getLogger("amber.log")
BATCH = 4096  # leaves integrated per transaction


@dataclass(frozen=True)
class StoredCheckpoint:
    size: int
    root: bytes
    note: str
    timestamp: bytes | None


class EvidenceLog:
    def __init__(
        self,
        index: Index,
        signer: NoteSigner,
        *,
        checkpoint_interval: float = 1.0,
        timestamper: Timestamper | None = None,
        tsa_interval: float = 3600.0,
    ) -> None:
        self.index = index
        self.signer = signer
        self.checkpoint_interval = checkpoint_interval
        self.timestamper = timestamper
        self.tsa_interval = tsa_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the background rounds ------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="amber-log", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        pause = min(0.25, self.checkpoint_interval)
        while not self._stop.wait(pause):
            try:
                self.step()
            except Exception:  # logged and retried next round: the log must not stop
                log.exception("evidence log round failed")

    def step(self, *, force: bool = False) -> StoredCheckpoint | None:
        """Integrate what is sequenced; sign a checkpoint when due (``force``: whenever the
        tree grew); take a timestamp when due. The latest checkpoint."""
        if force or self._work_waiting():
            while self._integrate(force=force) == BATCH:
                pass
        latest = self.latest()
        if latest is not None and self.timestamper is not None and latest.timestamp is None:
            self._timestamp_if_due(latest)
        return self.latest()

    def _work_waiting(self) -> bool:
        """Whether a round has anything to write: leaves to integrate, or a tree larger than
        the last checkpoint. Read first, so an idle server takes no write lock."""
        sequenced, integrated = self.sizes()
        if sequenced != integrated:
            return True
        latest = self.latest()
        return integrated > (0 if latest is None else latest.size)

    def _integrate(self, *, force: bool) -> int:
        """One transaction: up to BATCH leaves into the tree, then a checkpoint if due."""
        with self.index.write() as connection:
            size = self._lock_integrated(connection)
            rows = connection.execute(
                select(log_leaves.c.idx, log_leaves.c.leaf_hash)
                .where(log_leaves.c.idx >= size)
                .order_by(log_leaves.c.idx)
                .limit(BATCH)
            ).all()
            hashes = []
            for offset, row in enumerate(rows):
                if row.idx != size + offset:
                    break  # a later leaf committed first (not possible with the counter lock)
                hashes.append(bytes.fromhex(row.leaf_hash))
            if hashes:
                tree.extend(connection, size, hashes)
                connection.execute(
                    update(log_counters)
                    .where(log_counters.c.name == "integrated")
                    .values(value=size + len(hashes))
                )
            self._sign_if_due(connection, size + len(hashes), force=force)
            return len(hashes)

    def _lock_integrated(self, connection: Connection) -> int:
        query = select(log_counters.c.value).where(log_counters.c.name == "integrated")
        if connection.dialect.name == "postgresql":
            query = query.with_for_update()
        return int(connection.execute(query).scalar_one())

    def _sign_if_due(self, connection: Connection, size: int, *, force: bool) -> None:
        previous = connection.execute(
            select(log_checkpoints).order_by(log_checkpoints.c.size.desc()).limit(1)
        ).first()
        if previous is not None and previous.size >= size:
            return
        if size == 0:
            return
        now = utc_now()
        if (
            not force
            and previous is not None
            and now - previous.signed_at < timedelta(seconds=self.checkpoint_interval)
        ):
            return
        head = tree.root(connection, size)
        if previous is not None:
            # Never sign a tree that does not extend the last signed one.
            verify_consistency(
                previous.size,
                size,
                tree.consistency_proof(connection, previous.size, size),
                bytes.fromhex(previous.root),
                head,
            )
        note = self.signer.sign(Checkpoint(self.signer.name, size, head).text())
        connection.execute(
            insert(log_checkpoints).values(size=size, root=head.hex(), note=note, signed_at=now)
        )

    def _timestamp_if_due(self, latest: StoredCheckpoint) -> None:
        with self.index.read() as connection:
            last = connection.execute(
                select(log_checkpoints.c.tsa_at)
                .where(log_checkpoints.c.tsa_at.is_not(None))
                .order_by(log_checkpoints.c.tsa_at.desc())
                .limit(1)
            ).scalar()
        if last is not None and utc_now() - last < timedelta(seconds=self.tsa_interval):
            return
        self.timestamp(latest.size)

    def timestamp(self, size: int | None = None) -> StoredCheckpoint:
        """Anchor a checkpoint (the latest by default) with an RFC 3161 timestamp now."""
        if self.timestamper is None:
            raise NotFound("no time-stamping authority is configured (AMBER_TSA_URL)")
        chosen = self.latest() if size is None else self.checkpoint_at(size)
        if chosen is None:
            raise NotFound("no checkpoint to timestamp yet")
        if chosen.timestamp is not None:
            return chosen
        response = self.timestamper.stamp(chosen.note.encode("utf-8"))
        with self.index.write() as connection:
            connection.execute(
                update(log_checkpoints)
                .where(
                    log_checkpoints.c.size == chosen.size, log_checkpoints.c.tsa_response.is_(None)
                )
                .values(tsa_response=base64.b64encode(response).decode(), tsa_at=utc_now())
            )
        stamped = self.checkpoint_at(chosen.size)
        assert stamped is not None
        return stamped

    # -- reading --------------------------------------------------------------------------

    def latest(self) -> StoredCheckpoint | None:
        with self.index.read() as connection:
            row = connection.execute(
                select(log_checkpoints).order_by(log_checkpoints.c.size.desc()).limit(1)
            ).first()
        return None if row is None else _checkpoint(row)

    def checkpoint_at(self, size: int) -> StoredCheckpoint | None:
        with self.index.read() as connection:
            row = connection.execute(
                select(log_checkpoints).where(log_checkpoints.c.size == size)
            ).first()
        return None if row is None else _checkpoint(row)

    def consistency(self, old: int, new: int) -> list[bytes]:
        """RFC 9162 §2.1.4 proof between two sizes the latest checkpoint covers."""
        latest = self.latest()
        if latest is None or not 0 <= old <= new <= latest.size:
            raise NotFound("no checkpoint covers those tree sizes")
        with self.index.read() as connection:
            return tree.consistency_proof(connection, old, new)

    def tile(self, level: int, index: int, width: int) -> bytes:
        """A tlog-tiles hash tile: ``width`` hashes of tree level ``8 * level``, from
        ``index * 256``, all within the latest checkpoint."""
        latest = self.latest()
        first = index * 256
        if latest is None or not 1 <= width <= 256:
            raise NotFound("no such tile")
        height = 8 * level
        if (first + width) << height > latest.size:
            raise NotFound("no such tile in the latest checkpoint")
        ids = [(height, first + i) for i in range(width)]
        with self.index.read() as connection:
            nodes = tree.read_nodes(connection, ids)
        return b"".join(nodes[i] for i in ids)

    def proof(self, kind: str, subject: str, tenant: str) -> dict[str, Any]:
        """The proof document of a memento's or citation's first leaf (docs/design.md).

        A leaf sequenced moments ago waits for the next checkpoint that is due (at most
        the checkpoint interval, and a second), rather than getting a 404."""
        deadline = time.monotonic() + self.checkpoint_interval + 1.0
        while True:
            try:
                return self._proof(kind, subject, tenant)
            except NotYetCheckpointed:
                if time.monotonic() > deadline:
                    raise
                self.step()
                time.sleep(0.05)

    def _proof(self, kind: str, subject: str, tenant: str) -> dict[str, Any]:
        with self.index.read() as connection:
            leaf = connection.execute(
                select(log_leaves)
                .where(
                    log_leaves.c.subject == subject,
                    log_leaves.c.kind == kind,
                    log_leaves.c.tenant == tenant,
                )
                .order_by(log_leaves.c.idx)
                .limit(1)
            ).first()
            if leaf is None:
                raise NotFound(f"this {kind} has no leaf in the evidence log")
            # The first timestamped checkpoint holding the leaf, and the latest: one query.
            first_stamped = (
                select(func.min(log_checkpoints.c.size))
                .where(
                    log_checkpoints.c.size > leaf.idx,
                    log_checkpoints.c.tsa_response.is_not(None),
                )
                .scalar_subquery()
            )
            newest_size = select(func.max(log_checkpoints.c.size)).scalar_subquery()
            found = {
                row.size: row
                for row in connection.execute(
                    select(log_checkpoints).where(
                        or_(
                            log_checkpoints.c.size == first_stamped,
                            log_checkpoints.c.size == newest_size,
                        )
                    )
                )
            }
            if not found or max(found) <= leaf.idx:
                raise NotYetCheckpointed("this leaf is not in a signed checkpoint yet; retry")
            newest = _checkpoint(found[max(found)])
            chosen = _checkpoint(found[min(found)])
            # Both proofs' nodes in one statement.
            inclusion = tree.inclusion_plan(leaf.idx, chosen.size)
            consistency_plan = (
                tree.consistency_plan(chosen.size, newest.size)
                if chosen.size != newest.size
                else []
            )
            hashes = tree.resolve(connection, inclusion + consistency_plan)
            path, consistency = hashes[: len(inclusion)], hashes[len(inclusion) :]
        return {
            "index": leaf.idx,
            "statement": leaf.statement,
            "leaf_hash": base64.b64encode(bytes.fromhex(leaf.leaf_hash)).decode(),
            "sequenced_at": to_rfc3339(leaf.sequenced_at),
            "proof": format_tlog_proof(leaf.idx, path, chosen.note),
            "timestamp": None
            if chosen.timestamp is None
            else base64.b64encode(chosen.timestamp).decode(),
            "consistency": {
                "old_size": chosen.size,
                "new_size": newest.size,
                "proof": [base64.b64encode(h).decode() for h in consistency],
                "checkpoint": newest.note,
            },
        }

    def sizes(self) -> tuple[int, int]:
        """(sequenced, integrated) leaf counts."""
        with self.index.read() as connection:
            values = dict(
                connection.execute(select(log_counters.c.name, log_counters.c.value)).all()
            )
        return int(values["sequenced"]), int(values["integrated"])


def _checkpoint(row: Any) -> StoredCheckpoint:
    stamp = None if row.tsa_response is None else base64.b64decode(row.tsa_response)
    return StoredCheckpoint(row.size, bytes.fromhex(row.root), row.note, stamp)


def open_evidence_log(settings: Settings, index: Index, base_url: str) -> EvidenceLog:
    signer = NoteSigner(
        origin_from(settings.log_origin, base_url),
        load_signing_key(settings.log_signing_key, settings.data_dir),
    )
    return EvidenceLog(
        index,
        signer,
        checkpoint_interval=settings.log_checkpoint_interval,
        timestamper=Timestamper(settings.tsa_url) if settings.tsa_url else None,
        tsa_interval=settings.tsa_interval,
    )
