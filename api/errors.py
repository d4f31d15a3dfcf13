"""Map library exceptions to HTTP answers: one status per class, one JSON body shape.

Body: ``{"error": {"code": …, "message": …, "detail": {…}}}``. Nothing here ever echoes the
request body or captured text back: validation errors are stripped of their ``input``.

Every answer is bounded whatever the request: a 422 lists at most ``AMBER_MAX_ERROR_ITEMS``
problems (``detail.problems``) and counts the rest (``detail.problems_omitted``), each
problem's text cut to :data:`PROBLEM_TEXT_CHARS` characters and its location to
:data:`PROBLEM_LOC_ITEMS` items of at most :data:`PROBLEM_LOC_CHARS` characters; a
``citations_rejected`` answer lists at most as many refused citations (``errors``) and
counts the rest (``detail.errors_omitted``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

from archive import exceptions as exc
from archive.exceptions import CitationsRejected, RetentionShortened

log = logging.getLogger("amber.api")

TOO_LARGE = "request body is over the size limit"
PROBLEM_TEXT_CHARS = 200  # a problem's msg and type
PROBLEM_LOC_ITEMS = 40  # items of a problem's loc (deeper bodies are over budget anyway)
PROBLEM_LOC_CHARS = 64  # characters of each loc item (member names echo the request)

STATUS_BY_ERROR: tuple[tuple[type[exc.AmberError], int], ...] = (
    (CitationsRejected, 422),
    (RetentionShortened, 409),
    (exc.PayloadTooLarge, 413),
    (exc.ExtractionLimitExceeded, 422),
    (exc.OverBudget, 422),
    (exc.InvalidInput, 400),
    (exc.NotFound, 404),
    (exc.Gone, 410),
    (exc.RetentionConflict, 409),
    (exc.RetentionLocked, 409),  # before StorageError: the store refuses on purpose
    (exc.Unauthenticated, 401),
    (exc.Forbidden, 403),
    (exc.RateLimited, 429),
    (exc.IdempotencyConflict, 409),
    (exc.FetchRefused, 403),
    (exc.FetchError, 502),
    (exc.StorageError, 503),
    (exc.IntegrityError, 500),
    (exc.ConfigurationError, 500),
)


def error_body(code: str, message: str, detail: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "detail": detail or {}}}


def status_for(error: exc.AmberError) -> int:
    for kind, status in STATUS_BY_ERROR:
        if isinstance(error, kind):
            return status
    return 500


async def _amber_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, exc.AmberError)
    limit: int = request.app.state.settings.max_error_items
    return amber_error_response(error, request.method, request.url.path, limit)


def amber_error_response(
    error: exc.AmberError, method: str, path: str, max_items: int | None = None
) -> JSONResponse:
    """The answer to ``error``; a ``citations_rejected`` answer lists at most ``max_items``
    refused citations (``errors``) and counts the rest (``detail.errors_omitted``)."""
    status = status_for(error)
    if status >= 500:
        # Codes and addresses only: detail never holds captured text.
        log.error("%s on %s %s: %s", error.code, method, path, error.message)
    headers = _headers_for(error)
    detail = {k: v for k, v in error.detail.items() if isinstance(v, str | int | float | bool)}
    body = error_body(error.code, error.message, detail)
    if isinstance(error, CitationsRejected):
        listed = error.errors if max_items is None else error.errors[:max_items]
        body["errors"] = [vars(e) for e in listed]
        if len(listed) < len(error.errors):
            body["error"]["detail"]["errors_omitted"] = len(error.errors) - len(listed)
    return JSONResponse(body, status, headers=headers)


def _headers_for(error: exc.AmberError) -> dict[str, str] | None:
    if isinstance(error, exc.StorageError):
        return {"Retry-After": "5"}
    if isinstance(error, exc.RateLimited):
        return {"Retry-After": str(max(1, math.ceil(error.retry_after)))}
    if isinstance(error, exc.Unauthenticated):
        return {"WWW-Authenticate": 'Bearer realm="amber"'}
    return None


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    found = error.errors()
    if any(item.get("type") == "json_invalid" for item in found):
        return malformed_json_response()
    limit: int = request.app.state.settings.max_error_items
    return invalid_request_response(found[:limit], len(found), limit)


def malformed_json_response() -> JSONResponse:
    return JSONResponse(error_body("malformed_json", "request body is not valid JSON"), 400)


def invalid_request_response(
    found: Sequence[Mapping[str, Any]], total: int, limit: int
) -> JSONResponse:
    """422 listing the first ``limit`` of ``total`` validation problems, each cut short."""
    problems = [_problem(item) for item in found[:limit]]
    detail: dict[str, Any] = {"problems": problems}
    if total > len(problems):
        detail["problems_omitted"] = total - len(problems)
    return JSONResponse(
        error_body("invalid_request", "request does not match the schema", detail), 422
    )


def _problem(item: Mapping[str, Any]) -> dict[str, Any]:
    loc = [
        part[:PROBLEM_LOC_CHARS] if isinstance(part, str) else part
        for part in list(item.get("loc", ()))[:PROBLEM_LOC_ITEMS]
    ]
    return {
        "loc": loc,
        "msg": str(item.get("msg", ""))[:PROBLEM_TEXT_CHARS],
        "type": str(item.get("type", ""))[:PROBLEM_TEXT_CHARS],
    }


def too_large_response() -> JSONResponse:
    return JSONResponse(error_body("payload_too_large", TOO_LARGE), 413)


async def reject_too_large(send: Send) -> None:
    """413, sent as plain ASGI (from middleware, outside the framework)."""
    body = json.dumps(error_body("payload_too_large", TOO_LARGE)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
        error.status_code, "http_error"
    )
    headers = dict(error.headers or {})
    if error.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return JSONResponse(error_body(code, str(error.detail)), error.status_code, headers=headers)


def _allowed_methods(request: Request) -> str:
    # Starlette reports the methods of the first route whose path matched; one path can have
    # several routes (GET and POST /api/v1/keys), so collect them all.
    methods: set[str] = set()
    for route in request.app.routes:
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(request.url.path):
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    return unexpected_error_response(request.method, request.url.path)


def unexpected_error_response(method: str, path: str) -> JSONResponse:
    """A bug: logged with its traceback (call from an ``except`` block), answered 500."""
    log.exception("unexpected error on %s %s", method, path)
    return JSONResponse(error_body("internal_error", "internal error"), 500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(exc.AmberError, _amber_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
