"""API keys: who is calling, for which tenant, in which role.

A key looks like ``amber_<key id>_<secret>``: the key id (12 hex characters) is public — it
names the key in listings and audit logs — and the secret is 32 random bytes. The index
stores only HMAC-SHA256(server secret, whole key), so a leaked table is useless without
the server secret, which lives outside the database (``AMBER_KEY_SECRET``, or a 0600 file
in the data directory for the embedded default). Checking a key is one indexed lookup and
one HMAC, compared in constant time; verified keys are then remembered (by digest) until the
next revocation, which takes effect on the next request in every process (SQLite:
:mod:`archive.index.signals`) or replica (PostgreSQL: :mod:`archive.index.generations`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import anyio
from sqlalchemy import bindparam, insert, select, update

from archive.dates import utc_now
from archive.exceptions import ConfigurationError, InvalidInput, NotFound, Unauthenticated
from archive.index import Index
from archive.index.generations import REVOCATIONS
from archive.index.schema import api_keys
from archive.index.signals import ReadCache
from archive.secretfiles import read_or_create

KEY_PREFIX = "amber"
_KEY = re.compile(rf"{KEY_PREFIX}_([0-9a-f]{{12}})_([A-Za-z0-9_\-]{{43}})")
_TENANT = re.compile(r"[a-z0-9][a-z0-9_\-]{0,62}")
MAX_PRESENTED_KEY = 128  # longer is refused before any work is done
_VERIFIED_CACHE_SIZE = 4096  # verified keys remembered (by digest, never the key)
SECRET_FILE = "key-secret"


class Role(StrEnum):
    """What a key may do: agents write and cite, auditors read and audit, admins manage."""

    AGENT = "agent"
    AUDITOR = "auditor"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. ``roles`` is one role for a key; all of them without auth."""

    key_id: str
    tenant: str
    roles: frozenset[Role]

    @property
    def role(self) -> str:
        return "+".join(sorted(r.value for r in self.roles))


@dataclass(frozen=True)
class KeyInfo:
    """An API key as listed: its public id, tenant, role and life, never its secret."""

    key_id: str
    tenant: str
    role: Role
    name: str | None
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class IssuedKey:
    """A key just created: the only moment its secret exists outside the caller."""

    info: KeyInfo
    key: str  # shown once, never stored


def check_tenant(name: str) -> str:
    if not isinstance(name, str) or not _TENANT.fullmatch(name):
        raise InvalidInput("tenant names are 1-63 of a-z, 0-9, '-' and '_', starting alphanumeric")
    return name


def load_server_secret(configured: str | None, data_dir: Path) -> bytes:
    """The HMAC key: configured, or created once in the data directory (mode 0600)."""
    if configured:
        if len(configured) < 32:
            raise ConfigurationError("AMBER_KEY_SECRET must be at least 32 characters")
        return configured.encode("utf-8")
    return read_or_create(data_dir / SECRET_FILE, lambda: secrets.token_bytes(32))


class KeyRing:
    def __init__(self, index: Index, server_secret: bytes) -> None:
        self.index = index
        self._secret = server_secret
        # Verified keys, by fingerprint, until the next revocation (archive/index/changes.py).
        # On PostgreSQL, until the revocations generation read by the request moves.
        self._verified: ReadCache[bytes, Principal] = index.changes.cache_until_revocation(
            _VERIFIED_CACHE_SIZE
        )
        # A prepared point lookup: how a key not remembered (see authenticate) is checked.
        self._by_id = index.lookups.prepare(
            select(
                api_keys.c.tenant, api_keys.c.role, api_keys.c.key_hmac, api_keys.c.revoked_at
            ).where(api_keys.c.key_id == bindparam("key_id"))
        )

    def create(self, tenant: str, role: Role | str, name: str | None = None) -> IssuedKey:
        tenant = check_tenant(tenant)
        role = Role(role)
        if name is not None and (len(name) > 200 or any(ord(c) < 0x20 for c in name)):
            raise InvalidInput("key names are at most 200 printable characters")
        key_id = secrets.token_hex(6)
        key = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        info = KeyInfo(key_id, tenant, role, name, utc_now(), None)
        with self.index.write() as connection:
            self.index.inserts.ensure_tenants(connection, {tenant})
            connection.execute(
                insert(api_keys).values(
                    key_id=key_id,
                    tenant=tenant,
                    role=role.value,
                    name=name,
                    key_hmac=self._digest(key),
                    created_at=info.created_at,
                )
            )
        return IssuedKey(info, key)

    def list(self, tenant: str | None = None) -> list[KeyInfo]:
        query = select(api_keys).order_by(api_keys.c.created_at, api_keys.c.key_id)
        if tenant is not None:
            query = query.where(api_keys.c.tenant == tenant)
        with self.index.read() as connection:
            return [
                KeyInfo(r.key_id, r.tenant, Role(r.role), r.name, r.created_at, r.revoked_at)
                for r in connection.execute(query)
            ]

    def revoke(self, key_id: str, tenant: str | None = None) -> KeyInfo:
        """Revoke now; idempotent. With ``tenant``, keys of other tenants are 'not found'."""
        where = [api_keys.c.key_id == key_id]
        if tenant is not None:
            where.append(api_keys.c.tenant == tenant)
        # Refuses where the servers could not hear of it: they would go on trusting the key.
        with self._verified.changing(), self.index.write() as connection:
            self.index.changes.announce(connection, REVOCATIONS)  # PostgreSQL: every replica
            connection.execute(
                update(api_keys)
                .where(*where, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=utc_now())
            )
        found = [k for k in self.list(tenant) if k.key_id == key_id]
        if not found:
            raise NotFound("no such key")
        return found[0]

    def any_keys(self) -> bool:
        with self.index.read() as connection:
            return connection.execute(select(api_keys.c.key_id).limit(1)).first() is not None

    def authenticate(self, presented: str | None) -> Principal:
        """The principal behind a presented key; raises :class:`Unauthenticated`."""
        principal = self.remembered(presented)
        return principal if principal is not None else self.verify(presented)

    def remembered(self, presented: str | None) -> Principal | None:
        """The principal of a key verified since the last revocation committed in any
        process, or None: one digest and a dictionary look-up, no index read. Runs on every
        request, so it does nothing else."""
        if not presented or len(presented) > MAX_PRESENTED_KEY:
            return None
        return self._verified.get(_fingerprint(presented))

    def verify(self, presented: str | None) -> Principal:
        """Check a presented key against the index (and remember it, see :meth:`remembered`)."""
        if not presented:
            raise Unauthenticated("an API key is required: 'Authorization: Bearer <key>'")
        if len(presented) > MAX_PRESENTED_KEY:
            raise Unauthenticated("malformed API key")
        return self._verified.refresh(_fingerprint(presented), lambda: self._check(presented))

    async def verify_async(self, presented: str | None) -> Principal:
        """:meth:`verify` for an event loop: right there when the index is read in process
        (SQLite: a point lookup of microseconds, less than a thread hop), else in a worker
        thread, so the loop never waits on the network."""
        if self.index.reads_in_process:
            return self.verify(presented)
        return await anyio.to_thread.run_sync(self.verify, presented)

    def close(self) -> None:
        self._verified.close()

    def _check(self, presented: str) -> Principal:
        match = _KEY.fullmatch(presented)  # verify() refused over-long keys already
        if match is None:
            raise Unauthenticated("malformed API key")
        row = self.index.lookups.first(self._by_id, key_id=match.group(1))
        # Compare even when the id is unknown, so timing does not reveal which ids exist.
        expected = row.key_hmac if row is not None else "0" * 64
        valid = hmac.compare_digest(self._digest(presented), expected)
        if row is None or not valid or row.revoked_at is not None:
            raise Unauthenticated("unknown or revoked API key")
        return Principal(match.group(1), row.tenant, frozenset({Role(row.role)}))

    def _digest(self, key: str) -> str:
        return hmac.new(self._secret, key.encode("ascii"), hashlib.sha256).hexdigest()


def _fingerprint(presented: str) -> bytes:
    """What a verified key is remembered by: a 256-bit BLAKE2s digest, never the key itself.
    BLAKE2s because this runs on every request: Python's own, it skips OpenSSL's per-call
    setup that SHA-256 pays (186 vs 281 ns here)."""
    return hashlib.blake2s(presented.encode("utf-8", "replace")).digest()
