"""Answers: what the model cites (:class:`Answer`, :class:`Claim`), what may be shown once
the server has checked it (:class:`CitedAnswer`), and the plan both clients follow to cite
one (:class:`AnswerPlan`: everything but the I/O)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Literal

from api.client.calls import Calls
from api.client.errors import CitationRejected, EvidenceIntegrityError
from api.client.evidence import EvidenceLocker
from api.client.models import CitationError, CitationRecord, CiteResult
from api.client.transport import Call
from api.client.wire import MAX_SOURCES_PER_REQUEST

Mode = Literal["fail_closed", "degrade"]

SAFE_ANSWER = "I cannot cite this reliably."


@dataclass(frozen=True)
class Claim:
    """One citation the model made: the words it quotes from a captured source."""

    source_id: str
    quote: str
    prefix: str | None = None
    suffix: str | None = None
    position: int | None = None

    @classmethod
    def coerce(cls, item: Claim | Mapping[str, Any]) -> Claim:
        if isinstance(item, Claim):
            return item
        quote = item.get("quote")
        if isinstance(quote, Mapping):  # the wire shape {"exact", "prefix", …}
            return cls(
                str(item.get("source_id")),
                str(quote.get("exact", "")),
                quote.get("prefix"),
                quote.get("suffix"),
                quote.get("position"),
            )
        return cls(
            str(item.get("source_id")),
            str(quote or ""),
            item.get("prefix"),
            item.get("suffix"),
            item.get("position"),
        )

    def wire_quote(self) -> dict[str, Any]:
        quote: dict[str, Any] = {"exact": self.quote}
        for name in ("prefix", "suffix", "position"):
            if getattr(self, name) is not None:
                quote[name] = getattr(self, name)
        return quote


@dataclass(frozen=True)
class Answer:
    """The model's answer: its text and the citations it makes."""

    text: str
    citations: tuple[Claim, ...] = ()

    def __init__(self, text: str, citations: Iterable[Claim | Mapping[str, Any]] = ()) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "citations", tuple(Claim.coerce(c) for c in citations))

    @classmethod
    def coerce(cls, answer: Answer | Mapping[str, Any]) -> Answer:
        if isinstance(answer, Answer):
            return answer
        return cls(str(answer.get("text", "")), answer.get("citations") or ())


@dataclass(frozen=True)
class CitedAnswer:
    """The answer as it may be shown: cited, or (degrade mode) rewritten to the safe form."""

    text: str  # what to show: the model's text, or SAFE_ANSWER plus reasons when degraded
    citations: tuple[CitationRecord, ...]
    errors: tuple[CitationError, ...]
    degraded: bool
    original_text: str
    transcript_id: str
    run_id: str | None

    @property
    def uri_ms(self) -> tuple[str, ...]:
        return tuple(c.uri_m for c in self.citations)

    @property
    def robust_links(self) -> tuple[str, ...]:
        return tuple(c.robust_link for c in self.citations)

    def render_markdown(self) -> str:
        """The text with numbered sources: quote, capture time, URI-M and original URL."""
        if not self.citations:
            return self.text
        lines = [self.text, "", "Sources:"]
        for number, c in enumerate(self.citations, 1):
            when = c.memento_datetime.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            lines.append(
                f"[{number}] “{c.exact or ''}” — archived {when}: {c.uri_m} (original: {c.uri_r})"
            )
        return "\n".join(lines)

    def render_html(self) -> str:
        """The text and an ordered list of Robust Links (data-versionurl = the URI-M)."""
        items = "".join(
            f"<li><q>{html.escape(c.exact or '')}</q> {c.robust_link}</li>" for c in self.citations
        )
        body = "".join(f"<p>{html.escape(p)}</p>" for p in self.text.split("\n\n"))
        return body + (f'<ol class="amber-sources">{items}</ol>' if items else "")


def safe_answer(errors: Sequence[CitationError]) -> str:
    """The degrade-mode rewrite: :data:`SAFE_ANSWER` and why."""
    return "\n".join([SAFE_ANSWER, *(f"- {e.describe()}" for e in errors)])


@dataclass(frozen=True)
class AnswerPlan:
    """Everything about citing an answer that is not I/O (shared by both clients)."""

    transcript_id: str
    answer: Answer
    mode: Mode
    required: bool
    keep_valid: bool
    run_id: str | None
    locker: EvidenceLocker
    sent: tuple[int, ...]  # answer citation index of each citation sent, in order
    client_errors: tuple[CitationError, ...]
    call: Call[CiteResult] | None  # None: decided without asking the server

    @classmethod
    def make(
        cls,
        calls: Calls,
        transcript_id: str,
        answer: Answer | Mapping[str, Any],
        locker: EvidenceLocker,
        *,
        mode: Mode,
        required: bool,
        keep_valid: bool,
        run_id: str | None,
        idempotency_key: str | None,
    ) -> AnswerPlan:
        if mode not in ("fail_closed", "degrade"):
            raise ValueError("mode is 'fail_closed' or 'degrade'")
        answer = Answer.coerce(answer)
        sent, wire, errors = [], [], []
        refs: dict[str, str] = {}  # source_id -> key in `sources`
        shared: dict[str, dict[str, Any]] = {}
        for index, claim in enumerate(answer.citations):
            source = locker.get(claim.source_id)
            if source is None:
                errors.append(
                    CitationError(
                        index,
                        "unknown_evidence",
                        "no wrapped tool captured this source_id",
                        claim.source_id,
                    )
                )
                continue
            sent.append(index)
            # Each captured document travels once, in `sources`, however often it is cited.
            ref = refs.get(source.source_id)
            if ref is None and len(refs) < MAX_SOURCES_PER_REQUEST:
                ref = refs[source.source_id] = f"s{len(refs)}"
                shared[ref] = source.wire_source()
            evidence = {"source_ref": ref} if ref is not None else {"source": source.wire_source()}
            wire.append({**evidence, "source_id": source.source_id, "quote": claim.wire_quote()})
        call = None
        if wire and (keep_valid or not errors):
            call = calls.cite(
                transcript_id,
                wire,
                fail_closed=not keep_valid,
                run_id=run_id,
                idempotency_key=idempotency_key,
                sources=shared,
            )
        return cls(
            transcript_id,
            answer,
            mode,
            required,
            keep_valid,
            run_id,
            locker,
            tuple(sent),
            tuple(errors),
            call,
        )

    def conclude(self, outcome: CiteResult | CitationRejected | None) -> CitedAnswer:
        errors = list(self.client_errors)
        citations: tuple[CitationRecord, ...] = ()
        if isinstance(outcome, CitationRejected):
            errors += [self._remap(e) for e in outcome.errors]
        elif outcome is not None:
            errors += [self._remap(e) for e in outcome.errors]
            citations = outcome.citations
            self._check_hashes(citations)
        errors.sort(key=lambda e: -1 if e.index is None else e.index)
        if not self.answer.citations and self.required:
            errors.append(
                CitationError(
                    None, "no_citations", "the answer cites nothing and citations are required"
                )
            )
        failed = (bool(errors) and not self.keep_valid) or (self.required and not citations)
        if not failed:
            return CitedAnswer(
                self.answer.text,
                citations,
                tuple(errors),
                False,
                self.answer.text,
                self.transcript_id,
                self.run_id,
            )
        safe = safe_answer(errors)
        if self.mode == "fail_closed":
            raise CitationRejected(
                f"{len(errors)} citation problem(s); nothing was stored",
                errors,
                safe_text=safe,
                status=outcome.status if isinstance(outcome, CitationRejected) else None,
            )
        return CitedAnswer(
            safe, (), tuple(errors), True, self.answer.text, self.transcript_id, self.run_id
        )

    def _remap(self, error: CitationError) -> CitationError:
        """Server indices count the citations sent; map them back to the answer's."""
        if error.index is None or not 0 <= error.index < len(self.sent):
            return error
        index = self.sent[error.index]
        return CitationError(
            index, error.reason, error.detail, self.answer.citations[index].source_id
        )

    def _check_hashes(self, citations: Sequence[CitationRecord]) -> None:
        for citation in citations:
            for source_id in citation.source_ids:
                source = self.locker.get(source_id)
                if source is not None and source.content_hash != citation.document_hash:
                    raise EvidenceIntegrityError(
                        f"citation {citation.id}: the server hashed the document of {source_id} "
                        f"to {citation.document_hash}, the tool's bytes hash to {source.content_hash}"
                    )
