"""run_singleton / Singleton (docs/design.md §7), on virtual time."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import anyio
import pytest

from trio_lease import (
    Following,
    Leading,
    LeaseConfigError,
    LeaseRecord,
    Singleton,
    SingletonContext,
    SingletonState,
    Stopped,
    Stopping,
    run_singleton,
)
from trio_lease.testing import FaultyBackend

from .conftest import World

pytestmark = pytest.mark.anyio


class Tracker:
    """Records fn runs and fails if two ever overlap."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.runs: list[tuple[str, int, float, float | None]] = []
        self.overlaps: list[str] = []

    def fn(self, name: str, work: float = 1e9, *, graceful: bool = True) -> Any:
        async def fn(ctx: SingletonContext) -> None:
            if self.running:
                self.overlaps.append(f"{name} started while {self.running} ran")
            self.running.add(name)
            index = len(self.runs)
            self.runs.append((name, ctx.fencing_token, anyio.current_time(), None))
            try:
                with anyio.move_on_after(work):
                    if graceful:
                        await ctx.stopping.wait()
                        await anyio.sleep(0.5)  # a short drain
                    else:
                        await anyio.sleep_forever()
            finally:
                self.running.discard(name)
                run = self.runs[index]
                self.runs[index] = (run[0], run[1], run[2], anyio.current_time())

        return fn


async def test_runners_never_overlap_through_loss_failover_stop_and_crash(world: World) -> None:
    """N runners on one lease never run fn concurrently: through a partition (loss), a
    graceful stop, a crashed runner, and the failovers after each."""
    s = world.settings
    tracker = Tracker()
    backends = [world.faulty() for _ in range(3)]
    leases = [world.lease(f"r{i}", backend=backends[i]) for i in range(3)]
    scopes = [anyio.CancelScope() for _ in range(3)]

    async def runner(i: int) -> None:
        with scopes[i]:
            await run_singleton(leases[i], tracker.fn(f"r{i}"), retry_interval=1.0, stop_grace=2)

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(runner, i)
        await anyio.sleep(5)
        leader = tracker.runs[-1][0]
        backends[int(leader[1])].pause()  # partition the leader: it loses, another takes over
        await anyio.sleep(s.heartbeat_timeout * 2)
        backends[int(leader[1])].resume()
        second = tracker.runs[-1][0]
        assert second != leader
        scopes[int(second[1])].cancel()  # graceful stop of the new leader
        await anyio.sleep(s.heartbeat_timeout)
        third = tracker.runs[-1][0]
        assert third != second
        crashed = int(third[1])
        backends[crashed].pause()  # a crash: silent from now on
        scopes[crashed].cancel()
        await anyio.sleep(s.heartbeat_timeout * 2)
        tg.cancel_scope.cancel()
    assert tracker.overlaps == []
    leaders = [run[0] for run in tracker.runs]
    assert len(leaders) >= 4, leaders
    tokens = [run[1] for run in tracker.runs]
    assert tokens == sorted(set(tokens))
    for (_, _, _, end), (_, _, start, _) in itertools.pairwise(tracker.runs):
        assert end is not None and end <= start


async def test_fn_is_cancelled_at_once_on_loss_and_restarts_after_retry_interval(
    world: World,
) -> None:
    """On loss fn is cancelled (no grace); the runner competes again only after fn exited
    and retry_interval passed."""
    backend = world.backend()
    tracker = Tracker()
    lease = world.lease("a")
    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(
                run_singleton, lease, tracker.fn("a"), retry_interval=3.0, stop_grace=60.0
            )
        )
        await anyio.sleep(1)
        current = await backend.get("job")
        assert current is not None
        stolen = await backend.update(
            LeaseRecord(
                name="job",
                holder="thief_1",
                fencing_token=current.fencing_token + 1,
                lease_duration=1.0,
            ),
            current.version,
        )
        await anyio.sleep(world.settings.heartbeat_interval + 0.5)
        assert tracker.runs[0][3] is not None  # cancelled at the next renewal, not after grace
        lost_at = tracker.runs[0][3]
        await backend.update(
            LeaseRecord(name="job", fencing_token=stolen.fencing_token), stolen.version
        )
        await anyio.sleep(10)
        tg.cancel_scope.cancel()
    assert len(tracker.runs) == 2
    assert tracker.runs[1][2] - lost_at >= 3.0 * 0.8


async def test_graceful_stop_sets_stopping_then_cancels_after_grace(world: World) -> None:
    """Leaving the runner's scope sets ctx.stopping; a fn that ignores it is cancelled after
    stop_grace; renewals continue meanwhile; then the lease is released."""
    backend = world.backend()
    events: list[tuple[str, float]] = []

    async def stubborn(ctx: SingletonContext) -> None:
        try:
            await ctx.stopping.wait()
            events.append(("stopping", anyio.current_time()))
            await anyio.sleep_forever()
        finally:
            events.append(("exit", anyio.current_time()))

    lease = world.lease("a")
    with anyio.move_on_after(5):
        await run_singleton(lease, stubborn, stop_grace=30)  # longer than the timeout L
    assert [e[0] for e in events] == ["stopping", "exit"]
    assert events[1][1] - events[0][1] == pytest.approx(30)
    record = await backend.get("job")
    assert record is not None and record.holder == ""  # never lost during the 30 s grace


async def test_fn_returning_releases_and_competes_again_or_stops(world: World) -> None:
    """When fn returns, the lease is released; the runner runs it again after
    retry_interval, or returns with stop_when_done."""
    runs: list[float] = []

    async def short(ctx: SingletonContext) -> None:
        runs.append(anyio.current_time())
        await anyio.sleep(1)

    lease = world.lease("a")
    await run_singleton(lease, short, stop_when_done=True)
    assert len(runs) == 1
    with anyio.move_on_after(20):
        await run_singleton(lease, short, retry_interval=4)
    assert len(runs) >= 4
    gaps = [b - a for a, b in itertools.pairwise(runs[1:])]
    assert all(gap >= 1 + 4 * 0.8 for gap in gaps)


async def test_fn_error_propagates_after_release(world: World) -> None:
    """An exception from fn leaves the runner as itself, after the lease is released."""
    backend = world.backend()

    async def broken(ctx: SingletonContext) -> None:
        raise RuntimeError("job failed")

    with pytest.raises(RuntimeError, match="job failed"):
        await run_singleton(world.lease("a"), broken)
    record = await backend.get("job")
    assert record is not None and record.holder == ""


async def test_started_fires_at_first_acquisition_and_states_are_reported(world: World) -> None:
    """task_status.started() fires once the lease is held; states() reports following whom,
    leading with the token, stopping, stopped."""
    a = world.lease("a")
    other = world.lease("b")
    tracker = Tracker()
    singleton = Singleton(a, tracker.fn("a"), stop_grace=5)
    seen: list[SingletonState] = []

    async def watch() -> None:
        async for state in singleton.states():
            seen.append(state)

    following: list[SingletonState] = []

    async def hold_then_release() -> None:
        async with other.held():
            await anyio.sleep(3)
            following.append(singleton.state)

    async with anyio.create_task_group() as outer:
        outer.start_soon(watch)
        outer.start_soon(hold_then_release)
        await anyio.sleep(0.1)  # b holds first
        async with anyio.create_task_group() as tg:
            grant = await tg.start(singleton.run)  # returns at the first acquisition
            assert anyio.current_time() >= 3
            await anyio.sleep(0.01)
            assert tracker.runs[0][1] == grant.fencing_token
            assert singleton.state == Leading(grant.fencing_token)
            tg.cancel_scope.cancel()
    assert following == [Following(other.identity)]
    assert Following(other.identity) in seen
    tail = [state for state in seen if not isinstance(state, Following)]
    assert tail == [Leading(grant.fencing_token), Stopping(grant.fencing_token), Stopped()]


async def test_health_check_reports_a_leader_past_its_deadline(world: World) -> None:
    """healthy() is False while the runner believes it leads but its deadline has passed
    (fn ignores cancellation during a partition)."""
    partitioned = FaultyBackend(world.backend())
    report: list[bool] = []

    async def deaf(ctx: SingletonContext) -> None:
        with anyio.CancelScope(shield=True):
            partitioned.pause()
            await anyio.sleep(world.settings.deadline + 1)
            report.append(singleton.healthy())

    singleton = Singleton(world.lease("a", backend=partitioned), deaf)
    with anyio.move_on_after(world.settings.heartbeat_timeout):
        assert singleton.healthy()
        await singleton.run()
    assert report == [False]


@pytest.mark.parametrize(
    ("option", "value"),
    [("retry_interval", -1.0), ("retry_interval", float("nan")), ("stop_grace", float("nan"))],
)
async def test_durations_that_are_not_seconds_at_least_zero_are_refused(
    world: World, option: str, value: float
) -> None:
    """run_singleton(retry_interval=NaN) and other negative/NaN durations: LeaseConfigError."""

    async def fn(ctx: SingletonContext) -> None:
        raise AssertionError("never run")

    options: dict[str, Any] = {option: value}
    with pytest.raises(LeaseConfigError, match=rf"run_singleton\({option}=\.\.\.\).*>= 0"):
        await run_singleton(world.lease("a"), fn, **options)
