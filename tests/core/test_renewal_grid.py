"""Holders renew on a grid of R/32, so one process's renewals share wake-ups (virtual time).

The rule itself (never later than last send + R, at most R/32 earlier, every R) is pinned
table-driven in test_algorithm.py; these tests show it in a running holder.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import anyio
import pytest

from trio_lease import BackendUnavailable, Lease, LeaseLost, LeaseRecord
from trio_lease._algorithm import RENEWAL_TICKS
from trio_lease.backends.memory import MemoryBackend

from .conftest import SETTINGS

pytestmark = pytest.mark.anyio

R = SETTINGS.heartbeat_interval
TICK = R / RENEWAL_TICKS


class _Timed(MemoryBackend):
    """A memory backend that notes when each lease's renewals were sent (not the release)."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: defaultdict[str, list[float]] = defaultdict(list)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        if record.holder:  # a release writes no holder
            self.sends[record.name].append(anyio.current_time())
        return await super().update(record, expected_version)


def _on_grid(at: float) -> bool:
    return math.isclose(at / TICK, round(at / TICK), abs_tol=1e-6)


async def test_holders_granted_apart_renew_at_the_same_instants_every_r() -> None:
    """Two grants 0.4 tick apart: every renewal of both falls on the same grid instants."""
    backend = _Timed()
    now = anyio.current_time()
    await anyio.sleep(math.ceil(now / TICK) * TICK - now + TICK)  # a grid instant
    async with Lease("a", "me", backend, SETTINGS).held():
        await anyio.sleep(0.4 * TICK)
        async with Lease("b", "me", backend, SETTINGS).held():
            await anyio.sleep(5 * R)
    a, b = backend.sends["a"], backend.sends["b"]
    assert len(a) >= 5 and len(b) >= 5
    assert all(_on_grid(at) for at in a + b), (a, b)
    assert b == pytest.approx(a[: len(b)])  # the same instants: one wake-up for both
    gaps = [later - earlier for earlier, later in itertools.pairwise(a)]
    assert gaps == pytest.approx([R] * len(gaps))  # every R, not more often


async def test_a_renewal_is_never_later_than_r_after_the_grant() -> None:
    """Off the grid, the first renewal comes at most one tick before R after the grant."""
    backend = _Timed()
    now = anyio.current_time()
    await anyio.sleep(math.ceil(now / TICK) * TICK - now + 0.7 * TICK)  # off the grid
    granted = anyio.current_time()
    async with Lease("a", "me", backend, SETTINGS).held():
        await anyio.sleep(1.5 * R)
    first = backend.sends["a"][0]
    assert granted + R - TICK < first <= granted + R


@pytest.mark.parametrize(
    ("deadline", "now", "expected"),
    [
        (100.0 * TICK + 0.3 * TICK, 90.0 * TICK, 100.0 * TICK),  # the grid instant before it
        (100.0 * TICK, 90.0 * TICK, 100.0 * TICK),  # a deadline on the grid is that instant
        (100.0 * TICK + 0.3 * TICK, 100.0 * TICK, 100.3 * TICK),  # that instant is now: deadline
        (100.0 * TICK + 0.3 * TICK, 100.1 * TICK, 100.3 * TICK),  # past it: the deadline itself
        (100.0 * TICK - 1e-9 * TICK, 90.0 * TICK, 100.0 * TICK - 1e-9 * TICK),  # never later
    ],
)
def test_the_watchdog_wakes_on_the_grid_and_never_after_the_deadline(
    deadline: float, now: float, expected: float
) -> None:
    from trio_lease._algorithm import next_renewal, watch_instant

    instant = watch_instant(deadline, now, SETTINGS)
    assert instant == pytest.approx(expected, rel=0, abs=1e-9)
    assert now < instant <= deadline
    if instant != deadline:
        # The very float a holder due then sleeps until: one loop timer for both.
        assert instant == next_renewal(instant - R, SETTINGS)


async def test_while_renewals_succeed_no_sleep_of_a_holder_is_off_the_grid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The renewal loop and the watchdog of a held lease sleep only until instants of the
    renewal grid (loop timers shared with the other holders due then), not until each new
    deadline."""
    from trio_lease._loops import current

    kit = current()
    sleeps: list[float] = []
    sleep_until = kit.sleep_until

    def noted(instant: float) -> object:
        sleeps.append(instant)
        return sleep_until(instant)

    monkeypatch.setattr(kit, "sleep_until", noted)
    async with Lease("a", "me", MemoryBackend(), SETTINGS).held():
        await anyio.sleep(4 * SETTINGS.heartbeat_timeout)
    assert len(sleeps) > 4 * SETTINGS.heartbeat_timeout / R
    off = [instant for instant in sleeps if not _on_grid(instant)]
    assert off == []


class _Failing(MemoryBackend):
    """A memory backend that fails every read and write once ``failing`` is set."""

    failing = False

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        if self.failing:
            raise BackendUnavailable("down")
        return await super().update(record, expected_version)

    async def get(self, name: str) -> LeaseRecord | None:
        if self.failing:
            raise BackendUnavailable("down")
        return await super().get(name)


async def test_once_renewals_fail_the_watchdog_declares_the_loss_exactly_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Waking on the grid changes nothing at the end: the loss is declared at the deadline
    itself (virtual time), by the watchdog, with the body still running."""
    from trio_lease._heartbeat import Holding

    declared: list[tuple[float, float, str]] = []
    mark_lost = Holding.mark_lost

    def noted(self: Holding, cause: str) -> None:
        declared.append((anyio.current_time(), self.deadline, cause))
        mark_lost(self, cause)

    monkeypatch.setattr(Holding, "mark_lost", noted)
    backend = _Failing()
    with pytest.raises(LeaseLost):
        async with Lease("a", "me", backend, SETTINGS).held():
            await anyio.sleep(2.3 * R)
            backend.failing = True
            await anyio.sleep(2 * SETTINGS.heartbeat_timeout)
    assert len(declared) == 1
    at, deadline, cause = declared[0]
    assert "deadline" in cause
    assert at == pytest.approx(deadline, rel=0, abs=1e-9)
    assert not _on_grid(deadline)  # the last wake-up was the deadline's own, off the grid
    # (D after a send on the grid, and D is not a whole number of ticks here: holder_deadline)


async def test_a_sleeping_holder_holds_neither_the_record_it_sent_nor_the_answer() -> None:
    """Between renewals the renewal loop keeps only its state: the record a renewal sent and
    the answer it got (the holder keeps that as its record) are not held by the loop's frame
    while it sleeps (held for R, they were moved to the collector's oldest generation, for
    every full collection to walk)."""
    import gc
    import inspect

    backend = _Timed()
    async with Lease("a", "me", backend, SETTINGS).held() as grant:
        await anyio.sleep(3.5 * R)  # renewed, and asleep until the next one
        assert len(backend.sends["a"]) >= 3
        loops = [
            obj for obj in gc.get_objects()
            if inspect.iscoroutine(obj) and obj.cr_code.co_name == "_renew_loop_marked"
        ]
        assert len(loops) == 1
        frame = loops[0].cr_frame
        assert frame is not None  # suspended, not finished
        held = frame.f_locals
        assert grant._holding.renewals >= 3
        assert "new" not in held and "stored" not in held
        assert not [v for v in held.values() if isinstance(v, LeaseRecord)]
