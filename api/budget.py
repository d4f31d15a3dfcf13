"""The request budget at the HTTP edge: every request with a JSON body passes here first.

In this order, and nowhere else:

1. Authenticate from the headers and check the route's roles (401, 403, 429) before a byte
   of the body is read: a client without a valid key costs a header check, however large
   or malformed what it sends. A route's ``Idempotency-Key`` is checked there too (400).
2. Read the body up to ``AMBER_MAX_BODY_BYTES`` (413).
3. Parse it under the JSON budget (:class:`archive.budget.JsonBudget`, 422 ``over_budget``
   naming the bound and where it broke) and validate it against the route's model (422
   ``invalid_request``, the problems capped by :func:`api.errors.invalid_request_response`).
   A body over :data:`INLINE_BYTES` is parsed and validated in a worker thread, so other
   requests are served meanwhile.

A body that passes is handed on with what the budget made of it: FastAPI's route gets the
parsed JSON (:class:`JudgedRequest`: no second parse on the event loop) and validates it
again, cheaply now that it is known to be valid; the memento write uses the model directly. What this
layer does not judge (another Content-Type, an empty body, ``null``, text that is not
UTF-8) is handed on too, and FastAPI answers it as it always did.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import Enum
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette import types as asgi
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from api.auth import ADMITTED_PRINCIPAL, Gatekeeper, bearer_token, roles_required
from api.deps import checked_idempotency_key, takes_idempotency_key
from api.errors import (
    amber_error_response,
    invalid_request_response,
    malformed_json_response,
    too_large_response,
)
from archive.access.keys import Principal, Role
from archive.budget import JsonBudget
from archive.exceptions import AmberError, OverBudget

# Bodies up to this size are parsed on the event loop: within the budget that costs well
# under a millisecond, less than the hop to a worker thread.
INLINE_BYTES = 16 * 1024


@dataclass(frozen=True)
class BodyRoute:
    """What the budget needs to know about one route that takes a JSON body."""

    roles: frozenset[Role] | None  # None: the route asks for no key
    model: TypeAdapter[Any]
    json_without_content_type: bool = False  # parse a body sent without Content-Type
    idempotency_key: bool = False  # check its Idempotency-Key header, before the body


@dataclass(frozen=True)
class Admitted:
    """A request let through: who sent it, its body, the body parsed (``data``) and
    validated against the route's model (``value``); both None when the budget left
    judging the body to FastAPI."""

    principal: Principal | None
    raw: bytes
    data: Any = None
    value: Any = None

    @property
    def judged(self) -> bool:
        return self.value is not None


class _Deferred(Enum):
    TO_FASTAPI = "FastAPI judges this body as it always did"


@dataclass
class RequestBudget:
    """The one place the budget is enforced (see the module docstring)."""

    gatekeeper: Gatekeeper
    max_body_bytes: int
    json_budget: JsonBudget
    max_error_items: int

    async def admit(
        self, route: BodyRoute, scope: asgi.Scope, receive: asgi.Receive
    ) -> Admitted | Response | None:
        """The request, authorised and within budget; or the answer refusing it; or None
        when the client left before sending all of its body."""
        headers = _headers(scope)
        method: str = scope["method"]
        path: str = scope["path"]
        principal = None
        if route.roles is not None:
            try:
                principal = await self.gatekeeper.authorize(
                    bearer_token(headers.get(b"authorization")), route.roles
                )
            except AmberError as error:
                return amber_error_response(error, method, path)
            scope[ADMITTED_PRINCIPAL] = principal
        if route.idempotency_key:
            try:
                checked_idempotency_key(headers.get(b"idempotency-key"))
            except AmberError as error:
                return amber_error_response(error, method, path)
        declared = headers.get(b"content-length")
        if declared is not None and _over(declared, self.max_body_bytes):
            return too_large_response()
        raw = await _read_body(receive, self.max_body_bytes)
        if raw is _Unread.TOO_LARGE:
            return too_large_response()
        if raw is _Unread.DISCONNECTED:
            return None
        assert isinstance(raw, bytes)
        content_type = headers.get(b"content-type")
        if not raw or not _is_json(content_type, route):
            return Admitted(principal, raw)
        if len(raw) <= INLINE_BYTES:
            outcome = self.judge(raw, route.model)
        else:
            outcome = await run_in_threadpool(self.judge, raw, route.model)
        if content_type is None and isinstance(outcome, AmberError | Response):
            # Parsed only in case it is valid: FastAPI refuses a body without Content-Type.
            return Admitted(principal, raw)
        if isinstance(outcome, AmberError):
            return amber_error_response(outcome, method, path)
        if isinstance(outcome, Response):
            return outcome
        if outcome is _Deferred.TO_FASTAPI:
            return Admitted(principal, raw)
        data, value = outcome
        return Admitted(principal, raw, data, value)

    def judge(self, raw: bytes, model: TypeAdapter[Any]) -> Any:
        """The body parsed within budget and validated (``(data, value)``), or why it is
        refused (an error or the answer), or ``_Deferred.TO_FASTAPI``. Runs in a worker
        thread for large bodies."""
        try:
            data = self.json_budget.loads(raw)
        except OverBudget as error:
            return error
        except json.JSONDecodeError:
            return malformed_json_response()
        except (ValueError, RecursionError):
            return _Deferred.TO_FASTAPI  # not text: FastAPI's own 400
        if data is None:
            return _Deferred.TO_FASTAPI  # FastAPI reads null as a missing body
        try:
            return data, model.validate_python(data, from_attributes=True)
        except ValidationError as error:
            return invalid_request_response(
                _problems(error, self.max_error_items), error.error_count(), self.max_error_items
            )


class BudgetedRoute(APIRoute):
    """A FastAPI route whose body passes :class:`RequestBudget` before FastAPI reads it
    (FastAPI reads and parses a body before it solves any dependency, the key check
    included). Routers whose routes take a body use it as their ``route_class``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler
        route = BodyRoute(
            roles=roles_required(self.dependant),
            model=TypeAdapter(self.body_field.field_info.annotation),
            idempotency_key=takes_idempotency_key(self.dependant),
        )

        async def budgeted(request: Request) -> Response:
            if ADMITTED_PRINCIPAL in request.scope:
                return await handler(request)  # admitted already (the memento write)
            budget: RequestBudget = request.app.state.budget
            admitted = await budget.admit(route, request.scope, request.receive)
            if admitted is None:
                raise ClientDisconnect()
            if isinstance(admitted, Response):
                return admitted
            receive = replay(admitted.raw, request.receive)
            if admitted.judged:
                return await handler(JudgedRequest(request.scope, receive, admitted.data))
            return await handler(Request(request.scope, receive))

        return budgeted


class JudgedRequest(Request):
    """A request whose JSON body the budget has parsed: ``json()`` answers with it, so
    FastAPI does not parse it a second time on the event loop (a 30 MB document would
    hold the loop, and the GIL, for a long moment)."""

    def __init__(self, scope: asgi.Scope, receive: asgi.Receive, data: Any) -> None:
        super().__init__(scope, receive)
        self._judged = data

    async def json(self) -> Any:
        return self._judged


def _problems(error: ValidationError, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` problems, as FastAPI reports them (under ``body``)."""
    listed = error.errors(include_url=False, include_context=False, include_input=False)
    return [{**item, "loc": ("body", *item["loc"])} for item in listed[:limit]]


def _headers(scope: asgi.Scope) -> dict[bytes, str]:
    """The first value of each header (as ``bearer_scheme`` reads Authorization)."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name not in found:
            found[name] = value.decode("latin-1")
    return found


def _is_json(content_type: str | None, route: BodyRoute) -> bool:
    """Whether FastAPI would parse the body as JSON (``application/json``, ``…+json``)."""
    if content_type is None:
        return route.json_without_content_type
    media_type = content_type.split(";", 1)[0].strip().lower()
    kind, _, subtype = media_type.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


class _Unread(Enum):
    TOO_LARGE = "over the body size limit"
    DISCONNECTED = "the client left before sending it all"


def _over(content_length: str, limit: int) -> bool:
    try:
        return int(content_length) > limit
    except ValueError:
        return False  # the bytes actually read are counted instead


async def _read_body(receive: asgi.Receive, limit: int) -> bytes | _Unread:
    """The request body, or why it was not read."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return _Unread.DISCONNECTED
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return _Unread.TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(raw: bytes, receive: asgi.Receive) -> asgi.Receive:
    """A ``receive`` that hands the already-read body over again, then defers to the real one."""
    replayed = False

    async def replayer() -> asgi.Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return replayer
