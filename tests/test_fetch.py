"""The outbound fetch guard, against real HTTP servers on 127.0.0.1 only (no outside network).

Names that must not touch real DNS (``*.test``) go through a stubbed
``archive.fetch.transport.resolve``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpcore
import httpx
import pytest

from archive.config import Settings
from archive.exceptions import (
    ConfigurationError,
    FetchError,
    FetchRefused,
    FetchTooLarge,
    InvalidURI,
)
from archive.fetch import (
    KEPT_HEADERS,
    AllowList,
    FetchedDocument,
    GuardedBackend,
    blocked_reason,
    fetch,
    fetch_async,
    guarded_async_client,
    guarded_client,
    parse_allow_entry,
)
from archive.fetch import transport as fetch_transport

# --------------------------------------------------------------------------------------
# A small local origin server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Origin

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self.server.seen.append((self.headers.get("Host", ""), self.path))
        parts = urlsplit(self.path)
        route = getattr(self, "route_" + parts.path.strip("/").split("/")[0], None)
        if route is None:
            self._send(404, b"no such route")
            return
        try:
            route(parts.path, parse_qs(parts.query))
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: expected
            pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self._send(302, b"", {"Location": location})

    def route_ok(self, path: str, query: dict[str, list[str]]) -> None:
        self._send(
            200,
            b"<p>hello</p>",
            {
                "Content-Type": "text/html; charset=utf-8",
                "ETag": '"v1"',
                "Last-Modified": "Tue, 01 Oct 2024 10:00:00 GMT",
                "Content-Language": "en",
                "Link": '<https://example.org/a>; rel="canonical"',
                "X-Robots-Tag": "noarchive",
                "Cache-Control": "max-age=60",
                "Set-Cookie": "session=secret-value",
                "X-Internal-Token": "do-not-keep",
            },
        )

    def route_echo(self, path: str, query: dict[str, list[str]]) -> None:
        seen = {name.lower(): value for name, value in self.headers.items()}
        self._send(200, json.dumps(seen).encode(), {"Content-Type": "application/json"})

    def route_hop(self, path: str, query: dict[str, list[str]]) -> None:
        left = int(path.rsplit("/", 1)[1])
        if left > 0:
            self._redirect(f"/hop/{left - 1}")  # relative on purpose
        else:
            self._send(200, b"landed", {"Content-Type": "text/plain"})

    def route_loop(self, path: str, query: dict[str, list[str]]) -> None:
        self._redirect("/loop")

    def route_to(self, path: str, query: dict[str, list[str]]) -> None:
        self._redirect(query["u"][0])

    def route_big(self, path: str, query: dict[str, list[str]]) -> None:
        self._send(200, b"x" * 5000, {"Content-Type": "text/plain"})

    def route_stream(self, path: str, query: dict[str, list[str]]) -> None:
        # Chunked: the size is unknown until the end, so only the stream cap can catch it.
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for _ in range(10):
            self.wfile.write(b"3e8\r\n" + b"y" * 1000 + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def route_unsized(self, path: str, query: dict[str, list[str]]) -> None:
        # No length at all: the body ends when the connection closes.
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"z" * 5000)
        self.close_connection = True

    def route_slow(self, path: str, query: dict[str, list[str]]) -> None:
        time.sleep(1.5)
        self._send(200, b"late")

    def route_drip(self, path: str, query: dict[str, list[str]]) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100")
        self.end_headers()
        for _ in range(100):  # every read succeeds in time; only the overall deadline stops it
            self.wfile.write(b".")
            self.wfile.flush()
            time.sleep(0.05)


class _Origin(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, str]] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up mid-response is part of several tests

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    @property
    def paths(self) -> list[str]:
        return [path for _host, path in self.seen]


@pytest.fixture
def origin() -> Iterator[_Origin]:
    server = _Origin()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def make_settings(*allow: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"fetch_allow": allow, "fetch_timeout_seconds": 5.0}
    values.update(overrides)
    return Settings(**values)


def stub_dns(
    monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]
) -> list[tuple[str, int]]:
    """Replace the module's resolver; names not listed fail like NXDOMAIN. Returns the calls."""
    calls: list[tuple[str, int]] = []

    def fake(host: str, port: int) -> list[Any]:
        calls.append((host, port))
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(a) for a in answers[host]]

    monkeypatch.setattr(fetch_transport, "resolve", fake)
    return calls


# --------------------------------------------------------------------------------------
# The address classifier


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("[::1]", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("0.1.2.3", "this network"),
        ("10.0.0.1", "RFC 1918"),
        ("10.255.255.255", "RFC 1918"),
        ("172.16.0.1", "RFC 1918"),
        ("172.31.255.254", "RFC 1918"),
        ("192.168.1.10", "RFC 1918"),
        ("::ffff:10.1.2.3", "RFC 1918"),
        ("fd12:3456::1", "unique local"),
        ("fc00::1", "unique local"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),  # NAT64 form of 169.254.169.254
        ("100.64.0.1", "CGNAT"),
        ("100.127.255.254", "CGNAT"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("ff0e::1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "documentation"),
        ("2001:db8::1", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("2001:0:4136:e378::1", "Teredo"),
    ],
)
def test_blocked_ranges_are_named(address: str, expected: str) -> None:
    reason = blocked_reason(address)
    assert reason is not None and expected in reason


@pytest.mark.parametrize(
    "address",
    [
        "93.184.215.14",
        "8.8.8.8",
        "172.32.0.1",
        "100.128.0.1",
        "2606:4700::6810:84e5",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert blocked_reason(address) is None


def test_classifier_rejects_non_addresses() -> None:
    with pytest.raises(ValueError):
        blocked_reason("example.org")


def test_allowlist_hosts_cidrs_and_single_addresses() -> None:
    allow = AllowList.from_entries(["Intranet.Example.", "10.0.0.0/8", "192.168.1.5"])
    ip = ipaddress.ip_address
    assert allow.permits("intranet.example", ip("172.16.0.1"), 443)  # host match, any address
    assert allow.permits("INTRANET.EXAMPLE.", ip("172.16.0.1"), 80)
    assert allow.permits("other", ip("10.9.8.7"), 443)
    assert allow.permits("other", ip("::ffff:10.9.8.7"), 443)  # mapped form of an allowed CIDR
    assert allow.permits("other", ip("192.168.1.5"), 80)
    assert not allow.permits("other", ip("192.168.1.6"), 80)
    assert not allow.permits("intranet.example.evil", ip("172.16.0.1"), 443)


@pytest.mark.parametrize("entry", ["intranet.example", "10.0.0.0/8", "10.1.2.3", "[fd00::5]"])
@pytest.mark.parametrize("port", [22, 25, 6379, 8080, 5432, 65535])
def test_an_entry_without_a_port_opens_only_http_and_https(entry: str, port: int) -> None:
    allow = AllowList.from_entries([entry])
    address = ipaddress.ip_address("fd00::5" if "fd00" in entry else "10.1.2.3")
    assert allow.permits("intranet.example", address, 80)
    assert allow.permits("intranet.example", address, 443)
    assert not allow.permits("intranet.example", address, port)


def test_an_entry_with_a_port_opens_only_that_port() -> None:
    allow = AllowList.from_entries(
        ["wiki.internal:8080", "10.0.0.0/8:8443", "[fd00::7]:9000", "[fd01::/16]:9001"]
    )
    ip = ipaddress.ip_address
    assert allow.permits("wiki.internal", ip("172.16.0.1"), 8080)
    assert not allow.permits("wiki.internal", ip("172.16.0.1"), 80)
    assert not allow.permits("wiki.internal", ip("172.16.0.1"), 443)
    assert allow.permits("x", ip("10.4.4.4"), 8443)
    assert not allow.permits("x", ip("10.4.4.4"), 443)
    assert allow.permits("x", ip("fd00::7"), 9000)
    assert not allow.permits("x", ip("fd00::7"), 9001)
    assert allow.permits("x", ip("fd01:1::1"), 9001)
    assert not allow.permits("x", ip("fd01:1::1"), 9000)


def test_a_star_port_opens_every_port() -> None:
    allow = AllowList.from_entries(["build.internal:*", "[::1]:*", "192.168.0.0/16:*"])
    ip = ipaddress.ip_address
    for port in (1, 80, 443, 6379, 65535):
        assert allow.permits("build.internal", ip("10.0.0.1"), port)
        assert allow.permits("x", ip("::1"), port)
        assert allow.permits("x", ip("192.168.3.4"), port)
    assert not allow.permits("x", ip("10.0.0.1"), 80)


def test_the_same_host_may_be_listed_for_several_ports() -> None:
    allow = AllowList.from_entries(["wiki.internal:8080", "wiki.internal:8081"])
    address = ipaddress.ip_address("10.0.0.9")
    assert allow.permits("wiki.internal", address, 8080)
    assert allow.permits("wiki.internal", address, 8081)
    assert not allow.permits("wiki.internal", address, 8082)


@pytest.mark.parametrize(
    ("entry", "host", "network", "ports"),
    [
        ("Wiki.Internal.", "wiki.internal", None, frozenset({80, 443})),
        ("wiki.internal:8080", "wiki.internal", None, frozenset({8080})),
        ("wiki.internal:*", "wiki.internal", None, None),
        ("10.0.0.0/8", None, "10.0.0.0/8", frozenset({80, 443})),
        ("10.0.0.0/8:22", None, "10.0.0.0/8", frozenset({22})),
        ("::1/128", None, "::1/128", frozenset({80, 443})),
        ("fd00::1", None, "fd00::1/128", frozenset({80, 443})),
        ("[fd00::1]", None, "fd00::1/128", frozenset({80, 443})),
        ("[fd00::1]:8443", None, "fd00::1/128", frozenset({8443})),
        ("[fd00::/8]:*", None, "fd00::/8", None),
        (" 127.0.0.1:65535 ", None, "127.0.0.1/32", frozenset({65535})),
    ],
)
def test_allow_entries_parse(
    entry: str, host: str | None, network: str | None, ports: frozenset[int] | None
) -> None:
    parsed = parse_allow_entry(entry)
    assert parsed.host == host
    assert parsed.network == (None if network is None else ipaddress.ip_network(network))
    assert parsed.ports == ports


@pytest.mark.parametrize(
    "entry",
    [
        "wiki.internal:0",
        "wiki.internal:65536",
        "wiki.internal:",
        "wiki.internal:http",
        "wiki.internal:８０",  # fullwidth digits are digits to str.isdigit, not to a port
        "10.0.0.0/99",
        "10.0.0.0/8:x",
        "[fd00::1]8080",
        "[fd00::1",
        "http://wiki.internal",
        "wiki internal",
        "wiki.internal/path",
        "fd00::1:8080x",
    ],
)
def test_malformed_allow_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="AMBER_FETCH_ALLOW"):
        parse_allow_entry(entry)
    with pytest.raises(ConfigurationError, match="AMBER_FETCH_ALLOW"):
        Settings(fetch_allow=(entry,))


def test_metadata_needs_the_exact_address_in_the_allowlist() -> None:
    metadata = ipaddress.ip_address("169.254.169.254")
    broad = AllowList.from_entries(["169.254.0.0/16:*", "metadata.test:*"])
    assert not broad.permits("metadata.test", metadata, 80)
    assert not broad.permits("x", ipaddress.ip_address("::ffff:169.254.169.254"), 80)
    assert broad.permits("x", ipaddress.ip_address("169.254.1.1"), 80)  # plain link-local
    assert AllowList.from_entries(["169.254.169.254"]).permits("x", metadata, 80)
    assert not AllowList.from_entries(["169.254.169.254"]).permits("x", metadata, 8080)
    assert AllowList.from_entries(["169.254.169.254:8080"]).permits("x", metadata, 8080)


# --------------------------------------------------------------------------------------
# Refusals


def test_loopback_is_refused_by_default_before_any_request(origin: _Origin) -> None:
    with pytest.raises(FetchRefused) as caught:
        fetch(origin.url("/ok"), make_settings())
    assert "127.0.0.1" in caught.value.message and "loopback" in caught.value.message
    assert caught.value.detail["reason"] == "loopback"
    assert origin.seen == []


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1]:9/",
        "http://0.0.0.0:9/",
        "http://[::ffff:127.0.0.1]:9/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.0.1/",
        "http://100.64.0.1/",
        "http://2130706433:9/",  # 127.0.0.1 spelt as one decimal number
    ],
)
def test_blocked_literals_are_refused(url: str) -> None:
    with pytest.raises(FetchRefused):
        fetch(url, make_settings())


def test_hostname_resolving_to_private_address_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub_dns(monkeypatch, {"intranet.test": ["10.1.2.3"]})
    with pytest.raises(FetchRefused) as caught:
        fetch("https://intranet.test/wiki", make_settings())
    message = caught.value.message
    assert "intranet.test" in message and "10.1.2.3" in message and "private" in message


def test_name_with_one_private_answer_among_public_ones_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub_dns(monkeypatch, {"mixed.test": ["93.184.215.14", "127.0.0.1"]})
    with pytest.raises(FetchRefused):
        fetch("http://mixed.test/", make_settings())


def test_metadata_hostname_stays_refused_even_with_broad_allow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub_dns(monkeypatch, {"metadata.test": ["169.254.169.254"]})
    settings = make_settings("metadata.test", "169.254.0.0/16")
    with pytest.raises(FetchRefused, match="metadata"):
        fetch("http://metadata.test/latest/meta-data/", settings)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://ftp.example.org/pub/x",
        "javascript:alert(1)",
        "gopher://127.0.0.1:70/",
        "example.org/no-scheme",
        "http:///no-host",
        "http://user:secret@example.org/",
        "http://exa mple.org/",
    ],
)
def test_non_http_or_malformed_urls_are_invalid(url: str) -> None:
    with pytest.raises(InvalidURI):
        fetch(url, make_settings())


# --------------------------------------------------------------------------------------
# Allowed fetches


@pytest.mark.parametrize(
    "allow", ["127.0.0.1:{port}", "127.0.0.0/8:{port}", "127.0.0.1/32:*", "127.0.0.1:*"]
)
def test_loopback_allowed_by_address_or_cidr(origin: _Origin, allow: str) -> None:
    doc = fetch(origin.url("/ok"), make_settings(allow.format(port=origin.port)))
    assert isinstance(doc, FetchedDocument)
    assert doc.status == 200 and doc.body == b"<p>hello</p>"
    assert doc.url == origin.url("/ok") == doc.final_url
    assert doc.redirects == ()


def test_loopback_allowed_by_hostname(origin: _Origin) -> None:
    doc = fetch(origin.url("/ok", host="localhost"), make_settings(f"LOCALHOST.:{origin.port}"))
    assert doc.body == b"<p>hello</p>"
    assert origin.seen == [(f"localhost:{origin.port}", "/ok")]


def test_only_selected_headers_are_kept(origin: _Origin) -> None:
    doc = fetch(origin.url("/ok"), make_settings(f"127.0.0.1:{origin.port}"))
    assert doc.content_type == "text/html; charset=utf-8"
    assert set(doc.headers) <= set(KEPT_HEADERS)
    assert doc.headers["etag"] == '"v1"'
    assert doc.headers["last-modified"] == "Tue, 01 Oct 2024 10:00:00 GMT"
    assert doc.headers["link"] == '<https://example.org/a>; rel="canonical"'
    assert doc.headers["x-robots-tag"] == "noarchive"
    assert doc.headers["content-language"] == "en"
    assert "date" in doc.headers
    for dropped in ("set-cookie", "x-internal-token", "server", "content-length"):
        assert dropped not in doc.headers
    assert doc.fetched_at.tzinfo is UTC
    assert doc.elapsed_ms >= 0


def test_user_agent_and_caller_headers_are_sent(origin: _Origin) -> None:
    settings = make_settings(f"127.0.0.1:{origin.port}", user_agent="AmberTest/1")
    doc = fetch(origin.url("/echo"), settings, headers={"Accept-Language": "fr"})
    seen = json.loads(doc.body)
    assert seen["user-agent"] == "AmberTest/1"
    assert seen["accept-language"] == "fr"


def test_connects_to_the_checked_address_with_the_name_as_host(
    origin: _Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = stub_dns(monkeypatch, {"amber.test": ["127.0.0.1"]})
    real_getaddrinfo = socket.getaddrinfo

    def numeric_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        # Any second, unvetted lookup of the name would fail here.
        ipaddress.ip_address(str(host))
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", numeric_only)
    doc = fetch(origin.url("/echo", host="amber.test"), make_settings("127.0.0.0/8:*"))
    assert json.loads(doc.body)["host"] == f"amber.test:{origin.port}"
    assert calls == [("amber.test", origin.port)]


class _RecordingBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self.hosts: list[str] = []

    def connect_tcp(self, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        self.hosts.append(host)
        return httpcore.MockStream([])


def test_rebinding_cannot_swap_the_address_after_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = iter([["93.184.215.14"], ["127.0.0.1"]])  # public first, loopback after

    def rebinding(host: str, port: int) -> list[Any]:
        return [ipaddress.ip_address(a) for a in next(answers)]

    monkeypatch.setattr(fetch_transport, "resolve", rebinding)
    inner = _RecordingBackend()
    GuardedBackend(AllowList(), inner).connect_tcp("rebind.test", 80, timeout=1.0)
    assert inner.hosts == ["93.184.215.14"]  # the address that was checked, not a re-lookup


def test_guarded_client_refuses_on_its_own(origin: _Origin) -> None:
    with guarded_client(make_settings()) as client, pytest.raises(FetchRefused):
        client.get(origin.url("/ok"))
    with guarded_client(make_settings(f"127.0.0.1:{origin.port}")) as client:
        assert client.get(origin.url("/ok")).status_code == 200


def test_unguarded_clients_are_not_accepted(origin: _Origin) -> None:
    with httpx.Client() as plain, pytest.raises(TypeError):
        fetch(origin.url("/ok"), make_settings(f"127.0.0.1:{origin.port}"), client=plain)
    assert origin.seen == []


# --------------------------------------------------------------------------------------
# Redirects


def test_redirect_chain_is_recorded(origin: _Origin) -> None:
    doc = fetch(origin.url("/hop/3"), make_settings(f"127.0.0.1:{origin.port}"))
    assert doc.body == b"landed"
    assert doc.url == origin.url("/hop/3")
    assert doc.redirects == (origin.url("/hop/2"), origin.url("/hop/1"), origin.url("/hop/0"))
    assert doc.final_url == origin.url("/hop/0")


def test_redirects_up_to_the_limit_are_followed(origin: _Origin) -> None:
    doc = fetch(
        origin.url("/hop/2"), make_settings(f"127.0.0.1:{origin.port}", fetch_max_redirects=2)
    )
    assert len(doc.redirects) == 2


@pytest.mark.parametrize("path", ["/hop/3", "/loop"])
def test_too_many_redirects(origin: _Origin, path: str) -> None:
    with pytest.raises(FetchError, match="too many redirects") as caught:
        fetch(origin.url(path), make_settings(f"127.0.0.1:{origin.port}", fetch_max_redirects=2))
    assert not isinstance(caught.value, FetchRefused)


def test_redirect_from_allowed_host_to_unallowed_loopback_name(origin: _Origin) -> None:
    # "localhost" is allowed by name; the hop to 127.0.0.1 is neither that name nor a CIDR.
    start = origin.url(f"/to?u={origin.url('/ok')}", host="localhost")
    with pytest.raises(FetchRefused, match="127.0.0.1"):
        fetch(start, make_settings(f"localhost:{origin.port}"))
    assert origin.paths == [f"/to?u={origin.url('/ok')}"]


def test_redirect_to_address_outside_allowed_set_is_refused(origin: _Origin) -> None:
    target = f"http://127.0.0.2:{origin.port}/ok"
    with pytest.raises(FetchRefused, match="127.0.0.2"):
        fetch(origin.url(f"/to?u={target}"), make_settings(f"127.0.0.1:{origin.port}"))


def test_redirect_to_name_resolving_private_is_refused(
    origin: _Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub_dns(monkeypatch, {"internal.test": ["10.0.0.7"]})
    target = f"http://internal.test:{origin.port}/ok"
    with pytest.raises(FetchRefused, match="private"):
        fetch(origin.url(f"/to?u={target}"), make_settings("127.0.0.0/8:*"))


@pytest.mark.parametrize("allow", ["127.0.0.1", "localhost", "127.0.0.0/8", "127.0.0.1:1"])
def test_an_entry_for_other_ports_does_not_open_this_one(origin: _Origin, allow: str) -> None:
    with pytest.raises(FetchRefused) as caught:
        fetch(origin.url("/ok", host="localhost"), make_settings(allow))
    message = caught.value.message
    assert f"port {origin.port}" in message and "80 and 443 only" in message
    assert origin.paths == []  # refused before connecting


def test_redirect_to_another_port_of_an_allowed_host_is_refused(origin: _Origin) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        other = probe.getsockname()[1]
    target = f"http://127.0.0.1:{other}/admin"
    with pytest.raises(FetchRefused, match=f"port {other}"):
        fetch(origin.url(f"/to?u={target}"), make_settings(f"127.0.0.1:{origin.port}"))
    assert origin.paths == [f"/to?u={target}"]


def test_redirect_to_non_http_scheme_is_refused(origin: _Origin) -> None:
    with pytest.raises(FetchRefused, match="file"):
        fetch(origin.url("/to?u=file:///etc/passwd"), make_settings(f"127.0.0.1:{origin.port}"))


def test_credentials_do_not_follow_a_cross_origin_redirect(origin: _Origin) -> None:
    settings = make_settings(f"127.0.0.1:{origin.port}", f"localhost:{origin.port}")
    auth = {"Authorization": "Bearer t0ken"}
    same = fetch(origin.url("/to?u=/echo"), settings, headers=auth)
    assert json.loads(same.body)["authorization"] == "Bearer t0ken"
    other = origin.url("/echo", host="localhost")
    cross = fetch(origin.url(f"/to?u={other}"), settings, headers=auth)
    assert "authorization" not in json.loads(cross.body)
    assert cross.final_url == other


# --------------------------------------------------------------------------------------
# Size cap, timeouts, failures


def test_announced_length_over_cap(origin: _Origin) -> None:
    with pytest.raises(FetchTooLarge, match="announced 5000"):
        fetch(origin.url("/big"), make_settings(f"127.0.0.1:{origin.port}", fetch_max_bytes=1000))


@pytest.mark.parametrize("path", ["/stream", "/unsized"])
def test_streamed_body_over_cap(origin: _Origin, path: str) -> None:
    with pytest.raises(FetchTooLarge, match="exceeded"):
        fetch(origin.url(path), make_settings(f"127.0.0.1:{origin.port}", fetch_max_bytes=1000))


def test_streamed_body_within_cap(origin: _Origin) -> None:
    doc = fetch(
        origin.url("/stream"), make_settings(f"127.0.0.1:{origin.port}", fetch_max_bytes=10_000)
    )
    assert doc.body == b"y" * 10_000


def test_read_timeout(origin: _Origin) -> None:
    settings = make_settings(f"127.0.0.1:{origin.port}", fetch_timeout_seconds=0.3)
    with pytest.raises(FetchError, match="timed out") as caught:
        fetch(origin.url("/slow"), settings)
    assert type(caught.value) is FetchError


def test_overall_deadline_stops_a_dripping_server(origin: _Origin) -> None:
    settings = make_settings(f"127.0.0.1:{origin.port}", fetch_timeout_seconds=0.2)
    started = time.monotonic()
    with pytest.raises(FetchError, match="longer than"):
        fetch(origin.url("/drip"), settings)
    assert time.monotonic() - started < 3


def test_dns_lookup_is_bounded_by_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    def hanging(host: str, port: int) -> list[Any]:
        time.sleep(2)
        return []

    monkeypatch.setattr(fetch_transport, "resolve", hanging)
    started = time.monotonic()
    with pytest.raises(FetchError, match="DNS lookup"):
        fetch("http://slow-dns.test/", make_settings(fetch_timeout_seconds=0.2))
    assert time.monotonic() - started < 1.5


def test_dns_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    stub_dns(monkeypatch, {})
    with pytest.raises(FetchError, match="cannot resolve 'nowhere.test'"):
        fetch("http://nowhere.test/", make_settings())


def test_connection_refused() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(FetchError, match="127.0.0.1") as caught:
        fetch(f"http://127.0.0.1:{port}/", make_settings(f"127.0.0.1:{port}"))
    assert type(caught.value) is FetchError


# --------------------------------------------------------------------------------------
# The async variant


def run(coro_factory: Callable[[], Any]) -> Any:
    return asyncio.run(coro_factory())


def test_async_fetch_follows_redirects(origin: _Origin) -> None:
    doc = run(lambda: fetch_async(origin.url("/hop/2"), make_settings("127.0.0.0/8:*")))
    assert doc.body == b"landed"
    assert doc.redirects == (origin.url("/hop/1"), origin.url("/hop/0"))
    assert doc.final_url == origin.url("/hop/0")


def test_async_refusals(origin: _Origin, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FetchRefused):
        run(lambda: fetch_async(origin.url("/ok"), make_settings()))
    stub_dns(monkeypatch, {"intranet.test": ["192.168.7.7"]})
    with pytest.raises(FetchRefused, match="192.168.7.7"):
        run(lambda: fetch_async("http://intranet.test/", make_settings()))
    target = f"http://127.0.0.2:{origin.port}/ok"
    with pytest.raises(FetchRefused, match="127.0.0.2"):
        run(
            lambda: fetch_async(
                origin.url(f"/to?u={target}"), make_settings(f"127.0.0.1:{origin.port}")
            )
        )
    with pytest.raises(InvalidURI):
        run(lambda: fetch_async("file:///etc/passwd", make_settings()))
    assert origin.paths == [f"/to?u={target}"]


def test_async_caps_and_timeouts(origin: _Origin, monkeypatch: pytest.MonkeyPatch) -> None:
    capped = make_settings(f"127.0.0.1:{origin.port}", fetch_max_bytes=1000)
    with pytest.raises(FetchTooLarge):
        run(lambda: fetch_async(origin.url("/stream"), capped))
    with pytest.raises(FetchTooLarge):
        run(lambda: fetch_async(origin.url("/big"), capped))
    quick = make_settings(f"127.0.0.1:{origin.port}", fetch_timeout_seconds=0.3)
    with pytest.raises(FetchError, match="timed out"):
        run(lambda: fetch_async(origin.url("/slow"), quick))

    def hanging(host: str, port: int) -> list[Any]:
        time.sleep(1)
        return []

    monkeypatch.setattr(fetch_transport, "resolve", hanging)
    with pytest.raises(FetchError, match="DNS lookup"):
        run(lambda: fetch_async("http://slow-dns.test/", quick))


def test_async_shared_client(origin: _Origin) -> None:
    settings = make_settings(f"127.0.0.1:{origin.port}")

    async def job() -> list[FetchedDocument]:
        async with guarded_async_client(settings) as client:
            return list(
                await asyncio.gather(
                    fetch_async(origin.url("/ok"), settings, client=client),
                    fetch_async(origin.url("/hop/1"), settings, client=client),
                )
            )

    ok, hopped = run(job)
    assert ok.headers["etag"] == '"v1"' and "set-cookie" not in ok.headers
    assert hopped.body == b"landed" and hopped.redirects == (origin.url("/hop/0"),)


def test_async_rejects_unguarded_client() -> None:
    async def job() -> None:
        async with httpx.AsyncClient() as plain:
            await fetch_async("http://127.0.0.1:9/", make_settings(), client=plain)

    with pytest.raises(TypeError):
        run(job)
