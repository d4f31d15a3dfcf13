"""Schemathesis against /openapi.json of a real server: no 5xx, no schema violations.

Runs the schemathesis CLI (all checks but ``positive_data_acceptance``: URI-R validity,
RFC 3339 dates and "exactly one of content/content_base64" are semantic rules the schema
cannot state, so schema-valid inputs may rightly get a 400) against ``amber serve`` over
HTTP — raw paths, real uvicorn — once per identity: agent, auditor, admin, and no key.
Budget: ``AMBER_SCHEMATHESIS_EXAMPLES`` examples per operation (default 25).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from live_server import create_key, env_for, free_port, running_server

from archive.config import Settings

EXAMPLES = os.environ.get("AMBER_SCHEMATHESIS_EXAMPLES", "25")


def _schemathesis(
    base_url: str, key: str | None, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{base_url}/openapi.json",
        "--max-examples",
        EXAMPLES,
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",
        "--request-timeout",
        "20",
        "--generation-deterministic",
    ]
    if key is not None:
        command += ["--header", f"Authorization: Bearer {key}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("identity", ["agent", "auditor", "admin", "none"])
def test_schemathesis_finds_no_server_errors_or_schema_violations(
    tmp_path: Path, identity: str
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = env_for(Settings(data_dir=tmp_path / "amber-data"), base)
    env["AMBER_RATE_LIMIT_PER_SECOND"] = "0"  # the fuzzer is not abuse; test limits elsewhere
    with running_server(env, port) as server:
        key = (
            None
            if identity == "none"
            else (server.agent_key if identity == "agent" else create_key(env, identity))
        )
        result = _schemathesis(base, key, tmp_path)
        log = server.log_tail(50_000)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "passed" in result.stdout
    assert "Traceback" not in log and "internal_error" not in log, log[-4000:]
