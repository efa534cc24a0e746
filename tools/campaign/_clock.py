"""A monotonic clock whose rate can be changed at run time (injected with ``Lease(clock=)``).

Per-process CLOCK_MONOTONIC cannot be skewed without privileges, so each worker reads time
through a :class:`SkewedClock`: ``base + rate * (monotonic() - anchor)``. Changing the rate
re-anchors, so readings stay continuous and never go backwards.

:class:`ReplyAnchorClock` is a deliberately *broken* clock for the checker's self-test: it stops
while a write is in flight, so a deadline computed as "send time + D" really ends D after the
*reply* (the anchoring docs/design.md §4.2 forbids).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["ReplyAnchorClock", "SkewedClock"]


class SkewedClock:
    """Monotonic seconds running at ``rate`` times real time (1.0 = true rate)."""

    def __init__(self, rate: float = 1.0, source: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"a clock rate must be positive, got {rate}")
        self._source = source
        self._anchor = source()
        self._base = self._anchor
        self.rate = rate

    def __call__(self) -> float:
        return self._base + self.rate * (self._source() - self._anchor)

    def set_rate(self, rate: float) -> None:
        """Run at ``rate`` from now on (the reading stays continuous)."""
        if rate <= 0:
            raise ValueError(f"a clock rate must be positive, got {rate}")
        now = self._source()
        self._base = self._base + self.rate * (now - self._anchor)
        self._anchor = now
        self.rate = rate


class ReplyAnchorClock(SkewedClock):
    """Broken on purpose: frozen between :meth:`freeze` and :meth:`thaw` (a write in flight).

    The time spent frozen is never counted, so a deadline anchored at the send time by the
    library ends as if it had been anchored at the reply.
    """

    def __init__(self, source: Callable[[], float] = time.monotonic) -> None:
        super().__init__(1.0, source)
        self._frozen_at: float | None = None
        self._depth = 0

    def __call__(self) -> float:
        if self._frozen_at is not None:
            return self._frozen_at
        return super().__call__()

    def freeze(self) -> None:
        """Stop the clock until the matching :meth:`thaw` (nested calls are counted)."""
        if self._depth == 0:
            self._frozen_at = super().__call__()
        self._depth += 1

    def thaw(self) -> None:
        """Resume from the frozen reading: the frozen span is lost from this clock."""
        self._depth -= 1
        if self._depth == 0 and self._frozen_at is not None:
            self._base = self._frozen_at
            self._anchor = self._source()
            self.rate = 1.0
            self._frozen_at = None
