"""Client CPU per request at each layer of a Kubernetes renewal, against the emulator.

``python -m tools.benchmarks._layers [--rounds 5] [--concurrency 20] [--count 300]`` starts the
emulator (:mod:`._emulator`, its own process), then, ``rounds`` times, runs each layer in a fresh
worker process: ``concurrency`` tasks, each sending ``count`` requests one after another, and
prints the worker's CPU time (``time.process_time``) per request. Layers, from the bottom:

- ``floor``: the least any asyncio client pays for that GET on this machine: a bare
  ``asyncio.Protocol`` on the same TLS connection sends the same request bytes and waits for the
  reply's last byte (Content-Length only, no parsing, no checks, no cancel scopes);
- ``lean``: ``LeanClient.request`` (trio_lease._lean_http), a GET of one Lease;
- ``update``: ``KubernetesBackend.update``, a renewal's PUT with its checks, cache and records.

Each layer runs on asyncio and, as ``LAYER, trio``, on trio; the trio floor sends the same bytes
on a bare :mod:`trio.socket` socket and reads with ``recv`` until the reply's last byte.

Every number on this VM moves between runs by more than some of the differences measured
(tools/benchmarks/README.md); compare two trees by running this in both, alternating, and
compare medians. The whole-process figure with the heartbeat and the shared watch is
``--only renewal_cpu`` of the runner.
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
from trio_lease._http import request_head
from trio_lease.backends.kubernetes import KubernetesBackend, resolve_config

from ._procs import rounds_of_workers

BASE_LAYERS = ("floor", "lean", "update")
#: Every layer on asyncio, then on trio (``LAYER, trio``).
LAYERS = (*BASE_LAYERS, *(f"{layer}, trio" for layer in BASE_LAYERS))


async def _worker(kubeconfig: str, kind: str, concurrency: int, count: int) -> None:
    layer = kind.removesuffix(", trio")
    backend = KubernetesBackend(resolve_config({"kubeconfig": kubeconfig}))
    names = [f"layers-{os.getpid()}-{i}" for i in range(concurrency)]
    records = {
        name: await backend.create(
            LeaseRecord(name=name, holder="me", lease_duration=30.0, fencing_token=1)
        )
        for name in names
    }
    api = backend._api
    unary = api._lease()._entry.unary

    async def one(name: str) -> None:
        if layer == "floor":
            floor = _floor if kind == layer else _floor_trio
            await floor(unary, api.item_path(name) + "?timeout=5s", count)
            return
        record = records[name]
        for _ in range(count):
            if layer == "update":
                record = await backend.update(record, record.version)
            else:
                await unary.request(
                    "GET", api.item_path(name) + "?timeout=5s",
                    headers=[("Accept", "application/json")],
                )

    started = time.process_time()
    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(one, name)
    cpu = time.process_time() - started
    print(json.dumps({"layer": kind, "us_per_request": cpu / (concurrency * count) * 1e6}))


class _Bare(asyncio.Protocol):
    """Counts a reply's bytes up to the end its Content-Length gives; nothing else."""

    def __init__(self) -> None:
        self.buffer = b""
        self.last = b""  # the last whole reply
        self.done: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            return
        length = int(self.buffer.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
        if len(self.buffer) >= head_end + 4 + length:
            self.last, self.buffer = self.buffer, b""
            if self.done is not None:
                self.done.set_result(None)


async def _floor(unary: Any, target: str, count: int) -> None:
    loop = asyncio.get_running_loop()
    data = request_head(
        "GET",
        unary.url.prefix + target,
        [("Host", unary.url.netloc), *unary._headers, ("Accept", "application/json")],
    )
    transport, bare = await loop.create_connection(
        _Bare, unary._host, unary._port, ssl=unary._ssl,
        server_hostname=unary._tls_hostname if unary._ssl is not None else None,
    )
    for _ in range(count):
        bare.done = loop.create_future()
        transport.write(data)
        await bare.done
    transport.close()


async def _floor_trio(unary: Any, target: str, count: int) -> None:
    """The floor on trio: the same bytes on a bare trio socket, read to the reply's end."""
    import trio

    if unary._ssl is not None:
        raise SystemExit("the trio floor speaks plain HTTP (the emulator's)")
    data = request_head(
        "GET",
        unary.url.prefix + target,
        [("Host", unary.url.netloc), *unary._headers, ("Accept", "application/json")],
    )
    sock = trio.socket.socket()
    await sock.connect((unary._host, unary._port))
    bare = _Bare()
    for _ in range(count):
        await sock.send(data)
        bare.last = b""
        while not bare.last:
            bare.data_received(await sock.recv(65536))
    sock.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        kubeconfig, layer, concurrency, count = sys.argv[2:6]
        anyio.run(_worker, kubeconfig, layer, int(concurrency), int(count),
                  backend="trio" if layer.endswith(", trio") else "asyncio")
        return
    parser = argparse.ArgumentParser(description="Client CPU per request at each layer.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
    rounds_of_workers(
        "tools.benchmarks._layers", LAYERS, args.rounds,
        (str(args.concurrency), str(args.count)), 300,
    )


if __name__ == "__main__":
    main()
