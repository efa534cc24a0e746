"""The watch SPI: ``backend.watch(name)`` is an async context manager handing out a receive
stream; an async generator ``watch`` (the form of older versions) keeps working through the
core's adapter, and anything else is a typed error. Streams own their task: an error of the
producer ends the stream and is raised bare from the ``async with``."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from trio_lease import BackendProtocolError, BackendUnavailable, Lease, LeaseRecord, LeaseSettings
from trio_lease.abc import Changes, Emit
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend, check_backend

pytestmark = pytest.mark.anyio

SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)


class OldStyleWatch(MemoryBackend):
    """A backend written against the async-generator SPI: its yields stand inside a scope."""

    async def watch(self, name: str) -> AsyncIterator[LeaseRecord | None]:  # type: ignore[override]
        while True:
            changed = self.store.changed(name)
            with anyio.CancelScope():  # the pattern that breaks a caller's scopes if run inline
                yield self.store.records.get(name)
            await changed.wait()


class ReturnsAList(MemoryBackend):
    def watch(self, name: str) -> Any:
        return [None]


async def test_an_old_style_watch_keeps_working_through_the_adapter() -> None:
    """An async generator watch runs in the stream's own task: holders are seen, the
    caller's own timeout leaves cleanly, and the stream still works as the shared watch."""
    backend = OldStyleWatch(MemoryStore())
    writer = Lease("job", "writer", backend, SETTINGS)
    watcher = Lease("job", "watcher", backend, SETTINGS)
    seen: list[str | None] = []

    async def watch() -> None:
        with anyio.move_on_after(5):
            async with watcher.watch_holder() as holders:
                async for holder in holders:
                    seen.append(holder)
                    await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await anyio.sleep(0.5)
        async with writer.held():
            await anyio.sleep(1)
    assert seen == [None, writer.identity, None]
    await check_backend(lambda: OldStyleWatch(backend.store))


async def test_a_watch_returning_neither_form_is_a_protocol_error() -> None:
    """watch() returning something that is neither a context manager nor an async iterator
    raises BackendProtocolError naming what it returned and what it must return."""
    lease = Lease("job", "me", ReturnsAList(), SETTINGS)
    with pytest.raises(BackendProtocolError, match=r"returned list; it must return an async"):
        async with lease.watch_holder() as holders:
            async for _ in holders:
                pytest.fail("a holder from a broken watch")


async def test_iterating_a_stream_without_async_with_says_how_to_use_it() -> None:
    """`async for` over backend.watch() or watch_holder() directly is a TypeError that shows
    the `async with … as …: async for …` form."""
    backend = MemoryBackend()
    lease = Lease("job", "me", backend, SETTINGS)
    for changes in (backend.watch("job"), lease.watch_holder()):
        with pytest.raises(TypeError, match=r"async with .* as items: async for item in items"):
            async for _ in changes:
                pytest.fail("iterated")


async def test_a_producer_error_ends_the_stream_then_is_raised_bare() -> None:
    """Items before a producer's error all reach the caller (nothing is cancelled), then the
    error is raised from the `async with` by itself, not inside an ExceptionGroup."""

    async def produce(emit: Emit[int]) -> None:
        for i in range(3):
            await emit(i)
        raise BackendUnavailable("the stream broke")

    got: list[int] = []
    with pytest.raises(BackendUnavailable, match="the stream broke") as caught:
        async with Changes(produce) as items:
            async for item in items:
                await anyio.sleep(0.1)  # a slow body is not cancelled by the failure
                got.append(item)
    assert got == [0, 1, 2]
    assert not isinstance(caught.value, BaseExceptionGroup)


async def test_leaving_the_block_stops_the_producer_and_runs_its_cleanup() -> None:
    """A break out of the loop cancels the producer, whose cleanup has run when `async with`
    returns; the caller's own error leaves the block bare."""
    cleaned: list[bool] = []

    async def produce(emit: Emit[int]) -> None:
        try:
            for i in range(100):
                await emit(i)
        finally:
            cleaned.append(True)

    async with Changes(produce) as items:
        async for item in items:
            if item == 2:
                break
    assert cleaned == [True]
    with pytest.raises(KeyError):
        async with Changes(produce) as items:
            async for _ in items:
                raise KeyError("mine")
    assert cleaned == [True, True]


async def test_a_faulty_backend_watch_is_a_stream_too() -> None:
    """testing.FaultyBackend's watch hands out a stream of the inner backend's states."""
    inner = MemoryBackend()
    record = await inner.create(LeaseRecord("job", holder="a"))
    faulty = FaultyBackend(inner)
    async with faulty.watch("job") as states:
        first = await states.receive()
        await inner.update(dataclasses.replace(record, holder="b"), record.version)
        second = await states.receive()
    assert first is not None and first.holder == "a"
    assert second is not None and second.holder == "b"
    assert faulty.calls["watch"] == 1


async def test_a_producer_task_groups_single_error_leaves_bare() -> None:
    """A producer whose own task group fails with one error: that error leaves the `async
    with` by itself, not inside the producer's ExceptionGroup."""

    async def fail() -> None:
        raise BackendUnavailable("a child of the producer failed")

    async def produce(emit: Emit[int]) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(fail)
            await emit(1)
            await anyio.sleep_forever()

    with pytest.raises(BackendUnavailable, match="a child of the producer") as caught:
        async with Changes(produce) as items:
            async for _ in items:
                pass
    assert not isinstance(caught.value, BaseExceptionGroup)
