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

from trio_lease import Lease, LeaseRecord
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
