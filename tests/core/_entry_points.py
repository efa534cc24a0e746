"""Every public scope and runner, driven one way: the adapter table of the no-error-lost matrix.

Each :class:`Entry` runs a caller's ``body`` inside one entry point (in a loop's body, a
runner's ``fn``, a scope's block) on the client ``ctx.backend``. A change to an entry point's
API is a change to its one line here (``host`` is the Akka-style host; ``PARTITIONED`` the
options ``run_partitioned`` gets).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, aclosing
from typing import Any, cast

import anyio

from tests.conftest import World
from trio_lease import (
    Group,
    Lease,
    LeaseBackend,
    Semaphore,
    Singleton,
    run_partitioned,
    run_singleton,
)
from trio_lease._namespace import record_name
from trio_lease.health import HealthObserver, HealthServer
from trio_lease.testing import FaultyBackend

Body = Callable[[], Awaitable[None]]


def host(lease: Lease) -> AbstractAsyncContextManager[Any]:
    """The task group that hosts ``acquire()``'s heartbeat."""
    return lease.host()


#: Options of every run_partitioned call (a fn's error ends the member).
PARTITIONED: dict[str, Any] = {"stop_on_error": True}


@dataclasses.dataclass
class Ctx:
    """One case: its world, the entry point's own (pausable) client, and the names it uses."""

    world: World
    backend: FaultyBackend
    name: str = "job"
    owner: str = "me"

    def lease(self) -> Lease:
        return Lease(self.name, self.owner, self.backend, self.world.settings)


Drive = Callable[[Ctx, Body], Awaitable[None]]
#: Another owner's hold of what the entry point holds: ``(ctx, owner, backend) -> scope``.
Probe = Callable[[Ctx, str, LeaseBackend], AbstractAsyncContextManager[Any]]


@dataclasses.dataclass(frozen=True)
class Entry:
    """An entry point: how it runs a body, and what it holds."""

    name: str
    drive: Drive
    #: Another owner taking what this entry point holds (None: it holds nothing exclusive).
    probe: Probe | None = None
    #: When another owner holds it: True raises LeaseBusy at once, False waits.
    busy_raises: bool = False
    #: A loss of its lease during the body: True raises LeaseLost; False absorbs it (the Akka
    #: host calls on_lost, run_singleton competes again); None: it holds no lease.
    raises_loss: bool | None = True
    #: It opens sockets (name lookups in a thread): real time only, where a virtual clock
    #: cannot jump over a thread's work.
    sockets: bool = False


async def _held(ctx: Ctx, body: Body) -> None:
    async with ctx.lease().held():
        await body()


async def _try_held(ctx: Ctx, body: Body) -> None:
    async with ctx.lease().try_held():
        await body()


async def _acquire(ctx: Ctx, body: Body) -> None:
    lease = ctx.lease()
    async with host(lease):
        if not await lease.acquire():
            await anyio.sleep_forever()  # busy: the caller's scope ends the wait
        await body()


async def _watch_holder(ctx: Ctx, body: Body) -> None:
    async with ctx.lease().watch_holder() as holders:
        async for _ in holders:
            await body()
            break


def _semaphore(ctx: Ctx, owner: str, backend: LeaseBackend) -> Semaphore:
    return Semaphore(ctx.name, owner, backend, ctx.world.settings, limit=1)


async def _semaphore_held(ctx: Ctx, body: Body) -> None:
    async with _semaphore(ctx, ctx.owner, ctx.backend).held():
        await body()


async def _semaphore_try_held(ctx: Ctx, body: Body) -> None:
    async with _semaphore(ctx, ctx.owner, ctx.backend).try_held():
        await body()


def _group(ctx: Ctx) -> Group:
    return Group(ctx.name, ctx.owner, ctx.backend, ctx.world.settings)


async def _joined(ctx: Ctx, body: Body) -> None:
    async with _group(ctx).joined():
        await body()


async def _changes(ctx: Ctx, body: Body) -> None:
    async with _group(ctx).joined() as membership, membership.changes() as lists:
        async for _ in lists:
            await body()
            break


async def _run_singleton(ctx: Ctx, body: Body) -> None:
    async def fn(_: object) -> None:
        await body()

    await run_singleton(ctx.lease(), fn, retry_interval=0.1, stop_when_done=True)


async def _singleton_states(ctx: Ctx, body: Body) -> None:
    async def fn(_: object) -> None:
        await anyio.sleep_forever()

    singleton = Singleton(ctx.lease(), fn)
    async with aclosing(cast(AsyncGenerator[Any, None], singleton.states())) as states:
        async for _ in states:
            await body()
            break


async def _run_partitioned(ctx: Ctx, body: Body) -> None:
    with anyio.CancelScope() as done:

        async def fn(key: str, grant: object) -> None:
            await body()
            done.cancel()  # the body returned: the caller leaves the runner

        await run_partitioned(
            ["k"],
            fn,
            name=ctx.name,
            owner=ctx.owner,
            backend=ctx.backend,
            settings=ctx.world.settings,
            **PARTITIONED,
        )


async def _health_server(ctx: Ctx, body: Body) -> None:
    async with HealthServer(HealthObserver()):
        await body()


async def _emulator_server(ctx: Ctx, body: Body) -> None:
    from trio_lease.testing.kube import KubeEmulator

    async with KubeEmulator().serve(tls=False):
        await body()


def _lease_probe(ctx: Ctx, owner: str, backend: LeaseBackend) -> AbstractAsyncContextManager[Any]:
    return Lease(ctx.name, owner, backend, ctx.world.settings).held()


def _semaphore_probe(
    ctx: Ctx, owner: str, backend: LeaseBackend
) -> AbstractAsyncContextManager[Any]:
    return _semaphore(ctx, owner, backend).held()


def _key_probe(ctx: Ctx, owner: str, backend: LeaseBackend) -> AbstractAsyncContextManager[Any]:
    return Lease(record_name(ctx.name, "key", "k"), owner, backend, ctx.world.settings).held()


ENTRIES = [
    Entry("held", _held, _lease_probe),
    Entry("try_held", _try_held, _lease_probe, busy_raises=True),
    Entry("acquire", _acquire, _lease_probe, raises_loss=False),
    Entry("watch_holder", _watch_holder, raises_loss=None),
    Entry("semaphore_held", _semaphore_held, _semaphore_probe),
    Entry("semaphore_try_held", _semaphore_try_held, _semaphore_probe, busy_raises=True),
    Entry("group_joined", _joined),
    Entry("membership_changes", _changes),
    Entry("run_singleton", _run_singleton, _lease_probe, raises_loss=False),
    Entry("singleton_states", _singleton_states, raises_loss=None),
    Entry("run_partitioned", _run_partitioned, _key_probe),
    Entry("health_server", _health_server, raises_loss=None, sockets=True),
    Entry("emulator_server", _emulator_server, raises_loss=None, sockets=True),
]
