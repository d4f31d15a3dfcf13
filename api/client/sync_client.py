"""The synchronous client, :class:`AmberClient`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import httpx

from api.client.answers import Answer, AnswerPlan, CitedAnswer, Mode
from api.client.calls import Calls
from api.client.errors import CitationRejected
from api.client.evidence import EvidenceLocker
from api.client.models import CiteResult, MementoContent, MementoInfo, TimeGateResult, Transcript
from api.client.transport import Call, RetryPolicy, Transport

T = TypeVar("T")


class AmberClient:
    """Synchronous client. ``base_url`` is the server's address (e.g. ``http://127.0.0.1:8000``).

    ``http_client`` lets you bring your own ``httpx.Client`` (proxies, TLS, a test
    transport, ``fastapi.testclient.TestClient``); it is then yours to close. Otherwise
    ``timeout`` and ``transport`` configure the one the client makes.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._calls = Calls(base_url)
        self._transport = Transport(api_key, retry or RetryPolicy(), headers)
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(
            timeout=timeout, transport=transport, trust_env=False
        )

    def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.send(
                    self._transport.request(self._http, call), follow_redirects=False
                )
            except httpx.TransportError as error:
                delay = self._transport.delay_after_error(call, attempt, error)
            else:
                retry_in = self._transport.delay_after_response(call, attempt, response)
                if retry_in is None:
                    return self._transport.finish(call, response)
                response.close()
                delay = retry_in
            time.sleep(delay)
            attempt += 1

    # -- transcripts and citations ------------------------------------------------------

    def put_transcript(
        self,
        transcript_id: str,
        *,
        retention: str | datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Transcript:
        """Create or update a transcript; ``retention`` a policy name (``"regulated"``), an
        ISO 8601 duration (``"P7Y"``) or an aware datetime (retain until)."""
        return self._run(self._calls.put_transcript(transcript_id, retention, labels))

    def get_transcript(self, transcript_id: str) -> Transcript:
        return self._run(self._calls.get_transcript(transcript_id))

    def cite(
        self,
        transcript_id: str,
        citations: Sequence[Mapping[str, Any]],
        *,
        fail_closed: bool | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CiteResult:
        """POST citations in the wire shape (``{"memento_id"|"source", "quote", …}``).
        Raises :class:`CitationRejected` on a 422."""
        return self._run(
            self._calls.cite(
                transcript_id,
                citations,
                fail_closed=fail_closed,
                run_id=run_id,
                idempotency_key=idempotency_key,
            )
        )

    def cite_answer(
        self,
        transcript_id: str,
        answer: Answer | Mapping[str, Any],
        locker: EvidenceLocker,
        *,
        mode: Mode = "fail_closed",
        required: bool = True,
        keep_valid: bool = False,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CitedAnswer:
        """Cite an answer's claims from the locker's captured sources (see the package doc: :mod:`api.client`)."""
        plan = AnswerPlan.make(
            self._calls,
            transcript_id,
            answer,
            locker,
            mode=mode,
            required=required,
            keep_valid=keep_valid,
            run_id=run_id,
            idempotency_key=idempotency_key,
        )
        if plan.call is None:
            return plan.conclude(None)
        try:
            result = self._run(plan.call)
        except CitationRejected as rejected:
            return plan.conclude(rejected)
        return plan.conclude(result)

    verify_citations = cite_answer

    # -- mementos and time travel -------------------------------------------------------

    def write_memento(
        self,
        uri_r: str,
        content: bytes | str,
        content_type: str,
        *,
        captured_at: datetime | None = None,
        scope: str = "document",
        tool: str | None = None,
        final_url: str | None = None,
        http_status: int | None = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> MementoInfo:
        """Store a memento (``bytes`` arrive byte for byte: as text when UTF-8, else base64)."""
        return self._run(
            self._calls.write_memento(
                uri_r,
                content,
                content_type,
                captured_at=captured_at,
                scope=scope,
                tool=tool,
                final_url=final_url,
                http_status=http_status,
                headers=headers,
                idempotency_key=idempotency_key,
            )
        )

    def get_memento(self, memento: str) -> MementoInfo:
        """Metadata of a memento, by id or URI-M."""
        return self._run(self._calls.get_memento(memento))

    def fetch_memento(self, memento: str, *, verify: bool = True) -> MementoContent:
        """The bytes of a memento (by id or URI-M), re-hashed against its ETag."""
        return self._run(self._calls.fetch_memento(memento, verify))

    def timegate(self, uri_r: str, at: datetime | None = None) -> TimeGateResult:
        """The memento of ``uri_r`` nearest to ``at`` (default: the latest)."""
        return self._run(self._calls.timegate(uri_r, at))

    def timemap(self, uri_r: str) -> dict[str, Any]:
        """The JSON TimeMap of ``uri_r``: every memento Amber holds for it (first page)."""
        return self._run(self._calls.timemap(uri_r))

    def citation_drift(self, citation_id: str) -> dict[str, Any]:
        """A citation's drift checks and latest verdict, as the server answers them."""
        return self._run(self._calls.citation_drift(citation_id))

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> AmberClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
