"""The citations table: storing checked citations, and reading them back.

Write order is the durability contract: the passages' bytes are staged first (S3: uploaded
concurrently), then the group commit makes them durable together with concurrent requests'
passages, and only then do the citation rows commit, in one transaction for the batch, so a
row never points at bytes that are not there. In that transaction the cited evidence is
re-dated: it expires with the latest of the transcripts citing it, as they stand then.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import blake3
from sqlalchemy import Connection, select

from archive.blobstore.base import BlobStore, StagedBlob, StoredBlob, discard_on_failure
from archive.citations.normalise import (
    NORMALISATION_VERSION,
    check_quote,
    normalise,
    quote_hash,
)
from archive.citations.records import (
    Citation,
    CitationError,
    CiteResult,
    PlannedCitation,
    citation_from_row,
)
from archive.citations.transcripts import Transcript, TranscriptBook
from archive.committer import GroupCommitter
from archive.config import CitationPolicy
from archive.dates import utc_now
from archive.exceptions import Gone, IdempotencyConflict
from archive.index import Index, RowView, StoredResponse
from archive.index.schema import citations
from archive.log.statements import Statement, citation_statement, sha256_hex
from archive.mementos import Memento, Scope, memento_id

PASSAGE_MEDIA_TYPE = "text/plain; charset=utf-8"

# Sets the cached expiry of these mementos to their true expiry, inside the given transaction
# (retention's Evaluator.redate); returns how many changed.
Redate = Callable[[Connection, Collection[str]], int]


@dataclass(frozen=True)
class StoreJob:
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
    # citation id -> (document SHA-256, normalised quote SHA-256): facts its log leaf attests
    digests: dict[str, tuple[str, str]]


class CitationLedger:
    """Stores what :class:`~archive.citations.desk.CitationDesk` accepted; reads it back."""

    def __init__(
        self,
        index: Index,
        blobs: BlobStore,
        transcripts: TranscriptBook,
        policy: CitationPolicy,
        initial_lock: Callable[[datetime], datetime | None],
        redate: Redate,
    ) -> None:
        self.index = index
        self.blobs = blobs
        self.transcripts = transcripts
        self.policy = policy
        self.initial_lock = initial_lock  # the retention lock a new blob starts with
        # Retention's Evaluator.redate: sets cited evidence's cached expiry from its citing
        # transcripts inside the citation's transaction.
        self.redate = redate
        # Batches concurrent requests' citations into one transaction. Public on purpose:
        # its submit() is the point between staging and committing, where tests interleave
        # a concurrent change (a retention shortened, a committer refusing at shutdown).
        self.committer: GroupCommitter[StoreJob, CiteResult] = GroupCommitter(
            self._commit_jobs, name="amber-citation-commit"
        )

    def close(self) -> None:
        """Commit what is queued, then stop the committer."""
        self.committer.close()

    def store(
        self,
        tenant: str,
        transcript: Transcript,
        planned: Sequence[PlannedCitation],
        errors: list[CitationError],
        run_id: str | None,
        idempotency_key: str | None,
        request_hash: str | None,
    ) -> CiteResult:
        """Store a request's accepted citations (group commit); their records as stored."""
        now = utc_now()
        passages, documents, rows = [], [], []
        contents: dict[str, bytes] = {}
        digests: dict[str, tuple[str, str]] = {}
        # Written now (S3: uploaded concurrently); the group commit makes them durable together
        # with concurrent requests' passages (local store: two filesystem syncs per batch),
        # before any row points at them.
        lock = self.initial_lock(now)
        staged = self.blobs.stage_many([plan.passage_bytes for plan in planned], retain_until=lock)
        with discard_on_failure(self.blobs, staged):
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
                digests[rows[-1]["id"]] = _digests(plan)
            # Published and committed together with concurrent requests' passages and rows.
            return self.committer.submit(
                StoreJob(
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
                    digests,
                )
            )

    def _commit_jobs(self, jobs: Sequence[StoreJob]) -> list[CiteResult | BaseException]:
        """One transaction for a batch of requests' citations (group commit).

        Anything wrong with one job raises, which rolls the batch back; the committer then
        retries each job alone, so a bad job fails by itself and its neighbours commit.
        """
        contents = {address: data for job in jobs for address, data in job.contents.items()}
        self.blobs.publish([one for job in jobs for one in job.staged])
        with self.index.write() as connection:
            outcomes = self.index.insert_mementos(
                connection,
                [m for job in jobs for m in job.mementos],
                revive=lambda address: self.blobs.put(
                    contents[address], retain_until=self.initial_lock(utc_now())
                ),
                contents=contents,
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
            inserted = self.index.inserts.insert_ignoring(
                connection, citations, all_rows, conflict=["id"], returning=citations.c.id
            )
            if self.index.log is not None:
                self._log(connection, jobs, inserted)
            # The cited evidence now expires with the latest of the transcripts citing it, as
            # they stand in this transaction (earlier than its grace date, too): read before
            # it, a retention shortened meanwhile would keep evidence past every transcript.
            self.redate(connection, {i for job in jobs for i in _reached(job)})
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

    def _log(self, connection: Connection, jobs: Sequence[StoreJob], inserted: set[Any]) -> None:
        """The evidence log's leaves for the citations inserted just now, in request order."""
        assert self.index.log is not None
        logged: dict[str, Statement] = {}
        for job in jobs:
            for row in job.rows:
                if row["id"] in inserted and row["id"] not in logged:
                    logged[row["id"]] = citation_statement(row, *job.digests[row["id"]])
        self.index.log.append(connection, list(logged.values()))

    def _remember(self, connection: Connection, job: StoreJob) -> None:
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
        connection: Connection,
        tenant: str,
        rows: list[dict[str, Any]],
        ours: set[str],
        mementos: Mapping[str, Memento],
    ) -> list[Citation]:
        """The citations as stored, in request order: what this request inserted is known;
        only citations recorded before (same identity) are read back."""
        earlier = {
            c.id: c
            for c in self.load(connection, tenant, [r["id"] for r in rows if r["id"] not in ours])
        }
        return [
            citation_from_row(RowView(row), mementos[row["passage_memento_id"]])
            if row["id"] in ours
            else earlier[row["id"]]
            for row in rows
        ]

    def _passage_memento(
        self, tenant: str, plan: PlannedCitation, blob: StoredBlob, now: datetime
    ) -> Memento:
        return _memento_of(tenant, plan, blob, now, PASSAGE_MEDIA_TYPE, Scope.PASSAGE)

    def _document_memento(self, tenant: str, plan: PlannedCitation, now: datetime) -> Memento:
        evidence = plan.evidence
        blob = self.blobs.put(evidence.content, retain_until=self.initial_lock(now))
        return _memento_of(tenant, plan, blob, now, evidence.media_type, Scope.DOCUMENT)

    def _citation_row(
        self,
        tenant: str,
        transcript_id: str,
        plan: PlannedCitation,
        passage: Memento,
        document_id: str | None,
        run_id: str | None,
        now: datetime,
    ) -> dict[str, Any]:
        evidence, match = plan.evidence, plan.match
        selector = {"exact": match.exact, "prefix": match.prefix, "suffix": match.suffix}
        return {
            "id": citation_id(
                tenant, transcript_id, passage.id, match.start, match.end, evidence.document_hash
            ),
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

    def restore(
        self, rows: Sequence[dict[str, Any]], digests: Mapping[str, tuple[str, str]] | None
    ) -> set[str]:
        """Insert citation rows recorded elsewhere (an audit bundle's), with their own ids,
        dates and run ids; idempotent. Each row inserted gets its log leaf (``digests``: the
        document and quote SHA-256 by citation id; required when the log is on) and its
        evidence is re-dated. Returns the ids inserted now."""
        with self.index.write() as connection:
            inserted = self.index.inserts.insert_ignoring(
                connection, citations, list(rows), conflict=["id"], returning=citations.c.id
            )
            if self.index.log is not None:
                assert digests is not None
                self.index.log.append(
                    connection,
                    [citation_statement(r, *digests[r["id"]]) for r in rows if r["id"] in inserted],
                )
            reached = {r["passage_memento_id"] for r in rows}
            self.redate(connection, reached | {r["document_memento_id"] for r in rows} - {None})
        return {str(i) for i in inserted}

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
            return self.load(connection, tenant, list(rows))

    def for_passage(self, tenant: str, memento_id: str, *, limit: int = 20) -> list[Citation]:
        """Citations proved by this passage memento (one, unless identical quotes and
        context were cited again), oldest first."""
        with self.index.read() as connection:
            rows = (
                connection.execute(
                    select(citations.c.id)
                    .where(
                        citations.c.tenant == tenant,
                        citations.c.passage_memento_id == memento_id,
                    )
                    .order_by(citations.c.created_at, citations.c.id)
                    .limit(limit)
                )
                .scalars()
                .all()
            )
            return self.load(connection, tenant, list(rows))

    def load(self, connection: Connection, tenant: str, ids: list[str]) -> list[Citation]:
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
            citation_from_row(found[i], passages[found[i].passage_memento_id])
            for i in ids
            if i in found
        ]

    def replay(self, tenant: str, stored: StoredResponse) -> CiteResult:
        with self.index.read() as connection:
            loaded = self.load(connection, tenant, list(stored.body["citation_ids"]))
        errors = [CitationError(**e) for e in stored.body.get("errors", [])]
        return CiteResult(loaded, errors, created=stored.status_code == 201)


def citation_id(
    tenant: str, transcript_id: str, passage_id: str, start: int, end: int, document_hash: str
) -> str:
    """A citation's id: the same quote of the same passage in the same transcript is the
    same citation (citing it again, or importing its bundle again, adds nothing)."""
    identity = "\n".join((tenant, transcript_id, passage_id, str(start), str(end), document_hash))
    return blake3.blake3(identity.encode()).hexdigest()[:32]


def _reached(job: StoreJob) -> list[str]:
    """Ids of every memento a job's citations reach: passages, and documents kept or cited
    by memento id (a document follows the transcripts citing it, as its passages do)."""
    reached = [m.id for m in job.mementos]
    reached += [r["document_memento_id"] for r in job.rows if r["document_memento_id"]]
    return reached


def _digests(plan: PlannedCitation) -> tuple[str, str]:
    """SHA-256 of the cited document's bytes and of the normalised quote (as quote_hash
    normalises it), for external tools that verify SHA-256 only."""
    quote = normalise(check_quote(plan.request.quote.exact)).encode("utf-8")
    return sha256_hex(plan.evidence.content), sha256_hex(quote)


def _memento_of(
    tenant: str,
    plan: PlannedCitation,
    blob: StoredBlob,
    now: datetime,
    media_type: str,
    scope: Scope,
) -> Memento:
    """A memento of the cited evidence's capture (its URI-R, time and facts) for ``blob``:
    the passage cut from it, or the whole document."""
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
        media_type=media_type,
        size=blob.size,
        scope=scope,
        facts=evidence.facts,
    )
