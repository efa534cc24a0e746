"""The bodies' scopes of a grant are cancelled at its deadline, which renewals move (§4.5).

``trio_lease._bodies`` on its own, on virtual time, the same tests on every per-loop keeper of
the deadline (``trio_lease._loops``): the loop's own (on asyncio one timer per grant, the
alarm, that reads the deadline when it fires; on trio scope deadlines) and scope deadlines on
every loop (what a holder with an injected clock gets). The grant-level tests
are ``test_g5_body_deadline_follows_renewals`` (tests/core/test_guarantees.py) and
tests/core/test_stall.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
import sniffio

from trio_lease import LeaseLost
from trio_lease._bodies import BodyScopes

from .conftest import World

pytestmark = pytest.mark.anyio


#: Whether the grant uses the loop's own keeper (``alarm=True``) or scope deadlines.
_LOOPS_OWN = [True]


@pytest.fixture(autouse=True, params=[True, False], ids=["loops-own-keeper", "scope-deadlines"])
def keeper(request: pytest.FixtureRequest) -> Any:
    """Every test here runs on the loop's own keeper and on scope deadlines."""
    _LOOPS_OWN[0] = request.param
    yield request.param
    _LOOPS_OWN[0] = True


class _Grant:
    """A deadline on the loop's clock, moved by hand."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.bodies = BodyScopes(lambda loop_now: self.deadline, alarm=_LOOPS_OWN[0])


async def _run_body(bodies: BodyScopes, times: dict[str, float]) -> anyio.CancelScope:
    scope = bodies.open()
    try:
        with scope:
            await anyio.sleep(1000)
    finally:
        times["ended"] = anyio.current_time()
        bodies.close(scope)
    return scope


async def test_a_body_is_cancelled_at_the_deadline() -> None:
    start = anyio.current_time()
    grant = _Grant(start + 5)
    times: dict[str, float] = {}
    scope = await _run_body(grant.bodies, times)
    assert scope.cancel_called
    assert times["ended"] - start == pytest.approx(5)


async def test_each_move_of_the_deadline_is_honoured(anyio_backend_name: str) -> None:
    start = anyio.current_time()
    grant = _Grant(start + 5)
    times: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_body, grant.bodies, times)
        for _ in range(4):  # renewals every second, each 5 s ahead
            await anyio.sleep(1)
            grant.deadline = anyio.current_time() + 5
            grant.bodies.moved()
    assert times["ended"] - start == pytest.approx(9)  # the last move's deadline, not an earlier
    if anyio_backend_name == "asyncio" and _LOOPS_OWN[0]:
        # One timer for the first deadline, one more when it fired and found the deadline moved:
        # not one per move.
        assert grant.bodies.alarms_set == 2


async def test_every_body_of_a_grant_is_cancelled() -> None:
    start = anyio.current_time()
    grant = _Grant(start + 3)
    first: dict[str, float] = {}
    second: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_body, grant.bodies, first)
        await anyio.sleep(1)
        tg.start_soon(_run_body, grant.bodies, second)
    assert first["ended"] - start == pytest.approx(3)
    assert second["ended"] - start == pytest.approx(3)
    assert not grant.bodies


async def test_a_body_that_left_is_not_cancelled_later() -> None:
    start = anyio.current_time()
    grant = _Grant(start + 2)
    scope = grant.bodies.open()
    with scope:
        await anyio.sleep(1)
    grant.bodies.close(scope)
    await anyio.sleep(5)
    assert not scope.cancel_called


async def test_a_body_opened_past_the_deadline_is_cancelled_at_once() -> None:
    grant = _Grant(anyio.current_time() - 1)
    start = anyio.current_time()
    times: dict[str, float] = {}
    scope = await _run_body(grant.bodies, times)
    assert scope.cancel_called
    assert times["ended"] == pytest.approx(start)


async def test_an_injected_clock_is_never_read_from_a_timer_callback(
    world: World, anyio_backend_name: str
) -> None:
    """A holder's injected clock may need a running task (``anyio.current_time()`` does, and a
    loop timer's callback runs outside any task): its bodies' scopes carry the deadline
    themselves, and the body is still cancelled at the deadline."""
    errors: list[dict[str, Any]] = []
    # As under asyncio.run(): anyio.run sets this variable, which lets anyio find the loop even
    # from a timer callback; an application started by asyncio itself has no such help.
    token = sniffio.current_async_library_cvar.set(None)
    try:
        if anyio_backend_name == "asyncio":
            asyncio.get_running_loop().set_exception_handler(
                lambda _loop, context: errors.append(context)
            )
        frozen = world.faulty()
        lease = world.lease("a", backend=frozen, clock=lambda: anyio.current_time())
        with pytest.raises(LeaseLost) as caught:
            async with lease.held() as grant:
                deadline = grant.deadline
                frozen.pause()  # no renewal is confirmed from here on
                await anyio.sleep(3 * world.settings.deadline)
    finally:
        sniffio.current_async_library_cvar.reset(token)
        if anyio_backend_name == "asyncio":
            asyncio.get_running_loop().set_exception_handler(None)
    assert "deadline" in caught.value.cause
    assert anyio.current_time() == pytest.approx(deadline, abs=0.01)
    assert errors == []
