"""Hypothesis stateful test: several owners contend through FaultyBackend on virtual time.

Each owner runs a worker that loops ``async with lease.held(): sleep(work)``. Rules inject
latency, errors, lost replies and pauses (the owner's clock stops and its requests hang, as in a
SIGSTOP), and let virtual time pass. The simulation runs in a blocking portal whose clock is
frozen between rules and autojumps only inside ``advance``, so every step is deterministic.

Invariants, checked after every rule and by a monitor task every 50 ms of virtual time:
- two owners never both have check_lease() true unless one of them is paused past its deadline;
- grant tokens strictly increase in the order the grants were made.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import pytest
import trio.testing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from trio_lease import Lease, LeaseLost, LeaseSettings
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend, VirtualTimeEventLoop

SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)
OWNERS = 3


class PausableClock:
    """An owner's monotonic clock: it stops during a pause and catches up after (like SIGSTOP)."""

    def __init__(self) -> None:
        self.paused_at: float | None = None

    def __call__(self) -> float:
        return self.paused_at if self.paused_at is not None else anyio.current_time()


class Owner:
    def __init__(self, index: int, store: MemoryStore, seed: int) -> None:
        self.clock = PausableClock()
        self.backend = FaultyBackend(MemoryBackend(store), seed=seed + index)
        self.lease = Lease("job", f"owner{index}", self.backend, SETTINGS, clock=self.clock)
        self.work = 5.0
        self.pause_until: float | None = None


class Simulation:
    """Lives in the portal's event loop; rules call into it through the portal."""

    def __init__(self, seed: int, set_autojump: Callable[[bool], None]) -> None:
        self.store = MemoryStore()
        self.owners = [Owner(i, self.store, seed) for i in range(OWNERS)]
        self.grants: list[tuple[float, int, int]] = []  # (time, owner, token)
        self.violations: list[str] = []
        self.losses = 0
        self._set_autojump = set_autojump
        self._scope = anyio.CancelScope()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with self._scope:
            async with anyio.create_task_group() as tg:
                for index in range(OWNERS):
                    tg.start_soon(self._worker, index)
                tg.start_soon(self._monitor)
                task_status.started()

    async def _worker(self, index: int) -> None:
        owner = self.owners[index]
        while True:
            try:
                async with owner.lease.held() as grant:
                    self.grants.append((anyio.current_time(), index, grant.fencing_token))
                    await anyio.sleep(owner.work)
            except LeaseLost:
                self.losses += 1
            await anyio.sleep(0.2 + 0.1 * index)

    async def _monitor(self) -> None:
        while True:
            self.check()
            await anyio.sleep(0.05)

    def check(self) -> None:
        now = anyio.current_time()
        believers = [i for i, o in enumerate(self.owners) if o.lease.check_lease()]
        # A paused owner past its true deadline may still believe (its clock stopped): allowed.
        unexplained = []
        for i in believers:
            owner = self.owners[i]
            from trio_lease._heartbeat import registry

            holding = registry.get(owner.lease._state.key)
            paused_past = (
                owner.clock.paused_at is not None
                and holding is not None
                and now >= holding.deadline
            )
            if not paused_past:
                unexplained.append(i)
        if len(unexplained) > 1:
            self.violations.append(f"t={now:.3f}: owners {unexplained} all believe they hold")
        tokens = [token for _, _, token in self.grants]
        if any(b <= a for a, b in itertools.pairwise(tokens)):
            self.violations.append(f"t={now:.3f}: tokens not strictly increasing: {tokens}")

    async def advance(self, seconds: float) -> None:
        self._set_autojump(True)
        try:
            end = anyio.current_time() + seconds
            while anyio.current_time() < end:
                for owner in self.owners:
                    if owner.pause_until is not None and anyio.current_time() >= owner.pause_until:
                        owner.pause_until = None
                        owner.clock.paused_at = None
                        owner.backend.resume()
                step = min([end] + [o.pause_until for o in self.owners if o.pause_until])
                await anyio.sleep(max(0.0, step - anyio.current_time()))
        finally:
            self._set_autojump(False)
        self.check()

    def pause(self, index: int, seconds: float) -> None:
        owner = self.owners[index]
        if owner.pause_until is None:
            owner.clock.paused_at = anyio.current_time()
            owner.backend.pause()
            owner.pause_until = anyio.current_time() + seconds

    def stop(self) -> None:
        self._set_autojump(True)  # let cancelled workers finish their bounded releases
        for owner in self.owners:
            owner.backend.resume()
        self._scope.cancel()


def _backend_spec(name: str) -> tuple[dict[str, Any], Callable[[bool], None]]:
    if name == "trio":
        clock = trio.testing.MockClock(autojump_threshold=math.inf)

        def set_trio(on: bool) -> None:
            clock.autojump_threshold = 0 if on else math.inf

        return {"clock": clock}, set_trio
    loops: list[VirtualTimeEventLoop] = []

    def factory() -> VirtualTimeEventLoop:
        loop = VirtualTimeEventLoop(autojump_threshold=math.inf)
        loops.append(loop)
        return loop

    def set_asyncio(on: bool) -> None:
        loops[0].autojump_threshold = 0 if on else math.inf

    return {"loop_factory": factory}, set_asyncio


def make_machine(backend: str) -> type[RuleBasedStateMachine]:
    class LeaseMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            options, set_autojump = _backend_spec(backend)
            self.portal_cm = anyio.from_thread.start_blocking_portal(backend, options)
            self.portal = self.portal_cm.__enter__()
            # Objects holding anyio primitives must be made inside the portal's event loop.
            self.sim = self.portal.call(lambda: Simulation(seed=0, set_autojump=set_autojump))
            self.portal.start_task_soon(self.sim.run)

        @rule(seconds=st.floats(0.01, 20))
        def advance(self, seconds: float) -> None:
            self.portal.call(self.sim.advance, seconds)

        @rule(owner=st.integers(0, OWNERS - 1), seconds=st.floats(0.1, 40))
        def pause(self, owner: int, seconds: float) -> None:
            self.portal.call(self.sim.pause, owner, seconds)

        @rule(
            owner=st.integers(0, OWNERS - 1), latency=st.sampled_from([0.0, 0.05, 0.3, 0.45, 0.8])
        )
        def set_latency(self, owner: int, latency: float) -> None:
            self.sim.owners[owner].backend.latency = latency

        @rule(owner=st.integers(0, OWNERS - 1), latency=st.sampled_from([0.0, 0.2, 0.6]))
        def set_reply_latency(self, owner: int, latency: float) -> None:
            self.sim.owners[owner].backend.reply_latency = latency

        @rule(owner=st.integers(0, OWNERS - 1), count=st.integers(1, 3))
        def lose_replies(self, owner: int, count: int) -> None:
            self.portal.call(self.sim.owners[owner].backend.lose_next_replies, count)

        @rule(owner=st.integers(0, OWNERS - 1), rate=st.sampled_from([0.0, 0.2, 0.5]))
        def set_error_rate(self, owner: int, rate: float) -> None:
            self.sim.owners[owner].backend.error_rate = rate

        @rule(owner=st.integers(0, OWNERS - 1), work=st.floats(0.0, 30))
        def set_work(self, owner: int, work: float) -> None:
            self.sim.owners[owner].work = work

        @invariant()
        def exclusion_and_fencing(self) -> None:
            self.portal.call(self.sim.check)
            assert not self.sim.violations, self.sim.violations

        @precondition(lambda self: True)
        @rule()
        def settle(self) -> None:
            """Let everything run long enough for handovers and expiry."""
            self.portal.call(self.sim.advance, 2 * SETTINGS.heartbeat_timeout)

        def teardown(self) -> None:
            try:
                self.portal.call(self.sim.stop)
            finally:
                self.portal_cm.__exit__(None, None, None)

    return LeaseMachine


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_stateful_owners_never_overlap_and_tokens_increase(backend: str) -> None:
    """Hypothesis stateful: owners under latency, errors, lost replies and pauses never both
    believe they hold (unless paused past their deadline), and grant tokens strictly increase."""
    run_state_machine_as_test(
        make_machine(backend),
        settings=settings(
            max_examples=int(os.environ.get("STATEFUL_EXAMPLES", "200")),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
