"""Steady rows side by side on a shared machine: rounds that alternate loops and source trees.

``python -m tools.benchmarks._alternate [--rounds 3] [--leases 1000] [--window 30]
[--lib ours --lib ours-trio ...] [--tree DIR ...] [--out DIR]`` runs the ``steady`` scenario
(:mod:`._ours`, against the emulator, at the timings of the full run) ``rounds`` times for each
lib and tree, one after another in each round (round 1: every lib on every tree, then round
2, ...), so that whatever else loads the machine hits every row alike. ``--tree`` names other
checkouts of the repository (the code before a change, say): their workers import that tree's
``trio_lease`` and ``tools``. ``--backend memory`` runs the rows on one process's memory
backend instead of the emulator: the core's own cost per renewal (heartbeat, scopes, sleeps),
no I/O. ``--floor`` adds, in each round after each tree's rows, the bare client of
:mod:`._floor` in the same rhythm ("renewals on a grid", ``leases`` leases every R) on each
loop a lib runs on (asyncio for ``ours`` and ``ours-uvloop``, trio's own sockets for
``ours-trio``), and prints what trio_lease adds above its loop's floor, per round. Every run
records the load average before and after it; the document goes to
``<out>/alternate-<backend>.json``, the medians are printed.

Client CPU is the worker's ``time.process_time()`` over the window, as in the full run; compare
rows of one run only (tools/benchmarks/README.md, "Running them").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from ._common import machine, now
from ._procs import ROOT, Emulator, Proc
from .run import ACQUIRE_RATE, FULL, Runner, derive_steady

LIBS = ("ours", "ours-trio", "ours-uvloop")
#: The bare client's rhythm each lib's row is compared with (:mod:`._floor`), by the lib's loop.
FLOOR_RHYTHM = "renewals on a grid"


def _floor_loop(lib: str) -> str:
    return "trio" if lib == "ours-trio" else "asyncio"


def _floor_row(emulator: Emulator, loop: str, leases: int, window: float) -> dict[str, Any]:
    """The bare client in the steady row's rhythm on ``loop``, in a fresh worker."""
    rhythm = FLOOR_RHYTHM if loop == "asyncio" else f"{FLOOR_RHYTHM}, trio"
    interval = FULL["steady"]["R"]
    proc = Proc("tools.benchmarks._floor", "worker", str(emulator.kubeconfig), rhythm,
                str(leases), str(interval), str(window))
    try:
        line: dict[str, Any] = json.loads(proc.readline(window + interval + 60))
    finally:
        proc.stop()
    return {"rhythm": rhythm, "client_cpu_us_per_renewal": line["us_per_request"],
            "client_gc_us_per_renewal": line["gc_us_per_request"]}


def _memory_row(runner: Runner, lib: str, leases: int, window: float) -> dict[str, Any]:
    """One steady row on the memory backend (no emulator, no I/O)."""
    params = {**runner.base(lib, "memory", FULL["steady"]), "backend": "memory"}
    params.pop("kubeconfig", None)
    params.update(n=leases, window=window, ramp=max(params["R"], leases / ACQUIRE_RATE))
    raw = runner.worker(lib, "steady", params, params["ramp"] + window + 180)
    return {"params": params, "raw": raw, **derive_steady(raw, params)}


def run(libs: list[str], trees: list[Path], rounds: int, leases: int, window: float,
        out: Path, backend: str = "kube", floor: bool = False) -> dict[str, Any]:
    """The rounds; returns (and writes) the document."""
    doc: dict[str, Any] = {
        "machine": machine("alternate"),
        "plan": {"rounds": rounds, "leases": leases, "window": window, "libs": libs,
                 "trees": [str(t) for t in trees], "timings": FULL["steady"],
                 "backend": backend, "floor": floor},
        "runs": [],
    }
    started = now()
    with tempfile.TemporaryDirectory(prefix="trio-lease-alternate-") as tmp:
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            runner = Runner(emulator, Path(tmp), None)
            for round_ in range(rounds):
                for tree in trees:
                    runner.tree = tree
                    for lib in libs:
                        load_before = os.getloadavg()
                        if backend == "memory":
                            row = _memory_row(runner, lib, leases, window)
                        else:
                            row = runner.steady(lib, leases, window, FULL["steady"])
                        run_ = {
                            "round": round_, "tree": str(tree), "lib": lib,
                            "loadavg_before": list(load_before),
                            "loadavg_after": list(os.getloadavg()), **row,
                        }
                        doc["runs"].append(run_)
                        print(json.dumps({k: run_.get(k) for k in (
                            "round", "tree", "lib", "held", "losses", "renewals",
                            "client_cpu_us_per_renewal", "client_gc_us_per_renewal",
                            "loadavg_before", "loadavg_after",
                        )}), flush=True)
                if floor:
                    for loop in dict.fromkeys(_floor_loop(lib) for lib in libs):
                        load_before = os.getloadavg()
                        runner.emulator.restart()
                        run_ = {
                            "round": round_, "tree": "floor", "lib": loop,
                            "loadavg_before": list(load_before),
                            **_floor_row(runner.emulator, loop, leases, window),
                            "loadavg_after": list(os.getloadavg()),
                        }
                        doc["runs"].append(run_)
                        print(json.dumps(run_), flush=True)
        finally:
            runner.emulator.stop()
    doc["machine"]["loadavg_end"] = list(os.getloadavg())
    doc["machine"]["duration_s"] = now() - started
    out.mkdir(parents=True, exist_ok=True)
    (out / f"alternate-{backend}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return doc


def medians(doc: dict[str, Any]) -> list[str]:
    """One line per tree and lib: the median CPU per renewal and every run's."""
    lines = []
    for tree in doc["plan"]["trees"]:
        for lib in doc["plan"]["libs"]:
            values = [r["client_cpu_us_per_renewal"] for r in doc["runs"]
                      if r["tree"] == tree and r["lib"] == lib
                      and r["client_cpu_us_per_renewal"] is not None]
            if values:
                runs = ", ".join(f"{v:.0f}" for v in values)
                lines.append(f"{tree} {lib}: median {statistics.median(values):.0f} µs per "
                             f"renewal ({runs})")
            lines.extend(_collector(doc, tree, lib))
    if doc["plan"].get("floor"):
        lines.extend(_above_floor(doc))
    return lines


def _collector(doc: dict[str, Any], tree: str, lib: str) -> list[str]:
    """The garbage collector's part of a row's CPU per renewal, median over rounds (rows of
    trees whose workers do not measure it have none)."""
    values = [r["client_gc_us_per_renewal"] for r in doc["runs"]
              if r["tree"] == tree and r["lib"] == lib and r.get("client_gc_us_per_renewal")]
    if not values:
        return []
    runs = ", ".join(f"{v:.0f}" for v in values)
    return [f"{tree} {lib}: of it the garbage collector, median "
            f"{statistics.median(values):.0f} µs per renewal ({runs})"]


def _above_floor(doc: dict[str, Any]) -> list[str]:
    """Per lib: the floor of its loop, what the lib adds above it and its ratio to it, median
    over rounds (each round's row against the floor measured in that round)."""
    lines = []
    floors = {(r["round"], r["lib"]): r["client_cpu_us_per_renewal"]
              for r in doc["runs"] if r["tree"] == "floor"}
    for loop in dict.fromkeys(_floor_loop(lib) for lib in doc["plan"]["libs"]):
        values = [v for (_, lib), v in floors.items() if lib == loop]
        runs = ", ".join(f"{v:.0f}" for v in values)
        lines.append(f"floor {loop}: median {statistics.median(values):.0f} µs per renewal "
                     f"({runs})")
        lines.extend(_collector(doc, "floor", loop))
    for tree in doc["plan"]["trees"]:
        for lib in doc["plan"]["libs"]:
            rows = [(r["client_cpu_us_per_renewal"], floors[(r["round"], _floor_loop(lib))])
                    for r in doc["runs"] if r["tree"] == tree and r["lib"] == lib
                    and r["client_cpu_us_per_renewal"] is not None]
            if rows:
                above = [ours - floor for ours, floor in rows]
                runs = ", ".join(f"{v:.0f}" for v in above)
                lines.append(f"{tree} {lib} above its floor: median "
                             f"{statistics.median(above):.0f} µs per renewal ({runs})")
                # Each round's row against its loop's floor in that round (the target's measure).
                ratios = [ours / floor for ours, floor in rows]
                runs = ", ".join(f"{v:.2f}" for v in ratios)
                lines.append(f"{tree} {lib} against its floor: median "
                             f"{statistics.median(ratios):.2f}× ({runs})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description="Steady rows in alternating rounds.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--lib", action="append", choices=LIBS, help="default: all three")
    parser.add_argument("--tree", action="append", type=Path, default=None,
                        help="a checkout to measure as well (repeatable; this one first)")
    parser.add_argument("--backend", choices=("kube", "memory"), default="kube")
    parser.add_argument("--floor", action="store_true",
                        help="the bare client on each loop too, in each round (kube only)")
    parser.add_argument("--out", type=Path, default=ROOT / "tools/benchmarks/results/alternate")
    args = parser.parse_args()
    trees = [ROOT, *[t.resolve() for t in args.tree or []]]
    if args.floor and args.backend != "kube":
        parser.error("--floor measures the bare client against the emulator: --backend kube")
    doc = run(list(args.lib or LIBS), trees, args.rounds, args.leases, args.window, args.out,
              args.backend, args.floor)
    print("\n".join(medians(doc)))


if __name__ == "__main__":
    main()
