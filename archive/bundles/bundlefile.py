"""A finished audit bundle: a spooled temporary file, in memory while small and on disk
beyond ``SPOOL`` bytes, so an export's memory does not grow with the pages it carries."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

CHUNK = 1 << 20
SPOOL = 2 << 20  # bytes of a WARC or a bundle kept in memory before it spills to disk


@dataclass(frozen=True)
class Bundle:
    """A bundle written to a spooled temporary file: in memory up to ``SPOOL`` bytes, then
    on disk, so an export's memory does not grow with the bundle. Read it once with
    :meth:`chunks` (which closes it) or :meth:`write_to`; :attr:`data` is for small ones."""

    file: IO[bytes]
    size: int
    mementos: list[str]  # every memento id in it, for the read audit

    def chunks(self, size: int = CHUNK) -> Iterator[bytes]:
        try:
            self.file.seek(0)
            while chunk := self.file.read(size):
                yield chunk
        finally:
            self.file.close()

    def write_to(self, out: IO[bytes]) -> None:
        with self.file:
            self.file.seek(0)
            shutil.copyfileobj(self.file, out, CHUNK)

    @property
    def data(self) -> bytes:
        self.file.seek(0)
        return self.file.read()

    def close(self) -> None:
        self.file.close()


def spooled() -> IO[bytes]:
    return tempfile.SpooledTemporaryFile(max_size=SPOOL)
