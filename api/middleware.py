"""ASGI middleware: request body size limit (413 before the app reads a byte too many).

A safety net: the routes that take a body read it through the request budget
(:mod:`api.budget`), which authenticates first and then enforces the same limit, the
declared Content-Length included. Here only the bytes actually read are counted, so that a
request without a valid key is answered 401 however large a body it announces.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import reject_too_large


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not response_started:
                await reject_too_large(send)


class _TooLarge(HTTPException):
    # An HTTPException, so FastAPI's body parsing lets it through to the 413 handler
    # instead of wrapping it into a generic 400.
    def __init__(self) -> None:
        super().__init__(413, "request body is over the size limit")
