"""The shared watch over real sockets: one HTTP stream for many waiters, a takeover seen at once.

Real time on loopback (plain HTTP), asyncio and trio; nothing is timed by the wall clock: a loss
before the holder's first renewal (R = 10 s) is shown by the absence of its PUT.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from tests.conftest import REAL_LOOPS
from trio_lease import Lease, LeaseLost, LeaseRecord, LeaseSettings
from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend
from trio_lease.testing.kube import KubeEmulator

pytestmark = pytest.mark.anyio

#: Real time: L = 30 s, R = 10 s: no renewal happens within a test, and expiry never comes.
SETTINGS = LeaseSettings(heartbeat_timeout=30, heartbeat_interval=10, lease_operation_timeout=2)


@pytest.fixture(params=REAL_LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Real time (real sockets) on asyncio, asyncio on uvloop, and trio."""
    backend: str | tuple[str, dict[str, Any]] = request.param
    return backend


def _backend(url: str) -> KubernetesBackend:
    config = ClusterConfig(server=url, namespace="default", credentials=Credentials())
    return KubernetesBackend(config, watch_poll_interval=1000)


async def _until(condition: Callable[[], bool], limit: float = 8) -> None:
    with anyio.fail_after(limit):
        while not condition():
            await anyio.sleep(0.01)


async def test_waiters_share_one_stream_and_a_takeover_ends_the_holder() -> None:
    """200 waiters on 200 leases: one label watch stream per backend (a stream that ended, by
    a timeout or a slow machine, is followed by one more, which the backend counts); a foreign
    write ends the holder's grant."""
    from trio_lease._shared_watch import _feeds
    from trio_lease.backends.kubernetes._feed import KubernetesFeed

    count = 200
    emulator = KubeEmulator()
    got: list[str] = []
    lost: list[bool] = []
    async with emulator.serve(tls=False) as server, _backend(server.url) as owner, \
            _backend(server.url) as waiting:
        for i in range(count):
            await owner.create(LeaseRecord(f"job-{i}", holder="a", lease_duration=3600))
        holder = Lease("mine", "h", owner, SETTINGS)

        async def hold() -> None:
            try:
                async with holder.held():
                    await anyio.sleep_forever()
            except LeaseLost:
                lost.append(True)

        async def contend(name: str) -> None:
            async with Lease(name, "w", waiting, SETTINGS).held():
                got.append(name)
                await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            for i in range(count):
                tg.start_soon(contend, f"job-{i}")

            def feeds() -> list[KubernetesFeed]:
                found = [_feeds.get(owner), _feeds.get(waiting)]
                return [feed for feed in found if isinstance(feed, KubernetesFeed)]

            await _until(lambda: len(feeds()) == 2 and len(emulator.open_watches()) >= 2)
            await anyio.sleep(0.5)  # room for a watch per waiter, were there any
            every = [r for r in emulator.requests if r.query.get("watch") == "1"]
            watches = [r for r in every if r.query.get("labelSelector")]
            # Every label watch the server saw is a stream one of the two feeds sent: one each,
            # and one more after each stream that ended (the restarts this run had).
            sent = sum(feed.streams for feed in feeds())
            assert 2 <= len(watches) <= sent, (len(watches), sent)
            assert all(not feed.individual for feed in feeds())
            # No waiter has a watch of its own. The holder's new lease may have had one while
            # the label stream did not show it yet (a slow machine); it has ended since.
            alone = {r.query.get("fieldSelector") for r in every if r not in watches}
            assert alone <= {"metadata.name=mine"}, alone
            assert all(w.name is None and w.selection is not None
                       for w in emulator.open_watches())
            requests = len(emulator.requests)
            current = await owner.get("job-3")
            assert current is not None
            await owner.update(LeaseRecord("job-3", lease_duration=1), current.version)
            await _until(lambda: got == ["job-3"])
            mine = emulator.get_lease("mine")
            assert mine is not None
            mine["spec"].update(holderIdentity="intruder", leaseTransitions=99)
            emulator.apply(mine)
            await _until(lambda: bool(lost))
            puts = [r.path for r in emulator.requests[requests:] if r.method == "PUT"]
            assert puts and all("mine" not in path for path in puts)  # lost before any renewal
            tg.cancel_scope.cancel()


async def test_own_renewal_events_are_skipped_and_a_takeover_still_ends_the_grant() -> None:
    """Over a real socket, the label stream's events of this process's renewals are skipped
    undecoded by the task that reads the stream; a foreign write in the same stream is still
    seen and ends the grant."""
    from trio_lease._shared_watch import _feeds
    from trio_lease.backends.kubernetes._feed import KubernetesFeed

    fast = LeaseSettings(heartbeat_timeout=30, heartbeat_interval=0.1, lease_operation_timeout=0.1)
    emulator = KubeEmulator()
    async with emulator.serve(tls=False) as server, _backend(server.url) as backend:
        lease = Lease("mine", "h", backend, fast)
        with pytest.raises(LeaseLost, match=r"intruder.*seen on the watch"):
            async with lease.held() as grant:
                await _until(lambda: grant._holding.renewals >= 20)
                feed = _feeds[backend]
                assert isinstance(feed, KubernetesFeed)
                await _until(lambda: feed.own_skipped >= 15)
                mine = emulator.get_lease("mine")
                assert mine is not None
                mine["spec"].update(holderIdentity="intruder", leaseTransitions=99)
                emulator.apply(mine)
                await anyio.sleep(30)  # ended by the watch long before
