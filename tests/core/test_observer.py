"""Observers: each step of a lease's life told once, from one place."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import trio_lease._observer as observer_module
from tests._observed import fail_until_lost, lose, takeover, wait_behind_a_holder
from trio_lease import (
    Lease,
    LeaseInfo,
    LeaseObserver,
    LeaseProvider,
    add_observer,
    remove_observer,
)
from trio_lease.backends.memory import MemoryBackend, MemoryStore

from ._recorder import Recorder
from .conftest import SETTINGS

pytestmark = pytest.mark.anyio


@pytest.fixture
def everywhere() -> Iterator[Recorder]:
    """A process-wide observer, removed after the test."""
    recorder = Recorder()
    add_observer(recorder)
    yield recorder
    remove_observer(recorder)


async def test_a_held_scope_tells_acquired_renewed_released_in_order() -> None:
    """acquired (token, waited 0), one renewed per heartbeat (latency, valid_for), released."""
    recorder = Recorder()
    lease = Lease("job", "me", MemoryBackend(), SETTINGS, observers=[recorder])
    async with lease.held() as grant:
        await anyio.sleep(SETTINGS.heartbeat_interval * 3 + 0.1)
    steps = recorder.steps()
    assert steps[0] == "acquired" and steps[-1] == "released"
    assert steps[1:-1] == ["renewed"] * 3
    assert recorder.details("acquired") == [
        {"fencing_token": grant.fencing_token, "waited": 0.0, "valid_for": SETTINGS.deadline}
    ]
    for renewed in recorder.details("renewed"):
        assert renewed["latency"] >= 0
        assert renewed["valid_for"] == pytest.approx(SETTINGS.deadline, abs=0.05)
    (released,) = recorder.details("released")
    assert released["written"] is True
    assert released["held"] == pytest.approx(SETTINGS.heartbeat_interval * 3 + 0.1, abs=0.05)


async def test_a_waiting_contender_tells_who_holds_and_how_long_it_waited() -> None:
    """waiting (holder, expires_in) while another holds; acquired with the time waited."""
    recorder = Recorder()
    holder, _ = await wait_behind_a_holder(recorder)
    waiting = recorder.details("waiting")
    assert waiting and all(w["holder"] == holder.identity for w in waiting)
    assert all(0 < w["expires_in"] <= SETTINGS.heartbeat_timeout for w in waiting)
    (acquired,) = recorder.details("acquired")
    assert acquired["waited"] == pytest.approx(3.9, abs=0.1)


async def test_a_takeover_tells_lost_with_its_cause_and_no_release(everywhere: Recorder) -> None:
    """A foreign takeover: lost (cause names the new holder), never released."""
    await lose(Lease("job", "me", MemoryBackend(), SETTINGS), takeover)
    assert everywhere.steps()[0] == "acquired"
    assert "released" not in everywhere.steps()
    (lost,) = everywhere.details("lost")
    assert "intruder" in lost["cause"]


async def test_failing_renewals_are_told_with_time_left_before_the_loss() -> None:
    """A store that stops answering: renewal_failed with shrinking time_left, then lost."""
    recorder = Recorder()
    await fail_until_lost(recorder)
    failed = recorder.details("renewal_failed")
    assert len(failed) >= 2
    left = [f["time_left"] for f in failed]
    assert left == sorted(left, reverse=True) and left[-1] >= 0
    assert recorder.steps()[-1] == "lost"


async def test_an_observer_that_raises_is_logged_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broken observer: the lease is held, renewed and released as without it."""

    class Broken(LeaseObserver):
        def renewed(self, lease: LeaseInfo, **details: Any) -> None:
            raise RuntimeError("observer bug")

    recorder = Recorder()
    lease = Lease("job", "me", MemoryBackend(), SETTINGS, observers=[Broken(), recorder])
    async with lease.held():
        await anyio.sleep(SETTINGS.heartbeat_interval * 2 + 0.1)
    assert recorder.steps() == ["acquired", "renewed", "renewed", "released"]
    assert "observer bug" in caplog.text


async def test_no_observer_means_no_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without observers the core never calls notify (zero cost beyond one truth test)."""

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("notify called without observers")

    for module in ("trio_lease._heartbeat", "trio_lease._waiting", "trio_lease._observer"):
        monkeypatch.setattr(f"{module}.notify", fail)
    store = MemoryStore()
    lease = Lease("job", "me", MemoryBackend(store), SETTINGS)
    other = Lease("job", "other", MemoryBackend(store), SETTINGS)
    async with lease.held():
        await anyio.sleep(SETTINGS.heartbeat_interval * 2)
        with anyio.move_on_after(2):
            async with other.held():
                pass


async def test_a_reentrant_hold_is_not_a_new_grant() -> None:
    """A second scope of the same owner shares the grant: one acquired, one released."""
    recorder = Recorder()
    backend = MemoryBackend()
    first = Lease("job", "me", backend, SETTINGS, observers=[recorder])
    second = Lease("job", "me", backend, SETTINGS, observers=[recorder])
    async with first.held(), second.held():
        pass
    assert recorder.steps() == ["acquired", "released"]


def test_observers_must_be_lease_observers() -> None:
    """A wrong object is refused where it is given, with a TypeError naming it."""
    with pytest.raises(TypeError, match="LeaseObserver"):
        Lease("job", "me", MemoryBackend(), SETTINGS, observers=[object()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="LeaseObserver"):
        add_observer(print)  # type: ignore[arg-type]
    assert observer_module._everywhere == []


async def test_a_provider_gives_its_observers_to_every_lease() -> None:
    """LeaseProvider(observers=...) observes each lease it loads."""
    recorder = Recorder()
    config = {"memory": {"lease-class": "memory"}}
    async with LeaseProvider(config, observers=[recorder]) as provider:
        lease = provider.get_lease("job", "memory", "me")
        async with lease.held():
            pass
    assert recorder.steps() == ["acquired", "released"]
