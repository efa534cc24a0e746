"""trio_lease's side of every benchmark, one scenario per run of this program.

``python -m tools.benchmarks._ours SCENARIO PARAMS_JSON`` prints JSON event lines (see
:mod:`tools.benchmarks._common`) and ends with one ``result`` event. Scenarios:

- ``steady``: hold ``n`` leases (acquisitions spread over ``ramp`` seconds), then print
  ``start``, wait for a line on stdin (the runner resets the emulator's counts), measure CPU for
  ``window`` seconds, print ``end``, wait for a line (the runner reads the counts), report.
- ``handover``: per trial, a holder releases (leaves ``held()``) while a successor waits in
  ``held()`` on the same lease; time from the release to the successor's body running.
- ``cold``: ``held()`` on a lease that does not exist yet; time until the body runs.
- ``loss``: hold ``n`` leases; an outside writer takes each over at a random moment; time from
  that write (and from the holder noticing) to the guarded body being cancelled.
- ``hold`` / ``succeed``: the two halves of crash failover: ``hold`` acquires ``n`` leases and
  prints ``ready`` (the runner SIGKILLs it); ``succeed`` waits for the same leases and reports
  when each guarded body started.

Parameters: ``backend`` (``kube`` with ``kubeconfig``, ``sqlite`` with ``path``, ``etcd``
with ``endpoints``, or ``memory``: one process's memory backend, for the core's own cost),
``anyio_backend`` (``asyncio`` or ``trio``), ``L``/``R``/``T`` (heartbeat timeout, interval,
operation timeout, seconds), ``prefix`` (lease names), ``pool`` (optional client settings:
``[requests in flight, max connections, idle connections kept, lean HTTP path]``), plus the
scenario's own.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from trio_lease import Lease, LeaseLost, LeaseSettings
from trio_lease._heartbeat import Holding
from trio_lease.abc import LeaseBackend
from trio_lease.backends.kubernetes import KubernetesBackend, _client
from trio_lease.backends.kubernetes._config import resolve_config
from trio_lease.backends.memory import MemoryBackend
from trio_lease.backends.sqlite import SqliteBackend

from ._common import GcMeter, emit, now, profiled, promoted, wait_for_line

Params = dict[str, Any]


def make_backend(p: Params) -> LeaseBackend:
    """The backend named by the parameters."""
    if p["backend"] == "sqlite":
        return SqliteBackend(p["path"])
    if p["backend"] == "memory":  # the core's own cost: no I/O, no thread
        return MemoryBackend()
    if p["backend"] == "etcd":
        from trio_lease.backends.etcd import EtcdBackend

        return EtcdBackend(p["endpoints"], prefix=f"bench/{p['prefix']}/")
    if p.get("pool"):  # the measured alternatives: in flight, connections, keep-alive, lean
        _client.MAX_IN_FLIGHT, _client.MAX_CONNECTIONS, _client.MAX_KEEPALIVE, _client.LEAN = (
            p["pool"]
        )
    return KubernetesBackend(resolve_config({"kubeconfig": p["kubeconfig"]}))


def make_settings(p: Params) -> LeaseSettings:
    """L, R and T from the parameters (D and T_stop at their defaults unless given)."""
    extra = {"stop_timeout": p["stop"]} if "stop" in p else {}
    return LeaseSettings(
        heartbeat_timeout=p["L"], heartbeat_interval=p["R"], lease_operation_timeout=p["T"],
        **extra,
    )


def _finish(**fields: Any) -> None:
    """Report and leave at once: the runner does not need the leases released."""
    emit("result", **fields)
    sys.stdout.flush()
    os._exit(0)


async def steady(p: Params) -> None:
    """Hold ``n`` leases; CPU and losses over a window the runner brackets."""
    backend, settings, n = make_backend(p), make_settings(p), p["n"]
    state = {"held": 0, "losses": 0, "failed": 0}
    errors: collections.Counter[str] = collections.Counter()  # why acquisitions failed
    all_held = anyio.Event()
    acquire_times: list[float] = []
    holdings: list[Any] = []  # each grant's Holding, for its renewal counter

    async def hold(i: int) -> None:
        await anyio.sleep(i * p["ramp"] / n)
        lease = Lease(f"{p['prefix']}-{i}", "bench", backend, settings)
        started = now()
        try:
            async with lease.held(timeout=p.get("acquire_timeout", 60)) as grant:
                acquire_times.append(now() - started)
                holdings.append(grant._holding)
                state["held"] += 1
                if state["held"] == n:
                    all_held.set()
                await anyio.sleep_forever()
        except LeaseLost:
            state["losses"] += 1
        except Exception as exc:
            state["failed"] += 1
            errors[f"{type(exc).__name__}: {str(exc)[:160]}"] += 1

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(hold, i)
        with anyio.move_on_after(p["ramp"] + 60):
            await all_held.wait()
        await anyio.sleep(p["settle"] if "settle" in p else p["R"])
        emit("start", held=state["held"])
        await wait_for_line()
        losses0, cpu0, wall0 = state["losses"], time.process_time(), now()
        times0 = os.times()
        renewals0 = sum(h.renewals for h in holdings)
        with profiled(), GcMeter() as gc_meter, promoted():
            await anyio.sleep(p["window"])
        cpu, wall = time.process_time() - cpu0, now() - wall0
        times = os.times()
        renewals = sum(h.renewals for h in holdings) - renewals0
        emit("end")
        await wait_for_line()
        _finish(
            cpu_s=cpu, wall_s=wall, held=state["held"], losses=state["losses"],
            losses_in_window=state["losses"] - losses0, failed=state["failed"],
            acquire_s_max=max(acquire_times, default=0.0), renewals=renewals,
            user_s=times.user - times0.user, system_s=times.system - times0.system,
            errors=dict(errors.most_common(5)),
            **gc_meter.fields(),
        )


async def handover(p: Params) -> None:
    """Release → successor's body running, ``trials`` times, one lease per trial."""
    backend, settings = make_backend(p), make_settings(p)
    samples: list[float] = []
    for trial in range(p["trials"]):
        name = f"{p['prefix']}-{trial}"
        holder = Lease(name, "holder", backend, settings)
        successor = Lease(name, "successor", backend, settings)
        release, acquired = anyio.Event(), anyio.Event()
        released_at: list[float] = []
        running_at: list[float] = []

        async def hold(lease: Lease = holder, release: anyio.Event = release,
                       acquired: anyio.Event = acquired,
                       released_at: list[float] = released_at) -> None:
            async with lease.held():
                acquired.set()
                await release.wait()
                released_at.append(now())  # the body is done: held() releases from here

        async def succeed(lease: Lease = successor, running_at: list[float] = running_at) -> None:
            async with lease.held(timeout=30):
                running_at.append(now())

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(hold)
                await acquired.wait()
                tg.start_soon(succeed)
                await anyio.sleep(p.get("settle", 0.3))  # the successor is waiting on its watch
                release.set()
        samples.append(running_at[0] - released_at[0])
    _finish(handover_s=samples)


async def cold(p: Params) -> None:
    """No object → body running, ``trials`` times."""
    backend, settings = make_backend(p), make_settings(p)
    samples: list[float] = []
    for trial in range(p["trials"] + 1):  # trial 0 warms up (connection, lazy imports)
        lease = Lease(f"{p['prefix']}-{trial}", "cold", backend, settings)
        started = now()
        async with lease.held(timeout=30):
            samples.append(now() - started)
        await anyio.sleep(0.02)
    _finish(cold_s=samples[1:])


class _LossLog(logging.Handler):
    """Stamps the moment the core logs a lease as lost (its ``mark_lost``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lost_at: dict[str, float] = {}
        #: Why each lease was lost, as the core logged it.
        self.causes: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("lease %r lost") and isinstance(record.args, tuple):
            self.lost_at.setdefault(str(record.args[0]), now())
            self.causes.setdefault(str(record.args[0]), str(record.args[-1]))


async def take_over(client: httpx.AsyncClient, name: str, thief: str) -> float:
    """Write ``thief`` as holder of the Lease ``name`` (CAS, retried); when it committed."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}"
    for _ in range(50):
        obj = (await client.get(path)).json()
        obj["spec"]["holderIdentity"] = thief
        obj["spec"]["leaseTransitions"] = obj["spec"].get("leaseTransitions", 0) + 1
        response = await client.put(path, json=obj)
        if response.status_code == 200:
            return now()
    raise RuntimeError(f"could not take over {name}")


def kube_server(kubeconfig: str) -> str:
    """The server URL of a benchmark kubeconfig (plain HTTP on loopback)."""
    text = Path(kubeconfig).read_text()
    for line in text.splitlines():
        if line.strip().startswith("server:"):
            return line.split("server:", 1)[1].strip()
    raise ValueError("no server in kubeconfig")


async def loss(p: Params) -> None:
    """Take over held leases at random moments; inject → cancelled, noticed → cancelled.

    ``n`` leases are held (acquired over ``ramp`` seconds, default all at once); ``victims`` of
    them (default all), picked at random, are taken over at moments spread evenly at random
    over ``spread`` seconds (default 2R). With many leases held and a few victims over a long
    spread, each takeover meets the process as a steady holder of ``n`` leases is: renewing,
    and now and then collecting its garbage (the longest collection in the window is reported
    beside the latencies).
    """
    handler = _LossLog()
    logging.getLogger("trio_lease").addHandler(handler)
    backend, settings, n = make_backend(p), make_settings(p), p["n"]
    ramp, spread = p.get("ramp", 0.0), p.get("spread", p["R"] * 2)
    cancelled_at: dict[str, float] = {}
    injected_at: dict[str, float] = {}
    held = anyio.Event()
    count = {"held": 0}
    pauses = GcMeter()

    async def hold(i: int, name: str) -> None:
        await anyio.sleep(i * ramp / n)
        try:
            async with Lease(name, "victim", backend, settings).held(timeout=30 + ramp):
                count["held"] += 1
                if count["held"] == n:
                    held.set()
                try:
                    await anyio.sleep_forever()
                finally:
                    cancelled_at[name] = now()
                    uncancelled.discard(name)
                    if not uncancelled:
                        all_cancelled.set()
        except LeaseLost:
            pass

    # When each holder began the read that confirms a foreign state seen on its watch: splits
    # takeover → noticed into the watch's delivery and the confirming read.
    confirming: dict[str, float] = {}
    confirm = Holding._confirm_loss

    async def stamped(holding: Holding) -> bool:
        confirming.setdefault(holding.name, now())
        return await confirm(holding)

    Holding._confirm_loss = stamped  # type: ignore[method-assign,assignment]
    names = [f"{p['prefix']}-{i}" for i in range(n)]
    victims = random.sample(names, int(p.get("victims") or n))
    uncancelled, all_cancelled = set(victims), anyio.Event()
    async with httpx.AsyncClient(base_url=kube_server(p["kubeconfig"])) as client:
        with anyio.fail_after(p["R"] * 4 + 120 + ramp + spread + p["L"]):
            async with anyio.create_task_group() as tg:
                for i, name in enumerate(names):
                    tg.start_soon(hold, i, name)
                await held.wait()
                await anyio.sleep(p["R"])  # every holder renewing, in its rhythm

                async def inject(name: str) -> None:
                    await anyio.sleep(random.uniform(0, spread))
                    injected_at[name] = await take_over(client, name, f"thief-{name}")

                with pauses:
                    async with anyio.create_task_group() as injectors:
                        for name in victims:
                            injectors.start_soon(inject, name)
                    # A victim that missed its takeover on the watch is cancelled by its
                    # deadline, at most L after its last renewal.
                    with anyio.move_on_after(p["L"] + p["R"] * 4):
                        await all_cancelled.wait()
                tg.cancel_scope.cancel()
    _finish(
        inject_to_cancel_s=[
            cancelled_at[k] - injected_at[k] for k in victims if k in cancelled_at
        ],
        noticed_to_cancel_s=[
            cancelled_at[k] - handler.lost_at[k] for k in victims
            if k in cancelled_at and k in handler.lost_at
        ],
        inject_to_confirming_s=[
            confirming[k] - injected_at[k] for k in victims if k in confirming
        ],
        confirming_to_noticed_s=[
            handler.lost_at[k] - confirming[k] for k in victims
            if k in confirming and k in handler.lost_at
        ],
        #: CLOCK_MONOTONIC of each victim's takeover and of its holder's confirming read.
        injected_at=injected_at,
        confirming_at={k: confirming[k] for k in victims if k in confirming},
        seen_on_watch=sum("seen on the watch" in handler.causes.get(k, "") for k in victims),
        longest_collection_s=pauses.longest,
        collections=pauses.collections,
    )


async def hold_forever(p: Params) -> None:
    """Failover, holder side: acquire ``n`` leases (spread over R), say ``ready``, keep them."""
    backend, settings, n = make_backend(p), make_settings(p), p["n"]
    count = {"held": 0}
    ready = anyio.Event()

    async def hold(i: int) -> None:
        await anyio.sleep(i * p["R"] / n)
        async with Lease(f"{p['prefix']}-{i}", "crasher", backend, settings).held(timeout=30):
            count["held"] += 1
            if count["held"] == n:
                ready.set()
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(hold, i)
        await ready.wait()
        emit("ready")
        await anyio.sleep_forever()


async def succeed(p: Params) -> None:
    """Failover, successor side: wait for the ``n`` leases; when each body started."""
    backend, settings, n = make_backend(p), make_settings(p), p["n"]
    started: dict[str, float] = {}

    async def wait(name: str) -> None:
        async with Lease(name, "successor", backend, settings).held(timeout=p["L"] * 3 + 30):
            started[name] = now()

    with anyio.fail_after(p["L"] * 3 + 60):
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(wait, f"{p['prefix']}-{i}")
            await anyio.sleep(p.get("settle", 1.0))
            emit("waiting")
    _finish(started_at=started)


SCENARIOS = {
    "steady": steady, "handover": handover, "cold": cold, "loss": loss,
    "hold": hold_forever, "succeed": succeed,
}


def main() -> None:
    """Run one scenario: ``python -m tools.benchmarks._ours SCENARIO PARAMS_JSON``."""
    scenario, params = sys.argv[1], json.loads(sys.argv[2])
    backend = params.get("anyio_backend", "asyncio")
    # "uvloop": asyncio on uvloop's event loop (anyio's use_uvloop), for the row that shows
    # what a user who chose that loop pays.
    options = {"use_uvloop": True} if params.get("uvloop") else {}
    anyio.run(SCENARIOS[scenario], params, backend=backend, backend_options=options)


if __name__ == "__main__":
    main()
