"""Run every benchmark and write the results: ``python -m tools.benchmarks --smoke|--full``.

One emulator process (plain HTTP on loopback) serves every Kubernetes scenario; each scenario
runs in a fresh worker process (``tools.benchmarks._ours`` for trio_lease,
``tools.benchmarks._theirs`` for kubernetes_asyncio), one at a time, so their CPU figures do not
mix. The raw results, the parameters, the machine and its load go to ``<out>/<mode>.json`` and the
tables to ``<out>/<mode>.md`` (default ``tools/benchmarks/results``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import _one_watch
from ._common import machine, now, summary
from ._procs import ROOT, Emulator, Proc
from ._report import render

Params = dict[str, Any]

BENCHMARKS = ["steady", "capacity", "confirm", "pool", "handover", "cold", "loss", "failover",
              *_one_watch.NAMES]

#: Acquisitions per second while a steady run builds up its leases. An acquisition costs two
#: requests (GET 404, POST); much faster ramps overload a loaded 2-core machine and the
#: acquisitions then starve the renewals (README, "Design measurements").
ACQUIRE_RATE = 100

#: HTTP client alternatives for trio_lease: requests in flight, connections, idle connections
#: kept alive, and whether unary requests take the lean HTTP/1.1 path (trio_lease._http) or
#: httpx. "httpx default" is httpx with its own pool limits and no in-flight cap.
POOLS: dict[str, list[int | bool | None]] = {
    "httpx default (100 conns, 20 idle, no cap)": [1_000_000, 100, 20, False],
    "httpx, cap 100, 100 idle": [100, None, 100, False],
    "httpx, cap 16, 16 idle": [16, None, 16, False],
    "httpx, cap 4, 4 idle": [4, None, 4, False],
    "httpx, cap 1, 1 idle": [1, None, 1, False],
    "lean HTTP/1.1, cap 16, 16 idle": [16, None, 16, True],
    "lean HTTP/1.1, cap 4, 4 idle (chosen)": [4, None, 4, True],
}
#: Timings. "steady": a 15 s timeout and 1.5 s interval (kubernetes_asyncio:
#: lease_duration 15, renew_deadline 10, retry_period 1.5). The smoke run shortens them.
FULL: Params = {
    "steady": {"L": 15, "R": 1.5, "T": 1.0, "RD": 10, "n": 1000, "window": 60.0},
    "steady_side_window": 30.0,
    "capacity_ours": [100, 200, 300, 400, 500, 750, 1000],
    "capacity_theirs": [100, 200, 500],
    "capacity_window": 40.0,
    # The largest step that passed (under 20 % of a core) held again for 10 minutes.
    "capacity_confirm_window": 600.0,
    "trio_n": 1000,
    "pool_n": 500,
    "pool_window": 20.0,
    "pools": list(POOLS),
    "latency": {"L": 15, "R": 1.5, "T": 1.0, "RD": 10},
    "trials": 30,
    "loss_n": 20,
    "failover": {"L": 15, "R": 1.5, "T": 1.0, "RD": 10, "n": 20, "kills": 2},
    "failover_libs": ["ours", "theirs", "sqlite", "etcd"],
    "sqlite_n": 1000,
    "etcd_n": 1000,
    "shared_watch": _one_watch.FULL,
}
SMOKE: Params = {
    "steady": {"L": 2, "R": 0.5, "T": 0.15, "RD": 1.5, "stop": 0.3, "n": 10, "window": 1.0},
    "steady_side_window": 1.0,
    "capacity_ours": [20],
    "capacity_theirs": [],
    "capacity_window": 1.0,
    "capacity_confirm_window": 1.0,
    "trio_n": 10,
    "pool_n": 10,
    "pool_window": 1.0,
    "pools": [
        "httpx default (100 conns, 20 idle, no cap)", "lean HTTP/1.1, cap 4, 4 idle (chosen)"
    ],
    "latency": {"L": 2, "R": 0.5, "T": 0.15, "RD": 1.5, "stop": 0.3},
    "trials": 3,
    "loss_n": 2,
    "failover": {"L": 2, "R": 0.5, "T": 0.15, "RD": 1.5, "stop": 0.3, "n": 2, "kills": 1},
    "failover_libs": ["ours", "theirs"],
    "sqlite_n": 10,
    "etcd_n": 10,
    "shared_watch": _one_watch.SMOKE,
}


def _theirs_timings(p: Params) -> Params:
    """kubernetes_asyncio and the official elector need retry_period >= 1 s (their R)."""
    return {**p, "R": max(p["R"], 1.0)}


class Runner:
    """Runs the scenarios against one emulator and collects raw results."""

    def __init__(self, emulator: Emulator, workdir: Path, etcd: list[str] | None) -> None:
        self.emulator = emulator
        self.workdir = workdir
        self.etcd = etcd  # endpoints of the etcd server, None when there is none
        self.counter = 0
        self.tree = ROOT  # the source tree the workers import (tools.benchmarks._alternate)

    def _prefix(self, label: str) -> str:
        self.counter += 1
        return f"{label}-{self.counter}"

    def worker(self, lib: str, scenario: str, params: Params, timeout: float,
               module: str | None = None) -> Params:
        """One scenario in a fresh worker; brackets ``steady`` windows with emulator counts."""
        proc = Proc(module or _module(lib), scenario, json.dumps(params), cwd=self.tree)
        emulator: Params = {}
        try:
            while True:
                event = proc.event(timeout)
                if event["event"] == "start":
                    if params.get("backend") == "kube":
                        self.emulator.command("reset")
                    proc.send("go")
                elif event["event"] == "end":
                    if params.get("backend") == "kube":
                        emulator = self.emulator.command("stats")
                    proc.send("go")
                elif event["event"] == "result":
                    event.pop("event")
                    return {**event, "emulator": emulator} if emulator else event
        finally:
            proc.stop()

    def base(self, lib: str, label: str, timings: Params) -> Params:
        elector = lib in ("theirs", "official")
        params: Params = {**(_theirs_timings(timings) if elector else timings)}
        params["prefix"] = self._prefix(label)
        if lib == "sqlite":
            params.update(backend="sqlite", path=str(self.workdir / f"{params['prefix']}.db"))
        elif lib == "etcd":
            assert self.etcd is not None
            params.update(backend="etcd", endpoints=self.etcd)
        else:
            params.update(backend="kube", kubeconfig=str(self.emulator.kubeconfig))
        params["anyio_backend"] = "trio" if lib == "ours-trio" else "asyncio"
        if lib == "ours-uvloop":
            params["uvloop"] = True  # asyncio on uvloop's event loop (tools.benchmarks._ours)
        return params

    def steady(self, lib: str, n: int, window: float, timings: Params, module: str | None = None,
               scenario: str = "steady", **extra: Any) -> Params:
        params = {**self.base(lib, "steady", timings), **extra}
        params.update(n=n, window=window, ramp=max(params["R"], n / ACQUIRE_RATE))
        if params["backend"] == "kube":
            # Fresh: earlier steps' Leases fill the shared watch's first LIST
            # (README, "Design measurements").
            self.emulator.restart()
        raw = self.worker(lib, scenario, params, params["ramp"] + window + 180, module)
        return {"params": params, "raw": raw, **derive_steady(raw, params)}

    def latency(self, lib: str, scenario: str, timings: Params, **extra: Any) -> Params:
        params = {**self.base(lib, scenario, timings), **extra}
        raw = self.worker(lib, scenario, params, timeout=600)
        key = next(k for k in raw if k.endswith("_s"))
        out: Params = {"params": params, "raw": raw, key.removesuffix("_s") + "_ms": _ms(raw[key])}
        if "noticed_to_cancel_s" in raw:
            out["noticed_to_cancel_ms"] = _ms(raw["noticed_to_cancel_s"])
        return out

    def failover(self, lib: str, timings: Params, kills: int) -> Params:
        """SIGKILL a holder of n leases; when did a successor's body start, minus L."""
        since_kill: list[float] = []
        for _ in range(kills):
            params = {**self.base(lib, "failover", timings)}
            holder = Proc(_module(lib), "hold", json.dumps(params))
            successor: Proc | None = None
            try:
                if holder.event(120)["event"] != "ready":
                    raise RuntimeError("holder did not get ready")
                successor = Proc(_module(lib), "succeed", json.dumps(params))
                if successor.event(120)["event"] != "waiting":
                    raise RuntimeError("successor did not start waiting")
                time.sleep(random.uniform(0, params["R"]))
                killed_at = now()
                holder.kill()
                result = successor.event(params["L"] * 3 + 90)
                since_kill += [t - killed_at for t in result["started_at"].values()]
            finally:
                holder.stop()
                if successor is not None:
                    successor.stop()
        L = timings["L"]
        return {
            "params": {**timings, "kills": kills},
            "raw": {"kill_to_start_s": since_kill},
            "kill_to_start_ms": _ms(since_kill),
            "excess_over_L_ms": _ms([t - L for t in since_kill]),
        }


ETCD_MISSING = (
    "etcd binary not found: install it (Debian/Ubuntu: `apt-get install etcd-server`) or set "
    "TRIO_LEASE_ETCD_BINARY"
)
UVLOOP_MISSING = "uvloop is not installed (it comes with the test extras: pip install -e '.[test]')"


@contextlib.contextmanager
def _etcd() -> Iterator[list[str] | None]:
    """A real single-member etcd on a free loopback port, or None when there is no binary."""
    from tests.etcd_server import etcd_binary, etcd_cluster

    if etcd_binary() is None:
        yield None
        return
    with etcd_cluster(size=1) as cluster:
        yield cluster.endpoints


def _knee(steps: list[Params]) -> int | None:
    """The largest step with 0 losses, >= 95 % of renewals and < 20 % of a core."""
    passed = [
        s["params"]["n"] for s in steps
        if s["losses"] == 0 and s["renewal_rate_of_nominal"] > 0.95
        and s["held"] == s["params"]["n"] and s["client_cpu_pct_of_core"] < 20
    ]
    return max(passed) if passed else None


def _module(lib: str) -> str:
    if lib in ("theirs", "official"):
        return f"tools.benchmarks._{lib}"
    return "tools.benchmarks._ours"


def _ms(seconds: list[float]) -> dict[str, float]:
    return summary([s * 1000 for s in seconds])


def derive_steady(raw: Params, params: Params) -> Params:
    """Requests per renewal, CPU per renewal, CPU share, achieved renewal rate."""
    emu = raw.get("emulator") or {}
    status = emu.get("by_status", {})
    renewals = status.get("PUT 200", 0) if emu else raw.get("renewals", 0)
    wall = raw["wall_s"]
    nominal = raw["held"] / params["R"] * wall
    out: Params = {
        "held": raw["held"],
        "losses": raw["losses"],
        "renewals": renewals,
        "renewal_rate_of_nominal": renewals / nominal if nominal else 0.0,
        "client_cpu_us_per_renewal": raw["cpu_s"] / renewals * 1e6 if renewals else None,
        "client_cpu_pct_of_core": 100 * raw["cpu_s"] / wall,
    }
    if "gc_s" in raw and renewals:
        # The collector's share: part of the CPU per renewal above (_common.GcMeter).
        out["client_gc_us_per_renewal"] = sum(raw["gc_s"]) / renewals * 1e6
        out["gc_collections"] = raw["gc_collections"]
    if emu:
        out["requests_per_renewal"] = emu["requests"] / renewals if renewals else None
        out["emulator_cpu_pct_of_core"] = 100 * emu["cpu_s"] / emu["wall_s"]
        out["requests_by_method"] = emu["by_method"]
    return out


def run(mode: str, out: Path, only: set[str] | None = None) -> Params:
    """Every benchmark of ``mode``; returns (and writes) the results document."""
    plan = FULL if mode == "full" else SMOKE
    results: Params = {"machine": machine(mode), "plan": plan, "results": {}}
    res = results["results"]
    started = now()
    steady, latency = plan["steady"], plan["latency"]

    def want(name: str) -> bool:
        return only is None or name in only

    with tempfile.TemporaryDirectory(prefix="trio-lease-bench-") as tmp, _etcd() as etcd:
        if etcd is None:
            results["etcd_skipped"] = ETCD_MISSING
            print(f"etcd rows skipped: {ETCD_MISSING}", file=sys.stderr)
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            runner = Runner(emulator, Path(tmp), etcd)
            libs = ("ours", "theirs")
            side = ("sqlite", "etcd") if etcd is not None else ("sqlite",)
            if want("steady"):
                res["steady"] = {
                    lib: runner.steady(lib, steady["n"], steady["window"], steady)
                    for lib in libs
                }
                res["steady"]["ours-trio"] = runner.steady(
                    "ours-trio", plan["trio_n"], plan["steady_side_window"], steady
                )
                if importlib.util.find_spec("uvloop") is not None:
                    res["steady"]["ours-uvloop"] = runner.steady(
                        "ours-uvloop", steady["n"], plan["steady_side_window"], steady
                    )
                else:
                    results["uvloop_skipped"] = UVLOOP_MISSING
                    print(f"uvloop row skipped: {UVLOOP_MISSING}", file=sys.stderr)
                for lib in side:
                    res["steady"][f"ours-{lib}"] = runner.steady(
                        lib, plan[f"{lib}_n"], plan["steady_side_window"], steady
                    )
            if want("capacity"):
                res["capacity"] = {
                    lib: [runner.steady(lib, n, plan["capacity_window"], steady)
                          for n in plan[f"capacity_{lib}"]]
                    for lib in libs
                }
            if want("confirm") and "capacity" in res:
                # The knee, held for the confirmation window (10 minutes in --full).
                res["capacity_confirm"] = {}
                for lib in libs:
                    knee = _knee(res["capacity"][lib])
                    if knee is not None:
                        res["capacity_confirm"][lib] = runner.steady(
                            lib, knee, plan["capacity_confirm_window"], steady
                        )
            if want("pool"):
                res["pool"] = {
                    label: runner.steady("ours", plan["pool_n"], plan["pool_window"], steady,
                                         pool=pool)
                    for label, pool in POOLS.items() if label in plan["pools"]
                }
            if any(want(name) for name in ("handover", "cold", "loss", "failover")):
                # Latencies against a fresh emulator: earlier steps leave thousands of Leases
                # behind (README, "Design measurements": failovers late against them).
                emulator.stop()
                emulator = runner.emulator = Emulator(Path(tmp) / "kubeconfig")
            if want("handover"):
                res["handover"] = {
                    lib: runner.latency(lib, "handover", latency, trials=plan["trials"])
                    for lib in (*libs, *side)
                }
            if want("cold"):
                res["cold"] = {
                    lib: runner.latency(lib, "cold", latency, trials=plan["trials"])
                    for lib in (*libs, *side)
                }
            if want("loss"):
                res["loss"] = {
                    lib: runner.latency(lib, "loss", latency, n=plan["loss_n"]) for lib in libs
                }
            if want("failover"):
                failover = plan["failover"]
                res["failover"] = {
                    lib: runner.failover(lib, failover, failover["kills"])
                    for lib in plan["failover_libs"] if lib != "etcd" or etcd is not None
                }
            res.update(_one_watch.run_all(runner, plan["shared_watch"], want))
        finally:
            emulator.stop()
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    results["machine"]["duration_s"] = now() - started
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{mode}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out / f"{mode}.md").write_text(render(results))
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--smoke`` (default) or ``--full``, ``--out DIR``, ``--only NAME``."""
    parser = argparse.ArgumentParser(prog="python -m tools.benchmarks", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--smoke", action="store_true", help="seconds; checks that all runs")
    group.add_argument("--full", action="store_true", help="the recorded numbers (~20 min)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--only", action="append", default=None, choices=BENCHMARKS,
                        help="run only these benchmarks (repeatable)")
    args = parser.parse_args(argv)
    mode = "full" if args.full else "smoke"
    results = run(mode, args.out, set(args.only) if args.only else None)
    print(render(results))
    print(f"results: {args.out / (mode + '.json')}, {args.out / (mode + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
