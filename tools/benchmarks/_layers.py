"""Client CPU per request at each layer of a Kubernetes renewal, against the emulator.

``python -m tools.benchmarks._layers [--rounds 5] [--concurrency 20] [--count 300]`` starts the
emulator (:mod:`._emulator`, its own process), then, ``rounds`` times, runs each layer in a fresh
worker process: ``concurrency`` tasks, each sending ``count`` requests one after another, and
prints the worker's CPU time (``time.process_time``) per request. Layers, from the bottom:

- ``lean``: ``LeanClient.request`` (trio_lease._lean_http), a GET of one Lease;
- ``update``: ``KubernetesBackend.update``, a renewal's PUT with its checks, cache and records.

Every number on this VM moves between runs by more than some of the differences measured
(tools/benchmarks/README.md); compare two trees by running this in both, alternating, and
compare medians. The whole-process figure with the heartbeat and the shared watch is
``--only renewal_cpu`` of the runner.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from trio_lease import LeaseRecord
from trio_lease.backends.kubernetes import KubernetesBackend, resolve_config

from ._procs import Emulator, Proc

LAYERS = ("lean", "update")


async def _worker(kubeconfig: str, layer: str, concurrency: int, count: int) -> None:
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
    print(json.dumps({"layer": layer, "us_per_request": cpu / (concurrency * count) * 1e6}))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        kubeconfig, layer, concurrency, count = sys.argv[2:6]
        anyio.run(_worker, kubeconfig, layer, int(concurrency), int(count))
        return
    parser = argparse.ArgumentParser(description="Client CPU per request at each layer.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
    results: dict[str, list[float]] = {layer: [] for layer in LAYERS}
    with tempfile.TemporaryDirectory() as tmp:
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            for _ in range(args.rounds):
                for layer in LAYERS:
                    proc = Proc(
                        "tools.benchmarks._layers", "worker", str(emulator.kubeconfig), layer,
                        str(args.concurrency), str(args.count),
                    )
                    try:
                        line = json.loads(proc.readline(300))
                    finally:
                        proc.stop()
                    results[layer].append(line["us_per_request"])
        finally:
            emulator.stop()
    for layer, values in results.items():
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"{layer}: median {statistics.median(values):.0f} µs per request ({runs})")


if __name__ == "__main__":
    main()
