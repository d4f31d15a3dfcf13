"""Figures of every server process on one host, for one Prometheus scrape.

``amber serve --workers N`` runs N processes behind one port: a scrape reaches one of them
at random. So that any of them answers for the host, each worker publishes its figures in a
directory they share (``AMBER_METRICS_DIR``), and the one scraped adds them up: counters
summed, gauges given a ``worker`` label (each worker's memory is its own: a sum would
hide which one is full). Histograms: Amber has none today; :class:`Figure` would need
buckets to merge them.

Why not prometheus_client's multiprocess mode: Amber's figures are counts its objects
already keep (plain integer increments on the hot path, benchmarks/README.md); that mode
would replace them by writes into memory-mapped files on every increment, and add a
dependency whose import is gated on an environment variable. Here the hot path is
untouched: a background thread copies the counts into a small file once per
``AMBER_METRICS_PUBLISH_SECONDS`` (default 1 s), atomically (temporary file, rename).
A scrape therefore sees the other workers' figures as of at most that long ago, and the
scraped worker's own as of now.

Each worker holds a slot (``slot-K.lock``, an exclusive ``flock`` for its lifetime: the
kernel frees it when the process dies). A worker that takes a dead one's slot carries its
counters on, so the host's counters never go down while the server runs; ``amber serve``
empties the directory at start. Counts only: no tenant, id or captured text.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

COUNTER = "counter"
GAUGE = "gauge"
MAX_SLOTS = 1024  # far more workers than any host runs


@dataclass(frozen=True)
class Figure:
    """One sample: a counter or a gauge, its help text and its value."""

    name: str
    kind: str
    help: str
    value: float


Collect = Callable[[], list[Figure]]


def render(figures: list[Figure], labelled: dict[str, list[tuple[str, float]]]) -> str:
    """The Prometheus text format (0.0.4): ``figures`` unlabelled, and for the gauges named
    in ``labelled`` one sample per ``(worker, value)`` instead."""
    lines: list[str] = []
    for figure in figures:
        lines += [f"# HELP {figure.name} {figure.help}", f"# TYPE {figure.name} {figure.kind}"]
        per_worker = labelled.get(figure.name)
        if per_worker is None:
            lines.append(f"{figure.name} {_number(figure.value)}")
        else:
            lines += [f'{figure.name}{{worker="{w}"}} {_number(v)}' for w, v in per_worker]
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class WorkerBoard:
    """This worker's slot in the shared directory, and the host's figures from it."""

    def __init__(self, directory: Path, collect: Collect, interval: float = 1.0) -> None:
        self.directory = directory
        self._collect = collect
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self.slot, self._lock_file = self._claim()
        # Counters of the dead worker whose slot this is (kept: counters never go down).
        self._carried = {
            f["name"]: float(f["value"])
            for f in self._read(self._figures_path(self.slot)).get("figures", [])
            if f.get("kind") == COUNTER
        }

    # -- this worker -------------------------------------------------------------------

    def _claim(self) -> tuple[int, IO[bytes]]:
        for slot in range(MAX_SLOTS):
            handle = open(self.directory / f"slot-{slot}.lock", "ab")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            return slot, handle
        raise RuntimeError(f"no free metrics slot in {self.directory}")

    def _figures_path(self, slot: int) -> Path:
        return self.directory / f"slot-{slot}.json"

    def own(self) -> list[Figure]:
        """This worker's figures now, with the counters carried from its slot's last owner."""
        figures = self._collect()
        if not self._carried:
            return figures
        return [
            Figure(f.name, f.kind, f.help, f.value + self._carried.get(f.name, 0.0))
            if f.kind == COUNTER
            else f
            for f in figures
        ]

    def publish(self) -> list[Figure]:
        """Write this worker's figures for the others (atomically); returns them."""
        figures = self.own()
        body = json.dumps(
            {"pid": os.getpid(), "figures": [vars(f) for f in figures]}, separators=(",", ":")
        )
        path = self._figures_path(self.slot)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        with self._write_lock:
            temporary.write_text(body, encoding="utf-8")
            os.replace(temporary, path)
        return figures

    def start(self) -> None:
        """Publish now, then every ``interval`` seconds from a daemon thread."""
        self.publish()
        self._thread = threading.Thread(target=self._run, name="amber-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.publish()
            except Exception as error:  # the next round tries again; a scrape says what it has
                log.warning("cannot publish this worker's metrics: %s", type(error).__name__)

    def close(self) -> None:
        """Stop publishing; the last figures stay for the counters (the slot is freed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        with suppress(Exception):
            self.publish()
        self._lock_file.close()

    # -- the host ----------------------------------------------------------------------

    def gather(self) -> str:
        """The host's figures in Prometheus text: this worker's now, the others' as last
        published. Counters of workers that died still count; gauges only of live ones."""
        own = self.publish()
        totals = {f.name: f.value for f in own if f.kind == COUNTER}
        per_worker: dict[str, list[tuple[str, float]]] = {
            f.name: [(str(self.slot), f.value)] for f in own if f.kind == GAUGE
        }
        live = 1
        for slot, published in self._others():
            alive = _alive(published.get("pid"))
            live += alive
            for item in published.get("figures", []):
                name, value = item.get("name"), item.get("value")
                if not isinstance(value, (int, float)):
                    continue
                if item.get("kind") == COUNTER and name in totals:
                    totals[name] += value
                elif item.get("kind") == GAUGE and name in per_worker and alive:
                    per_worker[name].append((str(slot), value))
        figures = [
            Figure(f.name, f.kind, f.help, totals[f.name]) if f.kind == COUNTER else f for f in own
        ]
        figures.append(Figure("amber_workers", GAUGE, "Server processes publishing.", live))
        for samples in per_worker.values():
            samples.sort(key=lambda sample: int(sample[0]))
        return render(figures, per_worker)

    def _others(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for path in self.directory.glob("slot-*.json"):
            slot_text = path.stem.removeprefix("slot-")
            if not slot_text.isdigit() or int(slot_text) == self.slot:
                continue
            yield int(slot_text), self._read(path)

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # absent, or not ours: nothing to add
        return loaded if isinstance(loaded, dict) else {}


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def empty(directory: Path) -> None:
    """Remove what earlier runs published (``amber serve`` calls it before the workers
    start: their counters begin at zero)."""
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if path.name.startswith("slot-"):
            with suppress(FileNotFoundError):
                path.unlink()
