"""The hostile suite's time bound: a call's own time, without its event loop's wait for a CPU."""

from __future__ import annotations

import time

from ._checks import SLACK, CallOutcome, cpu_wait


def test_a_call_over_its_bound_is_named_unless_the_excess_was_a_wait_for_a_cpu() -> None:
    """A call 2 s over its bound fails it; not when its loop waited those 2 s for a CPU."""
    slow = CallOutcome(None, None, start=10.0, end=12.5 + SLACK)
    assert "took 3.50 s (0.00 s of it waiting for a CPU), over its bound 0.5 s" in slow.over(0.5)
    starved = CallOutcome(None, None, start=10.0, end=12.5 + SLACK, starved=2.0)
    assert starved.own_time == 1.5
    assert starved.over(0.5) == ""
    assert CallOutcome(None, None, start=10.0, end=10.5 + SLACK).over(0.5) == ""


def test_cpu_wait_counts_up_from_the_kernel() -> None:
    """cpu_wait() reads Linux's per-thread run-queue wait: positive and never decreasing."""
    first = cpu_wait()
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:  # run a little, so the scheduler accounts for us
        pass
    assert 0 < first <= cpu_wait()
