"""Extraction in worker processes that can be killed: bounded time and memory per document.

HTML and PDF text is read by a small pool of persistent worker processes
(:mod:`archive.citations.sandbox_worker`), never in the server process, because what it
costs depends on the document, not on its size: a 1 MB PDF can inflate one stream to a
gigabyte, a 400 KB page nested 80,000 deep parses for tens of seconds. Each worker is a
fresh interpreter (started like ``multiprocessing``'s *spawn* method: safe in a threaded
server, nothing inherited but its pipes and a minimal environment) that limits its own
address space and CPU time; the parent enforces a wall-clock deadline on every job and kills
a worker that passes it. A worker that is killed, or dies (PDFium aborts when an allocation
fails under the address-space limit), is replaced, and the document is refused with
:class:`~archive.exceptions.ExtractionLimitExceeded` naming the limit.

Workers are shared by everything in the process that extracts with the same worker count and
memory limit (:func:`worker_pool`), so several PDFs are read in parallel — there is no
process-wide PDFium lock any more — and a runaway document holds one worker, not the others.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from archive.citations import sandbox_worker as protocol
from archive.config import ExtractionLimits
from archive.exceptions import ConfigurationError, ExtractionLimitExceeded, InvalidContent

# A new interpreter importing PDFium and Lexbor; generous, as the machine may be busy.
START_TIMEOUT_SECONDS = 60.0
_WORKER_SCRIPT = str(Path(protocol.__file__).resolve())
# Passed on to workers; anything else in the server's environment (keys, database URLs,
# cloud credentials) is not theirs to read.
_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "PYTHONHOME", "LD_LIBRARY_PATH")
_CHUNK = 1 << 20


class _WorkerGone(Exception):
    """The worker's pipe closed before it answered."""


class _Worker:
    """One worker process and its pipes (non-blocking on this side, so every exchange has a
    deadline)."""

    def __init__(self, memory_bytes: int) -> None:
        environment = {name: os.environ[name] for name in _ENVIRONMENT if name in os.environ}
        environment["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
        self.process = subprocess.Popen(
            [sys.executable, "-P", _WORKER_SCRIPT, str(memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment,
            cwd="/",
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.inbox = self.process.stdin.fileno()
        self.outbox = self.process.stdout.fileno()
        os.set_blocking(self.inbox, False)
        os.set_blocking(self.outbox, False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, frame: bytes, content: bytes, deadline: float) -> None:
        for data in (memoryview(frame), memoryview(content)):
            sent = 0
            while sent < len(data):
                self._wait(self.inbox, select.POLLOUT, deadline)
                try:
                    sent += os.write(self.inbox, data[sent : sent + _CHUNK])
                except BlockingIOError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    raise _WorkerGone() from None

    def receive(self, deadline: float) -> tuple[int, bool, bytes]:
        head = self._read(protocol.RESPONSE_HEAD.size, deadline)
        status, retire, length = protocol.RESPONSE_HEAD.unpack(head)
        return status, bool(retire), self._read(length, deadline)

    def _read(self, size: int, deadline: float) -> bytes:
        buffer = bytearray()
        while len(buffer) < size:
            self._wait(self.outbox, select.POLLIN, deadline)
            try:
                chunk = os.read(self.outbox, min(size - len(buffer), _CHUNK))
            except BlockingIOError:
                continue
            if not chunk:
                raise _WorkerGone()
            buffer += chunk
        return bytes(buffer)

    @staticmethod
    def _wait(fd: int, event: int, deadline: float) -> None:
        poller = select.poll()
        poller.register(fd, event)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError()
            if poller.poll(max(1, int(remaining * 1000))):
                return  # ready, or hung up: the read or write that follows tells which

    def kill(self) -> int:
        """Stop the process (if it still runs) and reap it; its exit status."""
        if self.process.poll() is None:
            self.process.kill()
        code = self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        return code

    def close(self) -> None:
        """Ask the worker to exit (end of its input), then make sure it did."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


class WorkerPool:
    """Up to ``size`` workers, each limited to ``memory_mb`` MiB of address space; started
    when first needed, replaced when one is killed or dies."""

    def __init__(self, size: int, memory_mb: int) -> None:
        self.size = size
        self.memory_mb = memory_mb
        self._idle: list[_Worker] = []
        self._count = 0  # workers running or starting
        self._closed = False
        self._changed = threading.Condition()

    def extract(
        self,
        kind: str,
        content: bytes,
        charset: str | None,
        limits: ExtractionLimits,
        seconds: float,
    ) -> str:
        """The text of ``content`` (``kind`` ``html`` or ``pdf``) read by a worker within
        ``seconds`` of wall-clock time. Raises :class:`ExtractionLimitExceeded` (``time``,
        ``memory``, ``pages``, ``text``) or :class:`InvalidContent`."""
        header = json.dumps(
            {
                "kind": kind,
                "charset": charset,
                "max_pages": limits.max_pages,
                "max_chars": limits.max_text_chars,
                "cpu_seconds": seconds,
                "size": len(content),
            }
        ).encode()
        frame = protocol.REQUEST_HEAD.pack(len(header)) + header
        while True:
            worker = self._acquire()
            if worker.process.poll() is not None:  # it died while idle: take another
                self._discard(worker)
                continue
            deadline = time.monotonic() + seconds
            try:
                worker.send(frame, content, deadline)
            except _WorkerGone:  # it died while idle, just now: take another
                self._discard(worker)
                continue
            except TimeoutError:
                self._discard(worker)
                raise _timed_out(seconds) from None
            return self._answer(worker, deadline, seconds, limits)

    def _answer(
        self, worker: _Worker, deadline: float, seconds: float, limits: ExtractionLimits
    ) -> str:
        try:
            status, retire, payload = worker.receive(deadline)
        except TimeoutError:
            self._discard(worker)
            raise _timed_out(seconds) from None
        except _WorkerGone:
            self._discard(worker)
            raise self._died(worker.process.wait(), limits) from None
        if retire:
            self._discard(worker)
        else:
            self._release(worker)
        if status == protocol.OK:
            return payload.decode("utf-8", "surrogatepass")
        if status == protocol.INVALID:
            raise InvalidContent(payload.decode("utf-8", "replace"))
        if status == protocol.LIMIT:
            found = json.loads(payload)
            if found["limit"] == "memory":
                raise _out_of_memory(self.memory_mb)
            raise ExtractionLimitExceeded(found["limit"], found["maximum"], found["message"])
        raise RuntimeError(f"extraction worker failed: {payload.decode('ascii', 'replace')}")

    def _died(self, code: int, limits: ExtractionLimits) -> ExtractionLimitExceeded:
        # Killed for CPU time by the kernel (RLIMIT_CPU) or by us is time; any other death
        # while a document was read is an allocation the address-space limit refused (PDFium
        # aborts then; the kernel's OOM killer sends SIGKILL) or a crash on the document.
        if code == -signal.SIGXCPU:
            return _timed_out(limits.timeout_seconds)
        return _out_of_memory(self.memory_mb)

    # -- the workers ------------------------------------------------------------------------

    def _acquire(self) -> _Worker:
        with self._changed:
            while True:
                if self._closed:
                    raise RuntimeError("the extraction pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.size:
                    self._count += 1
                    break
                self._changed.wait()
        try:
            return self._start()
        except BaseException:
            with self._changed:
                self._count -= 1
                self._changed.notify()
            raise

    def _start(self) -> _Worker:
        worker = _Worker(self.memory_mb * 1024 * 1024)
        try:
            status, _, payload = worker.receive(time.monotonic() + START_TIMEOUT_SECONDS)
        except (TimeoutError, _WorkerGone):
            code = worker.kill()
            raise ConfigurationError(
                f"the extraction worker did not start (exit status {code}); "
                "is AMBER_EXTRACT_MEMORY_MB too low?"
            ) from None
        if status != protocol.OK or payload != protocol.READY:
            worker.kill()
            raise ConfigurationError("the extraction worker did not start")
        return worker

    def _release(self, worker: _Worker) -> None:
        with self._changed:
            if self._closed:
                worker.close()
                return
            self._idle.append(worker)
            self._changed.notify()

    def _discard(self, worker: _Worker) -> None:
        """Kill ``worker`` and start its replacement in the background, so that the next
        document does not wait for a new interpreter."""
        worker.kill()
        with self._changed:
            if self._closed:
                self._count -= 1
                self._changed.notify()
                return
        threading.Thread(target=self._replace, name="amber-extract-start", daemon=True).start()

    def _replace(self) -> None:
        try:
            worker = self._start()
        except Exception:  # the next document starts one itself and reports why it cannot
            with self._changed:
                self._count -= 1
                self._changed.notify()
            return
        self._release(worker)

    def worker_pids(self) -> list[int]:
        """Process ids of the idle workers (for operators and tests)."""
        with self._changed:
            return [worker.pid for worker in self._idle]

    def close(self) -> None:
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._changed.notify_all()
        for worker in idle:
            worker.close()


def _timed_out(seconds: float) -> ExtractionLimitExceeded:
    return ExtractionLimitExceeded(
        "time", seconds, f"extracting the document's text took longer than {seconds:g} s"
    )


def _out_of_memory(memory_mb: int) -> ExtractionLimitExceeded:
    return ExtractionLimitExceeded(
        "memory", memory_mb, f"extracting the document's text needed more than {memory_mb} MiB"
    )


_pools: dict[tuple[int, int], WorkerPool] = {}
_pools_lock = threading.Lock()


def worker_pool(limits: ExtractionLimits) -> WorkerPool:
    """The process's pool for ``limits``' worker count and memory limit."""
    key = (limits.pool_size, limits.memory_mb)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = WorkerPool(*key)
        return pool


def close_pools() -> None:
    """Stop every worker of this process (at exit; tests that need a fresh start)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


atexit.register(close_pools)
