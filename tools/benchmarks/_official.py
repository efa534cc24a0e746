"""The official ``kubernetes`` client's leader elector (``kubernetes.leaderelection``, LeaseLock).

``python -m tools.benchmarks._official SCENARIO PARAMS_JSON``, the same events and results as
:mod:`._ours` and :mod:`._theirs`. Timings map as for kubernetes_asyncio: ``L`` →
``lease_duration`` (whole seconds: the lock writes it as ``leaseDurationSeconds``), ``R`` →
``retry_period``, ``RD`` → ``renew_deadline``.

The elector is synchronous: ``LeaderElection.run()`` blocks a thread, polls with
``time.sleep(retry_period)`` and starts ``onstarted_leading`` in a daemon thread of its own.
Each ``LeaseLock`` builds its own ``CoordinationV1Api()`` on the default configuration (loaded
from the kubeconfig once), so each elector has its own urllib3 pool. It cannot cancel its body:
when its renew deadline passes without a renewal it returns and calls ``onstopped_leading``,
which is the "body cancelled" moment measured here (the body thread itself runs on).

Scenarios:

- ``loss``: hold ``n`` leases; an outside writer takes each over at a random moment; time from
  that write (and from the elector first reading the thief) to ``onstopped_leading``.
- ``replicas``: three electors (three replicas) on one lease; ``start`` / ``end`` bracket a
  window in which the runner counts the server's requests.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from kubernetes import config
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from ._common import emit, now
from ._ours import kube_server

Params = dict[str, Any]


def _finish(**fields: Any) -> None:
    emit("result", **fields)
    sys.stdout.flush()
    os._exit(0)  # elector threads never end on their own


def elector(p: Params, name: str, identity: str, started: Callable[[], None],
            stopped: Callable[[], None]) -> threading.Thread:
    """A started daemon thread running a LeaderElection on the Lease ``name``."""
    cfg = electionconfig.Config(  # type: ignore[no-untyped-call]
        LeaseLock(name, "default", identity),  # type: ignore[no-untyped-call]
        lease_duration=int(p["L"]),
        renew_deadline=p["RD"], retry_period=p["R"], onstarted_leading=started,
        onstopped_leading=stopped,
    )
    election = leaderelection.LeaderElection(cfg)  # type: ignore[no-untyped-call]
    thread = threading.Thread(target=election.run, daemon=True)
    thread.start()
    return thread


def take_over(client: httpx.Client, name: str, thief: str) -> float:
    """Write ``thief`` as holder of the Lease ``name`` (CAS, retried); when it committed."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}"
    for _ in range(50):
        obj = client.get(path).json()
        obj["spec"]["holderIdentity"] = thief
        obj["spec"]["leaseTransitions"] = obj["spec"].get("leaseTransitions", 0) + 1
        if client.put(path, json=obj).status_code == 200:
            return now()
    raise RuntimeError(f"could not take over {name}")


class _NoticeLog(logging.Handler):
    """Stamps the first time an elector reads the thief ("yet to finish lease_duration")."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.noticed_at: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("yet to finish") and "thief-" in message:
            name = message.split("thief-", 1)[1].split()[0]
            self.noticed_at.setdefault(name, now())


def loss(p: Params) -> None:
    """Take over ``n`` held leases at random moments; inject → ``onstopped_leading``."""
    handler = _NoticeLog()
    log = logging.getLogger("leaderelection")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    names = [f"{p['prefix']}-{i}" for i in range(p["n"])]
    stopped_at: dict[str, float] = {}
    all_held = threading.Barrier(p["n"] + 1)
    body_ends = threading.Event()

    def body(name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        def started() -> None:
            all_held.wait(60)
            body_ends.wait()

        def stopped() -> None:
            stopped_at.setdefault(name, now())

        return started, stopped

    for name in names:
        elector(p, name, "victim", *body(name))
    all_held.wait(60)
    injected_at: dict[str, float] = {}
    with httpx.Client(base_url=kube_server(p["kubeconfig"])) as client:
        moments = sorted((random.uniform(0, p["R"] * 2), name) for name in names)
        begun = now()
        for at, name in moments:  # one writer, in order: takeovers are short
            time.sleep(max(0.0, begun + at - now()))
            injected_at[name] = take_over(client, name, f"thief-{name}")
    deadline = now() + p["RD"] + p["R"] * 4 + 30
    while len(stopped_at) < len(names) and now() < deadline:
        time.sleep(0.05)
    _finish(
        inject_to_cancel_s=[stopped_at[k] - injected_at[k] for k in names if k in stopped_at],
        noticed_to_cancel_s=[
            stopped_at[k] - handler.noticed_at[k] for k in names
            if k in stopped_at and k in handler.noticed_at
        ],
    )


def replicas(p: Params) -> None:
    """Three replicas on one lease; the runner counts requests over the window."""
    leading = threading.Event()

    def lead() -> None:
        leading.set()
        time.sleep(1e6)

    for i in range(p.get("replicas", 3)):
        elector(p, p["prefix"], f"replica-{i}", lead, lambda: None)
    if not leading.wait(60):
        raise RuntimeError("no replica became leader")
    time.sleep(p.get("settle", p["R"] * 2))
    emit("start", held=1)
    sys.stdin.readline()
    cpu0, wall0 = time.process_time(), now()
    time.sleep(p["window"])
    cpu, wall = time.process_time() - cpu0, now() - wall0
    emit("end")
    sys.stdin.readline()
    _finish(cpu_s=cpu, wall_s=wall, held=1, losses=0, failed=0)


SCENARIOS: dict[str, Callable[[Params], None]] = {"loss": loss, "replicas": replicas}


def main() -> None:
    """Run one scenario: ``python -m tools.benchmarks._official SCENARIO PARAMS_JSON``."""
    scenario, params = sys.argv[1], json.loads(sys.argv[2])
    logging.basicConfig(level=logging.CRITICAL)
    config.load_kube_config(config_file=params["kubeconfig"])  # type: ignore[no-untyped-call]
    SCENARIOS[scenario](params)


if __name__ == "__main__":
    main()
