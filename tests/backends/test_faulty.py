"""FaultyBackend injects exactly the faults it is asked for."""

from __future__ import annotations

import anyio
import pytest

from trio_lease import BackendUnavailable, LeaseRecord
from trio_lease.backends.memory import MemoryBackend
from trio_lease.testing import FaultyBackend, check_backend

pytestmark = pytest.mark.anyio


async def test_without_faults_it_conforms() -> None:
    """A FaultyBackend with no faults passes check_backend (it is transparent)."""
    inner = MemoryBackend()
    await check_backend(lambda: FaultyBackend(MemoryBackend(inner.store)))


async def test_lost_reply_applies_the_write() -> None:
    """lose_next_replies: the write lands, the caller gets BackendUnavailable."""
    faulty = FaultyBackend(MemoryBackend())
    faulty.lose_next_replies(1)
    with pytest.raises(BackendUnavailable, match="lost reply"):
        await faulty.create(LeaseRecord(name="x", holder="a"))
    stored = await faulty.get("x")
    assert stored is not None and stored.holder == "a"


async def test_fail_next_does_not_apply_the_write() -> None:
    """fail_next: the request fails before reaching the store."""
    faulty = FaultyBackend(MemoryBackend())
    faulty.fail_next(1)
    with pytest.raises(BackendUnavailable, match="before create"):
        await faulty.create(LeaseRecord(name="x", holder="a"))
    assert await faulty.get("x") is None


async def test_latency_and_pause() -> None:
    """latency delays each request; pause() holds requests until resume()."""
    faulty = FaultyBackend(MemoryBackend(), latency=2.0)
    start = anyio.current_time()
    await faulty.get("x")
    assert anyio.current_time() - start == pytest.approx(2.0)
    faulty.latency = 0.0
    faulty.pause()
    with anyio.move_on_after(100) as scope:
        await faulty.get("x")
    assert scope.cancelled_caught
    faulty.resume()
    await faulty.get("x")
    assert faulty.calls["get"] == 3


async def test_error_rate_is_seeded() -> None:
    """error_rate fails a reproducible share of requests for a given seed."""

    async def failures(seed: int) -> list[bool]:
        faulty = FaultyBackend(MemoryBackend(), seed=seed, error_rate=0.5)
        outcome = []
        for _ in range(40):
            try:
                await faulty.get("x")
            except BackendUnavailable:
                outcome.append(True)
            else:
                outcome.append(False)
        return outcome

    first = await failures(7)
    assert first == await failures(7)
    assert 5 < sum(first) < 35
