"""Per-key token buckets: a steady rate with a burst allowance.

In-process: with several API replicas each enforces its own bucket, so the effective limit
is the configured one times the replica count. That bounds abuse without a shared store
on the hot path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from archive.exceptions import RateLimited


class RateLimiter:
    def __init__(
        self, rate_per_second: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate_per_second
        self.burst = max(1, burst)
        self._clock = clock
        # key -> [tokens, last update]: lists updated in place under the lock, because this
        # runs on every authenticated request.
        self._buckets: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: str) -> None:
        """Spend one token for ``key``, or raise :class:`RateLimited` with a retry time."""
        rate = self.rate
        if rate <= 0:
            return
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = [float(self.burst), now]
            tokens = min(self.burst, bucket[0] + (now - bucket[1]) * rate)
            bucket[1] = now
            if tokens >= 1:
                bucket[0] = tokens - 1
                return
            bucket[0] = tokens
            wait = (1 - tokens) / rate
        raise RateLimited("rate limit exceeded for this key", retry_after=wait)
