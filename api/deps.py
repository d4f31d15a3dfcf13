"""Request-scoped dependencies shared by the route modules."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Header, Request
from fastapi.dependencies.models import Dependant

from api.urls import Urls
from archive.archive import Archive
from archive.exceptions import InvalidInput

F = TypeVar("F", bound=Callable[..., Any])


# Plain lookups are ``async def`` on purpose: FastAPI runs a sync dependency in the thread
# pool, and a thread hop per lookup per request costs more than the lookup.
async def get_archive(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


async def get_urls(request: Request) -> Urls:
    urls: Urls = request.app.state.urls
    return urls


def get_and_head(router: APIRouter, path: str, **options: Any) -> Callable[[F], F]:
    """Register a GET route and its HEAD twin with distinct OpenAPI operation ids.

    FastAPI answers HEAD with 405 unless a route allows it, and one route listing both
    methods would give both operations the same id in /openapi.json.
    """

    def register(endpoint: F) -> F:
        name = endpoint.__name__
        router.get(path, operation_id=name, **options)(endpoint)
        router.head(path, operation_id=f"{name}_head", **options)(endpoint)
        return endpoint

    return register


IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def checked_idempotency_key(key: str | None) -> str | None:
    """The optional ``Idempotency-Key`` header, validated (printable ASCII, 1-255)."""
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidInput("Idempotency-Key must be 1-255 printable ASCII characters")
    return key


async def idempotency_key(
    key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
) -> str | None:
    """The route's ``Idempotency-Key``. A route with a body has had it checked already, before
    its body was read (:class:`api.budget.RequestBudget`); this documents the header."""
    return checked_idempotency_key(key)


def takes_idempotency_key(dependant: Dependant) -> bool:
    """Whether a route reads the ``Idempotency-Key`` header (:func:`idempotency_key`)."""
    return any(
        sub.call is idempotency_key or takes_idempotency_key(sub) for sub in dependant.dependencies
    )
