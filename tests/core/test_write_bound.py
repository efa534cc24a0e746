"""The seam's write bound (``trio_lease._loops``, ``write_bound``): a holder's scope whose
deadline is set while a write is in flight and cleared after it.

On trio it is the scope's own deadline; on asyncio one loop timer keeps the bounds of every
holder, and the scope's deadline field is written without a timer of its own. Both must behave
as a deadline of the scope's own would: the same tests run on every loop, on virtual time.
"""

from __future__ import annotations

import math

import anyio
import pytest

from trio_lease._loops import current

pytestmark = pytest.mark.anyio


async def _write(bound_at: float | None, lasts: float, clear: bool = True) -> tuple[bool, float]:
    """A write under a fresh bound ``bound_at`` seconds ahead (None: no bound), lasting
    ``lasts`` seconds; whether the scope was cancelled, and when the write ended."""
    start = anyio.current_time()
    with anyio.CancelScope() as scope:
        bound = current().write_bound(scope)
        if bound_at is not None:
            bound.set(start + bound_at)
        try:
            await anyio.sleep(lasts)
        finally:
            if clear:
                bound.clear()
    return scope.cancelled_caught, anyio.current_time() - start


async def test_a_write_that_outlives_its_bound_is_cancelled_exactly_at_it() -> None:
    """The scope is cancelled when the loop's clock reaches the bound, not before or after."""
    cancelled, ended = await _write(1.0, lasts=5.0)
    assert cancelled and ended == pytest.approx(1.0)


async def test_a_write_that_ends_before_its_bound_is_not_cancelled_then_or_later() -> None:
    """A write done before its bound keeps its outcome, and once cleared the bound cancels
    nothing: the scope lives on past it, as the holder's scope does between writes."""
    start = anyio.current_time()
    with anyio.CancelScope() as scope:
        bound = current().write_bound(scope)
        bound.set(start + 1.0)
        await anyio.sleep(0.5)
        bound.clear()
        await anyio.sleep(3.0)  # past the old bound
        assert anyio.current_time() - start == pytest.approx(3.5)
    assert not scope.cancelled_caught


async def test_while_set_the_bound_is_the_deadline_the_backends_read() -> None:
    """Inside the scope, ``anyio.current_effective_deadline()`` (what a backend bounds its
    request by) reads the bound while it is set, and infinity once it is cleared."""
    start = anyio.current_time()
    with anyio.CancelScope() as scope:
        bound = current().write_bound(scope)
        assert anyio.current_effective_deadline() == math.inf
        bound.set(start + 2.5)
        assert anyio.current_effective_deadline() == start + 2.5
        assert scope.deadline == start + 2.5
        bound.clear()
        assert anyio.current_effective_deadline() == math.inf
        assert scope.deadline == math.inf
        await anyio.sleep(5.0)  # past the cleared bound
    assert not scope.cancelled_caught


async def test_a_bound_already_past_cancels_at_the_next_checkpoint() -> None:
    """A bound set in the past cancels at once, as a deadline in the past does."""
    start = anyio.current_time()
    with anyio.CancelScope() as scope:
        current().write_bound(scope).set(start - 1.0)
        await anyio.sleep(10.0)
    assert scope.cancelled_caught
    assert anyio.current_time() == pytest.approx(start)


async def test_the_next_write_keeps_its_own_bound_after_an_earlier_one_was_cleared() -> None:
    """A write whose earlier bound was cleared is bounded by its new one only: the earlier,
    nearer bound cancels nothing when its time comes."""
    start = anyio.current_time()
    with anyio.CancelScope() as scope:
        bound = current().write_bound(scope)
        bound.set(start + 1.0)
        await anyio.sleep(0.25)
        bound.clear()
        bound.set(start + 3.0)  # the next write, still in flight at 1.0
        await anyio.sleep(10.0)
    assert scope.cancelled_caught
    assert anyio.current_time() - start == pytest.approx(3.0)


async def test_each_holders_bound_cancels_its_own_write_at_its_own_time() -> None:
    """Writes of many holders at once, bounds set in any order, some done in time: each write
    that outlives its bound is cancelled exactly at it, the others end when they end."""
    cases = [  # (bound, lasts): cancelled at the bound when lasts > bound
        (3.0, 10.0), (1.0, 10.0), (2.0, 0.5), (0.5, 10.0), (2.0, 10.0), (4.0, 3.5), (0.75, 0.1),
    ]
    results: dict[int, tuple[bool, float]] = {}

    async def one(i: int, bound_at: float, lasts: float) -> None:
        results[i] = await _write(bound_at, lasts)

    async with anyio.create_task_group() as tg:
        for i, (bound_at, lasts) in enumerate(cases):
            tg.start_soon(one, i, bound_at, lasts)
    for i, (bound_at, lasts) in enumerate(cases):
        cancelled, ended = results[i]
        assert cancelled == (lasts > bound_at), i
        assert ended == pytest.approx(bound_at if cancelled else lasts), i


async def test_a_nearer_bound_set_later_is_kept_before_the_farther_ones() -> None:
    """A holder near its deadline sets a shorter bound than the others: set after theirs, it
    still cancels its write at its own time."""
    results: dict[str, tuple[bool, float]] = {}

    async def one(name: str, delay: float, bound_at: float) -> None:
        await anyio.sleep(delay)
        results[name] = await _write(bound_at, lasts=10.0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "far", 0.0, 5.0)
        tg.start_soon(one, "near", 0.5, 0.5)
    assert results["far"][0] and results["far"][1] == pytest.approx(5.0)
    assert results["near"][0] and results["near"][1] == pytest.approx(0.5)


async def test_renewals_on_a_grid_share_the_loop_timers(anyio_backend_name: str) -> None:
    """On asyncio the bounds of many holders' writes are kept by one loop timer, set again
    about once per bound's length, not once per write; on trio they are the scopes' own
    deadlines (trio's heap, no loop timer at all)."""
    holders, rounds, tick = 50, 8, 0.1
    writes = 0

    async def holder() -> None:
        nonlocal writes
        with anyio.CancelScope() as scope:  # noqa: ASYNC912  the bound is what is tested
            bound = current().write_bound(scope)
            for _ in range(rounds):
                bound.set(anyio.current_time() + 1.0)
                await anyio.sleep(0.01)  # the write
                bound.clear()
                writes += 1
                await anyio.sleep(tick)
        assert not scope.cancelled_caught

    async with anyio.create_task_group() as tg:
        for _ in range(holders):
            tg.start_soon(holder)
    assert writes == holders * rounds
    if anyio_backend_name == "asyncio":
        import asyncio

        from trio_lease._loops import _asyncio

        assert _asyncio._DEADLINE_FIELD, "anyio no longer keeps a scope's deadline in _deadline"
        timers = _asyncio._BOUNDS[asyncio.get_running_loop()].timers_set
        # Writes last 0.9 s in all (8 rounds of 0.11 s), bounds are 1 s: few timers at all.
        assert 1 <= timers <= rounds


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_ended_writes_entry_holds_nothing_the_collector_walks() -> None:
    """On asyncio an ended write's entry stays in the loop's heap until its bound is reached
    (seconds, past the young generations): it holds only its bound and its number, which the
    collector stops tracking, and the write is dropped from the writes in flight at once.
    tools/benchmarks/README.md, "Promoted per renewal"."""
    import asyncio
    import gc

    from trio_lease._loops import _asyncio

    with anyio.CancelScope() as scope:
        bound = current().write_bound(scope)
        for _ in range(50):
            bound.set(anyio.current_time() + 30.0)
            bound.set(anyio.current_time() + 20.0)  # set again before it was cleared
            await anyio.sleep(0.01)  # the write
            bound.clear()
    bounds = _asyncio._BOUNDS[asyncio.get_running_loop()]
    assert bounds.in_flight == {}
    gc.collect()
    entries = list(bounds._heap)
    assert len(entries) >= 100
    assert not any(gc.is_tracked(entry) for entry in entries)
    assert not scope.cancel_called
