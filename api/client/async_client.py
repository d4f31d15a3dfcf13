"""The asyncio client, :class:`AsyncAmberClient`: :class:`~api.client.AmberClient`'s methods,
awaited."""

from __future__ import annotations

import asyncio
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


class AsyncAmberClient:
    """The asyncio twin of :class:`AmberClient`: the same methods, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._calls = Calls(base_url)
        self._transport = Transport(api_key, retry or RetryPolicy(), headers)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(
            timeout=timeout, transport=transport, trust_env=False
        )

    async def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.send(
                    self._transport.request(self._http, call), follow_redirects=False
                )
            except httpx.TransportError as error:
                delay = self._transport.delay_after_error(call, attempt, error)
            else:
                retry_in = self._transport.delay_after_response(call, attempt, response)
                if retry_in is None:
                    return self._transport.finish(call, response)
                await response.aclose()
                delay = retry_in
            await asyncio.sleep(delay)
            attempt += 1

    async def put_transcript(
        self,
        transcript_id: str,
        *,
        retention: str | datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Transcript:
        return await self._run(self._calls.put_transcript(transcript_id, retention, labels))

    async def get_transcript(self, transcript_id: str) -> Transcript:
        return await self._run(self._calls.get_transcript(transcript_id))

    async def cite(
        self,
        transcript_id: str,
        citations: Sequence[Mapping[str, Any]],
        *,
        fail_closed: bool | None = None,
        run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CiteResult:
        return await self._run(
            self._calls.cite(
                transcript_id,
                citations,
                fail_closed=fail_closed,
                run_id=run_id,
                idempotency_key=idempotency_key,
            )
        )

    async def cite_answer(
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
            result = await self._run(plan.call)
        except CitationRejected as rejected:
            return plan.conclude(rejected)
        return plan.conclude(result)

    verify_citations = cite_answer

    async def write_memento(
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
        return await self._run(
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

    async def get_memento(self, memento: str) -> MementoInfo:
        return await self._run(self._calls.get_memento(memento))

    async def fetch_memento(self, memento: str, *, verify: bool = True) -> MementoContent:
        return await self._run(self._calls.fetch_memento(memento, verify))

    async def timegate(self, uri_r: str, at: datetime | None = None) -> TimeGateResult:
        return await self._run(self._calls.timegate(uri_r, at))

    async def timemap(self, uri_r: str) -> dict[str, Any]:
        return await self._run(self._calls.timemap(uri_r))

    async def citation_drift(self, citation_id: str) -> dict[str, Any]:
        return await self._run(self._calls.citation_drift(citation_id))

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncAmberClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
