"""The auditors' pages: look-up, transcripts, mementos, TimeMaps and drift, as HTML.

Each page reads through the same library calls as the API route it stands for, and its view
by an auditor or admin is recorded in the read audit under that route's action
(:data:`archive.access.audit.READ_ACTIONS`). Evidence is re-hashed on view: a page says ✓
only for bytes that hash to their address now. Captured text is only ever rendered as
escaped text; a captured document is shown only at its URI-M, in a sandboxed frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Path, Query, Request, Response

from api.auth import record_read
from api.ui.render import PageRoute, page
from api.ui.signin import SignedIn
from api.urls import MEMENTO_PREFIX, Urls, raw_uri_r_of
from archive.archive import Archive
from archive.citations import Citation
from archive.drift.records import CheckRecord
from archive.exceptions import AmberError, IntegrityError, MementoNotFound
from archive.index.navigation import Navigable
from archive.links import robust_link, text_fragment_url
from archive.mementos import Memento, Scope, check_memento_id
from archive.retention.records import shown_deletion_reason
from archive.uri import WEB_SCHEMES

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)
TIMEMAPS_PREFIX = "/ui/timemaps/"
RECENT = 20
_MEMENTO_ID = re.compile(r"[0-9a-f]{32,64}")
_DIFF = re.compile(r"\[-(.*?)-\]|\{\+(.*?)\+\}", re.S)


@dataclass(frozen=True)
class Verified:
    """A fresh re-hash of stored bytes: whether they still hash to their address."""

    ok: bool
    note: str


def verify(archive: Archive, memento: Memento) -> tuple[Verified, bytes | None]:
    """Re-hash the memento's bytes now (its bytes too, when they verified)."""
    if memento.deleted_at is not None:
        return Verified(False, "deleted: only its hashes and dates are kept"), None
    try:
        data = archive.read_content(memento)
    except IntegrityError:
        return Verified(False, "the stored bytes no longer hash to this address"), None
    except AmberError as error:
        return Verified(False, f"could not be read: {error.code}"), None
    return Verified(True, "the stored bytes hash to this address"), data


@dataclass(frozen=True)
class CitationView:
    citation: Citation
    verified: Verified
    drift: CheckRecord | None
    uri_m: str
    robust_link: str
    live_link: str | None

    @property
    def drift_verdict(self) -> str:
        return self.drift.verdict if self.drift is not None else "unchecked"


def _uri_m(request: Request, memento_id: str) -> str:
    urls: Urls = request.app.state.urls
    return urls.memento(memento_id)


def _archive(request: Request) -> Archive:
    archive: Archive = request.app.state.archive
    return archive


@router.get("/")
def home(request: Request, session: SignedIn) -> Response:
    archive = _archive(request)
    recent = archive.transcripts.recent(session.principal.tenant, RECENT)
    record_read(
        archive.read_audit,
        session.principal,
        "transcripts.list",
        urlencode({"order": "updated", "limit": RECENT}),
    )
    return page(request, "home.html", recent=recent)


@router.get("/lookup")
def lookup(
    request: Request,
    session: SignedIn,
    q: Annotated[str, Query(min_length=1, max_length=8192)],
) -> Response:
    """Where a looked-up thing is shown: a memento id or URI-M, a URL, or a transcript id."""
    wanted = q.strip()
    urls: Urls = request.app.state.urls
    tail = wanted.removeprefix(urls.base).removeprefix(MEMENTO_PREFIX)
    if _MEMENTO_ID.fullmatch(tail) and (tail == wanted or wanted.endswith(MEMENTO_PREFIX + tail)):
        target = f"/ui/mementos/{tail}"
    elif "://" in wanted or wanted.startswith(("kb:", "urn:")):
        target = TIMEMAPS_PREFIX + quote(wanted, safe=":/?&=%~+,;@!$'()*[]")
    else:
        target = "/ui/transcripts/" + quote(wanted, safe="")
    return Response(status_code=303, headers={"Location": target})


@router.get("/transcripts/{transcript_id}")
def transcript(
    request: Request,
    session: SignedIn,
    transcript_id: Annotated[str, Path(max_length=128)],
) -> Response:
    archive = _archive(request)
    tenant = session.principal.tenant
    found = archive.transcripts.get(tenant, transcript_id)
    record_read(archive.read_audit, session.principal, "transcript.read", found.id)
    cited = archive.citations.for_transcript(tenant, found.id)
    latest = archive.drift.latest(tenant, [c.id for c in cited])
    views = [_citation_view(request, archive, c, latest.get(c.id)) for c in cited]
    review = archive.drift.review(tenant, found.id)
    return page(request, "transcript.html", transcript=found, citations=views, review=review)


def _citation_view(
    request: Request, archive: Archive, citation: Citation, drift: CheckRecord | None
) -> CitationView:
    verified, _ = verify(archive, citation.passage)
    uri_m = _uri_m(request, citation.passage.id)
    selector = citation.selector
    live = (
        text_fragment_url(citation.document_uri_r, selector.exact, selector.prefix, selector.suffix)
        if selector and citation.passage.uri_r.partition(":")[0].lower() in WEB_SCHEMES
        else None
    )
    link = robust_link(citation.document_uri_r, uri_m, citation.passage.captured_at)
    return CitationView(citation, verified, drift, uri_m, link, live)


@router.get("/mementos/{memento_id}")
def memento(request: Request, session: SignedIn, memento_id: str) -> Response:
    archive = _archive(request)
    tenant = session.principal.tenant
    check_memento_id(memento_id)
    found = archive.index.get_memento(tenant, memento_id)
    if found is None:
        raise MementoNotFound("no memento with this id")
    record_read(archive.read_audit, session.principal, "memento.metadata", found.id)
    uri_m = _uri_m(request, found.id)
    if found.deleted_at is not None:
        return page(
            request,
            "tombstone.html",
            status=410,
            memento=found,
            uri_m=uri_m,
            reason=shown_deletion_reason(found.deletion_reason),
        )
    verified, data = verify(archive, found)
    before = quoted = after = None
    if found.scope == Scope.PASSAGE and data is not None:
        record_read(archive.read_audit, session.principal, "memento.content", found.id)
        text = data.decode("utf-8", "replace")
        before, quoted, after = text, "", ""
        for citation in archive.citations.for_passage(tenant, found.id):
            exact = citation.selector.exact if citation.selector else ""
            at = text.find(exact) if exact else -1
            if at >= 0:
                before, quoted, after = text[:at], exact, text[at + len(exact) :]
                break
    around = archive.navigate(tenant, found.uri_r, found.captured_at)
    return page(
        request,
        "memento.html",
        memento=found,
        uri_m=uri_m,
        verified=verified,
        before=before,
        quoted=quoted,
        after=after,
        prev=around.prev,
        next=around.next,
        robust_link=robust_link(found.uri_r, uri_m, found.captured_at),
        timemap=TIMEMAPS_PREFIX + found.uri_r,
    )


@router.get("/timemaps/{uri_r:path}")
def timemap(request: Request, session: SignedIn, uri_r: str) -> Response:
    archive = _archive(request)
    original, page_number = raw_uri_r_of(request.scope, TIMEMAPS_PREFIX)
    view = archive.timemap_view(session.principal.tenant, original, page_number)
    record_read(archive.read_audit, session.principal, "timemap.json", original)
    by_month: dict[str, list[Navigable]] = {}
    for entry in view.entries:
        by_month.setdefault(entry.captured_at.strftime("%Y-%m"), []).append(entry)

    def page_url(number: int) -> str:
        return f"{TIMEMAPS_PREFIX}page/{number}/{original}"

    return page(
        request,
        "timemap.html",
        uri_r=original,
        view=view,
        by_month=by_month,
        previous_page=page_url(view.page - 1) if view.page > 1 else None,
        next_page=page_url(view.page + 1) if view.page < view.pages else None,
    )


@router.get("/citations/{citation_id}/drift")
def citation_drift(
    request: Request,
    session: SignedIn,
    citation_id: Annotated[str, Path(pattern="^[0-9a-f]{32}$")],
) -> Response:
    archive = _archive(request)
    found = archive.drift.history(session.principal.tenant, citation_id, limit=50)
    record_read(archive.read_audit, session.principal, "citation.drift", citation_id)
    latest = found.checks[0] if found.checks else None
    return page(
        request,
        "drift_citation.html",
        found=found,
        latest=latest,
        diff=diff_segments(latest.diff) if latest is not None and latest.diff else [],
    )


def diff_segments(diff: str) -> list[tuple[str, str]]:
    """An inline word diff (``[-removed-] {+added+}``) as ``(kind, text)`` pieces, kind one
    of ``same``, ``del``, ``ins``: the template marks them up, escaping the text."""
    pieces: list[tuple[str, str]] = []
    at = 0
    for match in _DIFF.finditer(diff):
        if match.start() > at:
            pieces.append(("same", diff[at : match.start()]))
        if match.group(1) is not None:
            pieces.append(("del", match.group(1)))
        else:
            pieces.append(("ins", match.group(2)))
        at = match.end()
    if at < len(diff):
        pieces.append(("same", diff[at:]))
    return pieces


@router.get("/drift")
def drift(
    request: Request,
    session: SignedIn,
    window_days: Annotated[int | None, Query(ge=1, le=3650)] = None,
) -> Response:
    archive = _archive(request)
    window = window_days or archive.settings.drift.window_days
    rates = archive.drift.source_rates(session.principal.tenant, window_days=window)
    record_read(archive.read_audit, session.principal, "drift.sources", f"window_days={window}")
    return page(request, "drift.html", window=window, rates=rates)
