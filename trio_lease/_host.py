"""The host task group: heartbeats of ``acquire()`` outlive the call that started them.

``Lease.acquire()`` (and a :class:`LeaseProvider`'s leases) start their heartbeat in a task group
opened by ``async with lease.host():`` (or ``async with provider:``). Such a task group spans
``__aenter__`` and ``__aexit__``, so it is opened by hand on an :class:`AsyncExitStack`
(:func:`open_host`) and closed by :func:`close_host`, which first ends the hosted holds, then lets
one error out bare instead of wrapped in an ``ExceptionGroup`` (docs/design.md §4.5), by the rule
of :mod:`._outcome`. The CLI uses :func:`reraise` and :func:`sole_error` for the same unwrapping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import anyio
from anyio.abc import TaskGroup

from ._outcome import ExcInfo, Outcome, reraise, sole_error

__all__ = ["close_host", "open_host", "reraise", "sole_error"]


async def open_host() -> tuple[AsyncExitStack, TaskGroup]:
    """Open a task group by hand, to host heartbeats between ``__aenter__`` and ``__aexit__``."""
    stack = AsyncExitStack()
    return stack, await stack.enter_async_context(anyio.create_task_group())


async def close_host(
    stack: AsyncExitStack | None,
    cleanup: Callable[[], Awaitable[None]],
    *exc_info: *ExcInfo,
) -> bool | None:
    """Run ``cleanup`` (ending the hosted holds), then exit the task group from open_host.

    What leaves is settled by :class:`~._outcome.Outcome`: the body's own exception bare (the
    task group wraps it, on both loops, with the caller's cancellation on trio), a library
    error bare, a cancellation unchanged (docs/design.md §4.5).
    """
    outcome = Outcome()
    outcome.given(exc_info[1])
    with outcome.settled():
        try:
            await cleanup()
        except BaseException:
            if stack is not None:
                await stack.aclose()  # not shielded: exits the task group, cancelling its tasks
            raise
        if stack is None:
            return None
        return await stack.__aexit__(*exc_info)
