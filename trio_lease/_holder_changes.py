"""``Lease.watch_holder()``: the holder identity now and whenever it changes, as a stream.

A :class:`~trio_lease._streams.Changes` (an async context manager handing out a receive
stream), so the backend's watch, its task group and its timers run in a task of their own and
never around the caller's loop body::

    async with lease.watch_holder() as holders:
        async for holder in holders:
            ...
"""

from __future__ import annotations

import functools
import logging
from typing import Protocol

import anyio

from ._abc import LeaseRecord
from ._exceptions import BackendUnavailable
from ._state import LeaseState
from ._streams import Changes, Emit

__all__ = ["holder_changes"]

logger = logging.getLogger("trio_lease")


class Reader(Protocol):
    """What this needs of a lease's reader: the holder as last read, a read, the watch."""

    def holder(self) -> str | None: ...
    async def read(self) -> LeaseRecord | None: ...
    def watch_records(self) -> Changes[LeaseRecord | None]: ...


def holder_changes(reader: Reader, state: LeaseState) -> Changes[str | None]:
    """The stream of the lease's holder identity (None when free); see the module docstring."""
    return Changes(functools.partial(_follow, reader, state), what="Lease.watch_holder()")


async def _follow(reader: Reader, state: LeaseState, emit: Emit[str | None]) -> None:
    """Uses the backend's watch when it has one, else reads every ``wait_interval``."""
    last: object = object()
    if state.backend.supports_watch:
        async with reader.watch_records() as records:
            async for record in records:
                state.observe(record)
                if reader.holder() != last:
                    last = reader.holder()
                    await emit(reader.holder())
        return
    while True:
        try:
            await reader.read()
        except BackendUnavailable as exc:
            logger.info("lease %r: reading the holder failed: %s", state.name, exc)
        else:
            if reader.holder() != last:
                last = reader.holder()
                await emit(reader.holder())
        await anyio.sleep(state.settings.wait_interval)
