"""Registries per event loop: two loops in two threads of one process never share one.

The grants a process holds (:data:`trio_lease._heartbeat.registry`) and the shared watch of each
backend object (:func:`trio_lease._shared_watch.shared_watch`) hold locks, events and tasks of
the loop that made them. Here trio runs in one thread and asyncio in another, at the same time,
each stepping through the same script; a barrier lines the two up between steps. The timeouts
only keep a broken run from hanging; nothing here measures time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable

import anyio
import anyio.to_thread
import trio

from trio_lease import Lease, LeaseSettings
from trio_lease._heartbeat import Holding, registry
from trio_lease._per_loop import PerLoop
from trio_lease._secrets import redact_sent, remember_sent
from trio_lease._shared_watch import shared_watch
from trio_lease.backends.memory import MemoryBackend, MemoryStore

#: How long a thread waits for the other at a step before the test fails instead of hanging.
HANG_GUARD = 30.0

Script = Callable[[str, Callable[[], Awaitable[None]]], Awaitable[object]]


def _run_side_by_side(script: Script) -> dict[str, object]:
    """Run ``script(loop_name, step)`` on trio and on asyncio in two threads at once.

    ``step()`` returns once both scripts reached it. Returns each script's result by loop.
    """
    barrier = threading.Barrier(2, timeout=HANG_GUARD)
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    async def step() -> None:
        await anyio.to_thread.run_sync(barrier.wait)

    async def main(name: str) -> None:
        try:
            results[name] = await script(name, step)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [
        threading.Thread(target=trio.run, args=(main, "trio")),
        threading.Thread(target=asyncio.run, args=(main("asyncio"),)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD * 4)
    assert not errors, errors
    return results


def test_each_event_loop_sees_only_its_own_holdings() -> None:
    """A grant registered on one loop is not in the registry another loop reads meanwhile."""
    key: tuple[Hashable, str, str] = (("memory", "shared"), "job", "worker")
    mine: dict[str, object] = {}

    async def script(name: str, step: Callable[[], Awaitable[None]]) -> object:
        assert registry.get(key) is None
        mine[name] = object()
        registry[key] = mine[name]  # type: ignore[assignment]  # a stand-in for a Holding
        await step()  # both loops have registered theirs
        seen = registry.get(key)
        await step()  # both have looked
        del registry[key]
        return seen

    seen = _run_side_by_side(script)
    assert seen == mine


def test_each_event_loop_has_its_own_shared_watch_of_one_backend_object() -> None:
    """shared_watch() of one backend object gives each loop its own hub and feed."""
    backend = MemoryBackend()
    hubs: dict[str, object] = {}

    async def script(name: str, step: Callable[[], Awaitable[None]]) -> object:
        hub = shared_watch(backend)
        assert hub is not None
        assert shared_watch(backend) is hub  # one per backend object within a loop
        hubs[name] = hub
        await step()  # both loops made theirs
        return hub.feed

    feeds = _run_side_by_side(script)
    assert hubs["trio"] is not hubs["asyncio"]
    assert feeds["trio"] is not feeds["asyncio"]


class _OneStoreKey(MemoryBackend):
    """A memory backend that reports one store key however many stores it is given (as two
    clients of one real store do)."""

    @property
    def store_key(self) -> Hashable:
        return ("memory", "one")


def test_a_grant_held_on_one_loop_is_not_shared_with_the_same_owner_on_another() -> None:
    """The same owner holding the same lease on two loops writes its own grant on each: the
    second is not taken for a reentrant hold of the first."""
    settings = LeaseSettings(heartbeat_timeout=60, heartbeat_interval=20)
    holdings: dict[str, Holding] = {}

    async def script(name: str, step: Callable[[], Awaitable[None]]) -> object:
        backend = _OneStoreKey(MemoryStore())
        lease = Lease("job", owner="worker", backend=backend, settings=settings)
        if name == "asyncio":
            await step()  # trio holds its grant first
        with anyio.fail_after(HANG_GUARD):
            async with lease.held() as grant:
                holding = registry.get(lease._state.key)
                assert isinstance(holding, Holding)
                holdings[name] = holding
                written = await backend.get("job")
                if name == "trio":
                    await step()  # the asyncio side takes its grant now
                await step()  # both hold
                return (written is not None, grant.fencing_token)

    results = _run_side_by_side(script)
    assert results == {"trio": (True, 1), "asyncio": (True, 1)}
    assert holdings["trio"] is not holdings["asyncio"]


def test_outside_an_event_loop_a_registry_reads_empty_and_refuses_writes() -> None:
    """With no event loop running, a PerLoop reads as empty and a write raises."""
    holdings: PerLoop[str, int] = PerLoop("test.outside", dict)
    assert len(holdings) == 0
    assert holdings.get("x") is None
    try:
        holdings["x"] = 1
    except RuntimeError:
        pass
    else:
        raise AssertionError("a write outside an event loop was accepted")


def test_a_secret_sent_on_one_loop_is_cut_from_text_read_on_another() -> None:
    """Secrets sent stay process-wide on purpose: text one loop quotes has every secret the
    process sent cut, whichever loop sent it."""
    secret = "per-loop-test-secret-7f3a9c"

    async def script(name: str, step: Callable[[], Awaitable[None]]) -> object:
        if name == "trio":
            remember_sent(secret)
        await step()  # trio has sent it
        return redact_sent(f"server said: bad token {secret}")

    quoted = _run_side_by_side(script)
    assert quoted == dict.fromkeys(("trio", "asyncio"), "server said: bad token [redacted]")
