"""The cases of the no-error-lost matrix: one entry point, one way of leaving it, checked.

:func:`run_case` drives an entry point (tests/core/_entry_points.py) through one scenario and
asserts the exact exception the caller sees (type, identity, never a group), that no task,
thread or file descriptor (socket, connection) is left behind, and that what the entry point
held is free for another owner within the documented time: at once after a release, within
about L after a holder that could not release (its store was cut off).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from tests._chained import chain
from trio_lease import BackendUnavailable, LeaseBusy, LeaseLost

from ._entry_points import ENTRIES, Ctx, Entry

#: How the caller's body, or the caller, leaves the entry point.
SCENARIOS = {
    "deadline": "the caller's deadline passes, then the body raises (no checkpoint between)",
    "cancelled": "the body cancels the caller's scope, then raises (no checkpoint between)",
    "cancel_during_acquire": "another owner holds it; the caller's deadline ends the wait",
    "early_exit": "the body returns at once (break / return)",
    "outer_cancel": "a task group around the entry point is cancelled while the body waits",
    "loss": "the store is cut off during the body: the lease is lost",
    "loss_and_body_error": "the lease is lost and the body's cleanup raises its own error",
}


class Boom(Exception):
    """The body's own error."""


class StoreStalled(Exception):
    """A real store answered no request within the lease operation timeout before the case's
    body ran, so the entry point never reached what the case checks (the suite reruns it:
    tests/conftest.py ``STALLED``)."""


#: What a store request that outlived the lease operation timeout says.
_TIMED_OUT = "took longer than the lease operation timeout"


def cases(entries: list[Entry] = ENTRIES) -> list[object]:
    """Every entry point with every scenario it has (losses only where a lease is held)."""
    return [
        pytest.param(entry, scenario, id=f"{entry.name}-{scenario}")
        for entry in entries
        for scenario in SCENARIOS
        if not (scenario.startswith("loss") and entry.raises_loss is None)
    ]


def _threads() -> list[str]:
    """Threads other than the pools' idle workers (anyio's worker threads, asyncio's default
    executor for name lookups, trio's thread cache), which outlive any one call by design."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if type(t).__name__ != "WorkerThread" and not t.name.startswith(("asyncio_", "Trio thread"))
    )


def open_fds() -> int:
    """File descriptors this process has open (sockets and connections among them)."""
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


async def _pause(rng: random.Random | None) -> None:
    if rng is not None:
        await anyio.sleep(rng.uniform(0, 0.02))


async def run_case(
    entry: Entry, scenario: str, ctx: Ctx, rng: random.Random | None = None, *, own: bool = True
) -> None:
    """Run ``scenario`` on ``entry``; assert what leaves, what is left, and what is free.

    ``own``: every task and socket of the loop is the case's (an in-process store), so none
    may remain after the case; on a real store the clients' pooled connections (and a served
    emulator's tasks for them) stay until the clients close, and the caller checks then.
    """
    settings = ctx.world.settings
    L = settings.heartbeat_timeout
    tasks, threads = len(anyio.get_running_tasks()), _threads()
    fds = open_fds()
    boom = Boom("the body's own error")
    ran = anyio.Event()
    lost = scenario.startswith("loss")

    async def raise_after(action: Callable[[], None]) -> None:
        ran.set()
        await _pause(rng)
        action()  # the caller's scope is cancelled or its deadline has passed: no checkpoint
        raise boom

    async def wait() -> None:
        ran.set()
        await anyio.sleep_forever()

    caught: BaseException | None = None
    try:
        if scenario == "deadline":
            with anyio.fail_after(L) as scope:

                def expire() -> None:
                    scope.deadline = anyio.current_time()

                await entry.drive(ctx, lambda: raise_after(expire))
        elif scenario == "cancelled":
            with anyio.CancelScope() as scope:
                await entry.drive(ctx, lambda: raise_after(scope.cancel))
        elif scenario == "cancel_during_acquire":
            await _while_held_by_another(entry, ctx, wait, rng)
        elif scenario == "early_exit":

            async def leave() -> None:
                ran.set()
                await _pause(rng)

            await entry.drive(ctx, leave)
        elif scenario == "outer_cancel":

            async def drive() -> None:
                await entry.drive(ctx, wait)

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                await ran.wait()
                await _pause(rng)
                tg.cancel_scope.cancel()
        elif scenario == "loss":
            with anyio.move_on_after(4 * L):

                async def cut_off() -> None:
                    ran.set()
                    ctx.backend.pause()
                    await anyio.sleep(2 * L)

                await entry.drive(ctx, cut_off)
        elif scenario == "loss_and_body_error":
            with anyio.move_on_after(4 * L):

                async def cut_off_and_fail() -> None:
                    ran.set()
                    ctx.backend.pause()
                    try:
                        await anyio.sleep(2 * L)
                    finally:
                        raise boom  # the body's cleanup fails: the point of the case

                await entry.drive(ctx, cut_off_and_fail)
        else:  # pragma: no cover
            raise AssertionError(scenario)
    except BaseException as exc:  # the exception the caller sees, checked below
        caught = exc
    finally:
        ctx.backend.resume()

    stalled = isinstance(caught, BackendUnavailable) and _TIMED_OUT in str(caught)
    if stalled and not own and not ran.is_set():
        raise StoreStalled(f"no answer before the body ran: {caught}") from caught
    _check_caught(entry, scenario, caught, boom)
    await anyio.lowlevel.checkpoint()
    if own:
        assert len(anyio.get_running_tasks()) == tasks, "a task outlived the entry point"
        assert open_fds() == fds, "a socket outlived the entry point"
    assert _threads() == threads, f"a thread outlived the entry point: {_threads()}"
    if entry.probe is not None:
        await _check_free(entry, ctx, after_loss=lost and entry.raises_loss is not None)


def _check_caught(entry: Entry, scenario: str, caught: BaseException | None, boom: Boom) -> None:
    """The exact exception the caller sees."""
    if scenario in ("deadline", "cancelled") or (
        scenario == "loss_and_body_error" and entry.raises_loss is not None
    ):
        assert caught is boom, f"expected the body's own Boom, bare; the caller saw {caught!r}"
        if scenario == "loss_and_body_error" and entry.raises_loss:
            assert _mentions_loss(boom), "the loss at the same time was dropped"
        return
    if scenario == "cancel_during_acquire" and entry.busy_raises and entry.probe is not None:
        assert type(caught) is LeaseBusy, f"expected a bare LeaseBusy, got {caught!r}"
        return
    if scenario == "loss" and entry.raises_loss:
        assert type(caught) is LeaseLost, f"expected a bare LeaseLost, got {caught!r}"
        return
    assert caught is None, f"expected nothing raised, got {caught!r}"


def _mentions_loss(exc: BaseException) -> bool:
    """Whether a LeaseLost is chained to ``exc`` (context, cause) or named in its notes."""
    return any(
        isinstance(current, LeaseLost)
        or any("LeaseLost" in note for note in getattr(current, "__notes__", ()))
        for current in chain(exc, groups=False)
    )


async def _while_held_by_another(
    entry: Entry, ctx: Ctx, body: Callable[[], Awaitable[None]], rng: random.Random | None
) -> None:
    """Run the entry point while another owner holds what it would take; the caller's
    deadline (L / 3) ends its wait."""
    L = ctx.world.settings.heartbeat_timeout
    ran = False

    async def mark() -> None:
        nonlocal ran
        ran = True
        await body()

    if entry.probe is None:
        with anyio.move_on_after(L / 3) as scope:
            await entry.drive(ctx, mark)
        assert scope.cancelled_caught
        return
    other = ctx.world.backend()
    async with entry.probe(ctx, "other", other):
        await _pause(rng)
        with anyio.move_on_after(L / 3) as scope:
            await entry.drive(ctx, mark)
        assert not ran, "the body ran while another owner held the lease"
        if not entry.busy_raises:
            assert scope.cancelled_caught


async def _check_free(entry: Entry, ctx: Ctx, *, after_loss: bool) -> None:
    """Another owner gets what the entry point held: at once after a release, within about L
    (the contender's own countdown, docs/design.md §4.1) after a holder that was cut off."""
    assert entry.probe is not None
    s = ctx.world.settings
    bound = (1.1 * s.heartbeat_timeout if after_loss else 0.0) + 2 * s.lease_operation_timeout
    bound += ctx.world.tolerance
    start = anyio.current_time()
    with anyio.fail_after(bound + 1e-6):
        async with entry.probe(ctx, "next", ctx.world.backend()):
            pass
    took = anyio.current_time() - start
    assert took <= bound, f"free after {took:.3f} s, documented bound {bound:.3f} s"
