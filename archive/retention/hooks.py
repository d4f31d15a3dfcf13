"""Named moments inside retention's write transactions, where tests start concurrent
writers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archive.retention.records import Verdict


def _nothing(verdicts: Sequence[Verdict]) -> None:
    """The default hook: nothing happens at these moments outside tests."""


@dataclass
class RetentionHooks:
    """Named moments inside retention's write transactions (the write lock held), where a
    test starts a concurrent writer — another API replica's citation, hold or retention
    change — to prove that the ordering and the lock keep evidence safe. Each defaults to
    doing nothing; a test replaces one on the instance a :class:`Retention` was given.

    - ``evaluated(verdicts)``: the expiries of some mementos have just been decided from
      the transcripts reaching them (a sweep's batch, a retention change, an erasure); the
      caller acts on ``verdicts`` next, in the same transaction.
    - ``batch_decided(expired)``: a sweep has evaluated a batch and re-dated the candidates
      not yet due; the ``expired`` ones are tombstoned next (never called on a dry run).
    """

    evaluated: Callable[[Sequence[Verdict]], None] = _nothing
    batch_decided: Callable[[Sequence[Verdict]], None] = _nothing
