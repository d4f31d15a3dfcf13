"""The baseline for ``bench_http.py``: the most trivial FastAPI app doing the same HTTP work.

Served by uvicorn exactly like Amber (single worker, default loop and HTTP implementation,
access log off), it answers the same requests Amber's write and resolve do, with none of
the archive work: ``POST /write`` reads the same JSON body and answers a small JSON;
``GET /bytes`` answers 4 KiB of bytes. Both endpoints are ``async def``, the cheapest way
FastAPI runs an endpoint, so the baseline is as fast as a FastAPI endpoint gets.

    uvicorn benchmarks.baseline_app:app --host 127.0.0.1 --port 8001 --no-access-log
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, Request, Response

BODY_4K = os.urandom(4096)

app = FastAPI(title="Amber benchmark baseline")


@app.post("/write", status_code=201)
async def write(request: Request) -> dict[str, Any]:
    body = await request.json()
    return {"ok": True, "uri_r": body.get("uri_r"), "size": len(body.get("content") or "")}


@app.get("/bytes")
async def read_bytes() -> Response:
    return Response(content=BODY_4K, media_type="application/octet-stream")


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
