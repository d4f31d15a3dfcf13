"""The SDK as a package (``api/client/``): its public names, that it installs and runs
without the server, and that its copies of the server's values are the server's."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import api.client
from api.client import wire
from archive.config import CitationPolicy, Settings
from archive.dates import parse_rfc3339
from archive.hashing import content_address
from archive.mementos import KEPT_HEADERS

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_NAMES = [
    "SAFE_ANSWER",
    "AmberClient",
    "AmberClientError",
    "AmberConnectionError",
    "Answer",
    "AsyncAmberClient",
    "AuthError",
    "CitationError",
    "CitationRecord",
    "CitationRejected",
    "CiteResult",
    "CitedAnswer",
    "Claim",
    "ConflictError",
    "EvidenceIntegrityError",
    "EvidenceLocker",
    "InvalidRequestError",
    "MementoContent",
    "MementoInfo",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RetryPolicy",
    "SearchHit",
    "ServerError",
    "ServiceUnavailableError",
    "Source",
    "TimeGateResult",
    "ToolResult",
    "Transcript",
    "content_hash",
    "safe_answer",
]


def test_the_public_names_are_exactly_these_and_each_is_importable() -> None:
    assert api.client.__all__ == PUBLIC_NAMES
    namespace: dict[str, object] = {}
    exec("from api.client import *", namespace)
    assert sorted(name for name in namespace if name != "__builtins__") == sorted(PUBLIC_NAMES)
    for name in PUBLIC_NAMES:
        value = getattr(api.client, name)
        module = getattr(value, "__module__", None)
        if module is not None:  # classes and functions: defined in the SDK itself
            assert module.startswith("api.client."), (name, module)
            assert getattr(importlib.import_module(module), name) is value


# The server's dependencies and the server itself: the SDK must need none of them.
SERVER_ONLY = ("fastapi", "starlette", "sqlalchemy", "uvicorn", "boto3", "psycopg", "archive")

WITHOUT_THE_SERVER = """
import asyncio
import importlib.abc
import sys

BLOCKED = frozenset(sys.argv[1].split(","))


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in BLOCKED:
            raise ImportError(f"{fullname} is not installed here")
        return None


sys.meta_path.insert(0, Refuse())
for name in BLOCKED:  # the blocker works: none of them can be imported
    try:
        importlib.import_module(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{name} was importable")

import httpx

import api
import api.client
from api.client import AmberClient, AsyncAmberClient, EvidenceLocker, ToolResult

assert api.__file__.startswith(sys.argv[2]), api.__file__


def answer(request):
    return httpx.Response(
        200,
        json={
            "id": "m1",
            "uri_r": "https://example.org/",
            "uri_m": "http://amber.test/memento/m1",
            "memento_datetime": "2024-05-01T12:00:00+00:00",
            "archived_at": "2024-05-01T12:00:01+00:00",
            "content_hash": "blake3:" + "0" * 64,
            "content_type": "text/plain",
            "size": 2,
            "scope": "document",
            "capture": {},
            "timegate": "http://amber.test/timegate/https://example.org/",
            "timemap": "http://amber.test/timemap/link/https://example.org/",
            "timemap_json": "http://amber.test/timemap/json/https://example.org/",
        },
    )


with AmberClient("http://amber.test", "amber_key", transport=httpx.MockTransport(answer)) as amber:
    assert amber.get_memento("m1").uri_m == "http://amber.test/memento/m1"


async def run_async():
    transport = httpx.MockTransport(answer)
    async with AsyncAmberClient("http://amber.test", "amber_key", transport=transport) as amber:
        return await amber.get_memento("m1")


assert asyncio.run(run_async()).id == "m1"
locker = EvidenceLocker()
source = locker.record("http.get", ToolResult("https://example.org/", b"hi"))
assert locker[source.source_id] is source
leaked = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
assert not leaked, leaked
print("ok")
"""


def test_the_sdk_imports_and_runs_without_the_server_or_its_framework() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(WITHOUT_THE_SERVER),
            ",".join(SERVER_ONLY),
            str(ROOT),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# -- the server's values the SDK copies -----------------------------------------------------


def test_the_capture_headers_sent_are_those_the_server_keeps() -> None:
    assert wire.CAPTURE_HEADERS == KEPT_HEADERS


def test_the_default_evidence_tools_are_the_servers_default_evidence_sources() -> None:
    assert wire.DEFAULT_EVIDENCE_TOOLS == CitationPolicy().evidence_sources


def test_tools_under_the_search_prefix_are_never_evidence_on_the_server_by_default() -> None:
    search = wire.SEARCH_TOOL_PREFIX + "web"
    listed = CitationPolicy(evidence_sources=(search, "kb.read"))
    assert not listed.tool_is_evidence(search)  # even when listed: search is never evidence
    assert listed.tool_is_evidence("kb.read")
    assert CitationPolicy(allow_search_results_as_evidence=True).tool_is_evidence(search)


def test_the_sources_one_request_may_name_are_the_servers_limit() -> None:
    from api.transcripts import CitationsIn

    limits = [
        getattr(rule, "max_length", None) for rule in CitationsIn.model_fields["sources"].metadata
    ]
    assert wire.MAX_SOURCES_PER_REQUEST in limits


def test_every_path_the_sdk_calls_is_one_the_server_routes() -> None:
    from api.app import create_app
    from api.mementos import WRITE_PATH
    from api.urls import MEMENTO_PREFIX, TIMEGATE_PREFIX, TIMEMAP_JSON_PREFIX
    from archive.config import Settings

    assert wire.MEMENTOS_PATH == WRITE_PATH
    assert wire.MEMENTO_PREFIX == MEMENTO_PREFIX
    assert wire.TIMEGATE_PREFIX == TIMEGATE_PREFIX
    assert wire.TIMEMAP_JSON_PREFIX == TIMEMAP_JSON_PREFIX
    routed = set(create_app(Settings()).openapi()["paths"])
    assert {
        wire.MEMENTOS_PATH,
        wire.MEMENTOS_PATH + "/{memento_id}",
        wire.MEMENTO_PREFIX + "{memento_id}",
        wire.TIMEGATE_PREFIX + "{uri_r}",
        wire.TRANSCRIPTS_PATH + "{transcript_id}",
        wire.TRANSCRIPTS_PATH + "{transcript_id}/citations",
        wire.TIMEMAP_JSON_PREFIX + "{uri_r}",
        wire.CITATIONS_PATH + "{citation_id}/drift",
    } <= routed


def test_content_hashes_and_etags_are_the_servers() -> None:
    from api.mementos import etag_for

    for data in (b"", b"hello", bytes(range(256)) * 5000):
        assert wire.content_hash(data) == content_address(data)
        assert wire.content_hash_from_etag(etag_for(content_address(data))) == content_address(data)


def test_datetimes_sent_read_back_as_the_same_instant_on_the_server() -> None:
    for moment in (
        datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
        datetime(2024, 5, 1, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2))),
    ):
        assert parse_rfc3339(wire.rfc3339(moment)) == moment


# -- the client-only distribution (sdk/pyproject.toml) -------------------------------------

SERVER_DISTRIBUTIONS = ("fastapi", "sqlalchemy", "boto3", "pypdfium2", "psycopg", "uvicorn", "mcp")

IN_THE_VENV = """
import importlib.util
import sys
from datetime import UTC, datetime

import api.client
from api.client import AmberClient, CitationRejected

absent = sys.argv[3].split(",")
assert [n for n in absent if importlib.util.find_spec(n) is not None] == [], absent
assert importlib.util.find_spec("archive") is None
assert api.client.__file__.startswith(sys.prefix), api.client.__file__

with AmberClient(sys.argv[1], sys.argv[2]) as amber:
    page = amber.write_memento(
        "https://example.org/leave", "<p>Leave is sixteen weeks.</p>", "text/html",
        captured_at=datetime(2024, 5, 1, tzinfo=UTC), tool="http.get",
    )
    amber.put_transcript("conv-1")
    cited = amber.cite("conv-1", [{"memento_id": page.id, "quote": {"exact": "sixteen weeks"}}])
    assert cited.citations[0].document_uri_m == page.uri_m
    try:
        amber.cite("conv-1", [{"memento_id": page.id, "quote": {"exact": "ten weeks"}}])
    except CitationRejected as refused:
        assert refused.reasons == ("quote_not_found",)
    else:
        raise SystemExit("a made-up quote was accepted")
    assert amber.fetch_memento(page.uri_m).verified
    assert page.uri_m in str(amber.timemap("https://example.org/leave"))
print("ok")
"""


def test_the_client_only_distribution_installs_alone_and_works(tmp_path: Path) -> None:
    from live_server import env_for, running_server

    # The layout of the repository, copied: building writes next to the sources.
    (tmp_path / "src" / "sdk").mkdir(parents=True)
    (tmp_path / "src" / "sdk" / "pyproject.toml").write_bytes(
        (ROOT / "sdk" / "pyproject.toml").read_bytes()
    )
    source = ROOT / "api" / "client"
    target = tmp_path / "src" / "api" / "client"
    target.mkdir(parents=True)
    for module in source.glob("*.py"):
        (target / module.name).write_bytes(module.read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AMBER_")}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "-q", str(tmp_path / "src" / "sdk")]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.lower()
    names = {line.partition("==")[0] for line in listed.split()}
    assert "amber-client" in names and {"httpx", "blake3"} <= names
    assert not names & set(SERVER_DISTRIBUTIONS), names & set(SERVER_DISTRIBUTIONS)

    settings = Settings(data_dir=tmp_path / "amber-data")
    with running_server(env_for(settings)) as server:
        ran = subprocess.run(
            [
                python,
                "-c",
                textwrap.dedent(IN_THE_VENV),
                server.base_url,
                str(server.agent_key),
                ",".join(SERVER_DISTRIBUTIONS),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ok"


def test_the_client_only_distribution_has_the_servers_version() -> None:
    import tomllib

    from archive import __version__

    sdk = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())["project"]
    full = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sdk["version"] == full["version"] == __version__
    assert sorted(sdk["dependencies"]) == sorted(
        d for d in full["dependencies"] if d.startswith(("httpx", "blake3"))
    )
