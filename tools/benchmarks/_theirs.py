"""kubernetes_asyncio's leader election (Lease lock) in the same scenarios as :mod:`._ours`.

``python -m tools.benchmarks._theirs SCENARIO PARAMS_JSON``, same events and results. Timings map as
the nearest equivalent: ``L`` → ``lease_duration``, ``R`` → ``retry_period`` (the renew
period), ``RD`` → ``renew_deadline``. All electors of a process share one ``ApiClient`` (one
aiohttp connection pool, its defaults), as one would write it.

kubernetes_asyncio has no release: cancelling an elector leaves the Lease held until it
expires. For ``handover`` the benchmark does what client-go's ``ReleaseOnCancel`` does: after
the body is done it cancels the elector and writes an empty holder, so the successor takes over
on its next poll. The "guarded body" is the ``onstarted_leading`` task, which the elector
cancels when its renew deadline passes without a renewal.

``replicas``: three electors, each with its own ``ApiClient``, on one lease; ``start``
/ ``end`` bracket a window in which the runner counts the server's requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import httpx
from kubernetes_asyncio import client, config
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from ._common import emit, now
from ._ours import kube_server, take_over

Params = dict[str, Any]
Callback = Callable[[], Coroutine[Any, Any, None]]


async def _noop() -> None:
    return None


async def api_client(p: Params) -> Any:
    """One ApiClient for the emulator in the kubeconfig."""
    configuration = client.Configuration()
    await config.load_kube_config(p["kubeconfig"], client_configuration=configuration)
    return client.ApiClient(configuration)


def elector(p: Params, api: Any, name: str, identity: str, started: Callback,
            stopped: Callback = _noop) -> Any:
    """A LeaderElection on the Lease ``name`` with the benchmark's timings."""
    lock = LeaseLock(name, "default", identity, api)
    cfg = electionconfig.Config(
        lock, lease_duration=p["L"], renew_deadline=p["RD"], retry_period=p["R"],
        onstarted_leading=started, onstopped_leading=stopped,
    )
    return leaderelection.LeaderElection(cfg)


async def _read_line() -> str:
    line: str = await asyncio.to_thread(sys.stdin.readline)
    return line.strip()


def _finish(**fields: Any) -> None:
    emit("result", **fields)
    sys.stdout.flush()
    import os

    os._exit(0)


async def steady(p: Params) -> None:
    """Hold ``n`` leases; CPU and losses over a window the runner brackets."""
    api, n = await api_client(p), p["n"]
    state = {"held": 0, "losses": 0}
    all_held = asyncio.Event()

    async def run(i: int) -> None:
        await asyncio.sleep(i * p["ramp"] / n)

        async def started() -> None:
            state["held"] += 1
            if state["held"] == n:
                all_held.set()

        async def stopped() -> None:
            state["losses"] += 1

        await elector(p, api, f"{p['prefix']}-{i}", f"bench-{i}", started, stopped).run()

    tasks = [asyncio.create_task(run(i)) for i in range(n)]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_held.wait(), p["ramp"] + 60)
    await asyncio.sleep(p["settle"] if "settle" in p else p["R"])
    emit("start", held=state["held"])
    await _read_line()
    losses0, cpu0, wall0 = state["losses"], time.process_time(), now()
    await asyncio.sleep(p["window"])
    cpu, wall = time.process_time() - cpu0, now() - wall0
    emit("end")
    await _read_line()
    del tasks
    _finish(cpu_s=cpu, wall_s=wall, held=state["held"], losses=state["losses"],
            losses_in_window=state["losses"] - losses0, failed=0)


async def _release(api: Any, name: str) -> None:
    """client-go's ReleaseOnCancel: write an empty holder (kubernetes_asyncio has none)."""
    leases = client.CoordinationV1Api(api)
    lease = await leases.read_namespaced_lease(name, "default")
    lease.spec.holder_identity = ""  # what client-go writes; the elector reads "" as free
    lease.spec.lease_duration_seconds = 1
    await leases.replace_namespaced_lease(name, "default", lease)


async def handover(p: Params) -> None:
    """Release (as ReleaseOnCancel) → successor's body running, ``trials`` times."""
    api = await api_client(p)
    samples: list[float] = []
    for trial in range(p["trials"]):
        name = f"{p['prefix']}-{trial}"
        leading = asyncio.Event()
        running = asyncio.Event()
        running_at: list[float] = []

        async def holder_started(leading: asyncio.Event = leading) -> None:
            leading.set()
            await asyncio.sleep(3600)

        async def successor_started(running_at: list[float] = running_at,
                                    running: asyncio.Event = running) -> None:
            running_at.append(now())
            running.set()

        holder = asyncio.create_task(elector(p, api, name, "holder", holder_started).run())
        await asyncio.wait_for(leading.wait(), 30)
        successor = asyncio.create_task(
            elector(p, api, name, "successor", successor_started).run()
        )
        await asyncio.sleep(p.get("settle", 0.3))
        released_at = now()  # the holder's body is done; release as client-go would
        holder.cancel()
        await _release(api, name)
        await asyncio.wait_for(running.wait(), p["L"] + 30)
        samples.append(running_at[0] - released_at)
        successor.cancel()
        await asyncio.sleep(0.02)
    _finish(handover_s=samples)


async def cold(p: Params) -> None:
    """No object → ``onstarted_leading`` running, ``trials`` times."""
    api = await api_client(p)
    samples: list[float] = []
    for trial in range(p["trials"] + 1):  # trial 0 warms up (connection, lazy imports)
        running = asyncio.Event()
        stamp: list[float] = []

        async def started(stamp: list[float] = stamp, running: asyncio.Event = running) -> None:
            stamp.append(now())
            running.set()

        begun = now()
        task = asyncio.create_task(
            elector(p, api, f"{p['prefix']}-{trial}", "cold", started).run()
        )
        await asyncio.wait_for(running.wait(), 30)
        samples.append(stamp[0] - begun)
        task.cancel()
        await asyncio.sleep(0.02)
    _finish(cold_s=samples[1:])


class _NoticeLog(logging.Handler):
    """Stamps the first time an elector reads another holder ("Yet to finish lease_duration")."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.noticed_at: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("Yet to finish") and isinstance(record.args, tuple):
            holder = str(record.args[0])
            if holder.startswith("thief-"):
                self.noticed_at.setdefault(holder.removeprefix("thief-"), now())


async def loss(p: Params) -> None:
    """Take over ``n`` held leases at random moments; inject → body cancelled."""
    handler = _NoticeLog()
    log = logging.getLogger("kubernetes_asyncio.leaderelection.leaderelection")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    api, n = await api_client(p), p["n"]
    names = [f"{p['prefix']}-{i}" for i in range(n)]
    cancelled_at: dict[str, float] = {}
    injected_at: dict[str, float] = {}
    held = {"n": 0}
    all_held = asyncio.Event()

    def body(name: str) -> Callback:
        async def started() -> None:
            held["n"] += 1
            if held["n"] == n:
                all_held.set()
            try:
                await asyncio.sleep(3600)
            finally:
                cancelled_at[name] = now()

        return started

    tasks = [asyncio.create_task(elector(p, api, k, "victim", body(k)).run()) for k in names]
    await asyncio.wait_for(all_held.wait(), 60)
    async with httpx.AsyncClient(base_url=kube_server(p["kubeconfig"])) as raw:

        async def inject(name: str) -> None:
            await asyncio.sleep(random.uniform(0, p["R"] * 2))
            injected_at[name] = await take_over(raw, name, f"thief-{name}")

        await asyncio.gather(*(inject(k) for k in names))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*tasks), p["RD"] + p["R"] * 4 + 30)
    _finish(
        inject_to_cancel_s=[cancelled_at[k] - injected_at[k] for k in names if k in cancelled_at],
        noticed_to_cancel_s=[
            cancelled_at[k] - handler.noticed_at[k] for k in names
            if k in cancelled_at and k in handler.noticed_at
        ],
    )


async def hold_forever(p: Params) -> None:
    """Failover, holder side: lead ``n`` leases (spread over R), say ``ready``, keep them."""
    api, n = await api_client(p), p["n"]
    count = {"n": 0}
    ready = asyncio.Event()

    async def started() -> None:
        count["n"] += 1
        if count["n"] == n:
            ready.set()

    async def run(i: int) -> None:
        await asyncio.sleep(i * p["R"] / n)
        await elector(p, api, f"{p['prefix']}-{i}", "crasher", started).run()

    tasks = [asyncio.create_task(run(i)) for i in range(n)]
    await asyncio.wait_for(ready.wait(), 60)
    emit("ready")
    await asyncio.sleep(3600)
    del tasks


async def succeed(p: Params) -> None:
    """Failover, successor side: wait for the ``n`` leases; when each body started."""
    api, n = await api_client(p), p["n"]
    started_at: dict[str, float] = {}
    done = asyncio.Event()

    def body(name: str) -> Callback:
        async def started() -> None:
            started_at[name] = now()
            if len(started_at) == n:
                done.set()

        return started

    names = [f"{p['prefix']}-{i}" for i in range(n)]
    tasks = [asyncio.create_task(elector(p, api, k, "successor", body(k)).run()) for k in names]
    await asyncio.sleep(p.get("settle", 1.0))
    emit("waiting")
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), p["L"] * 3 + 60)
    del tasks
    _finish(started_at=started_at)


async def replicas(p: Params) -> None:
    """Three replicas (one ApiClient each) on one lease; the runner counts the requests."""
    leading = asyncio.Event()

    async def lead() -> None:
        leading.set()
        await asyncio.sleep(1e6)

    apis = [await api_client(p) for _ in range(p.get("replicas", 3))]
    tasks = [asyncio.create_task(elector(p, api, p["prefix"], f"replica-{i}", lead).run())
             for i, api in enumerate(apis)]
    await asyncio.wait_for(leading.wait(), 60)
    await asyncio.sleep(p.get("settle", p["R"] * 2))
    emit("start", held=1)
    await _read_line()
    cpu0, wall0 = time.process_time(), now()
    await asyncio.sleep(p["window"])
    cpu, wall = time.process_time() - cpu0, now() - wall0
    emit("end")
    await _read_line()
    del tasks
    _finish(cpu_s=cpu, wall_s=wall, held=1, losses=0, failed=0)


SCENARIOS: dict[str, Callable[[Params], Awaitable[None]]] = {
    "steady": steady, "handover": handover, "cold": cold, "loss": loss,
    "hold": hold_forever, "succeed": succeed, "replicas": replicas,
}


def main() -> None:
    """Run one scenario: ``python -m tools.benchmarks._theirs SCENARIO PARAMS_JSON``."""
    scenario, params = sys.argv[1], json.loads(sys.argv[2])
    logging.basicConfig(level=logging.CRITICAL)  # failed renewals log tracebacks: keep quiet
    asyncio.run(SCENARIOS[scenario](params))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
