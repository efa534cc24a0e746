"""The least client CPU any asyncio or trio client pays per request in the steady row's rhythm.

``python -m tools.benchmarks._floor [--rounds 3] [--leases 1000] [--interval 1.5]
[--window 15] [--only RHYTHM ...]`` starts the emulator (:mod:`._emulator`, its own process),
then, ``rounds`` times, runs each rhythm in a fresh worker process and prints the worker's CPU
time (``time.process_time``) per request. The first four send the same bytes the same way as the
``floor`` layer of :mod:`._layers`: a bare ``asyncio.Protocol`` on one of four connections sends a
GET of one Lease and waits for the reply's last byte (no parsing, no checks, no cancel scopes, no
watch), so what is measured is the machine, the event loop and the emulator's pace:

- ``back-to-back``: 20 tasks, each sending its next request as soon as its last reply is in
  (the ``floor`` layer's rhythm, the process never idle while a request is out);
- ``paced``: ``leases`` tasks, each sending one request every ``interval`` seconds, spread
  evenly (the steady row's rhythm: 1,000 leases renewed every 1.5 s);
- ``paced on a grid``: as ``paced``, each due time rounded down to a multiple of
  ``interval / 32``, so one wake-up starts about 30 requests (tools/benchmarks/README.md,
  "Design measurements": holders renew on this grid, ``trio_lease._algorithm.next_renewal``);
- ``timers only``: as ``paced`` with no request at all: each task only wakes up every
  ``interval`` seconds (CPU per wake-up, no I/O: the machine and the event loop alone);
- ``renewals paced`` and ``renewals on a grid``: the least a *renewal* costs any client in the
  steady row's rhythm: ``leases`` tasks, each with a Lease of its own, each sending a PUT of its
  object every ``interval`` seconds (new ``renewTime``, the ``resourceVersion`` of its last
  reply taken from the reply's bytes by one regular expression, the body by pydantic-core's
  ``to_json``, as trio_lease encodes its bodies), with
  one watch of the namespace open whose events are read and dropped (the steady row follows
  every lease on one watch, and each write comes back on it). Nothing is parsed or checked
  beyond that: the difference to the steady row is what the library itself does per renewal.

Each rhythm runs on asyncio and, as ``RHYTHM, trio``, on trio's own sockets (:mod:`trio.socket`:
the same bytes, each task sending on a free connection and reading the reply with ``recv``
until its last byte; the idle connections in a trio memory channel where asyncio has a queue;
the watch read and dropped by a task of its own; sleeps by :func:`trio.sleep`): what a bare
trio client pays, against which trio_lease on trio is measured as the asyncio rows measure it
on asyncio.

The difference between ``back-to-back`` and ``paced`` is what the process pays for waking up
between requests, on this machine, before any client does any work of its own; ``timers only``
shows that cost without the emulator (on the benchmark VM, about as much per wake-up as a
whole back-to-back request: tools/benchmarks/README.md, "Design measurements").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
from pydantic_core import to_json

from trio_lease import LeaseRecord
from trio_lease._algorithm import RENEWAL_TICKS
from trio_lease._http import request_head
from trio_lease._reply import encode_request
from trio_lease.backends.kubernetes import KubernetesBackend, resolve_config
from trio_lease.backends.kubernetes._times import format_micro_time

from ._common import FLOOR_CONNECTIONS, GcMeter, profiled
from ._layers import _Bare
from ._procs import rounds_of_workers

#: The grid rhythm's tick: the interval divided by this (the holders' own grid).
GRID = RENEWAL_TICKS

BASE_RHYTHMS = (
    "back-to-back", "paced", "paced on a grid", "timers only", "renewals paced",
    "renewals on a grid",
)
#: Every rhythm on asyncio, then on trio (``RHYTHM, trio``).
RHYTHMS = (*BASE_RHYTHMS, *(f"{rhythm}, trio" for rhythm in BASE_RHYTHMS))
CONNECTIONS = FLOOR_CONNECTIONS


async def _worker(kubeconfig: str, rhythm: str, leases: int, interval: float,
                  window: float) -> None:
    if rhythm.endswith(", trio"):
        from . import _floor_trio

        await _floor_trio.worker(kubeconfig, rhythm.removesuffix(", trio"), leases, interval,
                                 window)
        return
    backend = KubernetesBackend(resolve_config({"kubeconfig": kubeconfig}))
    name = f"floor-{os.getpid()}"
    await backend.create(LeaseRecord(name=name, holder="me", lease_duration=30.0))
    api = backend._api
    unary: Any = api._lease()._entry.unary
    if rhythm.startswith("renewals"):
        await _renewals(backend, unary, rhythm, leases, interval, window)
        return
    data = request_head(
        "GET", unary.url.prefix + api.item_path(name) + "?timeout=5s",
        [("Host", unary.url.netloc), *unary._headers, ("Accept", "application/json")],
    )
    idle = await _connections(unary)
    sent = 0
    tasks = 20 if rhythm == "back-to-back" else leases
    pace = 0.0 if rhythm == "back-to-back" else interval

    async def step(i: int) -> None:
        nonlocal sent
        if rhythm != "timers only":
            await _exchange(idle, data)
        sent += 1

    running = _paced(step, tasks, pace, interval / GRID if rhythm == "paced on a grid" else 0.0)
    # "requests" counts wake-ups in the timers-only rhythm.
    await _measure(rhythm, running, max(pace, 1.0) + 2.0, window, lambda: sent)


async def _connections(unary: Any) -> asyncio.Queue[tuple[asyncio.Transport, _Bare]]:
    """:data:`CONNECTIONS` idle connections to the emulator, each with a bare protocol."""
    loop = asyncio.get_running_loop()
    ssl: Any = {"ssl": unary._ssl, "server_hostname": unary._tls_hostname} if unary._ssl else {}
    idle: asyncio.Queue[tuple[asyncio.Transport, _Bare]] = asyncio.Queue()
    for _ in range(CONNECTIONS):
        transport, bare = await loop.create_connection(_Bare, unary._host, unary._port, **ssl)
        idle.put_nowait((transport, bare))
    return idle


async def _exchange(idle: asyncio.Queue[tuple[asyncio.Transport, _Bare]], data: bytes) -> bytes:
    """Send ``data`` on the next idle connection; the whole reply's bytes."""
    transport, bare = await idle.get()
    bare.done = asyncio.get_running_loop().create_future()
    transport.write(data)
    await bare.done
    idle.put_nowait((transport, bare))
    return bare.last


def _paced(step: Callable[[int], Awaitable[None]], tasks: int, pace: float,
           tick: float) -> list[asyncio.Future[None]]:
    """``tasks`` tasks, task ``i`` calling ``step(i)`` every ``pace`` seconds, their first due
    times spread evenly over one pace; each due time rounded down to a multiple of ``tick``
    when it is not 0 (the grid rhythms)."""
    loop = asyncio.get_running_loop()

    async def one(i: int) -> None:
        await asyncio.sleep(i * pace / tasks)
        due = loop.time()
        while True:
            due += pace
            at = (due // tick) * tick if tick else due
            await asyncio.sleep(max(0.0, at - loop.time()))
            await step(i)

    return [asyncio.ensure_future(one(i)) for i in range(tasks)]


async def _measure(rhythm: str, running: list[asyncio.Future[None]], warmup: float,
                   window: float, count: Callable[[], int]) -> None:
    """After ``warmup`` (every task in its rhythm), print the CPU per request in ``window``."""
    await asyncio.sleep(warmup)
    cpu, before = time.process_time(), count()
    with GcMeter() as gc_meter, profiled():  # TRIO_LEASE_BENCH_PROFILE, as the steady worker
        await asyncio.sleep(window)
    cpu, done = time.process_time() - cpu, count() - before
    failed = [task for task in running if task.done()]
    for task in running:
        task.cancel()
    if failed:
        failed[0].result()  # its error
    if done == 0:
        raise SystemExit(f"no reply in {window:g} s: the emulator did not answer ({rhythm})")
    print(json.dumps({"rhythm": rhythm, "requests": done, "us_per_request": cpu / done * 1e6,
                      "gc_us_per_request": sum(gc_meter.seconds) / done * 1e6}))


class _Drain(asyncio.Protocol):
    """A watch stream's bytes, dropped as they come."""

    def data_received(self, data: bytes) -> None:
        pass


_VERSION = re.compile(rb'"resourceVersion":"([0-9]+)"')


async def _renewals(backend: KubernetesBackend, unary: Any, rhythm: str, leases: int,
                    interval: float, window: float) -> None:
    """The ``renewals`` rhythms: a PUT of each task's own Lease, one watch open, no checks."""
    api = backend._api
    loop = asyncio.get_running_loop()
    ssl: Any = {"ssl": unary._ssl, "server_hostname": unary._tls_hostname} if unary._ssl else {}
    prefix = f"floor-{os.getpid()}"
    objects = []
    for i in range(leases):
        await backend.create(LeaseRecord(name=f"{prefix}-{i}", holder="me", lease_duration=30.0))
        reply = await unary.request(
            "GET", api.item_path(f"{prefix}-{i}"), headers=[("Accept", "application/json")]
        )
        objects.append(json.loads(reply.content))
    targets = [
        unary.url.prefix + api.item_path(obj["metadata"]["name"]) + "?timeout=5s" for obj in objects
    ]
    watch, _ = await loop.create_connection(_Drain, unary._host, unary._port, **ssl)
    watch.write(request_head(
        "GET", unary.url.prefix + api.collection_path() + "?watch=1&timeoutSeconds=3600",
        [("Host", unary.url.netloc), *unary._headers, ("Accept", "application/json")],
    ))
    idle = await _connections(unary)
    sent = 0
    headers = [("Host", unary.url.netloc), *unary._headers, ("Accept", "application/json"),
               ("Content-Type", "application/json")]

    async def step(i: int) -> None:
        nonlocal sent
        await bare_renewal(idle, objects[i], targets[i], headers)
        sent += 1

    tick = interval / GRID if rhythm == "renewals on a grid" else 0.0
    running = _paced(step, leases, interval, tick)
    try:
        await _measure(rhythm, running, interval + 2.0, window, lambda: sent)
    finally:
        watch.close()


async def bare_renewal(
    idle: asyncio.Queue[tuple[asyncio.Transport, _Bare]], obj: dict[str, Any], target: str,
    headers: list[tuple[str, str]],
) -> None:
    """One bare renewal of ``obj``: a new ``renewTime``, the body by ``to_json``, a PUT on
    an idle connection, the answer's version taken from its bytes by :data:`_VERSION`."""
    obj["spec"]["renewTime"] = format_micro_time(datetime.now(UTC))
    body = to_json(obj)
    data = encode_request("PUT", target, [*headers, ("Content-Length", str(len(body)))], body)
    reply = await _exchange(idle, data)
    found = _VERSION.search(reply)
    if found is None or not reply.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"a renewal was refused: {reply[:200]!r}")
    obj["metadata"]["resourceVersion"] = found.group(1).decode()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        kubeconfig, rhythm, leases, interval, window = sys.argv[2:7]
        anyio.run(_worker, kubeconfig, rhythm, int(leases), float(interval), float(window),
                  backend="trio" if rhythm.endswith(", trio") else "asyncio")
        return
    parser = argparse.ArgumentParser(description="Client CPU per request, by rhythm.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=1.5)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--only", action="append", choices=RHYTHMS, help="these rhythms only")
    args = parser.parse_args()
    rounds_of_workers(
        "tools.benchmarks._floor", tuple(args.only or RHYTHMS), args.rounds,
        (str(args.leases), str(args.interval), str(args.window)),
        args.window + args.interval + 60,
    )


if __name__ == "__main__":
    main()
