"""§4.5 "no exception is lost" on real stores and sockets: the matrix's real-time part.

Every entry point of tests/core/_entry_points.py runs once on each real store (a SQLite file,
the Kubernetes emulator served over real HTTP on loopback, a real etcd), each on one of
asyncio, uvloop and trio, rotating so that every store meets every loop and every entry point
meets several loops. Which scenario of tests/core/_matrix.py a case runs, and where its body
pauses, is drawn from a seed printed by every case (``TRIO_LEASE_MATRIX_SEED=<seed>`` repeats a
run). The full cross of entry points and scenarios runs on virtual time in
tests/core/test_no_error_lost.py. After each case the store's clients are closed, and no file
descriptor (connection, socket, file) of the case is left open.
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from tests.conftest import (
    REAL_LOOPS,
    REAL_TIME_RERUNS,
    REAL_TIME_TOLERANCE,
    STALLED,
    STARVED,
    STORES,
    World,
)
from tests.core._entry_points import ENTRIES, Ctx, Entry
from tests.core._matrix import SCENARIOS, open_fds, run_case
from trio_lease import LeaseBackend, LeaseSettings

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.real_store,
    # A case whose store did not answer in time before its body ran, or whose holder was
    # starved, never reached what it checks: it runs again (each rerun is in the summary).
    pytest.mark.flaky(reruns=REAL_TIME_RERUNS, only_rerun=[STARVED, STALLED]),
]

#: One seed per run; every case prints it.
SEED = int(os.environ.get("TRIO_LEASE_MATRIX_SEED") or secrets.randbits(32))

REAL_STORES = ("sqlite", "emulator-http", "etcd")

#: The real-time settings with L in whole seconds, as a Kubernetes Lease stores it.
KUBE_SETTINGS = LeaseSettings(
    heartbeat_timeout=2, heartbeat_interval=0.5, lease_operation_timeout=0.25, stop_timeout=0.1
)


def _cases() -> list[object]:
    cases: list[object] = []
    for s, store in enumerate(REAL_STORES):
        for e, entry in enumerate(ENTRIES):
            loop = REAL_LOOPS[(e + s) % len(REAL_LOOPS)]
            cases.append(
                pytest.param(
                    loop.values[0],
                    store,
                    entry,
                    id=f"{store}-{entry.name}-{loop.id}",
                    marks=loop.marks,
                )
            )
    return cases


@asynccontextmanager
async def _world(store: str, request: pytest.FixtureRequest) -> AsyncIterator[World]:
    """A world on ``store``, its clients closed on the way out."""
    if store == "emulator-http":
        from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend
        from trio_lease.testing.kube import KubeEmulator

        async with KubeEmulator().serve(tls=False) as server:
            config = ClusterConfig(
                server=server.url, namespace="default", credentials=Credentials()
            )
            new: Callable[[], LeaseBackend] = lambda: KubernetesBackend(config)  # noqa: E731
            world = World(store, KUBE_SETTINGS, new, tolerance=REAL_TIME_TOLERANCE)
            try:
                yield world
            finally:
                await world.aclose()
        return
    chosen = next(s for s in STORES if s.name == store)
    world = chosen.world(request)
    try:
        yield world
    finally:
        await world.aclose()


async def _warm_up() -> None:
    """Open what the loop itself keeps after its first connection (uvloop: a /dev/null)."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with await anyio.connect_tcp("127.0.0.1", port):
            pass


@pytest.mark.parametrize(("anyio_backend", "store", "entry"), _cases())
async def test_no_error_is_lost_on_real_stores(
    store: str, entry: Entry, request: pytest.FixtureRequest
) -> None:
    """On a real store and loop, a seeded scenario leaves the entry point with exactly the
    exception it should, nothing left running or open, and the lease free in time."""
    rng = random.Random(f"{SEED}-{request.node.name}")
    applicable = [s for s in SCENARIOS if not (s.startswith("loss") and entry.raises_loss is None)]
    scenario = rng.choice(applicable)
    print(f"seed {SEED} (TRIO_LEASE_MATRIX_SEED={SEED} repeats it): {scenario}")
    await _warm_up()
    tasks, fds = len(anyio.get_running_tasks()), open_fds()
    async with _world(store, request) as world:
        await run_case(entry, scenario, Ctx(world, world.faulty()), rng, own=False)
    await anyio.lowlevel.checkpoint()
    assert len(anyio.get_running_tasks()) == tasks, "a task of the case is still running"
    assert open_fds() <= fds, "a connection or file of the case is still open"
