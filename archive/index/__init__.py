"""The index: every row Amber keeps beside the blobs, over SQLAlchemy Core.

One module per concern: :mod:`~archive.index.schema` (the tables) and
:mod:`~archive.index.migrations` (how a database reaches them), :mod:`~archive.index.engines`
(connections and write locks), :mod:`~archive.index.index` (the memento SQL),
:mod:`~archive.index.changes` (what each write tells other processes and replicas: the
change signals of :mod:`~archive.index.signals`, the generation rows of
:mod:`~archive.index.generations`),
:mod:`~archive.index.inserts` (batch inserts), :mod:`~archive.index.idempotency` (first
answers of Idempotency-Keys, claimed before a write's rows), :mod:`~archive.index.navigation`
(TimeGate choice), :mod:`~archive.index.prepared` (statements compiled once for the hot path),
:mod:`~archive.index.recorded` (values every process sharing the index agrees on, such as the
public base URL) and :mod:`~archive.index.rows` (rows to records).
"""

from archive.index.engines import OpenWrite
from archive.index.index import DEFAULT_TENANT, Index
from archive.index.navigation import Neighbours
from archive.index.rows import RowView, StoredResponse, WriteOutcome

__all__ = [
    "DEFAULT_TENANT",
    "Index",
    "Neighbours",
    "OpenWrite",
    "RowView",
    "StoredResponse",
    "WriteOutcome",
]
