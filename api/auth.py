"""Authentication and authorisation for every route.

Each route declares the roles it accepts with ``Depends(require(Role.AGENT, …))``; the
dependency authenticates the bearer key, spends a rate-limit token and checks the role. With
authentication turned off (``amber serve --insecure-no-auth``, loopback only) every request
acts as a principal holding all roles in the default tenant.

A route that takes a body is authorised earlier, from the headers alone, by the request
budget (:mod:`api.budget`), before its body is read; the dependency then takes the principal
it found (``scope[ADMITTED_PRINCIPAL]``) instead of checking the key and spending a token again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from archive.access.audit import ReadAudit
from archive.access.keys import KeyRing, Principal, Role
from archive.access.ratelimit import RateLimiter
from archive.access.sessions import Session, SessionBook
from archive.exceptions import Forbidden
from archive.index import DEFAULT_TENANT

ALL_ROLES = frozenset(Role)
READERS = (Role.AGENT, Role.AUDITOR, Role.ADMIN)
_AUDITED = frozenset({Role.AUDITOR, Role.ADMIN})
NO_AUTH_PRINCIPAL = Principal(key_id="no-auth", tenant=DEFAULT_TENANT, roles=ALL_ROLES)
# ASGI scope key: the principal the request budget authorised from this request's headers.
ADMITTED_PRINCIPAL = "amber.admitted_principal"
# Each dependency made by require(), with the roles it accepts.
_ROLES_OF: dict[Callable[..., Any], frozenset[Role]] = {}


# auto_error=False: we answer missing/odd credentials ourselves, as a JSON 401.
bearer_scheme = HTTPBearer(
    scheme_name="bearer",
    auto_error=False,
    description="An Amber API key: `Authorization: Bearer amber_…`",
)


def require(*roles: Role) -> Callable[..., Awaitable[Principal]]:
    allowed = frozenset(roles)

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    ) -> Principal:
        admitted = request.scope.get(ADMITTED_PRINCIPAL)
        if isinstance(admitted, Principal) and not admitted.roles.isdisjoint(allowed):
            return admitted
        presented = credentials.credentials if credentials is not None else None
        gatekeeper: Gatekeeper = request.app.state.gatekeeper
        return await gatekeeper.authorize(presented, allowed)

    dependency.__name__ = "require_" + "_or_".join(sorted(r.value for r in allowed))
    _ROLES_OF[dependency] = allowed
    return dependency


def roles_required(dependant: Dependant) -> frozenset[Role] | None:
    """The roles a route's ``require`` dependency accepts; None when it asks for no key."""
    for sub in dependant.dependencies:
        roles = _ROLES_OF.get(sub.call) if sub.call is not None else None
        if roles is None:
            roles = roles_required(sub)
        if roles is not None:
            return roles
    return None


@dataclass
class Gatekeeper:
    """Authenticates the presented key, spends a rate-limit token and checks the role, on
    every request. Plain attributes: Starlette's ``State`` resolves each of its attributes
    through ``__getattr__``, which cost more than checking a remembered key."""

    enabled: bool
    rate_limiter: RateLimiter
    keys: KeyRing | None = None  # set when the app starts
    sessions: SessionBook | None = None  # browser sessions (api.ui), set when the app starts

    async def authorize(self, presented: str | None, allowed: frozenset[Role]) -> Principal:
        """The principal behind the presented key, having spent a rate-limit token and held
        one of the ``allowed`` roles (raises Unauthenticated, RateLimited or Forbidden)."""
        if not self.enabled:
            return NO_AUTH_PRINCIPAL
        keys = self.keys
        assert keys is not None, "the app has not started"
        # The common case, a key verified before, reads no index: no coroutine, no thread.
        principal = keys.remembered(presented)
        if principal is None:
            principal = await keys.verify_async(presented)
        self.rate_limiter.take(principal.key_id)
        if principal.roles.isdisjoint(allowed):
            raise Forbidden(forbidden_message(principal, allowed))
        return principal

    async def authorize_request(
        self, authorization: str | None, session_id: str | None, allowed: frozenset[Role]
    ) -> Principal:
        """:meth:`authorize` for the routes a browser opens (URI-Ms, TimeGates, TimeMaps):
        a Bearer key when one is sent, else the session a signed-in browser's cookie names."""
        token = bearer_token(authorization)
        if token is None and session_id is not None and self.enabled:
            return (await self.authorize_session(session_id, allowed)).principal
        return await self.authorize(token, allowed)

    async def authorize_session(self, session_id: str | None, allowed: frozenset[Role]) -> Session:
        """The live session behind a cookie, having spent a rate-limit token of its key and
        held one of the ``allowed`` roles (raises Unauthenticated, RateLimited or Forbidden)."""
        sessions = self.sessions
        assert sessions is not None, "the app has not started"
        session = await sessions.resume_async(session_id)
        self.rate_limiter.take(session.principal.key_id)
        if session.principal.roles.isdisjoint(allowed):
            raise Forbidden(forbidden_message(session.principal, allowed))
        return session


def forbidden_message(principal: Principal, allowed: frozenset[Role]) -> str:
    """Why a key may not do this, and the command that makes one that may."""
    roles = sorted(r.value for r in allowed)
    return (
        f"role {principal.role!r} may not do this; needs one of {', '.join(roles)}. "
        f"Create such a key with: amber keys create --tenant {principal.tenant} "
        f"--role {roles[0]}"
    )


def bearer_token(authorization: str | None) -> str | None:
    """The key in an ``Authorization`` header value, read exactly as ``bearer_scheme`` reads
    it (for routes served without FastAPI's dependencies)."""
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    credentials = credentials.strip()
    if not credentials or scheme.lower() != "bearer":
        return None
    return credentials


def audit_read(request: Request, principal: Principal, action: str, target: str) -> None:
    record_read(request.app.state.archive.read_audit, principal, action, target)


def record_read(audit: ReadAudit, principal: Principal, action: str, target: str) -> None:
    """Record a resolution by an auditor or admin (agents' hot-path reads are not audited)."""
    if principal.roles & _AUDITED and principal is not NO_AUTH_PRINCIPAL:
        audit.record(principal.tenant, principal.key_id, principal.role, action, target)
