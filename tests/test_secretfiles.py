"""archive.secretfiles: a secret made on first start is made once, whole, and private."""

from __future__ import annotations

import threading
from pathlib import Path

from archive.secretfiles import read_or_create


def test_the_first_secret_is_kept_and_private(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secret"
    first = read_or_create(path, lambda: b"first")
    assert first == b"first" and path.read_bytes() == b"first"
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_or_create(path, lambda: b"second") == b"first"
    assert [p.name for p in path.parent.iterdir()] == ["secret"]  # no staging file left


def test_processes_starting_together_agree_on_one_secret(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    start = threading.Barrier(8)
    seen: list[bytes] = []

    def starter(n: int) -> None:
        start.wait()
        seen.append(read_or_create(path, lambda: b"secret-%d" % n))

    threads = [threading.Thread(target=starter, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and len(set(seen)) == 1  # nobody read a half-written or other file
    assert seen[0] == path.read_bytes()
