"""Every request finishes within its budget, and the server's memory stays bounded.

A live ``amber serve`` (embedded default, in a subprocess, so its CPU time and memory can be
read from ``/proc``) gets two kinds of requests:

- **From the request models.** Hypothesis builds JSON bodies from the JSON Schema of
  ``MementoIn``, ``TranscriptIn`` and ``CitationsIn`` (what ``/openapi.json`` publishes),
  with strings drawn from hostile alphabets and realistic shapes (URLs, media types, dates).
- **Pathological generators.** Deeply nested and unclosed HTML, an element with very many
  attributes, a huge single line, PDFs whose Flate streams inflate to hundreds of MB of
  repeated bytes or millions of text operators (built with zlib by hand), quotes with a
  near-occurrence at every character, Unicode edge cases, and JSON bodies that are costly
  only to parse.

For each request: no 5xx; the server's CPU time (its own, its reaped children's and its
live children's: an extraction worker counts) grows by at most ``CPU_BUDGET_SECONDS``; and
the peak resident memory of the server and its children stays under the baseline plus
``MEMORY_BOUND_MIB``. The server is watched while it works, so a request is given up (and
fails) the moment it passes a bound, or after ``WALL_LIMIT_SECONDS`` without an answer. The model-driven tests stop drawing examples when the file's
time budget is spent (``MODEL_BUDGET_SECONDS``, ``RAW_BUDGET_SECONDS``), so the file runs in
a fixed time (about 90 s when every request keeps its budget); the server is restarted
after a request that broke a bound, so each generator is judged on its own.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hostile_payloads as payloads
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import LiveServer, start_server

from api.models import MementoIn
from api.transcripts import CitationsIn, TranscriptIn

CPU_BUDGET_SECONDS = 2.0  # per request, server CPU time
MEMORY_BOUND_MIB = 768  # peak RSS over the baseline taken after start-up
WALL_LIMIT_SECONDS = 120.0  # a request still unanswered after this has failed, CPU or not
POLL_SECONDS = 0.05  # how often the server's CPU and memory are read during a request
MODEL_BUDGET_SECONDS = 40.0  # wall time the model-driven fuzzing may spend
RAW_BUDGET_SECONDS = 10.0  # and the raw-body fuzzing
MIN_MODEL_REQUESTS = 40  # fewer requests than this in the time would prove little

# The request budget under test, set through its documented settings (docs/design.md,
# "Extraction limits"): the defaults are sized for real documents (10 s, 8 Mi characters),
# so a request's worst case is theirs; here they are set so that the worst case is inside
# CPU_BUDGET_SECONDS, which proves every kind of cost is bounded by a setting. Quote
# location is linear in the extracted text (docs/design.md §9.2), so the text limit bounds it.
BUDGET_SETTINGS = {
    "AMBER_EXTRACT_TIMEOUT_SECONDS": "1",
    "AMBER_EXTRACT_REQUEST_SECONDS": "1.5",
    "AMBER_EXTRACT_MEMORY_MB": "512",
    "AMBER_EXTRACT_MAX_TEXT_CHARS": "262144",
}

CLK_TCK = os.sysconf("SC_CLK_TCK")
TRANSCRIPT = "/api/v1/transcripts/fuzz"
pytestmark = pytest.mark.slow


# -- measuring the server ---------------------------------------------------------------------


def _stat_fields(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rsplit(b")", 1)[1].split()


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (an extraction worker, say)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(_stat_fields(int(entry))[1])
            except (OSError, IndexError, ValueError):
                continue
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found.extend(kids)
        frontier.extend(kids)
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid``, of its reaped children and of its live descendants."""
    fields = _stat_fields(pid)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    for child in _children(pid):
        try:
            child_fields = _stat_fields(child)
        except OSError:
            continue  # exited meanwhile: its time is in cutime once reaped
        total += int(child_fields[11]) + int(child_fields[12])
    return total / CLK_TCK


def _status_kib(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return 0


def tree_peak_mib(pid: int) -> float:
    """Peak RSS (VmHWM) of ``pid`` plus that of each live descendant, in MiB."""
    total = _status_kib(pid, "VmHWM")
    for child in _children(pid):
        try:
            total += _status_kib(child, "VmHWM")
        except OSError:
            continue
    return total / 1024


@dataclass(frozen=True)
class Sample:
    what: str
    status: int | None  # None: no answer (abandoned over a bound, or the connection failed)
    cpu_seconds: float
    peak_mib: float
    waited_seconds: float

    def failures(self, memory_limit_mib: float) -> list[str]:
        found = []
        if self.status is None:
            found.append(f"no answer (gave up after {self.waited_seconds:.1f} s)")
        elif self.status >= 500:
            found.append(f"answered {self.status}")
        if self.cpu_seconds > CPU_BUDGET_SECONDS:
            found.append(f"server CPU {self.cpu_seconds:.2f} s > {CPU_BUDGET_SECONDS} s")
        if self.peak_mib > memory_limit_mib:
            found.append(f"peak RSS {self.peak_mib:.0f} MiB > {memory_limit_mib:.0f} MiB")
        return found


class Fuzzer:
    """One live server, restarted when a request left it over a bound or still busy."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.server: LiveServer | None = None
        self.start()

    def start(self) -> None:
        env = {
            "AMBER_DATA_DIR": str(self.data_dir),
            "AMBER_RATE_LIMIT_PER_SECOND": "0",
            **BUDGET_SETTINGS,
        }
        self.server = start_server(env)
        self.client = httpx.Client(
            base_url=self.server.base_url,
            headers=self.server.headers,
            timeout=WALL_LIMIT_SECONDS + 10,
            trust_env=False,
        )
        opened = self.client.put(TRANSCRIPT, json={})
        assert opened.status_code in (200, 201), opened.text
        self.client.get("/healthz")  # one request in: imports done, buffers sized
        self.limit_mib = tree_peak_mib(self.server.pid) + MEMORY_BOUND_MIB
        self.dirty = False

    def stop(self) -> None:
        if self.server is not None:
            self.client.close()
            if self.dirty:
                self.server.kill()  # may still be busy with the request that broke a bound
            self.server.close()
            self.server = None

    def ready(self) -> None:
        if self.dirty or self.server is None or self.server.process.poll() is not None:
            self.stop()
            self.start()

    def send(self, what: str, method: str, path: str, body: bytes) -> Sample:
        """Send one request and watch the server while it works: give up as soon as it has
        spent more than the CPU budget or memory bound (or ``WALL_LIMIT_SECONDS`` passed), so
        an over-budget request is caught at once and a loaded machine cannot fail a request
        that keeps its budget but waits for a core."""
        assert self.server is not None
        pid = self.server.pid
        answer: dict[str, int | None] = {}

        def call() -> None:
            try:
                response = self.client.request(
                    method, path, content=body, headers={"Content-Type": "application/json"}
                )
                answer["status"] = response.status_code
            except httpx.HTTPError:
                answer["status"] = None

        before, started = tree_cpu_seconds(pid), time.monotonic()
        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        while True:
            worker.join(POLL_SECONDS)
            cpu, peak = tree_cpu_seconds(pid) - before, tree_peak_mib(pid)
            waited = time.monotonic() - started
            over = cpu > CPU_BUDGET_SECONDS or peak > self.limit_mib or waited > WALL_LIMIT_SECONDS
            if not worker.is_alive() or over:
                break
        sample = Sample(what, answer.get("status"), cpu, peak, waited)
        if sample.failures(self.limit_mib):
            self.dirty = True  # judge the next request on a fresh server
        return sample

    def check(self, sample: Sample) -> None:
        failures = sample.failures(self.limit_mib)
        assert not failures, f"{sample.what}: {'; '.join(failures)}"


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzer]:
    made = Fuzzer(tmp_path_factory.mktemp("fuzz") / "amber-data")
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture()
def server(fuzzer: Fuzzer) -> Fuzzer:
    fuzzer.ready()
    return fuzzer


# -- strategies from the request models --------------------------------------------------------

HOSTILE_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60
) | st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "\r\n",
        "\u202e",
        "\ufeff",
        "e\u0301\u0301\u0301",
        "\ufdfa" * 40,
        "\U0001f469\u200d\U0001f469\u200d\U0001f467",
        "x" * 9000,
        "-" * 5000,
    ]
)
URLS = st.builds(
    "https://{}.example/{}?q={}".format,
    st.from_regex(r"[a-z]{1,12}", fullmatch=True),
    st.from_regex(r"[a-z0-9/._-]{0,40}", fullmatch=True),
    st.text(max_size=20),
) | st.sampled_from(["kb:doc/1", "https://ex.org/", "http://[::1]/", "javascript:x", "//a"])
MEDIA = st.sampled_from(
    [
        "text/html",
        "text/html; charset=utf-8",
        "text/plain; charset=latin-1",
        "application/pdf",
        "application/octet-stream",
        "text/html; charset=x-unknown",
        "text/html\r\nX-A: 1",
        "a/b; " + "k=v; " * 40,
    ]
)
DATES = st.sampled_from(
    ["2024-02-29T12:00:00Z", "2024-02-29T12:00:00+14:00", "9999-12-31T23:59:59Z", "yesterday"]
)
BASE64 = st.binary(max_size=2000).map(lambda b: base64.b64encode(b).decode()) | st.just("@@@")
CONTENT = st.sampled_from(
    [
        "<p>The harbour closed at noon.</p>",
        "The harbour closed at noon.",
        "<html><body>" + "<p>harbour closed " * 300 + "</body></html>",
    ]
) | st.text(max_size=300)
QUOTES = st.sampled_from(["harbour closed", "The harbour", "noon", "zzz"]) | HOSTILE_TEXT

# Field names whose values have a shape worth drawing on purpose.
SHAPED: dict[str, st.SearchStrategy[Any]] = {
    "uri_r": URLS,
    "final_url": URLS,
    "content_type": MEDIA,
    "captured_at": DATES,
    "content_base64": BASE64,
    "content": CONTENT,
    "exact": QUOTES,
    "retain_until": DATES,
    "retention": st.sampled_from(["default", "regulated", "P7Y", "P1D", "PT0S", "nope"]),
    "memento_id": st.from_regex(r"[0-9a-f]{32}", fullmatch=True) | HOSTILE_TEXT,
}


def from_schema(schema: dict[str, Any], defs: dict[str, Any], name: str = "") -> Any:
    """A strategy for the JSON values ``schema`` describes (the subset pydantic emits)."""
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].rsplit("/", 1)[1]], defs, name)
    if "anyOf" in schema:
        return st.one_of([from_schema(option, defs, name) for option in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        drawn = SHAPED.get(name, HOSTILE_TEXT)
        return drawn.filter(lambda s: len(s) <= schema.get("maxLength", 10**9))
    if kind == "integer":
        return st.integers(schema.get("minimum", -(2**40)), schema.get("maximum", 2**40))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(from_schema(schema["items"], defs, name), max_size=4)
    if kind == "object" and "properties" in schema:
        required = set(schema.get("required", ()))
        fields = {k: from_schema(v, defs, k) for k, v in schema["properties"].items()}
        return st.fixed_dictionaries(
            {k: s for k, s in fields.items() if k in required},
            optional={k: s for k, s in fields.items() if k not in required},
        )
    if kind == "object":
        values = from_schema(schema.get("additionalProperties", {"type": "string"}), defs)
        return st.dictionaries(HOSTILE_TEXT, values, max_size=4)
    return st.none()


def model_bodies(model: Any) -> st.SearchStrategy[Any]:
    schema = model.model_json_schema()
    return from_schema(schema, schema.get("$defs", {}))


MODEL_REQUESTS = st.one_of(
    model_bodies(MementoIn).map(lambda b: ("MementoIn", "POST", "/api/v1/mementos", b)),
    model_bodies(TranscriptIn).map(lambda b: ("TranscriptIn", "PUT", TRANSCRIPT + "-2", b)),
    model_bodies(CitationsIn).map(lambda b: ("CitationsIn", "POST", TRANSCRIPT + "/citations", b)),
)
MODEL_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _encode(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _fuzz_for(seconds: float, strategy: st.SearchStrategy[Any], send: Callable[[Any], None]) -> int:
    """Feed ``send`` examples of ``strategy`` until ``seconds`` are spent; how many were sent."""
    stop_at = time.monotonic() + seconds
    sent = 0

    @MODEL_SETTINGS
    @given(example=strategy)
    def run(example: Any) -> None:
        nonlocal sent
        if time.monotonic() > stop_at:
            return  # the time is spent: the remaining examples send nothing
        send(example)
        sent += 1

    run()
    return sent


def test_requests_built_from_the_models_stay_in_budget(server: Fuzzer) -> None:
    def send(request: tuple[str, str, str, Any]) -> None:
        server.ready()
        what, method, path, body = request
        server.check(server.send(what, method, path, _encode(body)))

    sent = _fuzz_for(MODEL_BUDGET_SECONDS, MODEL_REQUESTS, send)
    assert sent >= MIN_MODEL_REQUESTS, f"only {sent} requests in {MODEL_BUDGET_SECONDS} s"


def test_raw_bodies_stay_in_budget(server: Fuzzer) -> None:
    def send(body: bytes) -> None:
        server.ready()
        server.check(server.send("raw body", "POST", "/api/v1/mementos", body))

    raw = st.binary(max_size=400) | st.text(max_size=200).map(str.encode)
    sent = _fuzz_for(RAW_BUDGET_SECONDS, raw, send)
    assert sent >= MIN_MODEL_REQUESTS, f"only {sent} requests in {RAW_BUDGET_SECONDS} s"


# -- pathological generators ------------------------------------------------------------------


def _cite(content: bytes, media: str, quote: dict[str, Any]) -> tuple[str, str, bytes]:
    source = {
        "uri_r": "https://hostile.example/doc",
        "content_base64": base64.b64encode(content).decode(),
        "content_type": media,
        "tool": "http.get",
    }
    body = {"citations": [{"source": source, "quote": quote}]}
    return "POST", TRANSCRIPT + "/citations", json.dumps(body).encode()


def _raw(body: bytes) -> tuple[str, str, bytes]:
    return "POST", "/api/v1/mementos", body


def _memento(**fields: Any) -> tuple[str, str, bytes]:
    body = {"uri_r": "https://hostile.example/m", "content_type": "text/plain", **fields}
    return "POST", "/api/v1/mementos", json.dumps(body, ensure_ascii=False).encode()


Generator = Callable[[], tuple[str, str, bytes]]
HTML, PDF, TEXT = "text/html", "application/pdf", "text/plain; charset=utf-8"

PATHOLOGICAL: dict[str, Generator] = {
    "html-nested-200k": lambda: _cite(payloads.html_nested(200_000), HTML, {"exact": "deep text"}),
    "html-unclosed-500k": lambda: _cite(b"<div><span>" * 250_000 + b"x", HTML, {"exact": "x"}),
    "html-attributes-200k": lambda: _cite(
        payloads.html_many_attributes(200_000), HTML, {"exact": "attributes"}
    ),
    "html-single-line-16mb": lambda: _cite(
        payloads.html_single_line(16_000_000), HTML, {"exact": "word word"}
    ),
    "pdf-flate-256mb-spaces": lambda: _cite(
        payloads.pdf_flate_bomb(256 << 20, b" "), PDF, {"exact": "a"}
    ),
    "pdf-flate-64mb-text-operators": lambda: _cite(
        payloads.pdf_flate_bomb(64 << 20), PDF, {"exact": "a"}
    ),
    "pdf-hyphen-line-8000": lambda: _cite(payloads.pdf_hyphen_line(8_000), PDF, {"exact": "zzz"}),
    "pdf-pages-3000": lambda: _cite(payloads.pdf_many_pages(3_000), PDF, {"exact": "page 2999"}),
    "text-near-occurrences-prefix": lambda: _cite(
        payloads.spaced_text(100_000), TEXT, {"exact": "a a", "prefix": "x" * 1000}
    ),
    "text-near-occurrences-long-quote": lambda: _cite(
        b"ab" * 2_000_000, TEXT, {"exact": "ab" * 1999 + "ac"}
    ),
    "text-hyphen-runs": lambda: _cite(b"- \n" * 1_000_000, TEXT, {"exact": "- - zzz"}),
    "unicode-combining-marks": lambda: _cite(
        ("e" + "\u0301" * 200_000).encode(), TEXT, {"exact": "e\u0301\u0301"}
    ),
    "unicode-nfkc-expansions": lambda: _cite(("\ufdfa" * 500_000).encode(), TEXT, {"exact": "x"}),
    "unicode-invisibles": lambda: _cite(
        ("a\u200b\u00ad\ufeff" * 500_000).encode(), TEXT, {"exact": "aaaa"}
    ),
    "unicode-lone-surrogate-json": lambda: _raw(
        b'{"uri_r": "https://x.example/\\ud800", "content": "\\udfff", "content_type": "text/plain"}'
    ),
    "unicode-rtl-and-controls": lambda: _memento(content="\u202e\x00\x1b[2J" * 100_000),
    "json-nested-1m": lambda: _raw(b"[" * 1_000_000 + b"]" * 1_000_000),
    "json-many-keys-1m": lambda: _raw(
        b'{"uri_r": "https://x.example/", "content": "x", "content_type": "text/plain", '
        b'"headers": {' + b",".join(b'"h%d": "v"' % i for i in range(1_000_000)) + b"}}"
    ),
    "json-many-small-numbers": lambda: _raw(b"[" + b"0," * 10_000_000 + b"0]"),
    "json-citations-10k": lambda: (
        "POST",
        TRANSCRIPT + "/citations",
        json.dumps(
            {"citations": [{"memento_id": "0" * 32, "quote": {"exact": "x"}}] * 10_000}
        ).encode(),
    ),
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_request_stays_in_budget(server: Fuzzer, name: str) -> None:
    method, path, body = PATHOLOGICAL[name]()
    server.check(server.send(name, method, path, body))
