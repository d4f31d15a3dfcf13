"""Per-key rate limits: a steady rate with a burst allowance.

In-process: with several API replicas each enforces its own limit, so the effective limit
is the configured one times the replica count. That bounds abuse without a shared store
on the hot path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from archive.exceptions import RateLimited


class RateLimiter:
    """The generic cell rate algorithm: the same decisions as a token bucket holding
    ``burst`` tokens and refilled at ``rate`` per second, with one number per key, the time
    at which its bucket would be full again. Taking a token moves that time one interval
    later; a request is refused while it lies more than ``burst - 1`` intervals ahead.
    One comparison and one store per request: this runs on every authenticated request.
    """

    def __init__(
        self, rate_per_second: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate_per_second
        self.burst = max(1, burst)
        self._interval = 1.0 / rate_per_second if rate_per_second > 0 else 0.0
        # How far ahead of now a key's full-again time may lie and still hold a token.
        self._allowance = (self.burst - 1) * self._interval
        self._clock = clock
        self._full_at: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: str) -> None:
        """Spend one token for ``key``, or raise :class:`RateLimited` with a retry time."""
        interval = self._interval
        if not interval:
            return  # no limit
        now = self._clock()
        with self._lock:
            full_at = self._full_at.get(key, now)
            if full_at < now:
                full_at = now
            ahead = full_at - now - self._allowance  # > 0: less than one token left
            if ahead <= 0:
                self._full_at[key] = full_at + interval
                return
        raise RateLimited("rate limit exceeded for this key", retry_after=ahead)
