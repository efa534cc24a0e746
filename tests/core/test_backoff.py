"""trio_lease._backoff: the pause rule of the package's retry loops (first, doubled, capped,
jittered within its range, started over on success), slept on the loop's (virtual) clock."""

from __future__ import annotations

import math
import random

import anyio
import pytest

from trio_lease._backoff import Backoff, backoff_delay


def test_the_pause_doubles_per_failure_up_to_the_cap() -> None:
    """Without jitter the n-th failure in a row waits first·2ⁿ⁻¹, never more than the cap."""
    pauses = [backoff_delay(failures, 0.1, 1.0) for failures in range(1, 8)]
    assert pauses == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def test_without_a_cap_the_pause_keeps_doubling_and_never_overflows() -> None:
    """No cap: 0.5·2ⁿ⁻¹ for every n; a failure count past a float's exponent is finite."""
    assert [backoff_delay(n, 0.5) for n in (1, 2, 11)] == [0.5, 1.0, 512.0]
    assert math.isfinite(backoff_delay(10**6, 0.5))


def test_jitter_stays_within_its_range_of_the_ceiling() -> None:
    """Each jittered pause is its ceiling times a factor within the range, and they differ."""
    random.seed(7)
    pauses = [backoff_delay(3, 0.1, 1.0, jitter=(0.5, 1.0)) for _ in range(200)]
    assert all(0.2 <= pause <= 0.4 for pause in pauses)
    assert len(set(pauses)) > 100
    assert all(0.05 <= backoff_delay(1, 0.1, jitter=(0.5, 1.5)) <= 0.15 for _ in range(100))


def test_a_success_starts_the_pauses_over() -> None:
    """Backoff counts the failures in a row; reset() makes the next one the first again."""
    backoff = Backoff(0.25, 1.0)
    assert [backoff.failed() for _ in range(4)] == [0.25, 0.5, 1.0, 1.0]
    assert backoff.failures == 4
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.failed() == 0.25


@pytest.mark.anyio
async def test_sleep_waits_the_earned_pause_on_the_loop_clock() -> None:
    """Backoff.sleep() counts a failure and sleeps its pause on the event loop's clock."""
    backoff = Backoff(1.5, 4.0)
    for expected in (1.5, 3.0, 4.0):
        started = anyio.current_time()
        await backoff.sleep()
        assert anyio.current_time() - started == pytest.approx(expected, abs=0.01)
    assert backoff.failures == 3
