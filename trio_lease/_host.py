"""The host task group: heartbeats of ``acquire()`` outlive the call that started them.

``Lease.acquire()`` (and a :class:`LeaseProvider`'s leases) start their heartbeat in a task group
opened by ``async with lease.host():`` (or ``async with provider:``). Such a task group spans
``__aenter__`` and ``__aexit__``, so it is opened by hand on an :class:`AsyncExitStack`
(:func:`open_host`) and closed by :func:`close_host`, which first ends the hosted holds, then lets
one error out bare instead of wrapped in an ``ExceptionGroup`` (docs/design.md §4.5). The CLI uses
:func:`reraise` and :func:`sole_error` for the same unwrapping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import NoReturn

import anyio
from anyio.abc import TaskGroup

__all__ = ["close_host", "open_host", "reraise", "sole_error"]


async def open_host() -> tuple[AsyncExitStack, TaskGroup]:
    """Open a task group by hand, to host heartbeats between ``__aenter__`` and ``__aexit__``."""
    stack = AsyncExitStack()
    return stack, await stack.enter_async_context(anyio.create_task_group())


async def close_host(
    stack: AsyncExitStack | None,
    cleanup: Callable[[], Awaitable[None]],
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> bool | None:
    """Run ``cleanup`` (ending the hosted holds), then exit the task group from open_host."""
    try:
        await cleanup()
    except BaseException:
        if stack is not None:
            await stack.aclose()  # not shielded: exits the task group, cancelling its tasks
        raise
    if stack is None:
        return None
    try:
        return await stack.__aexit__(exc_type, exc, tb)
    except BaseExceptionGroup as group:
        # The task group wraps the body's own exception (anyio does, on both loops): one error
        # comes out bare, the body's own unchanged (docs/design.md §4.5).
        single = sole_error(group)
        if single is None:
            raise
        reraise(single)


def reraise(exc: BaseException) -> NoReturn:
    """Raise ``exc`` (taken out of a group) with its own ``__cause__``/``__context__`` kept."""
    chain = exc.__cause__, exc.__context__, exc.__suppress_context__
    try:
        raise exc
    finally:
        exc.__cause__, exc.__context__, exc.__suppress_context__ = chain


def sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside ``group`` (nested groups included), or None if there are more."""
    found: BaseException | None = None
    for inner in group.exceptions:
        leaf = sole_error(inner) if isinstance(inner, BaseExceptionGroup) else inner
        if leaf is None or found is not None:
            return None
        found = leaf
    return found
