"""Evidence capture: wrap an agent's tools so that what they returned is kept, as fetched,
under a ``source_id`` the model can cite (:class:`EvidenceLocker`)."""

from __future__ import annotations

import functools
import html
import inspect
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import blake3
import httpx

from api.client.wire import (
    DEFAULT_EVIDENCE_TOOLS,
    SEARCH_TOOL_PREFIX,
    capture_headers,
    content_fields,
    content_hash,
    decode_text,
    rfc3339,
)


@dataclass(frozen=True)
class ToolResult:
    """What a fetching tool returns to the wrapper: the response exactly as received.

    ``body`` is the raw bytes (never re-encoded text: byte identity is what lets the drift
    job say ``identical`` later). Adapters: :meth:`from_httpx`, :meth:`from_mapping`, and
    any object with the same attribute names (e.g. Amber's own ``FetchedDocument``).
    """

    url: str
    body: bytes = field(repr=False)
    content_type: str = "application/octet-stream"
    status: int | None = 200
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    final_url: str | None = None
    title: str | None = None
    fetched_at: datetime | None = None  # default: when the wrapper received it

    def __post_init__(self) -> None:
        if not isinstance(self.body, bytes):
            raise TypeError("ToolResult.body must be bytes (the body as fetched)")
        if self.fetched_at is not None and self.fetched_at.tzinfo is None:
            raise ValueError("ToolResult.fetched_at must be timezone-aware")

    @classmethod
    def from_httpx(cls, response: httpx.Response, *, title: str | None = None) -> ToolResult:
        # The request URL as asked; after redirects httpx's request is the final one.
        first = response.history[0].request.url if response.history else response.request.url
        return cls(
            url=str(first),
            body=response.content,
            content_type=response.headers.get("content-type", "application/octet-stream"),
            status=response.status_code,
            headers=dict(response.headers),
            final_url=str(response.url),
            title=title,
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ToolResult:
        body = data.get("body", data.get("content"))
        if isinstance(body, str):
            body = body.encode("utf-8")
        fetched = data.get("fetched_at")
        return cls(
            url=str(data.get("url") or data.get("uri") or data.get("uri_r")),
            body=body if isinstance(body, bytes) else b"",
            content_type=str(data.get("content_type") or "application/octet-stream"),
            status=data.get("status", data.get("http_status", 200)),
            headers=dict(data.get("headers") or {}),
            final_url=data.get("final_url"),
            title=data.get("title"),
            fetched_at=datetime.fromisoformat(fetched) if isinstance(fetched, str) else fetched,
        )

    @classmethod
    def coerce(cls, output: object) -> ToolResult:
        if isinstance(output, ToolResult):
            return output
        if isinstance(output, httpx.Response):
            return cls.from_httpx(output)
        if isinstance(output, Mapping):
            return cls.from_mapping(output)
        if hasattr(output, "url") and hasattr(output, "body"):
            return cls.from_mapping(
                {
                    name: getattr(output, name)
                    for name in (
                        "url",
                        "body",
                        "content_type",
                        "status",
                        "headers",
                        "final_url",
                        "title",
                        "fetched_at",
                    )
                    if getattr(output, name, None) is not None
                }
            )
        raise TypeError(
            f"a wrapped fetch tool must return ToolResult, httpx.Response or a mapping with "
            f"url/body/content_type, not {type(output).__name__}"
        )


@dataclass(frozen=True)
class SearchHit:
    """One search result: what a search tool saw, never evidence of what the page says."""

    url: str
    title: str | None = None
    snippet: str = ""

    @classmethod
    def coerce(cls, output: object) -> SearchHit:
        if isinstance(output, SearchHit):
            return output
        if isinstance(output, ToolResult):
            return cls(output.url, output.title, decode_text(output.body, output.content_type))
        if isinstance(output, Mapping):
            return cls(
                str(output.get("url") or output.get("uri")),
                output.get("title"),
                str(output.get("snippet") or output.get("text") or ""),
            )
        raise TypeError(
            f"a wrapped search tool must yield SearchHit or mappings, not {type(output).__name__}"
        )


@dataclass(frozen=True)
class Source:
    """One captured tool output, filed in the locker under ``source_id``.

    The id is bound to the capture: it is derived from the tool, URI, content hash and fetch
    time. ``is_evidence`` is False for search results (and tools outside the locker's
    ``evidence_tools``): a hint for prompts and UIs — the server still decides.
    """

    source_id: str
    tool: str
    uri: str
    content_hash: str
    fetched_at: datetime
    content_type: str
    body: bytes = field(repr=False)
    title: str | None = None
    status: int | None = None
    final_url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    is_evidence: bool = True

    @property
    def text(self) -> str:
        """The body decoded for the model to read (the raw bytes are what gets cited)."""
        return decode_text(self.body, self.content_type)

    def for_model(self) -> str:
        """A compact rendering to hand to the model as the tool's output."""
        kind = "" if self.is_evidence else " (search result: NOT citable evidence)"
        head = f"[source_id: {self.source_id}]{kind}\nURL: {self.uri}\n"
        return head + (f"Title: {self.title}\n" if self.title else "") + "\n" + self.text

    def wire_source(self) -> dict[str, Any]:
        """The inline ``source`` of a citation: the bytes as fetched, with the capture facts."""
        wire: dict[str, Any] = {
            "uri_r": self.uri,
            **content_fields(self.body),
            "content_type": self.content_type,
            "captured_at": rfc3339(self.fetched_at),
            "tool": self.tool,
        }
        if self.final_url and self.final_url != self.uri:
            wire["final_url"] = self.final_url
        if self.status is not None:
            wire["http_status"] = self.status
        headers = capture_headers(self.headers)
        if headers:
            wire["headers"] = headers
        return wire


class EvidenceLocker:
    """Keeps every wrapped tool's output, so the agent's citations can point at it.

    ``wrap_tool(name, fn)`` (or ``@locker.tool(name)``) returns a function with ``fn``'s
    parameters (sync or async, as ``fn``) that calls it and records its output:

    - tools whose name starts with ``search.``: ``fn`` returns an iterable of
      :class:`SearchHit` (or mappings with url/title/snippet); each hit is recorded as a
      :class:`Source` with ``is_evidence=False`` and the wrapper returns the tuple;
    - any other tool (``http.get``, ``kb.read``, …): ``fn`` returns a :class:`ToolResult`,
      an ``httpx.Response`` or a mapping; the wrapper returns the recorded :class:`Source`.

    Thread-safe. ``clock`` (default: now, UTC) stamps outputs that carry no fetch time.
    """

    def __init__(
        self,
        *,
        evidence_tools: Iterable[str] = DEFAULT_EVIDENCE_TOOLS,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.evidence_tools = frozenset(evidence_tools)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._sources: dict[str, Source] = {}
        self._lock = threading.Lock()

    # -- wrapping -----------------------------------------------------------------------

    def wrap_tool(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return self.record_output(name, await fn(*args, **kwargs))

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return self.record_output(name, fn(*args, **kwargs))

        return wrapper

    def tool(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of :meth:`wrap_tool`: ``@locker.tool("http.get")``."""
        return functools.partial(self.wrap_tool, name)

    # -- recording ----------------------------------------------------------------------

    def record_output(self, tool: str, output: Any) -> Source | tuple[Source, ...]:
        if tool.startswith(SEARCH_TOOL_PREFIX):
            return self.record_search(tool, output)
        return self.record(tool, ToolResult.coerce(output))

    def record(self, tool: str, result: ToolResult) -> Source:
        body = result.body
        digest = content_hash(body)
        fetched_at = result.fetched_at or self._clock()
        title = result.title if result.title is not None else _html_title(body, result.content_type)
        evidence = tool in self.evidence_tools and not tool.startswith(SEARCH_TOOL_PREFIX)
        source = Source(
            source_id=_source_id("ev" if evidence else "nx", tool, result.url, digest, fetched_at),
            tool=tool,
            uri=result.url,
            content_hash=digest,
            fetched_at=fetched_at,
            content_type=result.content_type,
            body=body,
            title=title,
            status=result.status,
            final_url=result.final_url,
            headers=dict(result.headers),
            is_evidence=evidence,
        )
        return self._file(source)

    def record_search(self, tool: str, hits: Iterable[object]) -> tuple[Source, ...]:
        fetched_at = self._clock()
        recorded = []
        for hit in map(SearchHit.coerce, hits):
            body = hit.snippet.encode("utf-8")
            digest = content_hash(body)
            recorded.append(
                self._file(
                    Source(
                        source_id=_source_id("sr", tool, hit.url, digest, fetched_at),
                        tool=tool,
                        uri=hit.url,
                        content_hash=digest,
                        fetched_at=fetched_at,
                        content_type="text/plain; charset=utf-8",
                        body=body,
                        title=hit.title,
                        status=None,
                        is_evidence=False,
                    )
                )
            )
        return tuple(recorded)

    def _file(self, source: Source) -> Source:
        with self._lock:
            return self._sources.setdefault(source.source_id, source)

    # -- looking up ---------------------------------------------------------------------

    def get(self, source_id: str) -> Source | None:
        with self._lock:
            return self._sources.get(source_id)

    def __getitem__(self, source_id: str) -> Source:
        found = self.get(source_id)
        if found is None:
            raise KeyError(source_id)
        return found

    def __contains__(self, item: object) -> bool:
        """``source_id in locker`` (or ``source in locker``)."""
        key = item.source_id if isinstance(item, Source) else item
        with self._lock:
            return key in self._sources

    def __iter__(self) -> Iterator[Source]:
        with self._lock:
            return iter(list(self._sources.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._sources)


def _source_id(kind: str, tool: str, uri: str, digest: str, fetched_at: datetime) -> str:
    material = "\n".join((tool, uri, digest, rfc3339(fetched_at)))
    return f"{kind}_{blake3.blake3(material.encode('utf-8')).hexdigest()[:12]}"


_TITLE = re.compile(rb"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)


def _html_title(body: bytes, content_type: str) -> str | None:
    if "html" not in (content_type or "").lower():
        return None
    found = _TITLE.search(body[:65536])
    if not found:
        return None
    title = " ".join(html.unescape(decode_text(found.group(1), content_type)).split())
    return title or None
