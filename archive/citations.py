"""Citations at the moment they are made: evidence, quote verification, fail-closed.

For each citation in a request the desk resolves its evidence (a stored document memento,
or the captured document inline), checks the capturing tool against the configured
evidence sources (search results are never evidence unless configured), extracts the
document's visible text with a named, versioned extractor, and finds the quote in it —
exactly, or under the documented normalisation; never fuzzily. Only then does it store:
the passage (quote plus context) as a ``passage`` memento, the document only by its facts
unless ``keep_document`` is on, and the citation with its W3C selectors, all in one
transaction after the blobs are durable. Fail-closed (the default): one invalid citation
rejects the request and nothing is stored.

Every decision is logged as one structured line with ids and hashes — never the quote or
the captured text.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import blake3
from sqlalchemy import select

from archive.blobstore.base import StagedBlob, StoredBlob, discard_on_failure
from archive.committer import GroupCommitter
from archive.config import CitationPolicy
from archive.dates import utc_now
from archive.exceptions import AmberError, Gone, IdempotencyConflict, InvalidInput, NotFound
from archive.hashing import content_address
from archive.index import RowView, StoredResponse
from archive.index.schema import citations
from archive.mementos import (
    CaptureFacts,
    Memento,
    Scope,
    check_captured_at,
    check_media_type,
    check_tool,
    memento_id,
    select_headers,
)
from archive.quotes import (
    NORMALISATION_VERSION,
    PreparedText,
    QuoteMatch,
    locate,
    prepare,
    quote_hash,
)
from archive.text import ExtractedText, extract_text
from archive.transcripts import Transcript
from archive.uri import URIR, parse_uri_r

log = logging.getLogger("amber.citations")

PASSAGE_MEDIA_TYPE = "text/plain; charset=utf-8"
_PREPARED_CACHE_SIZE = 32


@dataclass(frozen=True)
class QuoteRequest:
    exact: str
    prefix: str | None = None
    suffix: str | None = None
    position: int | None = None


@dataclass(frozen=True)
class SourceRequest:
    """A captured document handed over inline: what the tool really fetched."""

    uri_r: str
    content: bytes
    content_type: str
    captured_at: datetime | None = None
    tool: str | None = None
    final_url: str | None = None
    http_status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CitationRequest:
    quote: QuoteRequest
    memento_id: str | None = None
    source: SourceRequest | None = None
    source_id: str | None = None  # the agent's own evidence id, for the audit trail
    # (reason, detail) when the caller could not even read this citation's evidence (bad
    # base64, a malformed date, an unknown source_ref): refused like any invalid citation,
    # by index, so fail_closed=false still stores its valid neighbours.
    unreadable: tuple[str, str] | None = None


@dataclass(frozen=True)
class CitationError:
    index: int
    reason: str  # unknown_evidence, disallowed_tool, quote_not_found, quote_too_long, …
    detail: str


class CitationsRejected(InvalidInput):
    """At least one citation is invalid and the request is fail-closed (or none is valid)."""

    code = "citations_rejected"

    def __init__(self, errors: Sequence[CitationError]) -> None:
        super().__init__(f"{len(errors)} citation(s) rejected; nothing was stored")
        self.errors = list(errors)


@dataclass(frozen=True)
class Selector:
    exact: str
    prefix: str
    suffix: str
    start: int
    end: int

    def as_web_annotation(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "TextQuoteSelector",
                "exact": self.exact,
                "prefix": self.prefix,
                "suffix": self.suffix,
            },
            {"type": "TextPositionSelector", "start": self.start, "end": self.end},
        ]


@dataclass(frozen=True)
class Citation:
    id: str
    tenant: str
    transcript_id: str
    passage: Memento
    document_memento_id: str | None
    document_hash: str
    document_size: int
    document_media_type: str
    document_uri_r: str
    document_captured_at: datetime
    document_facts: CaptureFacts
    quote_hash: str
    selector: Selector | None  # None once retention has tombstoned the text
    extractor: str
    extractor_version: str
    normalisation: str
    match_method: str
    run_id: str | None
    source_ids: tuple[str, ...]
    created_at: datetime


@dataclass(frozen=True)
class CiteResult:
    citations: list[Citation]
    errors: list[CitationError]
    created: bool


@dataclass(frozen=True)
class _Evidence:
    uri: URIR
    content: bytes
    media_type: str
    captured_at: datetime
    facts: CaptureFacts
    document_hash: str
    memento: Memento | None  # the stored document memento, when cited by id


@dataclass(frozen=True)
class _Planned:
    index: int
    request: CitationRequest
    evidence: _Evidence
    extracted: ExtractedText
    match: QuoteMatch
    passage_bytes: bytes


@dataclass(frozen=True)
class _StoreJob:
    """One request's citations, passages written, waiting for the group commit."""

    tenant: str
    transcript: Transcript
    mementos: list[Memento]  # documents kept (keep_document), then passages
    rows: list[dict[str, Any]]  # citation rows, in request order
    contents: dict[str, bytes]  # bytes by address, to re-store a blob a sweep is deleting
    staged: list[StagedBlob]  # passages written, made durable by the group commit
    errors: list[CitationError]
    idempotency_key: str | None
    request_hash: str | None
    now: datetime


class _Rejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class CitationDesk:
    def __init__(self, archive: Any) -> None:
        # ``archive`` is the Archive facade (blobs, index, memento reads); typed loosely to
        # keep the import graph one-way (archive.archive imports this module).
        self.archive = archive
        self.index = archive.index
        self.policy: CitationPolicy = archive.settings.citations
        self._prepared_cache: OrderedDict[str, PreparedText] = OrderedDict()
        self._lock = threading.Lock()
        self._committer: GroupCommitter[_StoreJob, CiteResult] = GroupCommitter(
            self._commit_jobs, name="amber-citation-commit"
        )

    def close(self) -> None:
        """Commit what is queued, then stop the committer."""
        self._committer.close()

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
        transcript = self.archive.transcripts.get(tenant, transcript_id)  # unknown → 404
        if idempotency_key is not None:
            replay = self.index.check_idempotency(tenant, idempotency_key, request_hash or "")
            if replay is not None:
                return self._replay(tenant, replay)
        if not requests:
            raise InvalidInput("at least one citation is required")
        if len(requests) > self.policy.max_citations_per_request:
            raise InvalidInput(
                f"at most {self.policy.max_citations_per_request} citations per request"
            )
        fail_closed = self.policy.fail_closed if fail_closed is None else fail_closed
        planned, errors = self._plan(tenant, requests)
        for error in errors:
            self._log(tenant, transcript_id, run_id, requests[error.index], None, error.reason)
        if errors and (fail_closed or not planned):
            raise CitationsRejected(errors)
        stored = self._store(
            tenant, transcript, planned, errors, run_id, idempotency_key, request_hash
        )
        for plan, citation in zip(planned, stored.citations, strict=True):
            self._log(tenant, transcript_id, run_id, plan.request, citation, "accepted")
        return stored

    def _plan(
        self, tenant: str, requests: Sequence[CitationRequest]
    ) -> tuple[list[_Planned], list[CitationError]]:
        planned, errors = [], []
        seen: dict[Any, _Evidence] = {}  # an answer cites one document several times
        for number, request in enumerate(requests):
            try:
                planned.append(self._plan_one(tenant, number, request, seen))
            except _Rejected as rejected:
                errors.append(CitationError(number, rejected.reason, rejected.detail))
        return planned, errors

    def _plan_one(
        self, tenant: str, number: int, request: CitationRequest, seen: dict[Any, _Evidence]
    ) -> _Planned:
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
                evidence.content, evidence.media_type, cache_key=evidence.document_hash
            )
        except AmberError as error:
            raise _Rejected("unreadable_document", error.message) from None
        prepared = self._prepared(evidence.document_hash, evidence.media_type, extracted)
        try:
            match = locate(
                prepared,
                quote.exact,
                prefix=quote.prefix,
                suffix=quote.suffix,
                position=quote.position,
            )
        except AmberError as error:
            raise _Rejected(getattr(error, "code", "quote_not_found"), error.message) from None
        context = self.policy.context_chars
        passage = extracted.text[max(0, match.start - context) : match.end + context]
        return _Planned(number, request, evidence, extracted, match, passage.encode("utf-8"))

    def _prepared(
        self, document_hash: str, media_type: str, extracted: ExtractedText
    ) -> PreparedText:
        # Ten citations of one page prepare its text once (an agent cites a page in bursts).
        # The media type is part of the key: its charset changes the text of the same bytes.
        key = f"{document_hash}:{extracted.extractor}:{extracted.extractor_version}:{media_type}"
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

    def _evidence(self, tenant: str, request: CitationRequest) -> _Evidence:
        if (request.memento_id is None) == (request.source is None):
            raise _Rejected("unknown_evidence", "name exactly one of memento_id and source")
        if request.memento_id is not None:
            try:
                memento = self.archive.get_memento(tenant, request.memento_id)
            except (NotFound, InvalidInput):
                raise _Rejected(
                    "unknown_evidence", "no captured document with this memento id"
                ) from None
            if memento.scope is not Scope.DOCUMENT:
                raise _Rejected(
                    "unknown_evidence", "the memento is a passage, not a captured document"
                )
            return _Evidence(
                uri=parse_uri_r(memento.uri_r, self.archive.settings.internal_schemes),
                content=self.archive.read_content(memento),
                media_type=memento.media_type,
                captured_at=memento.captured_at,
                facts=memento.facts,
                document_hash=memento.content_hash,
                memento=memento,
            )
        source = request.source
        assert source is not None
        try:
            uri = parse_uri_r(source.uri_r, self.archive.settings.internal_schemes)
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
        return _Evidence(
            uri,
            source.content,
            media_type,
            captured_at,
            facts,
            content_address(source.content),
            None,
        )

    # -- storing -------------------------------------------------------------------------

    def _store(
        self,
        tenant: str,
        transcript: Transcript,
        planned: Sequence[_Planned],
        errors: list[CitationError],
        run_id: str | None,
        idempotency_key: str | None,
        request_hash: str | None,
    ) -> CiteResult:
        now = utc_now()
        passages, documents, rows = [], [], []
        contents: dict[str, bytes] = {}
        # Written now (S3: uploaded concurrently); the group commit makes them durable together
        # with concurrent requests' passages (local store: two filesystem syncs per batch),
        # before any row points at them.
        lock = self.archive.initial_lock(now)
        staged = self.archive.blobs.stage_many(
            [plan.passage_bytes for plan in planned], retain_until=lock
        )
        with discard_on_failure(self.archive.blobs, staged):
            stored = [one.blob for one in staged]
            for plan, blob in zip(planned, stored, strict=True):
                contents[blob.address] = plan.passage_bytes
                if self.policy.keep_document:
                    contents[plan.evidence.document_hash] = plan.evidence.content
                passage = self._passage_memento(tenant, plan, blob, now)
                passages.append(passage)
                document_id = plan.evidence.memento.id if plan.evidence.memento else None
                if document_id is None and self.policy.keep_document:
                    document = self._document_memento(tenant, plan, now)
                    documents.append(document)
                    document_id = document.id
                rows.append(
                    self._citation_row(
                        tenant, transcript.id, plan, passage, document_id, run_id, now
                    )
                )
            # Published and committed together with concurrent requests' passages and rows.
            return self._committer.submit(
                _StoreJob(
                    tenant,
                    transcript,
                    [*documents, *passages],
                    rows,
                    contents,
                    staged,
                    errors,
                    idempotency_key,
                    request_hash,
                    now,
                )
            )

    def _commit_jobs(self, jobs: Sequence[_StoreJob]) -> list[CiteResult | BaseException]:
        """One transaction for a batch of requests' citations (group commit).

        Anything wrong with one job raises, which rolls the batch back; the committer then
        retries each job alone, so a bad job fails by itself and its neighbours commit.
        """
        contents = {address: data for job in jobs for address, data in job.contents.items()}
        self.archive.blobs.publish([one for job in jobs for one in job.staged])
        with self.index.write() as connection:
            outcomes = self.index.insert_mementos(
                connection,
                [m for job in jobs for m in job.mementos],
                revive=lambda address: self.archive.blobs.put(
                    contents[address], retain_until=self.archive.initial_lock(utc_now())
                ),
            )
            if any(o.memento.deleted_at is not None for o in outcomes):
                raise Gone(
                    "this passage was stored before and has been deleted; ids are never reused"
                )
            stored_mementos = {o.memento.id: o.memento for o in outcomes}
            all_rows = [row for job in jobs for row in job.rows]
            # Documents cited by memento id were read before this transaction: a sweep may
            # have deleted one since, and a citation must never point at a tombstone.
            cited_documents = {
                r["document_memento_id"] for r in all_rows if r["document_memento_id"]
            }
            if self.index.deleted_among(connection, cited_documents - stored_mementos.keys()):
                raise Gone(
                    "the cited document memento has been deleted meanwhile; capture it again"
                )
            inserted = self.index.insert_ignoring(
                connection, citations, all_rows, conflict=["id"], returning=citations.c.id
            )
            # The cited evidence now lives at least as long as the transcripts citing it, as
            # they stand now: read before this transaction, a retention shortened meanwhile
            # would extend the evidence past every transcript's date.
            retain_until = self.archive.transcripts.retain_until_on(
                connection, {(job.tenant, job.transcript.id) for job in jobs}
            )
            self.index.extend_expiries(
                connection, [reach for job in jobs for reach in _reach(job, retain_until)]
            )
            results: list[CiteResult | BaseException] = []
            first_seen: set[str] = set()
            for job in jobs:
                if job.idempotency_key is not None:
                    self._remember(connection, job)
                # A row counts as ours only the first time its id appears in the batch.
                ours = {
                    r["id"] for r in job.rows if r["id"] in inserted and r["id"] not in first_seen
                }
                first_seen.update(ours)
                results.append(
                    CiteResult(
                        self._as_stored(connection, job.tenant, job.rows, ours, stored_mementos),
                        job.errors,
                        True,
                    )
                )
        return results

    def _remember(self, connection: Any, job: _StoreJob) -> None:
        assert job.idempotency_key is not None
        first = self.index.remember_response(
            connection,
            job.tenant,
            job.idempotency_key,
            StoredResponse(
                job.request_hash or "",
                201,
                {
                    "citation_ids": [r["id"] for r in job.rows],
                    "errors": [vars(e) for e in job.errors],
                },
            ),
            job.now,
        )
        if first.request_hash != (job.request_hash or ""):
            raise IdempotencyConflict(
                "this Idempotency-Key was already used for a different request"
            )

    def _as_stored(
        self,
        connection: Any,
        tenant: str,
        rows: list[dict[str, Any]],
        ours: set[str],
        mementos: Mapping[str, Memento],
    ) -> list[Citation]:
        """The citations as stored, in request order: what this request inserted is known;
        only citations recorded before (same identity) are read back."""
        earlier = {
            c.id: c
            for c in self._load(connection, tenant, [r["id"] for r in rows if r["id"] not in ours])
        }
        return [
            _citation_from(RowView(row), mementos[row["passage_memento_id"]])
            if row["id"] in ours
            else earlier[row["id"]]
            for row in rows
        ]

    def _passage_memento(
        self, tenant: str, plan: _Planned, blob: StoredBlob, now: datetime
    ) -> Memento:
        evidence = plan.evidence
        return Memento(
            id=memento_id(tenant, evidence.uri.key, evidence.captured_at, blob.address),
            tenant=tenant,
            uri_r=evidence.uri.raw,
            urir_key=evidence.uri.key,
            captured_at=evidence.captured_at,
            archived_at=now,
            content_hash=blob.address,
            blob_version_id=blob.version_id,
            media_type=PASSAGE_MEDIA_TYPE,
            size=blob.size,
            scope=Scope.PASSAGE,
            facts=evidence.facts,
        )

    def _document_memento(self, tenant: str, plan: _Planned, now: datetime) -> Memento:
        evidence = plan.evidence
        blob = self.archive.blobs.put(evidence.content, retain_until=self.archive.initial_lock(now))
        return Memento(
            id=memento_id(tenant, evidence.uri.key, evidence.captured_at, blob.address),
            tenant=tenant,
            uri_r=evidence.uri.raw,
            urir_key=evidence.uri.key,
            captured_at=evidence.captured_at,
            archived_at=now,
            content_hash=blob.address,
            blob_version_id=blob.version_id,
            media_type=evidence.media_type,
            size=blob.size,
            scope=Scope.DOCUMENT,
            facts=evidence.facts,
        )

    def _citation_row(
        self,
        tenant: str,
        transcript_id: str,
        plan: _Planned,
        passage: Memento,
        document_id: str | None,
        run_id: str | None,
        now: datetime,
    ) -> dict[str, Any]:
        evidence, match = plan.evidence, plan.match
        identity = "\n".join(
            (
                tenant,
                transcript_id,
                passage.id,
                str(match.start),
                str(match.end),
                evidence.document_hash,
            )
        )
        selector = {"exact": match.exact, "prefix": match.prefix, "suffix": match.suffix}
        return {
            "id": blake3.blake3(identity.encode()).hexdigest()[:32],
            "tenant": tenant,
            "transcript_id": transcript_id,
            "passage_memento_id": passage.id,
            "document_memento_id": document_id,
            "document_hash": evidence.document_hash,
            "document_size": len(evidence.content),
            "document_media_type": evidence.media_type,
            "document_uri_r": evidence.uri.raw,
            "document_captured_at": evidence.captured_at,
            "document_tool": evidence.facts.tool,
            "document_final_url": evidence.facts.final_url,
            "document_http_status": evidence.facts.http_status,
            "document_headers_json": evidence.facts.headers_json(),
            "quote_hash": quote_hash(plan.request.quote.exact),
            "selector_json": json.dumps(selector, ensure_ascii=False),
            "position_start": match.start,
            "position_end": match.end,
            "extractor": plan.extracted.extractor,
            "extractor_version": plan.extracted.extractor_version,
            "normalisation": NORMALISATION_VERSION,
            "match_method": match.method,
            "run_id": run_id,
            "source_ids_json": json.dumps(
                [plan.request.source_id] if plan.request.source_id else []
            ),
            "created_at": now,
        }

    # -- reading -------------------------------------------------------------------------

    def for_transcript(self, tenant: str, transcript_id: str) -> list[Citation]:
        with self.index.read() as connection:
            rows = (
                connection.execute(
                    select(citations.c.id)
                    .where(citations.c.tenant == tenant, citations.c.transcript_id == transcript_id)
                    .order_by(citations.c.created_at, citations.c.id)
                )
                .scalars()
                .all()
            )
            return self._load(connection, tenant, list(rows))

    def _load(self, connection: Any, tenant: str, ids: list[str]) -> list[Citation]:
        if not ids:
            return []
        found = {
            row.id: row
            for row in connection.execute(
                select(citations).where(citations.c.tenant == tenant, citations.c.id.in_(ids))
            )
        }
        passages = {
            m.id: m
            for m in self.index.load_mementos(
                connection, tenant, [r.passage_memento_id for r in found.values()]
            )
        }
        return [
            _citation_from(found[i], passages[found[i].passage_memento_id])
            for i in ids
            if i in found
        ]

    def _replay(self, tenant: str, stored: StoredResponse) -> CiteResult:
        with self.index.read() as connection:
            loaded = self._load(connection, tenant, list(stored.body["citation_ids"]))
        errors = [CitationError(**e) for e in stored.body.get("errors", [])]
        return CiteResult(loaded, errors, created=stored.status_code == 201)

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


def _reach(
    job: _StoreJob, retain_until: dict[tuple[str, str], datetime]
) -> list[tuple[str, str, datetime]]:
    """(tenant, memento id, until) for every memento a job's citations reach."""
    until = retain_until[(job.tenant, job.transcript.id)]
    reached = [m.id for m in job.mementos]
    reached += [r["document_memento_id"] for r in job.rows if r["document_memento_id"]]
    return [(job.tenant, memento_id_, until) for memento_id_ in reached]


def _citation_from(row: Any, passage: Memento) -> Citation:
    selector = None
    if row.selector_json is not None:
        quoted = json.loads(row.selector_json)
        selector = Selector(
            quoted["exact"],
            quoted["prefix"],
            quoted["suffix"],
            row.position_start,
            row.position_end,
        )
    return Citation(
        id=row.id,
        tenant=row.tenant,
        transcript_id=row.transcript_id,
        passage=passage,
        document_memento_id=row.document_memento_id,
        document_hash=row.document_hash,
        document_size=row.document_size,
        document_media_type=row.document_media_type,
        document_uri_r=row.document_uri_r,
        document_captured_at=row.document_captured_at,
        document_facts=CaptureFacts(
            tool=row.document_tool,
            final_url=row.document_final_url,
            http_status=row.document_http_status,
            headers=json.loads(row.document_headers_json),
        ),
        quote_hash=row.quote_hash,
        selector=selector,
        extractor=row.extractor,
        extractor_version=row.extractor_version,
        normalisation=row.normalisation,
        match_method=row.match_method,
        run_id=row.run_id,
        source_ids=tuple(json.loads(row.source_ids_json)),
        created_at=row.created_at,
    )
