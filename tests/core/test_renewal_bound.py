"""Each renewal's write is bounded by T, also after an earlier one outlived it (virtual time).

A holder bounds its renewals with one cancel scope whose deadline is set only while a write is
in flight (trio_lease/_heartbeat.py). These tests pin what that must keep: a write that hangs
is abandoned exactly T after it was sent and counts as not renewed; the next attempt (a
re-read, then the write) follows at once; a later hang is bounded the same way; and nothing
outside a write is ever cancelled by the bound (the sleeps between renewals last R, however
long the writes before them took).
"""

from __future__ import annotations

import itertools

import anyio
import pytest

from trio_lease import Lease, LeaseRecord
from trio_lease.backends.memory import MemoryBackend

from .conftest import SETTINGS

pytestmark = pytest.mark.anyio

T = SETTINGS.lease_operation_timeout


class _Hanging(MemoryBackend):
    """A memory backend whose renewals hang (until cancelled) on the attempts in ``hang``;
    notes when each renewal was sent and when it ended (and whether it was cancelled)."""

    def __init__(self, hang: set[int]) -> None:
        super().__init__()
        self.hang = hang
        self.attempts: list[tuple[float, float, bool]] = []  # (sent, ended, cancelled)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        if not record.holder:  # a release
            return await super().update(record, expected_version)
        sent, number = anyio.current_time(), len(self.attempts)
        try:
            if number in self.hang:
                await anyio.sleep_forever()
            result = await super().update(record, expected_version)
        except BaseException:
            self.attempts.append((sent, anyio.current_time(), True))
            raise
        self.attempts.append((sent, anyio.current_time(), False))
        return result


async def test_a_hanging_renewal_is_abandoned_at_t_and_the_next_ones_are_bounded_too() -> None:
    """The first and the third renewal hang: each is cancelled exactly T after it was sent, the
    attempt after it follows at once and is confirmed, and the grant is held throughout."""
    backend = _Hanging(hang={0, 2})
    async with Lease("job", "me", backend, SETTINGS).held() as grant:
        while len(backend.attempts) < 6:
            await anyio.sleep(SETTINGS.heartbeat_interval / 4)
            assert not grant.lost and grant.remaining() > 0
    attempts = backend.attempts[:6]
    assert [cancelled for _, _, cancelled in attempts] == [True, False, True, False, False, False]
    for sent, ended, cancelled in attempts:
        assert ended - sent == pytest.approx(T if cancelled else 0.0)
    # The retry (a re-read, then the write) follows at once: T/4 after the attempt started
    # has passed by the time it was abandoned.
    retries = [attempts[i + 1][0] - attempts[i][1] for i in (0, 2)]
    assert retries == pytest.approx([0.0, 0.0])
    # Confirmed renewals are R apart: no sleep between them was cut short by a bound.
    assert attempts[5][0] - attempts[4][0] == pytest.approx(SETTINGS.heartbeat_interval)


async def test_a_write_that_ends_just_before_its_bound_is_not_cancelled_later() -> None:
    """A renewal confirmed just before T is kept, and the long sleep after it is not cut short
    by the bound the write had (the scope's deadline is cleared once the write is done)."""

    class _Slow(MemoryBackend):
        def __init__(self) -> None:
            super().__init__()
            self.sent: list[float] = []

        async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
            if record.holder:
                self.sent.append(anyio.current_time())
                await anyio.sleep(T * 0.9)
            return await super().update(record, expected_version)

    backend = _Slow()
    async with Lease("job", "me", backend, SETTINGS).held() as grant:
        await anyio.sleep(4.5 * SETTINGS.heartbeat_interval)
        assert not grant.lost and grant.remaining() > 0
        first_deadline = grant.deadline
        await anyio.sleep(SETTINGS.heartbeat_interval)
        assert grant.deadline > first_deadline  # renewals are confirmed
        assert len(backend.sent) >= 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(backend.sent)]
    assert gaps == pytest.approx([SETTINGS.heartbeat_interval] * len(gaps))
