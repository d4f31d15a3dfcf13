"""pywb replays an audit bundle: a throwaway collection holding the bundle answers every
cited page at its capture time with the captured bytes.

pywb never runs in this process: it pins ``cryptography`` below 48 and ``Werkzeug`` (through
pyOpenSSL), and brings gevent, which monkeypatches whatever imports it. The session fixture
makes a private virtualenv from ``tests/replay/requirements.txt`` (PyPI, once per
requirements hash, under ``AMBER_TEST_CACHE`` or ``~/.cache/amber-tests``), and the test runs
pywb's own ``wb-manager`` and ``wayback`` there as subprocesses. Without PyPI the test skips
with the reason; ``AMBER_REQUIRE_SERVICES=1`` (CI) makes that a failure."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import service_unavailable
from test_bundles import fresh_bundle

from archive.bundles.warcfile import read_records

REQUIREMENTS = Path(__file__).parent / "replay" / "requirements.txt"
PIP_FLAGS = ("--disable-pip-version-check", "-r", str(REQUIREMENTS))


def _venv_dir() -> Path:
    tag = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    root = os.environ.get("AMBER_TEST_CACHE") or Path.home() / ".cache" / "amber-tests"
    return Path(root) / f"pywb-{version}-{tag}"


@pytest.fixture(scope="session")
def pywb_bin() -> Path:
    """The bin folder of a virtualenv holding pywb, made once (xdist workers take turns)."""
    venv = _venv_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / (venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = venv / "ready"
        if not ready.exists():
            try:
                subprocess.run(
                    [sys.executable, "-m", "venv", "--clear", str(venv)],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
                subprocess.run(
                    [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *PIP_FLAGS],
                    check=True,
                    capture_output=True,
                    timeout=600,
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                tail = (getattr(exc, "stderr", b"") or b"").decode("utf-8", "replace")[-400:]
                service_unavailable(f"could not install pywb into {venv}: {tail}")
            ready.write_text("ok\n")
    return venv / "bin"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture()
def replay(pywb_bin: Path, tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    """(base URL of a running pywb with the bundle in collection ``audit``, the bundle)."""
    data = fresh_bundle(tmp_path / "amber-data")
    root = tmp_path / "pywb"
    root.mkdir()
    (root / "t-1.wacz").write_bytes(data)
    manage = str(pywb_bin / "wb-manager")
    for args in (["init", "audit"], ["add", "audit", "t-1.wacz", "--unpack-wacz"]):
        subprocess.run([manage, *args], cwd=root, check=True, capture_output=True, timeout=120)
    port = _free_port()
    log = (tmp_path / "wayback.log").open("wb")
    server = subprocess.Popen(
        [str(pywb_bin / "wayback"), "-b", "127.0.0.1", "-p", str(port), "-t", "2"],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/", timeout=2)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    text = (tmp_path / "wayback.log").read_text("utf-8", "replace")[-800:]
                    pytest.fail(f"pywb did not start: {text}")
                time.sleep(0.2)
        yield base, data
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_pywb_replays_every_cited_page_byte_for_byte(
    replay: tuple[str, bytes], tmp_path: Path
) -> None:
    base, data = replay
    bundle_path = tmp_path / "check.wacz"
    bundle_path.write_bytes(data)
    with zipfile.ZipFile(bundle_path) as bundle:
        pages = [json.loads(line) for line in bundle.read("pages/pages.jsonl").splitlines()[1:]]
        records = list(read_records(bundle.read("archive/data.warc.gz")))
    # What a replay must give: the kept document where there is one (a passage of the same
    # URI-R and time is left out of the index), else the one memento at that time.
    captures = [r for r in records if r.get("Amber-Memento-Id")]
    captures.sort(key=lambda r: r.get("Amber-Scope") == "document")
    documents = {(r.get("WARC-Target-URI"), r.get("WARC-Date")): r.payload for r in captures}
    assert len(pages) == 2
    for page in pages:
        stamp = page["ts"].replace("-", "").replace(":", "").replace("T", "")[:14]
        replayed = httpx.get(f"{base}/audit/{stamp}id_/{page['url']}", timeout=30)
        assert replayed.status_code == 200, (page["url"], replayed.status_code)
        assert replayed.content == documents[(page["url"], page["ts"])], page["url"]
