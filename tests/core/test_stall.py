"""Event-loop stalls past the deadline: the campaign's finding, reduced and fixed.

Every long SIGSTOP of a holder in the campaign was followed, right after SIGCONT, by one more
fenced write from the stale holder (rejected by the fencing store). The same happens without
signals when the event loop stalls past the holder's deadline: when the loop runs again, the
guarded body's own timer fired before the heartbeat's watchdog had cancelled it, so the body
started a new side effect although its deadline had passed.

The fix (DESIGN §4.5, docs/guarantees.md): the body's cancel scope carries the grant's deadline,
pushed forward on each confirmed renewal. On trio, expired deadlines are all delivered before any
task resumes, so a body waiting on a timer never runs again. On asyncio, anyio does not cancel a
task whose wait has already completed, so the body runs until its next checkpoint: one step.
``Grant.check()`` closes that window on both loops for effects that take no fencing token.
"""

from __future__ import annotations

import time

import anyio
import pytest

from trio_lease import Grant, Lease, LeaseLost, LeaseSettings
from trio_lease.backends.memory import MemoryBackend

SETTINGS = LeaseSettings(
    heartbeat_timeout=1, heartbeat_interval=0.2, lease_operation_timeout=0.05, stop_timeout=0.2
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time on both backends: the stall is a real blocking call."""
    backend: str = request.param
    return backend


async def _stall() -> None:
    await anyio.sleep(0.02)
    time.sleep(SETTINGS.deadline + 0.3)  # blocks the event loop: the stall is the point


async def _effects_around_a_stall(*, check: bool) -> tuple[list[float], float]:
    """Run a body doing a side effect every 5 ms while the loop stalls past the deadline.

    Returns the effects' times and the last deadline the body saw (both on the loop's clock).
    """
    effects: list[float] = []
    deadline = 0.0

    async def body(grant: Grant) -> None:
        nonlocal deadline
        while True:
            deadline = grant.deadline
            await anyio.sleep(0.005)
            if check:
                grant.check()
            effects.append(anyio.current_time())  # a write to a resource

    lease = Lease("job", "a", MemoryBackend(), SETTINGS)
    with pytest.raises(LeaseLost) as caught:
        async with lease.held() as grant, anyio.create_task_group() as tg:
            tg.start_soon(_stall)
            await body(grant)
    assert caught.value.__cause__ is None, "check()'s own LeaseLost is not chained"
    assert "deadline" in caught.value.cause
    assert effects, "the body ran before the stall"
    return effects, deadline


@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.anyio
async def test_trio_body_starts_no_side_effect_after_a_stall_past_the_deadline() -> None:
    """On trio the body, waiting on a timer, is cancelled before it can run again."""
    effects, deadline = await _effects_around_a_stall(check=False)
    assert max(effects) < deadline


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_asyncio_body_runs_at_most_one_step_after_a_stall_past_the_deadline() -> None:
    """On asyncio the documented window: the body reaches its next checkpoint, no further."""
    effects, deadline = await _effects_around_a_stall(check=False)
    assert len([t for t in effects if t >= deadline]) <= 1


@pytest.mark.anyio
async def test_grant_check_stops_a_side_effect_after_a_stall_past_the_deadline() -> None:
    """With ``grant.check()`` before the effect, no effect starts after the deadline."""
    effects, deadline = await _effects_around_a_stall(check=True)
    assert max(effects) < deadline
