"""Crash failover against an emulator that holds thousands of leftover Lease objects.

``python -m tools.benchmarks._leftovers [--leftover 5000] [--kills 3] [--unlabelled]`` starts
a fresh emulator, writes ``leftover`` Lease objects held for an hour by a process that is gone
(with trio_lease's ``app.kubernetes.io/managed-by`` label, or without it with
``--unlabelled``), then runs the runner's crash-failover benchmark (:meth:`run.Runner.failover`:
L = 15 s, R = 1.5 s, T = 1 s, 20 leases, SIGKILL the holder ``kills`` times) and prints each
lease's start after the kill minus L, in ms.

It is the experiment behind "The late failovers" in tools/benchmarks/README.md ("Design
measurements"): the steady and capacity steps of ``--full`` leave thousands of labelled Leases
behind, and a failover measured after them came seconds late.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import anyio

from . import _ours_watch
from ._procs import Emulator
from .run import Runner

TIMINGS = {"L": 15, "R": 1.5, "T": 1.0, "RD": 10, "n": 20}


def main() -> None:
    parser = argparse.ArgumentParser(description="Crash failover against leftover Leases.")
    parser.add_argument("--leftover", type=int, default=5000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--unlabelled", action="store_true")
    args = parser.parse_args()
    if args.unlabelled:
        _ours_watch.LABEL = {"app": "not-trio-lease"}
    with tempfile.TemporaryDirectory() as tmp:
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            started = time.monotonic()
            names = [f"leftover-{i}" for i in range(args.leftover)]
            anyio.run(_ours_watch._create, emulator.url, names, "gone")
            print(f"wrote {args.leftover} leftover Leases in {time.monotonic() - started:.1f} s")
            result = Runner(emulator, Path(tmp), None).failover("ours", TIMINGS, args.kills)
        finally:
            emulator.stop()
    late = sorted(round(t * 1000) for t in result["raw"]["kill_to_start_s"])
    excess = [t - TIMINGS["L"] * 1000 for t in late]
    print("start after the kill minus L, ms:", excess)
    print(json.dumps(result["excess_over_L_ms"]))


if __name__ == "__main__":
    main()
