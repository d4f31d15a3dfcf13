"""Amber's Python SDK: the HTTP client agents and auditors use, and evidence capture for agents.

Two layers, both on httpx, each in a sync and an async flavour that share every line of
request building, retrying policy and response parsing (only the I/O differs):

**Low level** — :class:`AmberClient` / :class:`AsyncAmberClient`::

    with AmberClient("http://127.0.0.1:8000", api_key) as amber:
        amber.put_transcript("conv-42", retention="regulated", labels={"agent": "hr-bot"})
        memento = amber.write_memento("https://example.org/", b"<p>hi</p>", "text/html")
        result = amber.cite("conv-42", [{"memento_id": memento.id, "quote": {"exact": "hi"}}])
        amber.fetch_memento(result.citations[0].uri_m).content   # the passage, re-hashed

**Agent level** — an :class:`EvidenceLocker` wraps the agent's tools and keeps what they
returned (raw body bytes, content hash, URI, title, tool, fetch time) under a ``source_id``
that the model cites; :meth:`AmberClient.cite_answer` sends an :class:`Answer`'s citations
with their captured sources inline and returns a :class:`CitedAnswer` with URI-Ms and
Robust Links::

    locker = EvidenceLocker()
    http_get = locker.wrap_tool("http.get", my_fetch)      # returns a Source (.source_id)
    search = locker.wrap_tool("search.web", my_search)     # Sources flagged is_evidence=False
    ...
    answer = Answer("Leave is 16 weeks.", [Claim(page.source_id, "sixteen weeks")])
    cited = amber.cite_answer("conv-42", answer, locker, run_id="run-7")
    print(cited.render_markdown())

Policy, and who decides what:

- **The server is the authority** on every citation: allowed tools (search results are
  never evidence unless the server says so), whether the quote is in the document, limits.
  The SDK refuses only what it alone can know: a ``source_id`` that no wrapped tool
  captured (reason ``unknown_evidence``, nothing is sent) and, with ``required=True``
  (the default, as the server's ``citations.required``), an answer without citations
  (reason ``no_citations``). Citing a search result is therefore *sent* and answered by the
  server's ``disallowed_tool`` rejection, so a server configured with
  ``allow_search_results_as_evidence`` is obeyed, not second-guessed.
- ``mode="fail_closed"`` (default) raises :class:`CitationRejected` carrying every
  per-citation error; ``mode="degrade"`` returns the answer rewritten to the safe form
  (``"I cannot cite this reliably."`` plus the reasons) instead. Either way nothing was
  stored. ``keep_valid=True`` stores the valid citations and drops only the invalid ones
  (server ``fail_closed: false``); the answer then fails only when none is valid.
- After a success the SDK checks that the server's ``document_hash`` of every citation is
  the BLAKE3 of the bytes the tool returned (:class:`EvidenceIntegrityError` otherwise).

Retries: every call is idempotent — GET/PUT by nature, and every POST carries an
``Idempotency-Key`` (a uuid4 per logical call, reused by each of its retries; the body
bytes are serialised once) — so connection errors, timeouts, 429 and 503 are retried a
bounded number of times with exponential backoff and jitter, honouring ``Retry-After``.
Other errors raise at once, mapped to one exception hierarchy rooted at
:class:`AmberClientError`.

Where each part lives: ``errors`` (that hierarchy), ``models`` (the records returned),
``transport`` (running a call: retries, errors), ``calls`` (every call, described once),
``evidence`` (the locker and what tools return), ``answers`` (citing an answer),
``sync_client`` and ``async_client``, and ``wire`` (what the SDK and the server must agree
on). The SDK needs only httpx and blake3: it imports neither the server nor its framework.
"""

from api.client.answers import SAFE_ANSWER, Answer, CitedAnswer, Claim, safe_answer
from api.client.async_client import AsyncAmberClient
from api.client.errors import (
    AmberClientError,
    AmberConnectionError,
    AuthError,
    CitationRejected,
    ConflictError,
    EvidenceIntegrityError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
)
from api.client.evidence import EvidenceLocker, SearchHit, Source, ToolResult
from api.client.models import (
    CitationError,
    CitationRecord,
    CiteResult,
    MementoContent,
    MementoInfo,
    TimeGateResult,
    Transcript,
)
from api.client.sync_client import AmberClient
from api.client.transport import RetryPolicy
from api.client.wire import content_hash

__all__ = [
    "SAFE_ANSWER",
    "AmberClient",
    "AmberClientError",
    "AmberConnectionError",
    "Answer",
    "AsyncAmberClient",
    "AuthError",
    "CitationError",
    "CitationRecord",
    "CitationRejected",
    "CiteResult",
    "CitedAnswer",
    "Claim",
    "ConflictError",
    "EvidenceIntegrityError",
    "EvidenceLocker",
    "InvalidRequestError",
    "MementoContent",
    "MementoInfo",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RetryPolicy",
    "SearchHit",
    "ServerError",
    "ServiceUnavailableError",
    "Source",
    "TimeGateResult",
    "ToolResult",
    "Transcript",
    "content_hash",
    "safe_answer",
]
