"""The per-key token bucket, on a clock the test turns."""

from __future__ import annotations

import pytest

from archive.access.ratelimit import RateLimiter
from archive.exceptions import RateLimited


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_steady_rate_with_the_wait_to_retry() -> None:
    clock = Clock()
    limiter = RateLimiter(2.0, 3, clock=clock)
    for _ in range(3):
        limiter.take("k")
    with pytest.raises(RateLimited) as refused:
        limiter.take("k")
    assert refused.value.retry_after == pytest.approx(0.5)
    clock.now += 0.25  # half a token: still refused, a quarter second more to wait
    with pytest.raises(RateLimited) as again:
        limiter.take("k")
    assert again.value.retry_after == pytest.approx(0.25)
    clock.now += 0.25
    limiter.take("k")  # one token has accrued
    with pytest.raises(RateLimited):
        limiter.take("k")


def test_buckets_are_per_key_and_refill_only_up_to_the_burst() -> None:
    clock = Clock()
    limiter = RateLimiter(1.0, 2, clock=clock)
    limiter.take("a")
    limiter.take("a")
    limiter.take("b")  # another key has its own bucket
    clock.now += 3600  # an hour idle refills to the burst, not to 3,600 tokens
    limiter.take("a")
    limiter.take("a")
    with pytest.raises(RateLimited):
        limiter.take("a")


def test_a_rate_of_zero_turns_the_limit_off() -> None:
    limiter = RateLimiter(0, 1, clock=Clock())
    assert not limiter.enabled
    for _ in range(100):
        limiter.take("k")
