"""Fetching for the drift job: one guarded client per run, host gates, conditional requests.

Every fetch goes through the fetch guard (:func:`archive.fetch.fetch_async`: SSRF guard,
size cap, every redirect vetted and recorded). At most ``[drift] host_concurrency``
requests are in flight to one host, and their starts are at least ``host_delay_seconds``
apart; a fetch that fails is a :class:`Live` with an error, never an exception.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx

from archive.citations import ExtractedText, PreparedText
from archive.config import DriftPolicy, Settings
from archive.drift.records import DueCitation
from archive.drift.rules import Soft404Signals
from archive.exceptions import AmberError
from archive.fetch import FetchedDocument, fetch_async


@dataclass
class Live:
    """The live representation of one URI-R, fetched once per run."""

    document: FetchedDocument | None
    error: str | None
    fetch_ms: int | None
    extracted: ExtractedText | None = None
    prepared: PreparedText | None = None
    extract_ms: int | None = None
    live_hash: str | None = None
    title: str | None = None
    soft404: Soft404Signals | None = None
    contents: dict[str, bytes] = field(default_factory=dict)  # bytes of mementos made


class HostGate:
    """At most ``concurrency`` requests in flight to one host, starts ``delay`` apart."""

    def __init__(self, concurrency: int, delay: float) -> None:
        self._slots = asyncio.Semaphore(concurrency)
        self._order = asyncio.Lock()
        self._delay = delay
        self._next = 0.0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._slots:
            async with self._order:
                loop = asyncio.get_running_loop()
                wait = self._next - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._next = loop.time() + self._delay
            yield


class Fetcher:
    """The fetches of one run, through ``client`` (a guarded async client) and host gates."""

    def __init__(self, client: httpx.AsyncClient, settings: Settings, policy: DriftPolicy) -> None:
        self.client = client
        self.settings = settings  # with the drift job's fetch timeout
        self.policy = policy
        self.gates: dict[str, HostGate] = {}

    def _gate(self, host: str) -> HostGate:
        gate = self.gates.get(host)
        if gate is None:
            gate = self.gates[host] = HostGate(
                self.policy.host_concurrency, self.policy.host_delay_seconds
            )
        return gate

    async def fetch(self, url: str, host: str, headers: dict[str, str]) -> Live:
        async with self._gate(host).slot():
            started = time.monotonic()
            try:
                document = await fetch_async(
                    url, self.settings, headers=headers, client=self.client
                )
            except AmberError as error:
                return Live(
                    None,
                    f"{error.code}: {error.message}",
                    round((time.monotonic() - started) * 1000),
                )
        return Live(document, None, document.elapsed_ms)


def conditional(group: Sequence[DueCitation]) -> dict[str, str]:
    """Validators from the capture facts, only when every citation cites the same capture."""
    captures = {
        (c.document_hash, c.headers.get("etag"), c.headers.get("last-modified")) for c in group
    }
    if len(captures) != 1:
        return {}
    _, etag, modified = next(iter(captures))
    headers = {}
    if etag:
        headers["If-None-Match"] = etag
    if modified:
        headers["If-Modified-Since"] = modified
    return headers


def sibling_url(uri_r: str) -> str:
    """A random URL next to ``uri_r``: what its site answers for a page that never existed."""
    return str(httpx.URL(uri_r).join(f"amber-drift-probe-{secrets.token_hex(8)}"))
