"""Caches keyed by content are per tenant: one tenant's work is never reused for another.

A reused result answers in a fraction of the time of a fresh one, so a shared cache would
let a tenant learn, by timing its own request, that another tenant handled the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

import archive.citations.desk as desk_module
import archive.citations.extract as extract_module
from api.app import create_app
from archive.access.keys import Role
from archive.archive import Archive
from archive.citations import extract_text
from archive.config import Settings
from archive.hashing import content_address

PAGE = b"<html><body><p>The quarterly figures rose by nine percent.</p></body></html>"
TENANTS = ("alpha", "beta")


class Counted:
    """Counts calls of the HTML extractor and of text preparation, as the desk makes them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.extractions: list[bytes] = []
        self.preparations = 0
        real_html, real_prepare = extract_module.html_text, desk_module.prepare

        def html_text(content: bytes, charset: str | None = None) -> str:
            self.extractions.append(content)
            return real_html(content, charset)

        def prepare(text: str, *, pdf: bool = False) -> Any:
            self.preparations += 1
            return real_prepare(text, pdf=pdf)

        monkeypatch.setattr(extract_module, "html_text", html_text)
        monkeypatch.setattr(desk_module, "prepare", prepare)


@pytest.fixture()
def agents(settings: Settings, archive: Archive) -> Iterator[tuple[TestClient, dict[str, str]]]:
    keys = {t: archive.keys.create(t, Role.AGENT).key for t in TENANTS}
    app = create_app(settings.with_overrides(rate_limit_per_second=0), archive=archive, auth=True)
    with TestClient(app) as client:
        for key in keys.values():
            opened = client.put(
                "/api/v1/transcripts/t-1", json={}, headers={"Authorization": f"Bearer {key}"}
            )
            assert opened.status_code == 201, opened.text
        yield client, keys


def _cite(client: TestClient, key: str) -> None:
    response = client.post(
        "/api/v1/transcripts/t-1/citations",
        json={
            "citations": [
                {
                    "quote": {"exact": "rose by nine percent"},
                    "source": {
                        "uri_r": "https://figures.example/q3",
                        "content": PAGE.decode(),
                        "content_type": "text/html; charset=utf-8",
                        "captured_at": "2025-03-01T10:00:00Z",
                        "tool": "http.get",
                    },
                }
            ]
        },
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code in (200, 201), response.text


def test_a_tenant_never_reuses_another_tenants_extraction(
    agents: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, keys = agents
    extract_module.clear_cache()
    counted = Counted(monkeypatch)
    _cite(client, keys["alpha"])
    _cite(client, keys["alpha"])
    # The same tenant citing the same page again reuses its own work.
    assert (len(counted.extractions), counted.preparations) == (1, 1)
    _cite(client, keys["beta"])
    # Another tenant citing identical bytes does the work itself.
    assert (len(counted.extractions), counted.preparations) == (2, 2)
    _cite(client, keys["beta"])
    assert (len(counted.extractions), counted.preparations) == (2, 2)
    extract_module.clear_cache()


def test_extraction_cache_is_scoped_by_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    extract_module.clear_cache()
    counted = Counted(monkeypatch)
    key = content_address(PAGE)
    for tenant in ("alpha", "beta", "alpha", None, "beta", None):
        extract_text(PAGE, "text/html", tenant=tenant, cache_key=key)
    assert len(counted.extractions) == 3  # one per scope: alpha, beta, no tenant
    extract_module.clear_cache()
