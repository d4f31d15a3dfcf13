"""The citation desk: checks each citation of a request (evidence, source, quote), fail-closed.

For each citation in a request the desk resolves its evidence (a stored document memento,
or the captured document inline), checks the capturing tool against the configured
evidence sources (search results are never evidence unless configured), extracts the
document's visible text with a named, versioned extractor, and finds the quote in it —
exactly, or under the documented normalisation; never fuzzily. Only then does it store,
through the ledger (:mod:`archive.citations.ledger`): the passage (quote plus context) as a
``passage`` memento, the document only by its facts unless ``keep_document`` is on, and the
citation with its W3C selectors, all in one transaction after the blobs are durable.
Fail-closed (the default): one invalid citation
rejects the request and nothing is stored.

Every decision is logged as one structured line with ids and hashes — never the quote or
the captured text.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from archive.blobstore.base import BlobStore
from archive.citations.extract import ExtractedText, extract_text
from archive.citations.ledger import CitationLedger, Redate, StoreJob
from archive.citations.locate import locate
from archive.citations.normalise import PreparedText, prepare
from archive.citations.records import (
    Citation,
    CitationError,
    CitationRequest,
    CiteResult,
    Evidence,
    PlannedCitation,
)
from archive.citations.textmemory import TextMemory
from archive.citations.transcripts import TranscriptBook
from archive.committer import GroupCommitter
from archive.config import CitationPolicy, ExtractionLimits
from archive.dates import utc_now
from archive.exceptions import (
    AmberError,
    CitationsRejected,
    ExtractionLimitExceeded,
    InvalidInput,
    NotFound,
)
from archive.hashing import content_address
from archive.index import Index
from archive.mementos import (
    CaptureFacts,
    Memento,
    Scope,
    check_captured_at,
    check_media_type,
    check_tool,
    select_headers,
)
from archive.uri import parse_uri_r

log = logging.getLogger("amber.citations")

_PREPARED_CACHE_SIZE = 32

# What makes two citations of one request cite the same evidence (read and checked once):
# the memento id, or every field of the document handed over inline.
_SourceKey = tuple[
    str,
    bytes,
    str,
    datetime | None,
    str | None,
    str | None,
    int | None,
    tuple[tuple[str, str], ...],
]
_EvidenceKey = tuple[str | None, _SourceKey | None]


class _Rejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class CitationDesk:
    """Checks citations at the moment they are made, and stores the valid ones.

    Collaborators are passed in by the composition root (:class:`archive.archive.Archive`):
    the index and blob store, the transcript book, the ``[citations]`` policy, the internal
    URI schemes, three of the facade's own operations — reading a document memento
    (``get_memento``, ``read_content``) and the retention lock a new blob starts with
    (``initial_lock``) — retention's ``redate``, which dates cited evidence from the
    transcripts citing it, and the extraction limits.

    A document over an extraction limit refuses the whole request
    (:class:`ExtractionLimitExceeded`, whatever ``fail_closed`` says): the limits are one
    budget per request, and a document that broke one would break it again for every other
    citation of it.
    """

    def __init__(
        self,
        *,
        index: Index,
        blobs: BlobStore,
        transcripts: TranscriptBook,
        policy: CitationPolicy,
        internal_schemes: tuple[str, ...],
        get_memento: Callable[[str, str], Memento],
        read_content: Callable[[Memento], bytes],
        initial_lock: Callable[[datetime], datetime | None],
        redate: Redate,
        extraction_limits: ExtractionLimits | None = None,
        memory: TextMemory | None = None,
    ) -> None:
        self.index = index
        self.extraction_limits = extraction_limits or ExtractionLimits()
        self.transcripts = transcripts
        self.policy = policy
        self.internal_schemes = internal_schemes
        self.get_memento = get_memento
        self.read_content = read_content
        self.ledger = CitationLedger(index, blobs, transcripts, policy, initial_lock, redate)
        # (tenant, document hash, extractor, extractor version, media type) -> prepared text
        self._prepared_cache: OrderedDict[tuple[str, str, str, str, str], PreparedText] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        # Prepared text is text of captured bytes: an erasure must reach it (textmemory).
        self.memory = memory if memory is not None else TextMemory(None)
        self.memory.register(self._forget_prepared)

    @property
    def committer(self) -> GroupCommitter[StoreJob, CiteResult]:
        """The group committer storing accepted citations (:attr:`CitationLedger.committer`)."""
        return self.ledger.committer

    def close(self) -> None:
        """Commit what is queued, then stop the committer."""
        self.ledger.close()

    # -- the citation path ---------------------------------------------------------------

    def cite(
        self,
        tenant: str,
        transcript_id: str,
        requests: Sequence[CitationRequest],
        *,
        fail_closed: bool | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> CiteResult:
        transcript = self.transcripts.get(tenant, transcript_id)  # unknown → 404
        if idempotency_key is not None:
            replay = self.index.check_idempotency(tenant, idempotency_key, request_hash or "")
            if replay is not None:
                return self.ledger.replay(tenant, replay)
        if not requests:
            raise InvalidInput("at least one citation is required")
        if len(requests) > self.policy.max_citations_per_request:
            raise InvalidInput(
                f"at most {self.policy.max_citations_per_request} citations per request"
            )
        fail_closed = self.policy.fail_closed if fail_closed is None else fail_closed
        # One extraction budget for the whole request: its documents share the time.
        deadline = time.monotonic() + self.extraction_limits.request_seconds
        planned, errors = self._plan(tenant, requests, deadline)
        for error in errors:
            self._log(tenant, transcript_id, run_id, requests[error.index], None, error.reason)
        if errors and (fail_closed or not planned):
            raise CitationsRejected(errors)
        stored = self.ledger.store(
            tenant, transcript, planned, errors, run_id, idempotency_key, request_hash
        )
        for plan, citation in zip(planned, stored.citations, strict=True):
            self._log(tenant, transcript_id, run_id, plan.request, citation, "accepted")
        return stored

    def _plan(
        self, tenant: str, requests: Sequence[CitationRequest], deadline: float
    ) -> tuple[list[PlannedCitation], list[CitationError]]:
        self.memory.heed()  # an erasure since the last citation: forget its text first
        planned, errors = [], []
        seen: dict[_EvidenceKey, Evidence] = {}  # an answer cites one document several times
        for number, request in enumerate(requests):
            try:
                planned.append(self._plan_one(tenant, number, request, seen, deadline))
            except _Rejected as rejected:
                errors.append(CitationError(number, rejected.reason, rejected.detail))
        return planned, errors

    def _plan_one(
        self,
        tenant: str,
        number: int,
        request: CitationRequest,
        seen: dict[_EvidenceKey, Evidence],
        deadline: float,
    ) -> PlannedCitation:
        if request.unreadable is not None:
            raise _Rejected(*request.unreadable)
        quote = request.quote
        if not isinstance(quote.exact, str) or not quote.exact.strip():
            raise _Rejected("empty_quote", "the quote is empty")
        if len(quote.exact) > self.policy.max_quote_chars:
            raise _Rejected(
                "quote_too_long", f"quotes are at most {self.policy.max_quote_chars} characters"
            )
        source = request.source
        key = (
            request.memento_id,
            None
            if source is None
            else (
                source.uri_r,
                source.content,
                source.content_type,
                source.captured_at,
                source.tool,
                source.final_url,
                source.http_status,
                tuple(sorted(source.headers.items())),
            ),
        )
        evidence = seen.get(key)
        if evidence is None:
            evidence = seen[key] = self._evidence(tenant, request)
        if not self.policy.tool_is_evidence(evidence.facts.tool):
            raise _Rejected(
                "disallowed_tool",
                f"tool {evidence.facts.tool!r} is not an evidence source"
                + (
                    " (search results are never evidence)"
                    if (evidence.facts.tool or "").startswith("search")
                    else ""
                ),
            )
        try:
            extracted = extract_text(
                evidence.content,
                evidence.media_type,
                tenant=tenant,
                cache_key=evidence.document_hash,
                limits=self.extraction_limits,
                deadline=deadline,
            )
        except ExtractionLimitExceeded as error:
            error.detail["citation"] = number
            raise
        except AmberError as error:
            raise _Rejected("unreadable_document", error.message) from None
        prepared = self._prepared(tenant, evidence.document_hash, evidence.media_type, extracted)
        try:
            match = locate(
                prepared,
                quote.exact,
                prefix=quote.prefix,
                suffix=quote.suffix,
                position=quote.position,
                max_occurrences=self.policy.max_quote_occurrences,
            )
        except AmberError as error:
            raise _Rejected(getattr(error, "code", "quote_not_found"), error.message) from None
        context = self.policy.context_chars
        passage = extracted.text[max(0, match.start - context) : match.end + context]
        return PlannedCitation(number, request, evidence, extracted, match, passage.encode("utf-8"))

    def _prepared(
        self, tenant: str, document_hash: str, media_type: str, extracted: ExtractedText
    ) -> PreparedText:
        # Ten citations of one page prepare its text once (an agent cites a page in bursts).
        # The media type is part of the key: its charset changes the text of the same bytes.
        # So is the tenant: reusing another tenant's work would answer faster, and that
        # difference would tell this tenant that another one cited the same bytes.
        key = (
            tenant,
            document_hash,
            extracted.extractor,
            extracted.extractor_version,
            media_type,
        )
        with self._lock:
            found = self._prepared_cache.get(key)
            if found is not None:
                self._prepared_cache.move_to_end(key)
                return found
        prepared = prepare(extracted.text, pdf=extracted.extractor == "amber-pdf")
        with self._lock:
            self._prepared_cache[key] = prepared
            while len(self._prepared_cache) > _PREPARED_CACHE_SIZE:
                self._prepared_cache.popitem(last=False)
        return prepared

    def _forget_prepared(self, tenant: str | None, addresses: Collection[str] | None) -> None:
        with self._lock:
            if addresses is None:
                self._prepared_cache.clear()
                return
            for key in [k for k in self._prepared_cache if k[0] == tenant and k[1] in addresses]:
                del self._prepared_cache[key]

    def _evidence(self, tenant: str, request: CitationRequest) -> Evidence:
        if (request.memento_id is None) == (request.source is None):
            raise _Rejected("unknown_evidence", "name exactly one of memento_id and source")
        if request.memento_id is not None:
            try:
                memento = self.get_memento(tenant, request.memento_id)
            except (NotFound, InvalidInput):
                raise _Rejected(
                    "unknown_evidence", "no captured document with this memento id"
                ) from None
            if memento.scope is not Scope.DOCUMENT:
                raise _Rejected(
                    "unknown_evidence", "the memento is a passage, not a captured document"
                )
            return Evidence(
                uri=parse_uri_r(memento.uri_r, self.internal_schemes),
                content=self.read_content(memento),
                media_type=memento.media_type,
                captured_at=memento.captured_at,
                facts=memento.facts,
                document_hash=memento.content_hash,
                memento=memento,
            )
        source = request.source
        assert source is not None
        try:
            uri = parse_uri_r(source.uri_r, self.internal_schemes)
            media_type = check_media_type(source.content_type)
            captured_at = check_captured_at(source.captured_at, utc_now())
            facts = CaptureFacts(
                tool=check_tool(source.tool),
                final_url=source.final_url,
                http_status=source.http_status,
                headers=select_headers(source.headers),
            )
        except InvalidInput as error:
            raise _Rejected("invalid_source", error.message) from None
        return Evidence(
            uri,
            source.content,
            media_type,
            captured_at,
            facts,
            content_address(source.content),
            None,
        )

    # -- reading -------------------------------------------------------------------------

    def for_transcript(self, tenant: str, transcript_id: str) -> list[Citation]:
        return self.ledger.for_transcript(tenant, transcript_id)

    def for_passage(self, tenant: str, memento_id: str) -> list[Citation]:
        return self.ledger.for_passage(tenant, memento_id)

    def _log(
        self,
        tenant: str,
        transcript_id: str,
        run_id: str | None,
        request: CitationRequest,
        citation: Citation | None,
        verdict: str,
    ) -> None:
        # Ids, hashes and the verdict only: never the quote, never captured text.
        log.info(
            json.dumps(
                {
                    "event": "citation",
                    "verdict": verdict,
                    "tenant": tenant,
                    "transcript_id": transcript_id,
                    "run_id": run_id,
                    "source_id": request.source_id,
                    "memento_id": request.memento_id,
                    "citation_id": citation.id if citation else None,
                    "document_hash": citation.document_hash if citation else None,
                    "passage_hash": citation.passage.content_hash if citation else None,
                    "quote_hash": citation.quote_hash if citation else None,
                },
                sort_keys=True,
            )
        )
