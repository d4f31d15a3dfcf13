"""The extraction worker: one process reading HTML and PDF text, under limits, job by job.

:mod:`archive.citations.sandbox` starts it as ``python -P <this file> <address-space bytes>``
with pipes for standard input and output, which carry the jobs and answers (framed below).
The worker imports only the extractors — not the ``archive`` package's ``__init__`` (the
index, the blob stores …): a worker starts in a fraction of the time and memory. It then
limits its own address space (``RLIMIT_AS``) and, before each job, its CPU time
(``RLIMIT_CPU``: the kernel stops it if the parent's wall-clock deadline somehow does not),
and answers each job with the text or the reason there is none.

A request is ``REQUEST_HEAD`` (the length of a JSON header), the header (``kind``,
``charset``, ``max_pages``, ``max_chars``, ``cpu_seconds``, ``size``) and ``size`` bytes of
content. An answer is ``RESPONSE_HEAD`` (status, retire flag, payload length) and the
payload: the text as UTF-8, or a message, or a JSON limit. A worker that sets the retire
flag exits after answering (its heap grew, or an error left it in doubt).
"""

from __future__ import annotations

import json
import math
import os
import resource
import struct
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

OK, INVALID, LIMIT, FAILED = 0, 1, 2, 3
REQUEST_HEAD = struct.Struct("!I")
RESPONSE_HEAD = struct.Struct("!BBQ")
READY = b"ready"

_Extract = Callable[[dict[str, object], bytes], str]


def encode_answer(status: int, payload: bytes, retire: bool = False) -> bytes:
    return RESPONSE_HEAD.pack(status, int(retire), len(payload)) + payload


def main(argv: list[str]) -> int:
    memory_bytes = int(argv[1])
    inbox, outbox = _channel()
    extract, errors = _load_extractors()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _answer(outbox, encode_answer(OK, READY))
    while True:
        head = inbox.read(REQUEST_HEAD.size)
        if len(head) < REQUEST_HEAD.size:
            return 0  # the parent closed the pipe: the pool is shutting down
        (length,) = REQUEST_HEAD.unpack(head)
        job = json.loads(inbox.read(length))
        content = inbox.read(int(job["size"]))
        _limit_cpu(float(job["cpu_seconds"]))
        status, payload, retire = _run(extract, errors, job, content)
        retire = retire or _heap_grown(memory_bytes)
        _answer(outbox, encode_answer(status, payload, retire))
        if retire:
            return 0


def _channel() -> tuple[BinaryIO, BinaryIO]:
    """The job pipes, moved off fds 0 and 1 so that nothing a library prints to standard
    output can corrupt an answer (fd 1 then goes to standard error, fd 0 to /dev/null)."""
    inbox = os.fdopen(os.dup(0), "rb")
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return inbox, outbox


def _answer(outbox: BinaryIO, frame: bytes) -> None:
    outbox.write(frame)
    outbox.flush()


def _load_extractors() -> tuple[_Extract, tuple[type[Exception], type[Exception]]]:
    # Bare package objects for ``archive`` and ``archive.citations``: importing a submodule
    # then runs only that module and its own imports, not the packages' ``__init__``.
    package_dir = Path(__file__).resolve().parent
    for name, path in (("archive", package_dir.parent), ("archive.citations", package_dir)):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package
    from archive.citations.html_extractor import html_text
    from archive.citations.pdf_extractor import pdf_text
    from archive.exceptions import ExtractionLimitExceeded, InvalidContent

    def extract(job: dict[str, object], content: bytes) -> str:
        charset = job["charset"]
        max_chars = int(str(job["max_chars"]))
        if job["kind"] == "html":
            text = html_text(content, charset if isinstance(charset, str) else None)
        else:
            text = pdf_text(content, max_pages=int(str(job["max_pages"])), max_chars=max_chars)
        if len(text) > max_chars:
            raise ExtractionLimitExceeded(
                "text", max_chars, f"the extracted text is longer than {max_chars} characters"
            )
        return text

    return extract, (InvalidContent, ExtractionLimitExceeded)


def _run(
    extract: _Extract,
    errors: tuple[type[Exception], type[Exception]],
    job: dict[str, object],
    content: bytes,
) -> tuple[int, bytes, bool]:
    invalid, limit = errors
    try:
        text = extract(job, content)
    except MemoryError:
        return LIMIT, json.dumps({"limit": "memory"}).encode(), True
    except limit as error:
        limit_name, maximum = getattr(error, "limit", ""), getattr(error, "maximum", 0)
        body = {"limit": limit_name, "maximum": maximum, "message": str(error)}
        return LIMIT, json.dumps(body).encode(), False
    except invalid as error:
        return INVALID, str(error).encode("utf-8", "replace"), False
    except Exception as error:  # a bug: the parent reports it as one; this worker retires
        return FAILED, type(error).__name__.encode(), True
    return OK, text.encode("utf-8", "surrogatepass"), False


def _limit_cpu(seconds: float) -> None:
    """Allow this job ``seconds`` of CPU (plus one) on top of what the worker has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + seconds) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _heap_grown(memory_bytes: int) -> bool:
    """Whether the worker holds more than half its limit now that the job is done (memory
    a large document left behind): then it retires and a fresh one takes its place."""
    try:
        with open("/proc/self/statm") as statm:
            resident_pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return resident_pages * os.sysconf("SC_PAGE_SIZE") > memory_bytes // 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
