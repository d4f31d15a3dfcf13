"""Browser sessions (archive/access/sessions.py), on both index backends: stored only as a
hash, ended by idle and absolute expiry, by sign-out and by revoking the key."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from archive.access.sessions import SessionBook, csrf_token_for
from archive.archive import Archive
from archive.dates import utc_now
from archive.exceptions import Unauthenticated
from archive.index.schema import sessions


class Clock:
    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now


def _book(archive: Archive, clock: Clock) -> SessionBook:
    return SessionBook(
        archive.index, idle=timedelta(minutes=30), absolute=timedelta(hours=12), clock=clock
    )


def test_a_session_acts_as_its_key_and_is_stored_only_as_a_hash(archive: Archive) -> None:
    issued = archive.keys.create("acme", "auditor")
    principal = archive.keys.verify(issued.key)
    book = _book(archive, Clock())
    session_id, started = book.start(principal)
    assert len(session_id) >= 43  # 256 bits, base64url
    assert book.resume(session_id).principal == principal
    assert started.csrf_token == csrf_token_for(session_id) != session_id
    with archive.index.read() as connection:
        rows = [tuple(r) for r in connection.execute(select(sessions))]
    assert len(rows) == 1
    assert all(session_id not in str(value) for value in rows[0])
    assert issued.key not in repr(rows)


def test_idle_and_absolute_expiry_end_a_session(archive: Archive) -> None:
    principal = archive.keys.verify(archive.keys.create("acme", "auditor").key)
    clock = Clock()
    book = _book(archive, clock)
    idle_id, _ = book.start(principal)
    clock.now += timedelta(minutes=29)
    book.resume(idle_id)  # used: the idle expiry moves on
    clock.now += timedelta(minutes=29)
    book.resume(idle_id)
    clock.now += timedelta(minutes=31)
    with pytest.raises(Unauthenticated):
        book.resume(idle_id)
    busy_id, _ = book.start(principal)
    for _ in range(24):  # busy all along: a request every 29'59" for 11 h 59'36"
        clock.now += timedelta(minutes=29, seconds=59)
        book.resume(busy_id)
    clock.now += timedelta(minutes=29, seconds=59)  # within idle, past the 12 h
    with pytest.raises(Unauthenticated):
        book.resume(busy_id)


def test_sign_out_and_revocation_end_sessions(archive: Archive) -> None:
    issued = archive.keys.create("acme", "auditor")
    principal = archive.keys.verify(issued.key)
    book = _book(archive, Clock())
    signed_out, _ = book.start(principal)
    revoked, _ = book.start(principal)
    other = archive.keys.verify(archive.keys.create("acme", "auditor").key)
    kept, _ = book.start(other)
    book.end(signed_out)
    with pytest.raises(Unauthenticated):
        book.resume(signed_out)
    book.resume(revoked)
    archive.keys.revoke(issued.info.key_id)
    with pytest.raises(Unauthenticated):
        book.resume(revoked)
    assert book.resume(kept).principal == other
    # A second book over the same index (another process) sees the same: nothing cached.
    again = _book(archive, Clock())
    with pytest.raises(Unauthenticated):
        again.resume(revoked)
    assert again.resume(kept).principal == other


@pytest.mark.parametrize("presented", [None, "", "x" * 65, "no-such-session-id"])
def test_unknown_or_odd_ids_are_unauthenticated(archive: Archive, presented: str | None) -> None:
    with pytest.raises(Unauthenticated):
        _book(archive, Clock()).resume(presented)
