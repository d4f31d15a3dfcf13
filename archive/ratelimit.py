"""Per-key token buckets: a steady rate with a burst allowance.

In-process: with several API replicas each enforces its own bucket, so the effective limit
is the configured one times the replica count. That bounds abuse without a shared store
on the hot path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from archive.exceptions import RateLimited


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(
        self, rate_per_second: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate_per_second
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: str) -> None:
        """Spend one token for ``key``, or raise :class:`RateLimited` with a retry time."""
        if not self.enabled:
            return
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return
            wait = (1 - bucket.tokens) / self.rate
        raise RateLimited("rate limit exceeded for this key", retry_after=wait)
