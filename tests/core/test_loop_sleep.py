"""The seam's ``sleep_until`` (``trio_lease._loops``): a holder's sleep until its next renewal.

On trio the tasks sleeping until one instant share one trio sleep (a leader sleeps, the others
park); on asyncio each sleeps on its own timer. The same tests run on every loop, on virtual
time: each sleeper wakes at its instant, cancelling one leaves the others be, and a leader
cancelled hands the sleep on.
"""

from __future__ import annotations

import anyio
import pytest

from tests.conftest import REAL_LOOPS
from trio_lease._loops import current

pytestmark = pytest.mark.anyio


async def _sleeper(until: float, woke: dict[str, float], name: str,
                   scope: anyio.CancelScope | None = None) -> None:
    with scope or anyio.CancelScope():
        await current().sleep_until(until)
        woke[name] = anyio.current_time()
        return
    woke[name + " cancelled"] = anyio.current_time()


async def test_sleepers_until_one_instant_all_wake_at_it() -> None:
    """Ten tasks sleeping until the same instant each wake exactly then, not before."""
    start = anyio.current_time()
    woke: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(_sleeper, start + 5.0, woke, str(i))
    assert woke == {str(i): start + 5.0 for i in range(10)}


async def test_sleepers_until_different_instants_wake_each_at_its_own() -> None:
    """Sleepers until different instants (some shared) wake at their own, in order."""
    start = anyio.current_time()
    woke: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        for i, at in enumerate([3.0, 1.0, 3.0, 2.0, 1.0]):
            tg.start_soon(_sleeper, start + at, woke, f"{i}@{at}")
    assert {name: t - start for name, t in woke.items()} == {
        "0@3.0": 3.0, "1@1.0": 1.0, "2@3.0": 3.0, "3@2.0": 2.0, "4@1.0": 1.0,
    }


async def test_the_first_sleeper_cancelled_hands_the_sleep_on() -> None:
    """The first task to sleep until an instant (on trio, the one that really sleeps) is
    cancelled before it: it stops at once, and the others still wake at the instant."""
    start = anyio.current_time()
    woke: dict[str, float] = {}
    first = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_sleeper, start + 5.0, woke, "first", first)
        await anyio.sleep(0.5)  # the first one sleeps before the others come
        for i in range(3):
            tg.start_soon(_sleeper, start + 5.0, woke, str(i))
        await anyio.sleep(0.5)
        first.cancel()
    assert woke == {
        "first cancelled": start + 1.0, "0": start + 5.0, "1": start + 5.0, "2": start + 5.0
    }


async def test_a_later_sleeper_cancelled_leaves_the_others_be() -> None:
    """A task that joined others sleeping until an instant is cancelled: it stops at once,
    the first and the rest wake at the instant; and a new sleeper after that wakes too."""
    start = anyio.current_time()
    woke: dict[str, float] = {}
    later = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_sleeper, start + 5.0, woke, "first")
        await anyio.sleep(0.5)
        tg.start_soon(_sleeper, start + 5.0, woke, "later", later)
        tg.start_soon(_sleeper, start + 5.0, woke, "other")
        await anyio.sleep(0.5)
        later.cancel()
        await anyio.sleep(1.0)
        tg.start_soon(_sleeper, start + 5.0, woke, "last")
    assert woke == {
        "first": start + 5.0, "later cancelled": start + 1.0, "other": start + 5.0,
        "last": start + 5.0,
    }


async def test_every_sleeper_cancelled_then_the_instant_is_free_again() -> None:
    """All sleepers until an instant cancelled: a sleep until that instant afterwards
    still sleeps until it (nothing of the cancelled ones is left to wait on)."""
    start = anyio.current_time()
    woke: dict[str, float] = {}
    scopes = [anyio.CancelScope() for _ in range(3)]
    async with anyio.create_task_group() as tg:
        for i, scope in enumerate(scopes):
            tg.start_soon(_sleeper, start + 5.0, woke, str(i), scope)
        await anyio.sleep(1.0)
        for scope in scopes:
            scope.cancel()
    await _sleeper(start + 5.0, woke, "after")
    assert woke == {
        "0 cancelled": start + 1.0, "1 cancelled": start + 1.0, "2 cancelled": start + 1.0,
        "after": start + 5.0,
    }


async def test_an_instant_already_past_is_a_checkpoint_that_does_not_wait() -> None:
    """Sleeping until an instant already past returns at once, but is a checkpoint: a
    cancelled scope stops it."""
    start = anyio.current_time()
    await current().sleep_until(start - 1.0)
    assert anyio.current_time() == start
    with anyio.CancelScope() as scope:
        scope.cancel()
        await current().sleep_until(start - 1.0)
    assert scope.cancelled_caught


async def test_the_seams_clock_reads_the_loops_time_as_it_moves() -> None:
    """The clock the seam binds once (the loop's own, or trio's run clock) reads what
    anyio.current_time reads, before and after time moves (virtual time here, jumped 7 s)."""
    now = current().clock()
    assert now() == anyio.current_time()
    start = anyio.current_time()
    await anyio.sleep(7.0)
    assert now() == anyio.current_time() == start + 7.0



@pytest.mark.parametrize("anyio_backend", REAL_LOOPS)
async def test_the_seams_clock_is_the_loops_own_on_real_loops() -> None:
    """On a real loop (asyncio's, uvloop's, trio's) the seam's clock reads the loop's own
    time: on asyncio's loops it is ``time.monotonic`` itself, which ``BaseEventLoop.time``
    returns; on uvloop (its own ``time``) and trio, the loop's. Read around anyio's, each
    reading lies between the two others, and it moves as the loop's does."""
    now = current().clock()
    for _ in range(3):
        before = anyio.current_time()
        ours = now()
        after = anyio.current_time()
        assert before <= ours <= after
        await anyio.sleep(0.01)
    assert now() > ours
