"""Request-scoped dependencies shared by the route modules."""

from __future__ import annotations

from fastapi import Request

from archive.archive import Archive
from archive.index import DEFAULT_TENANT

from api.urls import Urls


def get_archive(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


def get_urls(request: Request) -> Urls:
    urls: Urls = request.app.state.urls
    return urls


def get_tenant(request: Request) -> str:
    # Single-tenant until access control lands (issue "Access control"): every principal
    # belongs to the default tenant, and the index already scopes every query by tenant.
    return DEFAULT_TENANT
