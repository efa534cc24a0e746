"""The seam's ``effective_deadline`` and ``checkpoint_if_cancelled`` against anyio's own.

On asyncio the seam reads anyio's cancel scopes directly (``trio_lease._loops._asyncio``); on
trio it is trio's own. Either way it must answer as :func:`anyio.current_effective_deadline`
and :func:`anyio.lowlevel.checkpoint_if_cancelled` do, in every arrangement of scopes: nested
deadlines, a shield between a cancelled scope and the task, a cancelled scope inside a shield,
a write bound, and a task anyio does not know.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from contextlib import ExitStack

import anyio
import anyio.lowlevel
import pytest

from trio_lease._loops import current

pytestmark = pytest.mark.anyio

#: Arrangements of scopes, outermost first: (deadline ahead in seconds or None, shielded,
#: cancelled before the check).
ARRANGEMENTS: dict[str, list[tuple[float | None, bool, bool]]] = {
    "none": [],
    "one deadline": [(5.0, False, False)],
    "nested, the inner nearer": [(9.0, False, False), (None, False, False), (2.0, False, False)],
    "nested, the outer nearer": [(2.0, False, False), (9.0, False, False)],
    "a shield hides the outer deadline": [(1.0, False, False), (None, True, False),
                                          (7.0, False, False)],
    "a shielded scope's own deadline counts": [(1.0, False, False), (4.0, True, False)],
    "an outer scope cancelled": [(None, False, True), (None, False, False)],
    "an inner scope cancelled": [(3.0, False, False), (None, False, True)],
    "a shield hides an outer cancellation": [(None, False, True), (None, True, False),
                                             (6.0, False, False)],
    "a cancelled scope inside a shield": [(None, True, False), (None, False, True)],
    "five deep, the middle nearest": [(8.0, False, False), (7.0, False, False),
                                      (2.5, False, False), (None, False, False),
                                      (9.0, False, False)],
}


def _enter(stack: ExitStack, arrangement: list[tuple[float | None, bool, bool]]) -> None:
    now = anyio.current_time()
    for ahead, shield, cancelled in arrangement:
        scope = stack.enter_context(anyio.CancelScope(shield=shield))
        if ahead is not None:
            scope.deadline = now + ahead
        if cancelled:
            scope.cancel()


@pytest.mark.parametrize("name", ARRANGEMENTS)
async def test_the_effective_deadline_is_anyios_in_every_arrangement(name: str) -> None:
    with ExitStack() as stack:
        _enter(stack, ARRANGEMENTS[name])
        theirs = anyio.current_effective_deadline()
        ours = current().effective_deadline()
    assert ours == theirs
    if "cancelled" in name:
        assert ours == -math.inf  # a walk that never read the cancellation would pass else


async def _cancelled_by(check: Callable[[], object], name: str) -> bool:
    """Whether awaiting ``check()`` inside the arrangement delivers a cancellation."""
    reached = False
    with ExitStack() as stack:
        _enter(stack, ARRANGEMENTS[name])  # a cancelled scope catches its own cancellation
        await check()  # type: ignore[misc]
        reached = True
    return not reached


@pytest.mark.parametrize("name", ARRANGEMENTS)
async def test_the_checkpoint_delivers_a_cancellation_exactly_when_anyios_does(
    name: str,
) -> None:
    theirs = await _cancelled_by(anyio.lowlevel.checkpoint_if_cancelled, name)
    ours = await _cancelled_by(current().checkpoint_if_cancelled, name)
    assert ours == theirs
    assert ours == ("cancelled" in name)  # a cancelled scope before any shield, or none


async def test_a_checkpoint_with_nothing_cancelled_does_not_let_another_task_run() -> None:
    """Nothing cancelled: the checkpoint is done at once, as anyio's is (no yield to the loop:
    a task started just before has not run when it returns)."""
    ran: list[bool] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(ran))
        with anyio.CancelScope(deadline=anyio.current_time() + 10):
            for _ in range(3):  # the awaitable done at once is shared: awaited again and again
                await current().checkpoint_if_cancelled()
            assert ran == []
    assert ran == [True]


async def _append(ran: list[bool]) -> None:
    ran.append(True)


async def test_the_write_bound_is_the_deadline_read() -> None:
    with anyio.CancelScope() as scope:
        bound = current().write_bound(scope)
        bound.set(anyio.current_time() + 3.0)
        assert current().effective_deadline() == anyio.current_effective_deadline()
        assert current().effective_deadline() == pytest.approx(anyio.current_time() + 3.0)
        bound.clear()
        assert current().effective_deadline() == anyio.current_effective_deadline() == math.inf
        await anyio.sleep(5.0)  # past the cleared bound: nothing cancelled
    assert not scope.cancelled_caught


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_anyio_does_not_know_reads_as_anyio_says() -> None:
    """A bare asyncio task (no anyio scope state): no deadline, and no checkpoint needed."""

    async def bare() -> tuple[float, float]:
        await current().checkpoint_if_cancelled()
        return current().effective_deadline(), anyio.current_effective_deadline()

    ours, theirs = await asyncio.get_running_loop().create_task(bare())
    assert ours == theirs == math.inf
