"""Who may do what: API keys and roles, per-key rate limits, and the audit of reads.

- :mod:`~archive.access.keys`: keys (a public id and a secret stored only as HMAC-SHA256),
  roles and tenants, checked on every request.
- :mod:`~archive.access.ratelimit`: a token bucket per key.
- :mod:`~archive.access.audit`: who resolved which memento, when (auditors and admins).
- :mod:`~archive.access.sessions`: browser sessions, a key signed in once behind a cookie.
"""

from archive.access.audit import ReadAudit, ReadRecord
from archive.access.keys import IssuedKey, KeyInfo, KeyRing, Principal, Role
from archive.access.ratelimit import RateLimiter
from archive.access.sessions import Session, SessionBook

__all__ = [
    "IssuedKey",
    "KeyInfo",
    "KeyRing",
    "Principal",
    "RateLimiter",
    "ReadAudit",
    "ReadRecord",
    "Role",
    "Session",
    "SessionBook",
]
