"""Virtual time for tests, on both anyio backends.

trio has ``trio.testing.MockClock(autojump_threshold=0)``: when every task is blocked, the clock
jumps to the next timer, so an hour of timeouts runs in milliseconds. asyncio has no such clock,
so :class:`VirtualTimeEventLoop` provides the same behaviour: its ``time()`` is virtual, and when
the loop would sleep waiting for a timer with no I/O ready, it advances the clock instead.

Use :func:`virtual_time_backends` to get anyio backend specs for both::

    @pytest.fixture(params=virtual_time_backends(), ids=lambda spec: spec[0])
    def anyio_backend(request):
        return request.param

Like trio's autojump clock, virtual time assumes the code under test waits only on timers and on
other tasks: a real socket or a worker thread that takes real time to answer looks, to the
clock, like a task that is blocked, and time jumps past it. Use real time for those tests.
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["VirtualTimeEventLoop", "virtual_time_backends"]


class _AutojumpSelector(selectors.BaseSelector):
    """Delegates to a real selector, but jumps the loop's clock instead of sleeping."""

    def __init__(self, loop_time: Callable[[float], None], threshold: float) -> None:
        self._inner = selectors.DefaultSelector()
        self._advance = loop_time
        self.threshold = threshold

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return self._inner.select(0)
        if math.isinf(self.threshold):
            # Frozen: time moves only when something else advances it; wait for real I/O.
            return self._inner.select(None)
        # Give real I/O (and wake-ups from worker threads) `threshold` real seconds to show up.
        wait = self.threshold if timeout is None else min(self.threshold, timeout)
        events = self._inner.select(wait)
        if events:
            return events
        if timeout is None:
            # Nothing is scheduled at all: only real I/O can wake us, so wait for it.
            return self._inner.select(None)
        self._advance(timeout)
        return []

    def close(self) -> None:
        self._inner.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()


class VirtualTimeEventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose clock jumps to the next timer when all tasks are blocked."""

    def __init__(self, autojump_threshold: float = 0.0) -> None:
        self._virtual_now = 0.0
        self._autojump = _AutojumpSelector(self._advance, autojump_threshold)
        super().__init__(self._autojump)

    def _advance(self, seconds: float) -> None:
        self._virtual_now += seconds

    @property
    def autojump_threshold(self) -> float:
        """Real seconds all tasks must be blocked before time jumps; ``math.inf`` freezes time
        (as with trio's ``MockClock.autojump_threshold``)."""
        return self._autojump.threshold

    @autojump_threshold.setter
    def autojump_threshold(self, value: float) -> None:
        self._autojump.threshold = value

    def time(self) -> float:
        return self._virtual_now


def virtual_time_backends() -> list[tuple[str, dict[str, Any]]]:
    """anyio backend specs running on virtual time: asyncio and trio, each with a fresh clock.

    Call it per test (or per parametrisation) so each test starts its own clock.
    """
    import trio.testing

    return [
        ("asyncio", {"loop_factory": VirtualTimeEventLoop}),
        ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}),
    ]
