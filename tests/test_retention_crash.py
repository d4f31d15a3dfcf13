"""kill -9 a retention sweep in the middle (real process, both backends); rerun; invariants hold."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from live_server import amber_command, clean_environ, env_for
from sqlalchemy import func, select

from archive.archive import Archive
from archive.citations import CitationRequest, QuoteRequest
from archive.config import Settings
from archive.index.schema import blobs, mementos
from archive.mementos import CaptureFacts
from archive.writes import MementoRequest

EXPIRED = 240


def _deleted(archive: Archive) -> int:
    with archive.index.read() as connection:
        return int(
            connection.execute(
                select(func.count()).select_from(mementos).where(mementos.c.deleted_at.is_not(None))
            ).scalar_one()
        )


def _check(archive: Archive, kept: list[Any]) -> None:
    with archive.index.read() as connection:
        live = connection.execute(
            select(mementos.c.id, mementos.c.content_hash, mementos.c.blob_version_id).where(
                mementos.c.deleted_at.is_(None)
            )
        ).all()
    for row in live:
        archive.blobs.get(row.content_hash, row.blob_version_id)  # raises if missing or corrupt
    for memento in kept:
        assert archive.read_content(archive.get_memento("default", memento.id))


@pytest.mark.slow
def test_sweep_killed_mid_way_then_rerun(settings: Settings, tmp_path: Path) -> None:
    config = tmp_path / "amber.toml"
    config.write_text("[citations]\nretention_days = 0\n")  # uncited evidence expires at once
    zero_grace = settings.with_overrides(extra={"citations": {"retention_days": 0}})
    archive = Archive.open(zero_grace)
    try:
        for number in range(EXPIRED):
            archive.write_memento(
                MementoRequest(
                    uri_r=f"https://crash.example/{number}",
                    content=f"expired evidence {number} ".encode() * 20,
                    content_type="text/plain",
                    facts=CaptureFacts(tool="http.get"),
                )
            )
        archive.transcripts.put("default", "keep", "P5Y", {})
        kept = []
        for number in range(5):
            document = archive.write_memento(
                MementoRequest(
                    uri_r=f"https://keep.example/{number}",
                    content=f"kept evidence number {number}".encode(),
                    content_type="text/plain",
                    facts=CaptureFacts(tool="http.get"),
                )
            ).memento
            cited = archive.citations.cite(
                "default",
                "keep",
                [CitationRequest(QuoteRequest(f"number {number}"), memento_id=document.id)],
            ).citations[0]
            kept += [document, cited.passage]
    finally:
        archive.close()

    env = {**env_for(settings), "AMBER_CONFIG": str(config)}
    command = [*amber_command(), "retention", "sweep", "--batch-size", "3"]
    sweep = subprocess.Popen(
        command,
        env=clean_environ(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    archive = Archive.open(zero_grace)
    try:
        deadline = time.monotonic() + 60
        while _deleted(archive) < 20 and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.02)
        os.killpg(sweep.pid, signal.SIGKILL)
        sweep.wait()
        interrupted_at = _deleted(archive)
        assert 0 < interrupted_at < EXPIRED, (
            f"kill landed outside the sweep ({interrupted_at} deleted)"
        )
        _check(archive, kept)
    finally:
        archive.close()

    rerun = subprocess.run(
        [*command, "--json"], env=clean_environ(env), capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    archive = Archive.open(zero_grace)
    try:
        assert _deleted(archive) == EXPIRED
        _check(archive, kept)
        with archive.index.read() as connection:
            states = dict(
                connection.execute(
                    select(blobs.c.state, func.count()).group_by(blobs.c.state)
                ).all()
            )
        assert states.get("deleting", 0) == 0
        assert states.get("deleted", 0) == EXPIRED
        again = archive.retention.sweep()
        assert again.mementos_deleted == 0 and again.blobs_deleted == 0  # idempotent
    finally:
        archive.close()
