"""The README's five-minute tour, run as written against a real ``amber serve``.

The tour's blocks are the README's fenced blocks whose info string is ``sh tour=<step>``.
They run in order in a fresh, empty directory with no ``AMBER_*`` variable set, each in its
own ``bash`` (like a reader pasting into a terminal; variables a block exports reach the
next ones). The ``serve`` block runs in the background, as the reader's first terminal.
One substitution: the tour's port, 8000, becomes a free port, because other processes on
the test machine may hold 8000. Nothing else in a block is changed, so the README cannot
rot without this test failing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from live_server import clean_environ, free_port

README = Path(__file__).resolve().parents[1] / "README.md"
TOUR_BLOCK = re.compile(
    r"^```sh tour=(?P<step>[a-z]+)\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE
)
STEPS = ["serve", "key", "store", "resolve", "timegate", "cite", "mcp", "browser", "bundle"]
TOUR_PORT = "8000"
KEY = re.compile(r"^amber_[0-9a-f]{12}_\S{43}$", re.MULTILINE)
BLOCK_TIMEOUT_SECONDS = 120


def tour_blocks(text: str) -> dict[str, str]:
    return {m["step"]: m["code"] for m in TOUR_BLOCK.finditer(text)}


@dataclass
class Ran:
    stdout: str
    stderr: str
    env: dict[str, str]


class Terminal:
    """Runs one block at a time in ``bash`` in ``workdir``, carrying exported variables."""

    def __init__(self, workdir: Path, env: Mapping[str, str]) -> None:
        self.workdir = workdir
        self.env = dict(env)

    def run(self, code: str) -> Ran:
        state = self.workdir / ".tour-env"
        script = f"set -e\n{code}\nenv -0 > {state}\n"
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_SECONDS,
        )
        assert done.returncode == 0, f"block failed ({done.returncode}):\n{code}\n{done.stderr}"
        pairs = state.read_text(encoding="utf-8").split("\0")
        self.env = dict(p.split("=", 1) for p in pairs if "=" in p)
        return Ran(done.stdout, done.stderr, self.env)


def _tour_environment() -> dict[str, str]:
    """A reader's shell after ``pip install -e .``: this interpreter's ``python`` and
    ``amber`` first on PATH, no AMBER_* variable."""
    env = clean_environ()
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[dict[str, str], Terminal, Path, str]]:
    """The tour's blocks (port substituted), a second terminal, the first terminal's log and
    the server's address, with the tour's ``serve`` block running."""
    for tool in ("bash", "curl"):
        if shutil.which(tool) is None:
            pytest.fail(f"the README's tour needs {tool}")
    if shutil.which("amber", path=_tour_environment()["PATH"]) is None:
        pytest.fail("the tour needs the `amber` console script (python -m pip install -e .)")
    port = str(free_port())
    blocks = {
        step: code.replace(TOUR_PORT, port)
        for step, code in tour_blocks(README.read_text(encoding="utf-8")).items()
    }
    workdir = tmp_path / "fresh"
    workdir.mkdir()
    env = _tour_environment()
    log_path = tmp_path / "terminal-1.log"
    with open(log_path, "wb") as log:
        first = subprocess.Popen(
            ["bash", "-c", f"exec {blocks['serve']}"],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(first, base, log_path)
        yield blocks, Terminal(workdir, env), log_path, base
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        try:
            first.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()


def _wait_healthy(process: subprocess.Popen[bytes], base: str, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the tour's amber serve exited:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"the tour's amber serve did not answer:\n{log_path.read_text()}")


def test_the_readme_has_the_tour_in_order() -> None:
    text = README.read_text(encoding="utf-8")
    assert list(tour_blocks(text)) == STEPS
    # The port is the only thing the tour test substitutes: it must appear only as such.
    for code in tour_blocks(text).values():
        assert re.sub(r"(127\.0\.0\.1:|--port )8000", "", code).count(TOUR_PORT) == 0


def test_the_readme_links_nothing_outside_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    root = README.parent
    for target in re.findall(r"\]\(([^)#]+)", text):
        if target.startswith(("http://", "https://")):
            continue
        assert (root / target).resolve().is_relative_to(root), target
        assert (root / target).exists(), target
    assert "../" not in text
    assert "(docs/design.md)" in text


@pytest.mark.slow
def test_the_readme_tour_works_when_pasted(
    served: tuple[dict[str, str], Terminal, Path, str],
) -> None:
    blocks, terminal, log_path, base = served
    first_terminal = log_path.read_text(encoding="utf-8")
    # Start: one admin key, the command for an agent key, the base recorded.
    assert len(KEY.findall(first_terminal)) == 1, first_terminal
    assert "amber keys create --role agent" in first_terminal
    assert f"Recorded {base} as the base of every URI-M" in first_terminal

    key = terminal.run(blocks["key"])
    assert key.env["AMBER_URL"] == base
    assert KEY.fullmatch(key.env["AMBER_KEY"]), key.env["AMBER_KEY"]

    stored = terminal.run(blocks["store"])
    written = json.loads(stored.stderr)
    uri_m = written["uri_m"]
    assert uri_m.startswith(f"{base}/memento/"), written
    assert written["content_hash"].startswith("blake3:")
    assert stored.env["URI_M"] == uri_m

    resolved = terminal.run(blocks["resolve"])
    head, _, body = resolved.stdout.partition("\n\n")  # text mode: CRLF read as \n
    assert head.startswith("HTTP/1.1 200"), head
    assert "memento-datetime: wed, 01 may 2024 12:00:00 gmt" in head.lower()
    assert 'rel="original"' in head
    assert body == "<p>Parental leave is sixteen weeks.</p>"

    navigated = terminal.run(blocks["timegate"])
    assert navigated.stdout.startswith("HTTP/1.1 302"), navigated.stdout
    location = re.search(r"^location: (\S+)$", navigated.stdout, re.IGNORECASE | re.MULTILINE)
    assert location is not None and location[1] == uri_m, navigated.stdout
    assert f"<{uri_m}>" in navigated.stdout  # the TimeMap lists it

    cited = terminal.run(blocks["cite"])
    assert "Parental leave is 16 weeks [1]." in cited.stdout, cited.stdout + cited.stderr
    assert "Sources:" in cited.stdout
    assert re.search(rf"“sixteen weeks” — archived .*: {re.escape(base)}/memento/", cited.stdout)

    # A browser is sent to sign in; signed in with the auditor key, it opens the bytes.
    browsed = terminal.run(blocks["browser"])
    auditor_key = browsed.env["AMBER_AUDITOR_KEY"]
    assert KEY.fullmatch(auditor_key), auditor_key
    path = uri_m.removeprefix(base)
    assert browsed.stdout.strip() == f"303 {base}/ui/login?next={quote(path, safe='')}"
    with httpx.Client(base_url=base, follow_redirects=False) as browser:
        form = browser.get(f"/ui/login?next={quote(path, safe='')}")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        signed = browser.post(
            "/ui/login",
            data={"key": auditor_key, "csrf": csrf[1], "next": path},
            headers={"Origin": base},
        )
        assert signed.status_code == 303 and signed.headers["location"] == path
        opened = browser.get(uri_m, headers={"Accept": "text/html"})
        assert opened.text == "<p>Parental leave is sixteen weeks.</p>"
        transcript = browser.get("/ui/transcripts/conversation-1")
        assert 'data-verified="true"' in transcript.text
    bundled = terminal.run(blocks["bundle"])
    assert bundled.stdout.count("\u2713") == 1, bundled.stdout + bundled.stderr
    assert "verified: 1 citations" in bundled.stderr, bundled.stderr

    # The CLI, sharing the index, prints the same URI-M the server issued.
    timemap = terminal.run("amber timemap 'https://example.org/leave?lang=en'")
    assert [json.loads(line)["uri_m"] for line in timemap.stdout.splitlines()] == [uri_m]

    # The MCP configuration block: the server it names starts, and resolves the memento.
    configured = terminal.run(blocks["mcp"])
    server = json.loads((terminal.workdir / ".mcp.json").read_text())["mcpServers"]["amber"]
    assert server["env"] == {"AMBER_URL": base, "AMBER_API_KEY": configured.env["AMBER_KEY"]}
    resolved_over_mcp = anyio.run(_resolve_over_mcp, server, configured.env, uri_m)
    assert resolved_over_mcp["hash_verified"] is True
    assert resolved_over_mcp["text"] == "Parental leave is sixteen weeks."


async def _resolve_over_mcp(
    server: dict[str, Any], shell: dict[str, str], uri_m: str
) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    command = shutil.which(server["command"], path=shell["PATH"])
    assert command is not None, server["command"]
    env = {**shell, **server["env"]}
    async with Client(StdioServerParameters(command=command, args=server["args"], env=env)) as mcp:
        result = await mcp.call_tool("resolve", {"uri_m": uri_m})
        assert not result.is_error, result.content
        assert result.structured_content is not None
        return dict(result.structured_content)


def test_the_reference_tables_name_real_commands_and_settings() -> None:
    """Every ``amber`` command is in the README's table; every setting the README or
    docs/operations.md names exists, and docs/operations.md names every setting."""
    from dataclasses import fields

    from api.cli import main
    from archive.config import ENV_PREFIX, Settings

    readme = README.read_text(encoding="utf-8")
    operations = (README.parent / "docs" / "operations.md").read_text(encoding="utf-8")
    for name in main.commands:
        assert f"`amber {name}" in readme, name
    known = {ENV_PREFIX + f.name.upper() for f in fields(Settings) if f.name != "extra"}
    known.add(ENV_PREFIX + "CONFIG")
    for text in (readme, operations):
        named = set(re.findall(r"`(AMBER_[A-Z0-9_]+)`", text))
        assert named <= known, named - known
    assert known <= set(re.findall(r"`(AMBER_[A-Z0-9_]+)`", operations)), "undocumented"
