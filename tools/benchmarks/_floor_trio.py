"""The rhythms of :mod:`._floor` on trio's own sockets (``RHYTHM, trio``): a bare trio client.

The same bytes as the asyncio rhythms, sent the same way: each task takes an idle connection
(a trio memory channel of :data:`._common.FLOOR_CONNECTIONS`), sends with the trio socket's ``send``
and reads with ``recv`` until the reply's last byte by its Content-Length (no parsing, no
checks, no cancel scopes of its own); the watch's bytes are read and dropped by a task of their
own; every task sleeps with :func:`trio.sleep`. What is measured is the machine, trio and the
emulator's pace: trio_lease on trio adds its own work on top of it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import trio
from pydantic_core import to_json

from trio_lease import LeaseRecord
from trio_lease._algorithm import RENEWAL_TICKS as GRID
from trio_lease._http import request_head
from trio_lease._reply import encode_request
from trio_lease.backends.kubernetes import KubernetesBackend, resolve_config
from trio_lease.backends.kubernetes._times import format_micro_time

from ._common import FLOOR_CONNECTIONS as CONNECTIONS
from ._common import GcMeter, profiled

_VERSION = re.compile(rb'"resourceVersion":"([0-9]+)"')
Idle = tuple[trio.MemorySendChannel[trio.socket.SocketType],
             trio.MemoryReceiveChannel[trio.socket.SocketType]]


async def worker(kubeconfig: str, rhythm: str, leases: int, interval: float,
                 window: float) -> None:
    backend = KubernetesBackend(resolve_config({"kubeconfig": kubeconfig}))
    name = f"floor-{os.getpid()}"
    await backend.create(LeaseRecord(name=name, holder="me", lease_duration=30.0))
    api = backend._api
    unary: Any = api._lease()._entry.unary
    if unary._ssl is not None:
        raise SystemExit("the trio rhythms speak plain HTTP (the emulator's)")
    async with trio.open_nursery() as nursery:
        if rhythm.startswith("renewals"):
            await _renewals(nursery, backend, unary, rhythm, leases, interval, window)
        else:
            await _requests(nursery, unary, api.item_path(name), rhythm, leases, interval,
                            window)
        nursery.cancel_scope.cancel()


async def _requests(nursery: trio.Nursery, unary: Any, path: str, rhythm: str, leases: int,
                    interval: float, window: float) -> None:
    data = request_head(
        "GET", unary.url.prefix + path + "?timeout=5s",
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

    _paced(nursery, step, tasks, pace, interval / GRID if rhythm == "paced on a grid" else 0.0)
    await _measure(rhythm, max(pace, 1.0) + 2.0, window, lambda: sent)


async def _connect(unary: Any) -> trio.socket.SocketType:
    sock = trio.socket.socket()
    await sock.connect((unary._host, unary._port))
    return sock


async def _connections(unary: Any) -> Idle:
    """:data:`CONNECTIONS` idle connections to the emulator."""
    send, receive = trio.open_memory_channel[trio.socket.SocketType](CONNECTIONS)
    for _ in range(CONNECTIONS):
        send.send_nowait(await _connect(unary))
    return send, receive


async def _exchange(idle: Idle, data: bytes) -> bytes:
    """Send ``data`` on the next idle connection; the whole reply's bytes."""
    sock = await idle[1].receive()
    await sock.send(data)
    buffer = b""
    while True:
        buffer += await sock.recv(65536)
        head_end = buffer.find(b"\r\n\r\n")
        if head_end < 0:
            continue
        length = int(buffer.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
        if len(buffer) >= head_end + 4 + length:
            break
    idle[0].send_nowait(sock)
    return buffer


def _paced(nursery: trio.Nursery, step: Callable[[int], Awaitable[None]], tasks: int,
           pace: float, tick: float) -> None:
    """As :func:`._floor._paced`, on trio."""

    async def one(i: int) -> None:
        await trio.sleep(i * pace / tasks)
        due = trio.current_time()
        while True:
            due += pace
            at = (due // tick) * tick if tick else due
            await trio.sleep(max(0.0, at - trio.current_time()))
            await step(i)

    for i in range(tasks):
        nursery.start_soon(one, i)


async def _measure(rhythm: str, warmup: float, window: float, count: Callable[[], int]) -> None:
    await trio.sleep(warmup)
    cpu, before = time.process_time(), count()
    with GcMeter() as gc_meter, profiled():  # TRIO_LEASE_BENCH_PROFILE, as the steady worker
        await trio.sleep(window)
    cpu, done = time.process_time() - cpu, count() - before
    if done == 0:
        raise SystemExit(f"no reply in {window:g} s: the emulator did not answer ({rhythm})")
    print(json.dumps({"rhythm": f"{rhythm}, trio", "requests": done,
                      "us_per_request": cpu / done * 1e6,
                      "gc_us_per_request": sum(gc_meter.seconds) / done * 1e6}), flush=True)


async def _drain(sock: trio.socket.SocketType) -> None:
    """A watch stream's bytes, dropped as they come."""
    while await sock.recv(65536):
        pass


async def _renewals(nursery: trio.Nursery, backend: KubernetesBackend, unary: Any, rhythm: str,
                    leases: int, interval: float, window: float) -> None:
    """As :func:`._floor._renewals`, on trio."""
    api = backend._api
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
    watch = await _connect(unary)
    await watch.send(request_head(
        "GET", unary.url.prefix + api.collection_path() + "?watch=1&timeoutSeconds=3600",
        [("Host", unary.url.netloc), *unary._headers, ("Accept", "application/json")],
    ))
    nursery.start_soon(_drain, watch)
    idle = await _connections(unary)
    sent = 0
    headers = [("Host", unary.url.netloc), *unary._headers, ("Accept", "application/json"),
               ("Content-Type", "application/json")]

    async def step(i: int) -> None:
        nonlocal sent
        obj = objects[i]
        obj["spec"]["renewTime"] = format_micro_time(datetime.now(UTC))
        body = to_json(obj)
        data = encode_request(
            "PUT", targets[i], [*headers, ("Content-Length", str(len(body)))], body
        )
        reply = await _exchange(idle, data)
        found = _VERSION.search(reply)
        if found is None or not reply.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"a renewal was refused: {reply[:200]!r}")
        obj["metadata"]["resourceVersion"] = found.group(1).decode()
        sent += 1

    tick = interval / GRID if rhythm == "renewals on a grid" else 0.0
    _paced(nursery, step, leases, interval, tick)
    await _measure(rhythm, interval + 2.0, window, lambda: sent)
