"""The Lease API on real etcd: crashed holders, a killed etcd leader, watch-driven handover."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from tests.etcd_server import EtcdCluster
from trio_lease import Lease, LeaseSettings
from trio_lease.backends.etcd import EtcdBackend

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]

# Short but valid timings (L = 4 s, R = 0.5 s, T = 0.3 s; D ≈ 2.7 s) keep the tests quick.
FAST = LeaseSettings(heartbeat_timeout=4, heartbeat_interval=0.5, lease_operation_timeout=0.3)


async def test_kill_9_of_the_holder_process_hands_over_after_the_timeout(
    etcd_server: EtcdCluster, etcd_prefix: str, anyio_backend_name: str
) -> None:
    """After kill -9 of the holding process, another process acquires it, but only after L."""
    L, R, T = FAST.heartbeat_timeout, FAST.heartbeat_interval, FAST.lease_operation_timeout
    command = [
        sys.executable,
        "-m",
        "tests.backends.etcd._holder",
        ",".join(etcd_server.endpoints),
        etcd_prefix,
        "job",
        str(L),
        str(R),
        str(T),
        anyio_backend_name,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with await anyio.open_process(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as holder:
        try:
            assert holder.stdout is not None
            with anyio.fail_after(30):
                line = ""
                async for chunk in TextReceiveStream(holder.stdout):
                    line += chunk
                    if "\n" in line:
                        break
            assert line.startswith("held "), line
            holder_token = int(line.split()[1])
            # Let it renew a few times, then crash it without a chance to release.
            await anyio.sleep(3 * R)
        finally:
            holder.kill()
        killed_at = anyio.current_time()
        assert await holder.wait() == -9

    async with EtcdBackend(etcd_server.endpoints, prefix=etcd_prefix) as backend:
        contender = Lease("job", "survivor", backend, FAST)
        with anyio.fail_after(L * 4 + 10):
            async with contender.held() as grant:
                acquired_at = anyio.current_time()
                assert grant.fencing_token > holder_token
    # The contender first read the record after the kill and judges expiry on its own clock,
    # so it may take over only once it has seen that version unchanged for a full L.
    assert acquired_at - killed_at >= L


# L = 8 s, R = 1 s, T = 0.8 s: D ≈ 5.3 s, far more than an etcd election (about 1-2 s).
CLUSTER = LeaseSettings(heartbeat_timeout=8, heartbeat_interval=1, lease_operation_timeout=0.8)


async def test_killing_the_etcd_leader_during_a_hold_keeps_one_holder(
    etcd_cluster3: EtcdCluster, etcd_prefix: str
) -> None:
    """Killing the etcd leader while a lease is held loses neither the lease nor exclusivity."""
    leader = etcd_cluster3.leader()
    # The holder talks to the leader first, so the kill also breaks its connection.
    endpoints = [leader.client_url] + [
        m.client_url for m in etcd_cluster3.members if m is not leader
    ]
    events: list[tuple[str, float, int]] = []
    async with (
        EtcdBackend(endpoints, prefix=etcd_prefix) as holder_backend,
        EtcdBackend(endpoints[::-1], prefix=etcd_prefix) as contender_backend,
    ):
        holder = Lease("job", "holder", holder_backend, CLUSTER)
        contender = Lease("job", "contender", contender_backend, CLUSTER)

        async def contend() -> None:
            async with contender.held(timeout=60) as grant:
                events.append(("contender acquired", anyio.current_time(), grant.fencing_token))

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg, holder.held(timeout=20) as grant:
                tg.start_soon(contend)
                await anyio.sleep(CLUSTER.heartbeat_interval * 1.5)
                await anyio.to_thread.run_sync(leader.kill)
                # Hold well past D: a lost renewal would have cancelled this body by now.
                await anyio.sleep(CLUSTER.deadline + 2 * CLUSTER.heartbeat_interval)
                assert grant.remaining() > 0
                assert not events, "the contender acquired while the lease was held"
                events.append(("holder leaving", anyio.current_time(), grant.fencing_token))
    assert [e[0] for e in events] == ["holder leaving", "contender acquired"]
    assert events[1][2] > events[0][2]
    assert not leader.alive


async def test_release_wakes_a_waiting_contender_through_the_watch(
    etcd_server: EtcdCluster, etcd_prefix: str
) -> None:
    """A contender waiting in held() acquires on release via the etcd watch, not by polling."""
    # Without a watch event the contender would re-read only after 30 s, past its 10 s timeout.
    slow_poll = LeaseSettings(
        heartbeat_timeout=60, heartbeat_interval=5, lease_operation_timeout=1, poll_interval=30
    )
    order: list[str] = []
    async with (
        EtcdBackend(etcd_server.endpoints, prefix=etcd_prefix) as holder_backend,
        EtcdBackend(etcd_server.endpoints, prefix=etcd_prefix) as contender_backend,
    ):
        holder = Lease("job", "holder", holder_backend, slow_poll)
        contender = Lease("job", "contender", contender_backend, slow_poll)
        tokens: list[int] = []

        async def contend() -> None:
            async with contender.held(timeout=10) as grant:
                order.append("contender acquired")
                tokens.append(grant.fencing_token)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg, holder.held(timeout=10) as grant:
                tokens.append(grant.fencing_token)
                tg.start_soon(contend)
                await anyio.sleep(1)  # the contender is now waiting on its watch
                order.append("holder releasing")
    assert order == ["holder releasing", "contender acquired"]
    assert tokens[1] > tokens[0]
