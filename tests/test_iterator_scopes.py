"""Every public iterator, consumed the way trio and anyio code does, leaves the caller's scopes
alone: on real stores (a real SQLite file, the Kubernetes emulator over real HTTP, a real etcd)
and on asyncio, uvloop and trio.

Each consumer runs rounds of: its own random ``move_on_after`` around the loop, an early
``break``, a loop body that sleeps, and an outer cancel (the task group around it cancelled),
while another owner rewrites the lease every few milliseconds. No round may end in a
RuntimeError (a cancel scope exited out of order), in any error at all, or with one of the
caller's own awaits cancelled by a scope the caller did not open (a library timer).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.conftest import REAL_LOOPS, require_etcd
from trio_lease import ConflictError, Lease, LeaseBackend, LeaseRecord, LeaseSettings, Singleton
from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend
from trio_lease.backends.kubernetes import _watch as kube_watch
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.testing.kube import KubeEmulator

pytestmark = pytest.mark.anyio

ROUNDS = 16
MODES = ("move_on_after", "break", "sleeping body", "outer cancel")
SETTINGS = LeaseSettings(heartbeat_timeout=6, heartbeat_interval=1, lease_operation_timeout=1)


@pytest.fixture(params=REAL_LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Real time (real sockets, a real file, a real server) on asyncio, uvloop and trio."""
    backend: str | tuple[str, dict[str, Any]] = request.param
    return backend


@asynccontextmanager
async def _closing(new: Callable[[], LeaseBackend]) -> AsyncIterator[Callable[[], LeaseBackend]]:
    """A maker of backends (each ``new()``), every one it made closed when the block ends."""
    made: list[LeaseBackend] = []

    def make() -> LeaseBackend:
        made.append(new())
        return made[-1]

    try:
        yield make
    finally:
        for backend in made:
            await backend.aclose()


def _sqlite(tmp_path: Path) -> AbstractAsyncContextManager[Callable[[], LeaseBackend]]:
    return _closing(lambda: SqliteBackend(tmp_path / "leases.db", watch_interval=0.005))


@asynccontextmanager
async def _kubernetes(tmp_path: Path) -> AsyncIterator[Callable[[], LeaseBackend]]:
    async with KubeEmulator().serve(tls=False) as server:

        def new() -> LeaseBackend:
            config = ClusterConfig(
                server=server.url, namespace="default", credentials=Credentials()
            )
            return KubernetesBackend(config, watch_poll_interval=1)

        async with _closing(new) as make:
            yield make


@asynccontextmanager
async def _etcd(tmp_path: Path) -> AsyncIterator[Callable[[], LeaseBackend]]:
    from tests.etcd_server import etcd_cluster
    from trio_lease.backends.etcd import EtcdBackend

    prefix = f"scopes-{tmp_path.name}/"
    with etcd_cluster(size=1) as cluster:
        async with _closing(lambda: EtcdBackend(cluster.endpoints, prefix=prefix)) as make:
            yield make


STORES = {"sqlite": _sqlite, "kubernetes": _kubernetes, "etcd": _etcd}


async def _churn(backend: LeaseBackend, name: str) -> None:
    """Another owner: the record changes hands every few milliseconds, forever."""
    turn = 0
    while True:
        turn += 1
        record = await backend.get(name)
        assert record is not None
        with contextlib.suppress(ConflictError):  # the singleton wrote in between
            await backend.update(
                LeaseRecord(name, holder="xy"[turn % 2], lease_duration=3, fencing_token=turn),
                record.version,
            )
        await anyio.sleep(0.01)


class Consumer:
    """Consumes one iterator in rounds, counting what it received and what went wrong."""

    def __init__(self, what: str, open_: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        self.what = what
        self.open = open_
        self.received = 0
        self.foreign_cancels: list[str] = []

    async def round(self, mode: str, rng: random.Random) -> None:
        async with anyio.create_task_group() as outer:
            if mode == "outer cancel":
                outer.start_soon(_cancel_later, outer.cancel_scope, rng.uniform(0.005, 0.08))
            with anyio.move_on_after(rng.uniform(0.005, 0.1) if mode == "move_on_after" else 5) \
                    as mine:
                async with self.open() as items:
                    async for _ in items:
                        self.received += 1
                        if mode == "break" and rng.random() < 0.5:
                            break
                        try:
                            await anyio.sleep(0.01 if mode == "sleeping body" else 0)
                        except anyio.get_cancelled_exc_class():
                            if not (mine.cancel_called or outer.cancel_scope.cancel_called):
                                self.foreign_cancels.append(mode)
                            raise
                        if mode != "move_on_after" and self.received % 4 == 0:
                            break
            outer.cancel_scope.cancel()


async def _cancel_later(scope: anyio.CancelScope, delay: float) -> None:
    await anyio.sleep(delay)
    scope.cancel()


@pytest.mark.parametrize("store", list(STORES))
async def test_iterators_leave_the_callers_scopes_alone(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """backend.watch(), watch_holder() and Singleton.states() under the caller's own scopes,
    breaks, sleeping bodies and outer cancels, with the lease churning: no error, and no await
    of the caller's is cancelled by a scope it did not open."""
    if store == "etcd":
        require_etcd()
    if store == "kubernetes":
        # Each watch stream's own timer (its whole life) fires every few events: it must end
        # the library's stream, never the caller's sleep.
        monkeypatch.setattr(kube_watch, "_STREAM_TIMEOUT", httpx.Timeout(5.0, read=0.03))
    rng = random.Random(f"scopes-{store}")
    async with STORES[store](tmp_path) as make:
        churner, watcher = make(), make()
        lease = Lease("job", "watcher", watcher, SETTINGS)

        async def leading(ctx: object) -> None:
            await anyio.sleep_forever()

        singleton = Singleton(Lease("solo", "s", make(), SETTINGS), leading, retry_interval=0.05)
        consumers = [
            Consumer("backend.watch()", lambda: watcher.watch("job")),
            Consumer("Lease.watch_holder()", lease.watch_holder),
            # An async generator whose every yield stands outside any scope: closed on exit.
            Consumer("Singleton.states()", lambda: aclosing(singleton.states())),
        ]
        for name in ("job", "solo"):
            await churner.create(LeaseRecord(name, holder="x", lease_duration=3))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_churn, churner, "job")
            tg.start_soon(_churn, churner, "solo")
            tg.start_soon(singleton.run)
            for consumer in consumers:
                for i in range(ROUNDS):
                    await consumer.round(MODES[i % len(MODES)], rng)
            tg.cancel_scope.cancel()
    for consumer in consumers:
        assert consumer.foreign_cancels == [], consumer.what
        assert consumer.received >= ROUNDS // 2, consumer.what
