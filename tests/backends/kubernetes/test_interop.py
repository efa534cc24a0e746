"""Interop: a trio_lease holder and a kubernetes_asyncio leader elector on one Lease.

The elector (client-go's algorithm, ported) runs in a subprocess against the emulator's HTTPS
server; trio_lease runs in the test on asyncio and on trio. Real time (sockets, processes).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.kubernetes import KubernetesBackend
from trio_lease.testing.kube import KubeEmulator, KubeServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ELECTOR = """
import asyncio, sys
from kubernetes_asyncio import client, config
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

async def main(kubeconfig: str, identity: str, log: str) -> None:
    await config.load_kube_config(config_file=kubeconfig)
    async with client.ApiClient() as api:
        lock = LeaseLock("interop", "default", identity, api)

        async def started() -> None:
            with open(log, "a") as f:
                f.write("started\\n")
            await asyncio.sleep(3600)

        async def stopped() -> None:
            with open(log, "a") as f:
                f.write("stopped\\n")

        cfg = electionconfig.Config(lock, lease_duration=4, renew_deadline=3, retry_period=1,
                                    onstarted_leading=started, onstopped_leading=stopped)
        await leaderelection.LeaderElection(cfg).run()

asyncio.run(main(*sys.argv[1:]))
"""
#: L = 4 s like the elector's lease duration; D = 2 s < the elector's 4 s of observation.
SETTINGS = LeaseSettings(heartbeat_timeout=4, heartbeat_interval=0.5, lease_operation_timeout=0.25,
                         stop_timeout=0.5, holder_deadline=2)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time: real sockets and subprocesses."""
    backend: str = request.param
    return backend


@asynccontextmanager
async def _cluster(tmp_path: Path) -> AsyncIterator[tuple[KubeEmulator, KubeServer, Path]]:
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("interop-token", "interop", groups=("system:masters",))
    async with emulator.serve() as server:
        yield emulator, server, server.write_kubeconfig(tmp_path / "kubeconfig", "interop-token")


def _holder(emulator: KubeEmulator) -> str | None:
    lease = emulator.get_lease("interop")
    return None if lease is None else lease["spec"].get("holderIdentity")


async def _wait_holder(emulator: KubeEmulator, holder: str, limit: float) -> None:
    with anyio.fail_after(limit):
        while _holder(emulator) != holder:
            await anyio.sleep(0.05)


HOLDER = """
import sys
import anyio
from trio_lease import Lease, LeaseSettings
from trio_lease.backends.kubernetes import KubernetesBackend

async def main(kubeconfig: str) -> None:
    settings = LeaseSettings(heartbeat_timeout=4, heartbeat_interval=0.5,
                             lease_operation_timeout=0.25, stop_timeout=0.5, holder_deadline=2)
    async with KubernetesBackend.from_config({"kubeconfig": kubeconfig}) as backend:
        async with Lease("interop", "trio-dies", backend, settings).held():
            await anyio.sleep(3600)

anyio.run(main, sys.argv[1])
"""


@asynccontextmanager
async def _process(script: Path, text: str, *args: str) -> AsyncIterator[anyio.abc.Process]:
    """Run a Python script; it is killed when the block exits, however it exits."""
    await anyio.Path(script).write_text(text)
    process = await anyio.open_process([sys.executable, str(script), *args])
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()


def _elector(kubeconfig: Path, log: Path) -> AbstractAsyncContextManager[anyio.abc.Process]:
    return _process(kubeconfig.parent / "elector.py", ELECTOR, str(kubeconfig), "elector-1",
                    str(log))


async def test_elector_first_excludes_us_until_it_dies(tmp_path: Path) -> None:
    """While the elector leads we never acquire; after it dies we take over (local countdown)."""
    log = tmp_path / "elector.log"
    async with _cluster(tmp_path) as (emulator, _, kubeconfig):
        async with _elector(kubeconfig, log) as elector:
            await _wait_holder(emulator, "elector-1", 30)
            async with KubernetesBackend.from_config({"kubeconfig": str(kubeconfig)}) as backend:
                lease = Lease("interop", "trio-1", backend, SETTINGS)
                with anyio.move_on_after(6) as waited:
                    async with lease.held():
                        pytest.fail("acquired while the elector was leading")
                assert waited.cancelled_caught
                assert _holder(emulator) == "elector-1"
                with contextlib.suppress(ProcessLookupError):
                    elector.kill()
                async with lease.held(timeout=20) as grant:
                    assert _holder(emulator) == grant.identity
        assert log.read_text().startswith("started")


async def test_we_hold_first_elector_waits_then_takes_over_on_release(tmp_path: Path) -> None:
    """While we hold, the elector never leads; after our release it takes over at once."""
    log = tmp_path / "elector.log"
    log.touch()
    async with _cluster(tmp_path) as (emulator, _, kubeconfig), AsyncExitStack() as processes:
        async with KubernetesBackend.from_config({"kubeconfig": str(kubeconfig)}) as backend:
            lease = Lease("interop", "trio-1", backend, SETTINGS)
            async with lease.held() as grant:
                await processes.enter_async_context(_elector(kubeconfig, log))
                await anyio.sleep(6)  # one and a half of the elector's lease durations
                assert log.read_text() == ""
                assert _holder(emulator) == grant.identity
            await _wait_holder(emulator, "elector-1", 15)
        with anyio.fail_after(10):
            while "started" not in log.read_text():
                await anyio.sleep(0.05)


async def test_elector_takes_over_after_our_holder_dies(tmp_path: Path) -> None:
    """A killed trio_lease holder is taken over by the elector after its lease duration."""
    log = tmp_path / "elector.log"
    log.touch()
    async with _cluster(tmp_path) as (emulator, _, kubeconfig), _process(
        tmp_path / "holder.py", HOLDER, str(kubeconfig)
    ) as holder:
        with anyio.fail_after(30):
            while not (_holder(emulator) or "").startswith("trio-dies"):
                await anyio.sleep(0.05)
        async with _elector(kubeconfig, log):
            await anyio.sleep(6)
            assert log.read_text() == ""  # excluded while our holder renews
            with contextlib.suppress(ProcessLookupError):
                holder.kill()
            await _wait_holder(emulator, "elector-1", 15)
