"""Run the real ``amber serve`` as a subprocess, for tests that need a live HTTP server.

Not a pytest plugin: import it (``from live_server import running_server``; ``tests/`` is on
``sys.path``).

- :func:`free_port` — a TCP port on 127.0.0.1 that was free a moment ago.
- :func:`env_for` — the ``AMBER_*`` (and ``AWS_*``) environment that makes a server use the
  same backends as a ``Settings`` from the ``settings`` fixture.
- :func:`start_server` — start ``amber serve`` and wait for ``/healthz``; returns a
  :class:`LiveServer` that can be stopped (SIGTERM, then SIGKILL) or killed on demand.
- :func:`running_server` — the same as a context manager that yields the base URL.

The server's stdout and stderr go to a log file (never a pipe: a full pipe would block the
server), and failures quote its tail.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

import httpx

from archive.config import Settings

STARTUP_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
LOG_TAIL_CHARS = 4000
HOST = "127.0.0.1"


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listened on when we asked the kernel."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def base_url_for(port: int) -> str:
    return f"http://{HOST}:{port}"


def env_for(settings: Settings, base_url: str | None = None) -> dict[str, str]:
    """``AMBER_*`` variables that reproduce ``settings`` in another process.

    ``public_base_url`` becomes ``base_url`` (the live server's address) when given; the
    ``AWS_*`` variables of this process (the S3 fixtures put credentials there) come along.
    """
    env = {
        "AMBER_DATA_DIR": str(Path(settings.data_dir).resolve()),
        "AMBER_DATABASE_URL": settings.resolved_database_url,
        "AMBER_BLOB_STORE": settings.resolved_blob_store,
        "AMBER_DURABILITY": settings.durability,
    }
    if settings.s3_endpoint_url:
        env["AMBER_S3_ENDPOINT_URL"] = settings.s3_endpoint_url
        env["AMBER_S3_REGION"] = settings.s3_region
    public = base_url or settings.public_base_url
    if public:
        env["AMBER_PUBLIC_BASE_URL"] = public
    if settings.fetch_allow:
        env["AMBER_FETCH_ALLOW"] = ",".join(settings.fetch_allow)
    env.update({k: v for k, v in os.environ.items() if k.startswith("AWS_")})
    return env


def clean_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any ``AMBER_*`` variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMBER_")}
    env.update(extra or {})
    return env


def amber_command() -> list[str]:
    """The installed ``amber`` console script next to this interpreter, else ``-m api.cli``."""
    script = Path(sys.executable).with_name("amber")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "api.cli"]


class LiveServer:
    """One ``amber serve`` process. Create it with :func:`start_server`."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        log_path: Path,
        agent_key: str | None = None,
    ) -> None:
        self.process = process
        self.port = port
        self.base_url = base_url_for(port)
        self.log_path = log_path
        self.agent_key = agent_key

    @property
    def headers(self) -> dict[str, str]:
        """``Authorization`` for the agent key made before start (empty if none was made)."""
        return {"Authorization": f"Bearer {self.agent_key}"} if self.agent_key else {}

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no server log)"
        return text[-chars:]

    def wait_healthy(self, timeout: float = STARTUP_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                code = self.process.poll()
                if code is not None:
                    raise RuntimeError(
                        f"amber serve exited with code {code} before answering /healthz; "
                        f"log tail:\n{self.log_tail()}"
                    )
                try:
                    response = client.get(f"{self.base_url}/healthz")
                    if response.status_code == 200:
                        return
                    last_error = f"HTTP {response.status_code}"
                except httpx.HTTPError as error:
                    last_error = f"{type(error).__name__}: {error}"
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(
            f"amber serve did not answer {self.base_url}/healthz within {timeout:.0f} s "
            f"({last_error}); log tail:\n{self.log_tail()}"
        )

    def kill(self) -> None:
        """SIGKILL, now: no shutdown handlers, no flushing, requests cut mid-flight."""
        self._signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """SIGTERM (graceful), then SIGKILL if it has not exited within ``timeout``."""
        if self.process.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def _signal(self, signum: int) -> None:
        # The server runs in its own session; signal its whole group (a console-script
        # launcher and the interpreter it runs), and nothing else.
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the server and remove its log file."""
        self.stop()
        try:
            self.log_path.unlink()
        except OSError:
            pass


def create_key(
    env: Mapping[str, str],
    role: str = "agent",
    *,
    cwd: str | os.PathLike[str] | None = None,
    command: Sequence[str] | None = None,
) -> str:
    """``amber keys create --role ROLE`` with ``env``; returns the printed key."""
    done = subprocess.run(
        [*(command or amber_command()), "keys", "create", "--role", role],
        env={**clean_environ(), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip().splitlines()[-1]


def start_server(
    env: Mapping[str, str],
    port: int | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    command: Sequence[str] | None = None,
    inherit_amber_env: bool = False,
    timeout: float = STARTUP_TIMEOUT_SECONDS,
    agent_key: bool = True,
    serve_args: Sequence[str] = (),
) -> LiveServer:
    """Start ``amber serve --host 127.0.0.1 --port P`` with ``env`` and wait for /healthz.

    ``env`` is laid over this process's environment, from which every ``AMBER_*`` variable
    is removed first unless ``inherit_amber_env`` is set. With ``agent_key`` an agent key
    is created first through the CLI (``server.headers`` carries it).
    """
    port = port if port is not None else free_port()
    full_env = dict(os.environ) if inherit_amber_env else clean_environ()
    full_env.update(env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    key = create_key(full_env, cwd=cwd, command=command) if agent_key else None
    fd, log_name = tempfile.mkstemp(prefix=f"amber-serve-{port}-", suffix=".log")
    log_path = Path(log_name)
    args = [
        *(command or amber_command()),
        *("serve", "--host", HOST, "--port", str(port), *serve_args),
    ]
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            args,
            env=full_env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LiveServer(process, port, log_path, key)
    try:
        server.wait_healthy(timeout)
    except BaseException:
        server.close()  # the error already quotes the log tail
        raise
    return server


@contextmanager
def running_server(
    env: Mapping[str, str], port: int | None = None, **options: object
) -> Iterator[LiveServer]:
    """``amber serve`` for the duration of the block; yields the running server."""
    server = start_server(env, port, **options)  # type: ignore[arg-type]
    with server:
        yield server


@contextmanager
def origin_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A throwaway origin web server on loopback for ``handler``; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
