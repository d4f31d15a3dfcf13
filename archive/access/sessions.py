"""Browser sessions: an API key signed in once, remembered server-side behind a cookie.

A browser cannot send ``Authorization: Bearer``, so ``/ui/login`` exchanges a key for a
session. The session id is 256 random bits; the index keeps only its SHA-256 (a leaked table
signs nobody in), with the key's id, tenant and role, and two expiries: idle (pushed forward
by use) and absolute (fixed at sign-in). Every use reads the row joined with its key, so
revoking the key or signing out ends the session on the next request, in every process.

Kept apart from the pages on purpose: another way to sign in (OIDC) only has to call
:meth:`SessionBook.start` with the principal it established.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio
from sqlalchemy import bindparam, delete, insert, or_, select, update

from archive.access.keys import Principal, Role
from archive.dates import utc_now
from archive.exceptions import Unauthenticated
from archive.index import Index
from archive.index.schema import api_keys, sessions

SESSION_ID_BYTES = 32  # 256 bits
# The idle expiry is written back at most this often: a page view is not a write each time.
_TOUCH_EVERY = timedelta(seconds=60)
_ENDED = "signed out: the session ended, expired, or its key was revoked"


@dataclass(frozen=True)
class Session:
    """A live session: who it acts as, and until when at most."""

    principal: Principal
    expires_at: datetime
    csrf_token: str


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


def csrf_token_for(session_id: str) -> str:
    """The synchronizer token of a session: derived from the secret id (which the page never
    sees), so it needs no storage, and knowing it reveals nothing of the id."""
    return hmac.new(session_id.encode("utf-8", "replace"), b"amber-csrf", "sha256").hexdigest()


class SessionBook:
    """Starts, resumes and ends sessions in the index."""

    def __init__(
        self,
        index: Index,
        idle: timedelta,
        absolute: timedelta,
        *,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.index = index
        self.idle = idle
        self.absolute = absolute
        self._clock = clock
        self._by_hash = index.lookups.prepare(
            select(
                sessions.c.tenant,
                sessions.c.key_id,
                sessions.c.role,
                sessions.c.idle_expires_at,
                sessions.c.expires_at,
                api_keys.c.revoked_at,
            )
            .join(api_keys, api_keys.c.key_id == sessions.c.key_id)
            .where(sessions.c.id_hash == bindparam("id_hash"))
        )

    def start(self, principal: Principal) -> tuple[str, Session]:
        """A new session for ``principal`` (one key, one role): its secret id, to be set as
        a cookie and never stored, and the session."""
        if len(principal.roles) != 1:
            raise Unauthenticated("only an API key can sign in")
        now = self._clock()
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        expires_at = now + self.absolute
        with self.index.write() as connection:
            # Sessions long past are dropped here, so the table holds the live ones only.
            connection.execute(
                delete(sessions).where(
                    or_(sessions.c.expires_at < now, sessions.c.idle_expires_at < now)
                )
            )
            connection.execute(
                insert(sessions).values(
                    id_hash=_hash(session_id),
                    tenant=principal.tenant,
                    key_id=principal.key_id,
                    role=principal.role,
                    created_at=now,
                    idle_expires_at=min(now + self.idle, expires_at),
                    expires_at=expires_at,
                )
            )
        return session_id, Session(principal, expires_at, csrf_token_for(session_id))

    def resume(self, session_id: str | None) -> Session:
        """The live session behind a cookie's id; raises :class:`Unauthenticated` when there
        is none: unknown, signed out, expired, or its key revoked."""
        if not session_id or len(session_id) > 2 * SESSION_ID_BYTES:
            raise Unauthenticated(_ENDED)
        id_hash = _hash(session_id)
        row = self.index.lookups.first(self._by_hash, id_hash=id_hash)
        now = self._clock()
        if row is None:
            raise Unauthenticated(_ENDED)
        if row.revoked_at is not None or now >= row.idle_expires_at or now >= row.expires_at:
            self._forget(id_hash)
            raise Unauthenticated(_ENDED)
        idle_until = min(now + self.idle, row.expires_at)
        if idle_until - row.idle_expires_at >= _TOUCH_EVERY:
            with self.index.write() as connection:
                connection.execute(
                    update(sessions)
                    .where(sessions.c.id_hash == id_hash)
                    .values(idle_expires_at=idle_until)
                )
        principal = Principal(row.key_id, row.tenant, frozenset({Role(row.role)}))
        return Session(principal, row.expires_at, csrf_token_for(session_id))

    async def resume_async(self, session_id: str | None) -> Session:
        """:meth:`resume` for an event loop: in place when the index is read in process,
        else in a worker thread."""
        if self.index.reads_in_process:
            return self.resume(session_id)
        return await anyio.to_thread.run_sync(self.resume, session_id)

    def end(self, session_id: str | None) -> None:
        """Sign out: the session is gone for every process. Idempotent."""
        if session_id and len(session_id) <= 2 * SESSION_ID_BYTES:
            self._forget(_hash(session_id))

    def _forget(self, id_hash: str) -> None:
        with self.index.write() as connection:
            connection.execute(delete(sessions).where(sessions.c.id_hash == id_hash))
