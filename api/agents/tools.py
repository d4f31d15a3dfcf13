"""The evidence tools, framework-neutral: what ``fetch_evidence``, ``store_evidence``,
``cite``, ``resolve``, ``timemap``, ``timegate`` and ``drift`` do, over the SDK. The MCP
server (:mod:`api.mcp`) and the framework adapters (:mod:`api.agents`) expose these.

Every call goes through :class:`api.client.AsyncAmberClient`, so the server's rules (keys,
roles, tenants, evidence tools, fail-closed citing) are enforced by one code path whether
the caller is the MCP server over stdio, ``/mcp`` on ``amber serve`` or a framework adapter.
Only the fetch itself and the reading of text happen here, through the fetch guard and the
extractors of the process that runs the tools (:mod:`archive.fetch`,
:mod:`archive.citations.extract`).

A refused call raises; :func:`explain` turns the error into what the model reads: what was
refused, why, and what to do next.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired

from typing_extensions import TypedDict  # pydantic reads only this one before 3.12

from api.client import (
    AsyncAmberClient,
    CitationRecord,
    CitationRejected,
    MementoInfo,
    content_hash,
)
from api.client.errors import (
    AmberClientError,
    AmberConnectionError,
    InvalidRequestError,
    NotFoundError,
)
from api.client.wire import SEARCH_TOOL_PREFIX
from archive.citations.extract import extract_text
from archive.config import Settings
from archive.dates import parse_rfc3339
from archive.exceptions import AmberError
from archive.fetch import fetch_async

TOOL_NAMES = (
    "fetch_evidence",
    "store_evidence",
    "cite",
    "resolve",
    "timemap",
    "timegate",
    "drift",
)

DESCRIPTIONS = {
    "fetch_evidence": (
        "Read a web page through Amber. The bytes you read are captured and stored at this "
        "moment, so what you later cite is provably what you saw. Returns the page's text "
        "(truncated to text_limit characters; text_length is the full length), and the "
        "memento_id to cite it by. Read pages only through this tool if you mean to cite them."
    ),
    "store_evidence": (
        "Store output you obtained through another evidence tool (for example a knowledge "
        "base read, tool='kb.read') so that it can be cited. Search results (tool 'search.*') "
        "are never evidence and are refused: fetch the page the result points to instead."
    ),
    "cite": (
        "Cite exact quotes from stored evidence for one answer (transcript_id names the "
        "conversation). Fail-closed: either every citation is stored, or none is and each "
        "refusal says why (quote not found, search result, unknown memento). On a refusal, "
        "quote the text exactly as the evidence has it and cite again, or answer "
        "'I cannot cite this reliably.'"
    ),
    "resolve": (
        "Read back a stored memento by memento_id or URI-M: its text, capture facts and "
        "whether its bytes still hash to the content hash recorded at capture."
    ),
    "timemap": "List every capture Amber holds for a URL, oldest first.",
    "timegate": (
        "Find the capture of a URL nearest to a moment (datetime in RFC 3339, e.g. "
        "2024-05-01T12:00:00Z)."
    ),
    "drift": "The latest drift verdict of a stored citation: does the live page still say it?",
}

# What the model should do after each kind of refusal; the server's reason codes.
NEXT_STEP = {
    "quote_not_found": "Quote the words exactly as the evidence has them, or drop the claim.",
    "quote_too_common": "Quote a longer, distinctive passage (a whole sentence), or drop it.",
    "disallowed_tool": "A search result is not evidence: fetch_evidence the page itself.",
    "memento_not_found": "Cite only memento_ids that fetch_evidence or store_evidence returned.",
}
FALLBACK = "If you cannot fix it, answer 'I cannot cite this reliably.'"


class Quote(TypedDict):
    exact: str
    prefix: NotRequired[str]
    suffix: NotRequired[str]


class Citation(TypedDict):
    memento_id: str
    quote: Quote


class Memento(TypedDict):
    memento_id: str  # what cite takes
    uri_m: str  # the Memento URI an auditor resolves
    uri_r: str
    memento_datetime: str  # RFC 3339: when the bytes were captured
    content_hash: str  # blake3:…
    content_type: str
    size: int
    tool: str | None


class Evidence(Memento):
    text: str  # the extracted text, at most text_limit characters
    text_length: int  # the whole text's length
    text_limit: int
    truncated: bool


class Resolved(Evidence):
    hash_verified: bool  # the stored bytes still hash to content_hash


class StoredCitation(TypedDict):
    citation_id: str  # what drift takes
    uri_m: str  # the passage memento
    uri_r: str
    document_uri_m: str | None
    passage_hash: str
    quote_hash: str
    robust_link: str
    text_fragment_url: str | None


class Cited(TypedDict):
    transcript_id: str
    citations: list[StoredCitation]


ToolFunction = Callable[..., Awaitable[Any]]


@dataclass
class EvidenceTools:
    """The tools of one caller: ``amber`` carries its key; ``settings`` are the fetch guard
    and extraction limits of this process; ``text_limit`` caps the text returned."""

    amber: AsyncAmberClient
    settings: Settings
    text_limit: int

    async def fetch_evidence(self, url: str) -> Evidence:
        document = await fetch_async(url, self.settings)
        stored = await self.amber.write_memento(
            url,
            document.body,
            document.content_type or "application/octet-stream",
            captured_at=document.fetched_at,
            tool="http.get",
            final_url=document.final_url,
            http_status=document.status,
            headers=document.headers,
        )
        return self._evidence(document.body, stored)

    async def store_evidence(
        self,
        uri_r: str,
        content: str,
        content_type: str,
        tool: str,
        captured_at: str | None = None,
    ) -> Memento:
        if tool.startswith(SEARCH_TOOL_PREFIX):
            raise InvalidRequestError(
                f"tool {tool!r} is a search tool: a search result is never evidence",
                code="disallowed_tool",
            )
        moment = parse_rfc3339(captured_at) if captured_at else None
        stored = await self.amber.write_memento(
            uri_r, content, content_type, captured_at=moment, tool=tool
        )
        return _memento(stored)

    async def cite(
        self,
        transcript_id: str,
        citations: Sequence[Citation],
        run_id: str | None = None,
        retention: str | None = None,
    ) -> Cited:
        # The transcript is made on first use (labels merge, so a PUT never loses any);
        # the common case, citing into an existing one, costs one call.
        if retention is not None:
            await self.amber.put_transcript(transcript_id, retention=retention)
        try:
            result = await self.amber.cite(transcript_id, citations, run_id=run_id)
        except NotFoundError as error:
            if error.code != "transcript_not_found":
                raise
            await self.amber.put_transcript(transcript_id)
            result = await self.amber.cite(transcript_id, citations, run_id=run_id)
        return Cited(
            transcript_id=transcript_id, citations=[_citation(c) for c in result.citations]
        )

    def functions(self, refuse: Callable[[str], Exception]) -> list[ToolFunction]:
        """The tools as plain async functions, named and typed for a framework to read;
        a refusal raises ``refuse(what the model should read)``."""
        return [_refusing(getattr(self, name), refuse) for name in TOOL_NAMES]

    async def read_transcript(self, transcript_id: str) -> dict[str, Any]:
        """The ``amber://transcripts/{id}`` resource (not a tool)."""
        found = await self.amber.get_transcript(transcript_id)
        return {
            "transcript_id": found.id,
            "retention": found.retention,
            "retain_until": found.retain_until.isoformat(),
            "legal_hold": found.legal_hold,
            "labels": dict(found.labels),
            "citations": [_citation(c) for c in found.citations],
        }

    async def resolve(self, memento_id: str | None = None, uri_m: str | None = None) -> Resolved:
        memento = memento_id or uri_m
        if not memento:
            raise ValueError("give memento_id or uri_m (one of them)")
        info = await self.amber.get_memento(memento)
        content = await self.amber.fetch_memento(info.id, verify=False)
        actual = content_hash(content.content)
        return Resolved(
            **self._evidence(content.content, info), hash_verified=actual == info.content_hash
        )

    async def timemap(self, url: str) -> dict[str, Any]:
        return await self.amber.timemap(url)

    async def timegate(self, url: str, datetime: str) -> Memento:
        chosen = await self.amber.timegate(url, parse_rfc3339(datetime))
        return _memento(await self.amber.get_memento(chosen.memento_id))

    async def drift(self, citation_id: str) -> dict[str, Any]:
        return await self.amber.citation_drift(citation_id)

    def _evidence(self, content: bytes, memento: MementoInfo) -> Evidence:
        extracted = extract_text(content, memento.content_type, cache_key=memento.content_hash)
        text = extracted.text
        return Evidence(
            **_memento(memento),
            text=text[: self.text_limit],
            text_length=len(text),
            text_limit=self.text_limit,
            truncated=len(text) > self.text_limit,
        )


def _refusing(method: ToolFunction, refuse: Callable[[str], Exception]) -> ToolFunction:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except Exception as error:
            message = explain(error)
            if message is None:
                raise
            raise refuse(message) from None

    return call


def _citation(record: CitationRecord) -> StoredCitation:
    return StoredCitation(
        citation_id=record.id,
        uri_m=record.uri_m,
        uri_r=record.uri_r,
        document_uri_m=record.document_uri_m,
        passage_hash=record.passage_hash,
        quote_hash=record.quote_hash,
        robust_link=record.robust_link,
        text_fragment_url=record.text_fragment_url,
    )


def _memento(info: MementoInfo) -> Memento:
    return Memento(
        memento_id=info.id,
        uri_m=info.uri_m,
        uri_r=info.uri_r,
        memento_datetime=info.memento_datetime.isoformat(),
        content_hash=info.content_hash,
        content_type=info.content_type,
        size=info.size,
        tool=info.tool,
    )


def explain(error: Exception) -> str | None:
    """What the model reads when a tool is refused, or None for an error that is not a
    refusal (a bug: let it surface). Names codes, indexes and hosts, never captured text."""
    if isinstance(error, CitationRejected):
        lines = ["Citation refused; nothing was stored."]
        for item in error.errors:
            lines.append(f"- citation {item.index}: {item.reason}: {item.detail}")
            lines.append(f"  next: {NEXT_STEP.get(item.reason, FALLBACK)}")
        lines.append(FALLBACK)
        return "\n".join(lines)
    if isinstance(error, NotFoundError):
        return f"Not found: {error.message}. Use only ids and URLs Amber returned to you."
    if isinstance(error, AmberConnectionError):
        return f"Amber could not be reached ({error.message}); nothing was stored. Try again."
    if isinstance(error, AmberClientError):
        hint = NEXT_STEP.get(error.code or "", FALLBACK)
        return f"Refused ({error.code or error.status}): {error.message}. {hint}"
    if isinstance(error, AmberError):  # the fetch guard, a bad date, unreadable content
        return f"Refused ({error.code}): {error.message}"
    if isinstance(error, ValueError):
        return f"Invalid input: {error}"
    return None
