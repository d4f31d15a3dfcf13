"""Secrets Amber makes for itself on first start (the API-key HMAC secret, the log's and the
bundles' signing keys): one file each in the data directory, mode 0600, never rewritten."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def read_or_create(path: Path, make: Callable[[], bytes]) -> bytes:
    """The bytes of ``path``; if it is absent, ``make()`` written there first.

    The new secret is written and synced under a temporary name, then linked into place:
    ``link`` fails if the name exists, so processes starting together all end up with the
    first one's secret, and none can read a file that is still being written.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = make()
    descriptor, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0600
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(fresh)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(staging, path)
        except FileExistsError:  # another process published first: use theirs
            return path.read_bytes()
    finally:
        os.unlink(staging)
    return fresh
