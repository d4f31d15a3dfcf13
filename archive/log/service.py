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
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, select, update

from archive.dates import utc_now
from archive.exceptions import NotFound, NotYetCheckpointed
from archive.index.schema import log_checkpoints, log_counters, log_leaves
from archive.log import tree
from archive.log.proofcheck import Checkpoint, verify_consistency
from archive.log.proofs import ProofDocuments, as_utc
from archive.log.signing import NoteSigner, load_signing_key, origin_from
from archive.log.timestamps import Timestamper

if TYPE_CHECKING:
    from archive.config import Settings
    from archive.index import Index

log = logging.getLogger("amber.log")
BATCH = 4096  # leaves integrated per transaction


# What a round needs to know, in one statement: both counters, the latest checkpoint, whether
# it is timestamped, and when the last timestamp was taken (log_checkpoints_stamped).
_STATE = (
    "SELECT (SELECT value FROM log_counters WHERE name = 'sequenced'), "
    "(SELECT value FROM log_counters WHERE name = 'integrated'), "
    "(SELECT max(size) FROM log_checkpoints), "
    "(SELECT tsa_response IS NOT NULL FROM log_checkpoints ORDER BY size DESC LIMIT 1), "
    "(SELECT tsa_at FROM log_checkpoints WHERE tsa_response IS NOT NULL "
    "ORDER BY size DESC LIMIT 1), "
    "(SELECT signed_at FROM log_checkpoints ORDER BY size DESC LIMIT 1)"
)


@dataclass(frozen=True)
class RoundState:
    sequenced: int
    integrated: int
    latest: int | None  # the latest checkpoint's size
    latest_stamped: bool | None
    last_stamp: datetime | None  # of the largest timestamped checkpoint
    last_signed: datetime | None  # of the latest checkpoint

    @property
    def pending(self) -> bool:
        """Leaves beyond the latest checkpoint."""
        return self.sequenced != (self.latest or 0) or self.integrated != self.sequenced

    def work_due(self, interval: float) -> bool:
        """Leaves beyond the latest checkpoint, and a checkpoint due (none signed within
        ``interval`` seconds) or a full batch waiting. Integration waits for the checkpoint
        it serves: one write transaction per checkpoint, not one per round."""
        if not self.pending:
            return False
        if self.last_signed is None or self.sequenced - self.integrated >= BATCH:
            return True
        return utc_now() - self.last_signed >= timedelta(seconds=interval)

    def stamp_due(self, interval: float) -> bool:
        """An unstamped latest checkpoint, and no timestamp within ``interval`` seconds."""
        if self.latest is None or self.latest_stamped:
            return False
        return self.last_stamp is None or utc_now() - self.last_stamp >= timedelta(seconds=interval)


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
        self._documents = ProofDocuments()
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
        # Every quarter second while leaves arrive (so a checkpoint is signed as soon as one
        # is due); once a round finds nothing to do, every checkpoint interval: an idle server
        # reads one small statement that often, and a leaf arriving then still reaches a
        # checkpoint within about an interval.
        busy, idle = min(0.25, self.checkpoint_interval), self.checkpoint_interval
        pause = busy
        while not self._stop.wait(pause):
            try:
                pause = busy if self._round(force=False) else idle
            except Exception:  # logged and retried next round: the log must not stop
                log.exception("evidence log round failed")
                pause = busy

    def step(self, *, force: bool = False) -> StoredCheckpoint | None:
        """Integrate what is sequenced; sign a checkpoint when due (``force``: whenever the
        tree grew); take a timestamp when due. The latest checkpoint."""
        self._round(force=force)
        return self.latest()

    def _round(self, *, force: bool) -> bool:
        """One round; whether leaves are waiting or it did work. One that finds nothing due
        (nothing sequenced since the last checkpoint, or the next checkpoint not due yet; no
        timestamp due) is one read of one small statement: no write lock, no write."""
        state = self._state()
        working = force or state.work_due(self.checkpoint_interval)
        if working:
            while self._integrate(force=force) == BATCH:
                pass
            state = self._state()
        working = working or state.pending
        if self.timestamper is not None and state.stamp_due(self.tsa_interval):
            self.timestamp(state.latest)
            working = True
        return working

    def _state(self) -> RoundState:
        with self.index.read() as connection:
            row = connection.exec_driver_sql(_STATE).one()
        sequenced, integrated, latest, stamped, last, signed = row
        return RoundState(
            int(sequenced),
            int(integrated),
            None if latest is None else int(latest),
            None if stamped is None else bool(stamped),
            None if last is None else as_utc(last),
            None if signed is None else as_utc(signed),
        )

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
            return self._documents.build(connection, kind, subject, tenant)


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
