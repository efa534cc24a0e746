"""The least client CPU any asyncio client pays per request in the steady row's rhythm.

``python -m tools.benchmarks._floor [--rounds 3] [--leases 1000] [--interval 1.5]
[--window 15]`` starts the emulator (:mod:`._emulator`, its own process), then, ``rounds``
times, runs each rhythm in a fresh worker process and prints the worker's CPU time
(``time.process_time``) per request. Every rhythm sends the same bytes the same way as the
``floor`` layer of :mod:`._layers`: a bare ``asyncio.Protocol`` on one of four connections sends a
GET of one Lease and waits for the reply's last byte (no parsing, no checks, no cancel scopes, no
watch), so what is measured is the machine, the event loop and the emulator's pace:

- ``back-to-back``: 20 tasks, each sending its next request as soon as its last reply is in
  (the ``floor`` layer's rhythm, the process never idle while a request is out);
- ``paced``: ``leases`` tasks, each sending one request every ``interval`` seconds, spread
  evenly (the steady row's rhythm: 1,000 leases renewed every 1.5 s);
- ``paced on a grid``: as ``paced``, each due time rounded down to a multiple of
  ``interval / 32``, so one wake-up starts about 30 requests (tools/benchmarks/README.md,
  "Issue 15, session 12": holders renew on this grid, ``trio_lease._algorithm.next_renewal``);
- ``timers only``: as ``paced`` with no request at all: each task only wakes up every
  ``interval`` seconds (CPU per wake-up, no I/O: the machine and the event loop alone).

The difference between ``back-to-back`` and ``paced`` is what the process pays for waking up
between requests, on this machine, before any client does any work of its own; ``timers only``
shows that cost without the emulator (on the benchmark VM, about as much per wake-up as a
whole back-to-back request: tools/benchmarks/README.md, "Issue 15, session 12").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import anyio

from trio_lease import LeaseRecord
from trio_lease._algorithm import RENEWAL_TICKS
from trio_lease._http import request_head
from trio_lease.backends.kubernetes import KubernetesBackend, resolve_config

from ._layers import _Bare
from ._procs import rounds_of_workers

#: The grid rhythm's tick: the interval divided by this (the holders' own grid).
GRID = RENEWAL_TICKS

RHYTHMS = ("back-to-back", "paced", "paced on a grid", "timers only")
CONNECTIONS = 4


async def _worker(kubeconfig: str, rhythm: str, leases: int, interval: float,
                  window: float) -> None:
    backend = KubernetesBackend(resolve_config({"kubeconfig": kubeconfig}))
    name = f"floor-{os.getpid()}"
    await backend.create(LeaseRecord(name=name, holder="me", lease_duration=30.0))
    api = backend._api
    unary: Any = api._lease()._entry.unary
    loop = asyncio.get_running_loop()
    data = request_head(
        "GET", unary._prefix + api.item_path(name) + "?timeout=5s",
        [*unary._headers, ("Accept", "application/json")],
    )
    idle: asyncio.Queue[tuple[asyncio.Transport, _Bare]] = asyncio.Queue()
    for _ in range(CONNECTIONS):
        transport, bare = await loop.create_connection(
            _Bare, unary._host, unary._port, ssl=unary._ssl,
            server_hostname=unary._tls_hostname if unary._ssl is not None else None,
        )
        idle.put_nowait((transport, bare))
    sent = 0
    tasks = 20 if rhythm == "back-to-back" else leases
    pace = 0.0 if rhythm == "back-to-back" else interval
    tick = interval / GRID if rhythm == "paced on a grid" else 0.0

    async def one(i: int) -> None:
        nonlocal sent
        await asyncio.sleep(i * pace / tasks)
        due = loop.time()
        while True:
            due += pace
            at = (due // tick) * tick if tick else due
            await asyncio.sleep(max(0.0, at - loop.time()))
            if rhythm == "timers only":
                sent += 1
                continue
            transport, bare = await idle.get()
            bare.done = loop.create_future()
            transport.write(data)
            await bare.done
            idle.put_nowait((transport, bare))
            sent += 1

    running = [asyncio.ensure_future(one(i)) for i in range(tasks)]
    await asyncio.sleep(max(pace, 1.0) + 2.0)  # every task in its rhythm
    cpu, count = time.process_time(), sent
    await asyncio.sleep(window)
    cpu, count = time.process_time() - cpu, sent - count
    for task in running:
        task.cancel()
    if count == 0:
        raise SystemExit(f"no reply in {window:g} s: the emulator did not answer ({rhythm})")
    # "requests" counts wake-ups in the timers-only rhythm.
    print(json.dumps({"rhythm": rhythm, "requests": count, "us_per_request": cpu / count * 1e6}))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        kubeconfig, rhythm, leases, interval, window = sys.argv[2:7]
        anyio.run(_worker, kubeconfig, rhythm, int(leases), float(interval), float(window))
        return
    parser = argparse.ArgumentParser(description="Client CPU per request, by rhythm.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=1.5)
    parser.add_argument("--window", type=float, default=15.0)
    args = parser.parse_args()
    rounds_of_workers(
        "tools.benchmarks._floor", RHYTHMS, args.rounds,
        (str(args.leases), str(args.interval), str(args.window)),
        args.window + args.interval + 60,
    )


if __name__ == "__main__":
    main()
