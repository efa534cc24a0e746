"""FaultyBackend: wrap any backend and inject the faults a lease must survive.

Faults, all seeded so a failing run can be replayed:

- ``latency`` / ``reply_latency``: seconds (or a callable drawing them) before the request reaches
  the store, and between the commit and the reply. A reply delayed past the caller's timeout is
  an applied write whose outcome the caller does not learn.
- ``error_rate``: the request fails with :class:`BackendUnavailable` before reaching the store.
- ``lost_reply_rate``: a write is applied, then :class:`BackendUnavailable` is raised (the reply
  was lost): the outcome is unknown to the caller.
- ``fail_next(n)`` / ``lose_next_replies(n)``: the same, deterministically, for the next n calls.
- ``pause()`` / ``resume()``: requests hang until resumed (a stalled store or a partition).
- ``watch_enabled=False``: hide the inner backend's watch (forces polling).

``calls`` counts requests by operation.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

import anyio

from .._abc import LeaseBackend, LeaseRecord
from .._exceptions import BackendUnavailable
from .._feed import checked_watch
from .._settings import LeaseSettings
from .._streams import Changes, Emit

__all__ = ["FaultyBackend"]

T = TypeVar("T")
Delay = float | Callable[[random.Random], float]


class FaultyBackend(LeaseBackend):
    """A :class:`LeaseBackend` wrapper injecting latency, errors, lost replies and pauses."""

    def __init__(
        self,
        inner: LeaseBackend,
        *,
        seed: int | None = None,
        latency: Delay = 0.0,
        reply_latency: Delay = 0.0,
        error_rate: float = 0.0,
        lost_reply_rate: float = 0.0,
        watch_enabled: bool = True,
    ) -> None:
        #: The wrapped backend: every request that gets through goes to it.
        self.inner: LeaseBackend = inner
        #: Draws the random faults and delays (seeded, so a run can be replayed).
        self.random: random.Random = random.Random(seed)
        self.latency: Delay = latency
        self.reply_latency: Delay = reply_latency
        self.error_rate: float = error_rate
        self.lost_reply_rate: float = lost_reply_rate
        self.supports_watch: bool = inner.supports_watch and watch_enabled
        #: Requests made so far, by operation ("get", "create", "update", "watch").
        self.calls: Counter[str] = Counter()
        self._fail_next: int = 0
        self._lose_next: int = 0
        self._resumed: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"FaultyBackend({self.inner!r})"

    @property
    def store_key(self) -> Hashable:
        return self.inner.store_key

    def validate_settings(self, settings: LeaseSettings) -> None:
        self.inner.validate_settings(settings)

    def fail_next(self, count: int = 1) -> None:
        """Make the next ``count`` requests fail before reaching the store."""
        self._fail_next += count

    def lose_next_replies(self, count: int = 1) -> None:
        """Apply the next ``count`` writes but lose their replies."""
        self._lose_next += count

    def pause(self) -> None:
        """Make requests hang (new and in-flight ones) until :meth:`resume`."""
        if self._resumed is None:
            self._resumed = anyio.Event()

    def resume(self) -> None:
        """Let hanging and new requests through again (after :meth:`pause`)."""
        if self._resumed is not None:
            self._resumed.set()
            self._resumed = None

    @property
    def paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume`."""
        return self._resumed is not None

    def _delay(self, delay: Delay) -> float:
        return delay(self.random) if callable(delay) else delay

    async def _gate(self) -> None:
        while self._resumed is not None:
            await self._resumed.wait()

    def _fails_now(self) -> bool:
        """Whether this call fails before reaching the store (queued, then by ``error_rate``)."""
        if self._fail_next > 0:
            self._fail_next -= 1
            return True
        return bool(self.error_rate) and self.random.random() < self.error_rate

    def _loses_reply(self) -> bool:
        """Whether this write's reply is lost (queued, then by ``lost_reply_rate``)."""
        if self._lose_next > 0:
            self._lose_next -= 1
            return True
        return bool(self.lost_reply_rate) and self.random.random() < self.lost_reply_rate

    async def _call(self, op: str, action: Callable[[], Awaitable[T]], *, write: bool) -> T:
        self.calls[op] += 1
        await self._gate()
        latency = self._delay(self.latency)
        if latency > 0:
            await anyio.sleep(latency)
        await self._gate()
        if self._fails_now():
            raise BackendUnavailable(f"injected failure before {op}")
        result = await action()
        lose = write and self._loses_reply()
        reply_latency = self._delay(self.reply_latency)
        if reply_latency > 0:
            await anyio.sleep(reply_latency)
        await self._gate()
        if lose:
            raise BackendUnavailable(f"injected lost reply after {op} was applied")
        return result

    async def get(self, name: str) -> LeaseRecord | None:
        return await self._call("get", lambda: self.inner.get(name), write=False)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        return await self._call("create", lambda: self.inner.create(record), write=True)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        return await self._call(
            "update", lambda: self.inner.update(record, expected_version), write=True
        )

    def watch(self, name: str) -> Changes[LeaseRecord | None]:
        if not self.supports_watch:
            raise NotImplementedError("watch is disabled on this FaultyBackend")
        self.calls["watch"] += 1
        follow = functools.partial(self._follow, name)
        return Changes(follow, what=f"{self!r}.watch({name!r})")

    async def _follow(self, name: str, emit: Emit[LeaseRecord | None]) -> None:
        async with checked_watch(self.inner, name) as states:
            async for state in states:
                await self._gate()
                await emit(state)

    async def aclose(self) -> None:
        await self.inner.aclose()
