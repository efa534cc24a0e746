"""A Kubernetes watch left mid-stream leaves nothing for the garbage collector to finalize.

The watch's line reader and the lean client's body reader were async generators: a watch left
mid-stream (its block exited, its task cancelled) abandoned them unfinished, and on trio each
one the garbage collector finalized warned ``ResourceWarning: Async generator ... was garbage
collected before it had been exhausted`` (an unraisable exception under pytest). They are
iterator objects now, and their owner closes what it iterates (``contextlib.aclosing``): httpx's
body iterator is an async generator (``trio_lease/backends/kubernetes/_watch.py``,
``_feed.py``, ``trio_lease/_lean_http.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from tests.conftest import REAL_LOOPS
from trio_lease import Lease, LeaseRecord, LeaseSettings
from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend
from trio_lease.testing.kube import KubeEmulator

from ._helpers import emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio

LIMIT = 10  # seconds: a hang guard, never a timing assert
ROUNDS = 5  # watches left mid-stream per test
SETTINGS = LeaseSettings(heartbeat_timeout=30, heartbeat_interval=10, lease_operation_timeout=2)


@contextlib.contextmanager
def nothing_left_to_finalize() -> Iterator[None]:
    """Fail if a warning or an unraisable exception (a finalizer's) arises in the block or in a
    full garbage collection after it."""
    unraisable: list[str] = []

    def hook(info: Any) -> None:
        unraisable.append(f"{info.exc_type.__name__}: {info.exc_value} in {info.object!r}")

    previous = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            yield
            for _ in range(3):  # objects a finalizer frees are collected in the next pass
                gc.collect()
    finally:
        sys.unraisablehook = previous
    assert [f"{w.category.__name__}: {w.message}" for w in seen] == []
    assert unraisable == []


async def change(writer: KubernetesBackend, name: str, holder: str) -> None:
    current = await writer.get(name)
    assert current is not None
    await writer.update(dataclasses.replace(current, holder=holder), current.version)


async def leave_watches_mid_stream(writer: KubernetesBackend, watcher: KubernetesBackend) -> None:
    """Watch a lease with ``backend.watch()`` and with ``watch_holder()`` (the shared watch);
    leave each while events it has not read are on the stream."""
    await writer.create(LeaseRecord("job", holder="h0", lease_duration=3600))
    with anyio.fail_after(LIMIT):
        for round_ in range(ROUNDS):
            async with watcher.watch("job") as states:
                assert await anext(states) is not None
                await change(writer, "job", f"a{round_}")
                await anext(states)
                for more in range(3):
                    await change(writer, "job", f"b{round_}-{more}")
                await anyio.sleep(0.01)  # the events reach the stream, unread
            async with Lease("job", "me", watcher, SETTINGS).watch_holder() as holders:
                assert await anext(holders) is not None
                await change(writer, "job", f"c{round_}")
                await anext(holders)
                await change(writer, "job", f"d{round_}")
                await anyio.sleep(0.01)


async def test_watches_left_mid_stream_in_process() -> None:
    """Watches through httpx (the in-process transport) left mid-stream, on asyncio and trio:
    no ResourceWarning and no unraisable exception, even after a full garbage collection."""
    emulator = emulator_with_crd()
    with nothing_left_to_finalize():
        async with make_backend(emulator.transport()) as writer, make_backend(
            emulator.transport(), watch_poll_interval=1000
        ) as watcher:
            await leave_watches_mid_stream(writer, watcher)


class TestRealSockets:
    """The same over real HTTP on loopback (the lean client), on every real event loop."""

    @pytest.fixture(params=REAL_LOOPS)
    def anyio_backend(self, request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
        """Real time (real sockets) on asyncio, asyncio on uvloop, and trio."""
        backend: str | tuple[str, dict[str, Any]] = request.param
        return backend

    async def test_watches_left_mid_stream_over_http(self) -> None:
        """Watches over real HTTP (the lean client) left mid-stream, on asyncio, uvloop and
        trio: no ResourceWarning and no unraisable exception, even after a full garbage
        collection."""
        with nothing_left_to_finalize():
            async with self._served() as url:
                config = ClusterConfig(server=url, namespace="default", credentials=Credentials())
                async with KubernetesBackend(config) as writer, KubernetesBackend(
                    config, watch_poll_interval=1000
                ) as watcher:
                    await leave_watches_mid_stream(writer, watcher)

    @contextlib.asynccontextmanager
    async def _served(self) -> AsyncIterator[str]:
        async with KubeEmulator().serve(tls=False) as server:
            yield server.url
