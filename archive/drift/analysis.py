"""Analysing one fetched URI-R for one citation: blocking work the job runs in threads.

Hash the live body, extract its text with the citation path's extractors
(:mod:`archive.citations.extract`, once per URI-R and only when some citation needs the text), classify
with the rules (``amber-drift-1``, :mod:`archive.drift.rules`), archive what now stands in
the passage's place, and build the check record. Logs nothing; no page text leaves here
except a check's ``diff`` (the old and new wording of the cited passage only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import blake3

from archive.blobstore.base import BlobStore
from archive.citations import PDF_EXTRACTOR, extract_text, prepare
from archive.config import ExtractionLimits
from archive.dates import to_rfc3339, utc_now
from archive.drift.fetching import Live
from archive.drift.records import CheckRecord, DueCitation, Location
from archive.drift.rules import (
    RULES_VERSION,
    CheckOutcome,
    Classify,
    Soft404Signals,
    html_title,
)
from archive.exceptions import AmberError, ExtractionLimitExceeded
from archive.fetch import FetchedDocument
from archive.hashing import content_address
from archive.mementos import (
    CaptureFacts,
    Memento,
    Scope,
    check_media_type,
    memento_id,
    select_headers,
)
from archive.uri import parse_uri_r

DRIFT_TOOL = "drift"
PASSAGE_MEDIA_TYPE = "text/plain; charset=utf-8"


class Analyser:
    """The analysis steps of one run, with what they need from the service."""

    def __init__(
        self,
        classify: Classify,
        blobs: BlobStore,
        initial_lock: Callable[[datetime], datetime | None],
        *,
        context_chars: int,
        keep_document: bool,
        extraction_limits: ExtractionLimits | None = None,
    ) -> None:
        self.classify = classify
        self.extraction_limits = extraction_limits or ExtractionLimits()
        self.blobs = blobs
        self.initial_lock = initial_lock
        self.context_chars = context_chars
        self.keep_document = keep_document

    def analyse(
        self, cited: DueCitation, live: Live, soft404: Soft404Signals | None
    ) -> tuple[CheckOutcome, int]:
        """Hash, extract (once per URI-R, only when some citation needs the text) and
        classify; CPU work, run in a worker thread. Returns the outcome and its time."""
        document = live.document
        if document is not None and live.live_hash is None and document.status != 304:
            live.live_hash = content_address(document.body)
        if live.live_hash is not None and live.live_hash != cited.document_hash:
            _extract(live, cited, self.extraction_limits)
        started = time.monotonic()
        outcome = self._classify(cited, live, soft404)
        return outcome, round((time.monotonic() - started) * 1000)

    def _classify(
        self, cited: DueCitation, live: Live, soft404: Soft404Signals | None
    ) -> CheckOutcome:
        document = live.document
        return self.classify(
            status=document.status if document else None,
            error=live.error,
            live_hash=live.live_hash,
            recorded_hash=cited.document_hash,
            not_modified=document is not None and document.status == 304,
            live_text=live.prepared,
            old_exact=cited.exact,
            prefix=cited.prefix,
            suffix=cited.suffix,
            position=cited.position,
            soft404=soft404,
        )

    def probe_text(self, document: FetchedDocument) -> str | None:
        """The text of the soft-404 probe's answer, or ``None`` when it cannot be read."""
        try:
            extracted = extract_text(
                document.body,
                document.content_type or "text/html",
                limits=self.extraction_limits,
            )
        except AmberError:
            return None
        return extracted.text

    def new_mementos(
        self, cited: DueCitation, document: FetchedDocument, live: Live, location: Location
    ) -> tuple[str | None, str | None, list[Memento]]:
        """What the live page now says in the passage's place (and the page, if kept):
        ``(passage hash, passage memento id, mementos to store)``. The same new passage as
        at the last check is not archived again: the check links the earlier memento."""
        assert live.extracted is not None
        text = live.extracted.text
        context = self.context_chars
        passage_bytes = text[max(0, location.start - context) : location.end + context].encode(
            "utf-8"
        )
        if not passage_bytes:
            return None, None, []
        passage_hash = content_address(passage_bytes)
        if passage_hash == cited.last_new_passage_hash and cited.last_new_passage_memento_id:
            return passage_hash, cited.last_new_passage_memento_id, []
        try:
            headers = select_headers(document.headers)
        except AmberError:
            headers = {}
        facts = CaptureFacts(
            tool=DRIFT_TOOL,
            final_url=document.final_url,
            http_status=document.status,
            headers=headers,
        )
        captured_at = document.fetched_at.replace(microsecond=0)
        blobs = self.blobs
        now = utc_now()

        def make(content: bytes, media_type: str, scope: Scope) -> Memento:
            # Locked from the start like any other new evidence (S3 Object Lock).
            blob = blobs.put(content, retain_until=self.initial_lock(now))
            live.contents[blob.address] = content
            return Memento(
                id=memento_id(cited.tenant, cited.urir_key, captured_at, blob.address),
                tenant=cited.tenant,
                uri_r=cited.uri_r,
                urir_key=cited.urir_key,
                captured_at=captured_at,
                archived_at=now,
                content_hash=blob.address,
                blob_version_id=blob.version_id,
                media_type=media_type,
                size=blob.size,
                scope=scope,
                facts=facts,
            )

        made = [make(passage_bytes, PASSAGE_MEDIA_TYPE, Scope.PASSAGE)]
        if self.keep_document:
            try:
                media_type = check_media_type(document.content_type or cited.document_media_type)
            except AmberError:
                media_type = None
            if media_type is not None:
                made.append(make(document.body, media_type, Scope.DOCUMENT))
        return passage_hash, made[0].id, made


def _extract(live: Live, cited: DueCitation, limits: ExtractionLimits) -> None:
    document = live.document
    if document is None or live.extract_ms is not None:
        return
    started = time.monotonic()
    try:
        if not 200 <= document.status < 300 or not document.body:
            return
        media_type = document.content_type or cited.document_media_type
        try:
            live.extracted = extract_text(
                document.body,
                media_type,
                tenant=cited.tenant,
                cache_key=live.live_hash,
                limits=limits,
            )
        except ExtractionLimitExceeded as error:
            # Not read within the limits, so not observed: inconclusive (``unreachable``,
            # retried sooner), never ``material`` — the passage may well still be there.
            live.error = f"{error.code}: {error.limit}"
            return
        except AmberError:
            return  # not text we can read: the rules see no live text
        live.prepared = prepare(live.extracted.text, pdf=live.extracted.extractor == PDF_EXTRACTOR)
        try:
            live.title = html_title(document.body, media_type)
        except Exception:  # a title is only a hint
            live.title = None
    finally:
        live.extract_ms = round((time.monotonic() - started) * 1000)


def check_record(
    cited: DueCitation,
    live: Live,
    outcome: CheckOutcome,
    *,
    verdict: str,
    run_id: str,
    checked_at: datetime,
    classify_ms: int,
    location: Location | None,
    new_passage: tuple[str | None, str | None, list[Memento]],
) -> CheckRecord:
    """The check of ``cited`` against ``live``; ``new_passage`` as from
    :meth:`Analyser.new_mementos` (``(None, None, [])`` when nothing was archived)."""
    document = live.document
    passage_hash, passage_id, made = new_passage
    document_id = next((m.id for m in made if m.scope is Scope.DOCUMENT), None)
    reasons = [str(r) for r in outcome.reasons or ()]
    extracted = live.extracted
    if extracted is not None and (extracted.extractor, extracted.extractor_version) != (
        cited.extractor,
        cited.extractor_version,
    ):
        reasons.append(
            f"extractor changed since the citation: {cited.extractor} "
            f"{cited.extractor_version} -> {extracted.extractor} "
            f"{extracted.extractor_version}"
        )
    identity = "\n".join((cited.tenant, cited.id, run_id, to_rfc3339(checked_at)))
    return CheckRecord(
        id=blake3.blake3(identity.encode()).hexdigest()[:32],
        tenant=cited.tenant,
        citation_id=cited.id,
        transcript_id=cited.transcript_id,
        memento_id=cited.memento_id,
        uri_r=cited.uri_r,
        host=cited.host,
        run_id=run_id,
        checked_at=checked_at,
        verdict=verdict,
        redirected_to=_redirected_to(cited, document),
        http_status=document.status if document else None,
        error=live.error,
        fetch_ms=live.fetch_ms,
        extract_ms=live.extract_ms,
        classify_ms=classify_ms,
        extractor=extracted.extractor if extracted else None,
        extractor_version=extracted.extractor_version if extracted else None,
        rules_version=RULES_VERSION,
        live_hash=live.live_hash,
        location=location,
        reasons=tuple(reasons),
        diff=outcome.diff,
        new_passage_memento_id=passage_id,
        live_document_memento_id=document_id,
        new_passage_hash=passage_hash,
    )


def location_of(outcome: CheckOutcome) -> Location | None:
    found = outcome.location
    if found is None:
        return None
    return Location(int(found.start), int(found.end), str(found.method), float(found.score))


def _redirected_to(cited: DueCitation, document: FetchedDocument | None) -> str | None:
    if document is None or not document.redirects:
        return None
    final = document.final_url
    try:
        same = parse_uri_r(final).key == cited.urir_key
    except AmberError:
        same = final == cited.uri_r
    return None if same else final
