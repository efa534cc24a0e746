"""Capped exponential backoff: the one rule for the pauses of the package's retry loops.

A loop that tries again after a failure waits ``first`` seconds after the first failure in a
row, twice as long after each further one, at most ``cap``, and starts over once a try
succeeds. ``jitter`` is the range of a random factor each pause is multiplied by, so that
processes failing on a shared cause (a server restarting) do not all try again in step;
``(1.0, 1.0)`` (the default) draws nothing. The pauses are slept with :func:`anyio.sleep`, so
they run on virtual time in tests, on asyncio and trio alike.
"""

from __future__ import annotations

import math
import random

import anyio

__all__ = ["Backoff", "backoff_delay"]

#: No jitter: every pause is its ceiling.
NO_JITTER = (1.0, 1.0)


def backoff_delay(
    failures: int, first: float, cap: float = math.inf, jitter: tuple[float, float] = NO_JITTER
) -> float:
    """The pause after the ``failures``-th failure in a row (1 or more): ``first`` doubled per
    failure after the first, at most ``cap``, times a random factor within ``jitter``."""
    # The exponent is capped: 2.0**1024 overflows a float, after about as many failures.
    ceiling = min(cap, first * 2.0 ** min(max(failures, 1) - 1, 64))
    low, high = jitter
    return ceiling * (low if low == high else random.uniform(low, high))


class Backoff:
    """One retry loop's failures in a row, and the pause each earns (:func:`backoff_delay`)."""

    __slots__ = ("cap", "failures", "first", "jitter")

    def __init__(
        self, first: float, cap: float = math.inf, *, jitter: tuple[float, float] = NO_JITTER
    ) -> None:
        self.first = first
        self.cap = cap
        self.jitter = jitter
        #: Failures since the last success.
        self.failures = 0

    def __repr__(self) -> str:
        return f"<Backoff {self.first}s to {self.cap}s, {self.failures} failure(s) in a row>"

    def failed(self) -> float:
        """Count one more failure; the pause it earns."""
        self.failures += 1
        return backoff_delay(self.failures, self.first, self.cap, self.jitter)

    def reset(self) -> None:
        """A try succeeded: the next failure is the first in a row again."""
        self.failures = 0

    async def sleep(self) -> None:
        """Count one more failure and sleep the pause it earns."""
        await anyio.sleep(self.failed())
