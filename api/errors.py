"""Map library exceptions to HTTP answers: one status per class, one JSON body shape.

Body: ``{"error": {"code": …, "message": …, "detail": {…}}}``. Nothing here ever echoes the
request body or captured text back: validation errors are stripped of their ``input``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from archive import exceptions as exc
from archive.exceptions import CitationsRejected, RetentionShortened

log = logging.getLogger("amber.api")

STATUS_BY_ERROR: tuple[tuple[type[exc.AmberError], int], ...] = (
    (CitationsRejected, 422),
    (RetentionShortened, 409),
    (exc.PayloadTooLarge, 413),
    (exc.ExtractionLimitExceeded, 422),
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
    return amber_error_response(error, request.method, request.url.path)


def amber_error_response(error: exc.AmberError, method: str, path: str) -> JSONResponse:
    status = status_for(error)
    if status >= 500:
        # Codes and addresses only: detail never holds captured text.
        log.error("%s on %s %s: %s", error.code, method, path, error.message)
    headers = _headers_for(error)
    detail = {k: v for k, v in error.detail.items() if isinstance(v, str | int | float | bool)}
    body = error_body(error.code, error.message, detail)
    if isinstance(error, CitationsRejected):
        body["errors"] = [vars(e) for e in error.errors]
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
    problems = [
        {"loc": list(item.get("loc", ())), "msg": item.get("msg", ""), "type": item.get("type", "")}
        for item in error.errors()
    ]
    if any(p["type"] == "json_invalid" for p in problems):
        return JSONResponse(error_body("malformed_json", "request body is not valid JSON"), 400)
    return JSONResponse(
        error_body("invalid_request", "request does not match the schema", {"problems": problems}),
        422,
    )


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
