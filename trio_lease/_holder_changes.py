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

from ._abc import LeaseBackend, LeaseRecord
from ._exceptions import BackendUnavailable
from ._settings import LeaseSettings
from ._streams import Changes, Emit

__all__ = ["holder_changes"]

logger = logging.getLogger("trio_lease")


class Reader(Protocol):
    """What this needs of a lease: its record as last read, and the reads that update it."""

    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> LeaseBackend: ...
    @property
    def settings(self) -> LeaseSettings: ...
    def holder(self) -> str | None: ...
    def _observe(self, record: LeaseRecord | None) -> None: ...
    async def _read(self) -> LeaseRecord | None: ...
    def _watch_records(self) -> Changes[LeaseRecord | None]: ...


def holder_changes(lease: Reader) -> Changes[str | None]:
    """The stream of ``lease``'s holder identity (None when free); see the module docstring."""
    return Changes(functools.partial(_follow, lease), what="Lease.watch_holder()")


async def _follow(lease: Reader, emit: Emit[str | None]) -> None:
    """Uses the backend's watch when it has one, else reads every ``wait_interval``."""
    last: object = object()
    if lease.backend.supports_watch:
        async with lease._watch_records() as records:
            async for record in records:
                lease._observe(record)
                if lease.holder() != last:
                    last = lease.holder()
                    await emit(lease.holder())
        return
    while True:
        try:
            await lease._read()
        except BackendUnavailable as exc:
            logger.info("lease %r: reading the holder failed: %s", lease.name, exc)
        else:
            if lease.holder() != last:
                last = lease.holder()
                await emit(lease.holder())
        await anyio.sleep(lease.settings.wait_interval)
