"""The shared-watch benchmarks (one watch per process), runner side.

Three libraries side by side: trio_lease (``ours``), kubernetes_asyncio's elector (``theirs``)
and the official ``kubernetes`` client's elector (``official``, :mod:`._official`):

- ``takeover``: an outside writer takes a held lease over → the guarded body is cancelled
  (the official elector: ``onstopped_leading`` is called; it cannot cancel its body thread).
- ``waiters``: watch streams open on the server (and requests per second) for ``n`` waiting
  contenders of one trio_lease process on ``n`` leases held by someone else. The electors of
  kubernetes_asyncio and of the official client never watch (they poll: one GET per retry
  period per contender), so they are not run here.
- ``replicas``: requests per hour on the server for one lease held by one of three replicas,
  at the same worst-case crash failover F for every library (mapping in :data:`FULL`;
  README, "What each benchmark measures"): trio_lease F = L (a waiting contender re-reads at
  the holder's expiry observed on its own clock); the electors F = RP × (1 + ceil(LD / RP))
  (a follower sees the last renewal up to one retry period RP late, then polls every RP until
  LD has passed since).
- ``renewal_cpu``: client CPU per renewal at ``n`` held leases (:func:`run.Runner.steady`),
  then the same run again under a sampling profiler (:mod:`._ours_watch` ``profile``).
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

Params = dict[str, Any]

NAMES = ("takeover", "waiters", "replicas", "renewal_cpu")
LIBS = {"ours": "trio_lease (asyncio)", "ours-poll-L": "trio_lease, poll_interval = L",
        "theirs": "kubernetes_asyncio", "official": "kubernetes (official client)"}


def failover_bound(lib: str, t: Params) -> float:
    """The worst-case crash failover (seconds) of ``lib`` with timings ``t`` (module doc)."""
    if lib.startswith("ours"):
        return float(t["L"])
    return float(t["R"] * (1 + math.ceil(t["L"] / t["R"])))


FULL: Params = {
    "takeover": {"L": 15, "R": 1.5, "T": 1.0, "RD": 10, "n": 20},
    "waiters": {"L": 15, "R": 1.5, "T": 1.0, "n": 1000, "ramp": 10.0, "window": 10.0,
                "variants": {"ours": {}, "ours-poll-L": {"poll": 15.0}}},
    # F = 15 s for all: trio_lease L = 15 (R = 1.5, T = 1); the electors LD = 13, RP = 1.5,
    # RD = 10: 1.5 × (1 + ceil(13 / 1.5)) = 1.5 × 10 = 15. Same renew period 1.5 s for all.
    "replicas": {
        "window": 45.0,
        "ours": {"L": 15, "R": 1.5, "T": 1.0},
        "ours-poll-L": {"L": 15, "R": 1.5, "T": 1.0, "poll": 15.0},
        "theirs": {"L": 13, "R": 1.5, "RD": 10},
        "official": {"L": 13, "R": 1.5, "RD": 10},
    },
    # R = 3 s: at R = 1.5 s (667 renewals per second) the shared, loaded 2-core machine of
    # 2026-11-23 could not serve the ramp to 1,000 leases
    # (acquisitions stalled at ~510 leases: reads queued behind renewals past T).
    "renewal_cpu": {"L": 30, "R": 3.0, "T": 1.0, "n": 1000, "window": 30.0,
                    "profile_window": 15.0},
}
SMOKE: Params = {
    "takeover": {"L": 2, "R": 0.5, "T": 0.15, "RD": 1.5, "stop": 0.3, "n": 2},
    "waiters": {"L": 2, "R": 0.5, "T": 0.15, "n": 5, "ramp": 0.2, "window": 0.5,
                "variants": {"ours": {}, "ours-poll-L": {"poll": 2.0}}},
    # F = 3 s: trio_lease L = 3; the electors LD = 2, RP = 1 (their minimum): 1 × (1 + 2) = 3.
    "replicas": {
        "window": 1.0,
        "ours": {"L": 3, "R": 0.5, "T": 0.15},
        "ours-poll-L": {"L": 3, "R": 0.5, "T": 0.15, "poll": 3.0},
        "theirs": {"L": 2, "R": 1.0, "RD": 1.5},
        "official": {"L": 2, "R": 1.0, "RD": 1.5},
    },
    # py-spy keeps only busy samples, ~5 a second here: the profiled window is longer.
    "renewal_cpu": {"L": 2, "R": 0.5, "T": 0.15, "n": 10, "window": 1.0, "profile_window": 4.0},
}


def source() -> Params:
    """The commit measured and the files changed on top of it (other work in the checkout)."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=False)
        return done.stdout.rstrip("\n")  # porcelain lines start with a space (" M path")

    return {"head": git("log", "-1", "--format=%h %cI"),
            "changed": git("status", "--porcelain", "--untracked-files=no").splitlines()}


def _per_hour(emu: Params) -> Params:
    scale = 3600 / emu["wall_s"]
    return {
        "requests_per_hour": emu["requests"] * scale,
        "by_method_per_hour": {k: v * scale for k, v in emu["by_method"].items()},
        "open_watches": emu.get("open_watches"),
    }


def run_all(runner: Any, plan: Params, want: Any) -> Params:
    """The benchmarks of ``plan`` (:data:`FULL` or :data:`SMOKE`) that ``want`` selects."""
    res: Params = {}
    if any(want(name) for name in NAMES):
        res["source"] = source()
    if want("takeover"):
        t = plan["takeover"]
        res["takeover"] = {lib: runner.latency(lib, "loss", t, n=t["n"])
                           for lib in ("ours", "theirs", "official")}
    if want("waiters"):
        t = plan["waiters"]
        res["waiters"] = {}
        for variant, extra in t["variants"].items():
            runner.emulator.restart()  # streams of finished workers stay open until written to
            params = {**runner.base("ours", "waiters", t), **extra}
            raw = runner.worker("ours", "waiters", params, timeout=t["ramp"] + t["window"] + 300,
                                module="tools.benchmarks._ours_watch")
            emu = raw["emulator"]
            res["waiters"][variant] = {
                "params": params, "raw": raw, "waiting": raw["waiting"], "acquired": raw["held"],
                "open_watches": emu["open_watches"], "warnings": raw["warnings"],
                "requests_per_s": emu["requests"] / emu["wall_s"],
                "requests_by_method": emu["by_method"],
            }
    if want("replicas"):
        t = plan["replicas"]
        res["replicas"] = {}
        for lib in ("ours", "ours-poll-L", "theirs", "official"):
            timings = t[lib]
            params = {**runner.base(lib.removesuffix("-poll-L"), "replicas", timings),
                      **timings, "window": t["window"]}
            module = "tools.benchmarks._ours_watch" if lib.startswith("ours") else None
            runner.emulator.restart()
            raw = runner.worker(lib.removesuffix("-poll-L"), "replicas", params, timeout=300,
                                module=module)
            res["replicas"][lib] = {
                "params": params, "raw": raw, "failover_bound_s": failover_bound(lib, timings),
                **_per_hour(raw["emulator"]),
            }
    if want("renewal_cpu"):
        t = plan["renewal_cpu"]
        runner.emulator.restart()
        steady = runner.steady("ours", t["n"], t["window"], t)
        runner.emulator.restart()
        prof = runner.steady("ours", t["n"], t["profile_window"], t,
                             module="tools.benchmarks._ours_watch", scenario="profile")
        res["renewal_cpu"] = {"ours": steady, "ours-profiled": prof}
    return res


def render(doc: Params) -> str:
    """The shared-watch tables (Markdown) of a results document; empty when none ran."""
    res = doc.get("results", {})
    lines: list[str] = []
    if "source" in res:
        changed = [c.split(maxsplit=1)[-1] for c in res["source"]["changed"]]  # "M path"
        lines += ["", f"Source: `{res['source']['head']}`"
                  + (f" plus uncommitted changes to {len(changed)} files "
                     f"({', '.join(changed)})." if changed else ".")]
    if "takeover" in res:
        lines += ["", "Takeover by an outside writer → guarded body cancelled (ms; the official "
                  "elector: onstopped_leading):", "",
                  "| library | n | p50 | p90 | p99 | max | noticed → cancelled p99 |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for lib, r in res["takeover"].items():
            s, n = r["inject_to_cancel_ms"], r.get("noticed_to_cancel_ms", {})
            lines.append(f"| {LIBS[lib]} | {s['n']} | {s['p50']:,.1f} | {s['p90']:,.1f} | "
                         f"{s['p99']:,.1f} | {s['max']:,.1f} | {n.get('p99', math.nan):,.1f} |")
    if "waiters" in res:
        lines += ["", "Waiting contenders of one trio_lease process (leases held elsewhere):", "",
                  "| settings | waiting | acquired | watch streams open (all / per-name / "
                  "selector) | requests per s | by method | warnings (reads past T) |",
                  "|---|---:|---:|---|---:|---|---:|"]
        for w in res["waiters"].values():
            p, ws = w["params"], w["open_watches"]
            shown = ", ".join(f"{k}={p[k]}" for k in ("L", "R", "T", "poll") if k in p)
            lines.append(f"| {shown} | {w['waiting']} | {w['acquired']} | {ws['all']} / "
                         f"{ws['named']} / {ws['selected']} | {w['requests_per_s']:,.1f} | "
                         f"{w['requests_by_method']} | {w['warnings']} |")
    if "replicas" in res:
        lines += ["", "One lease, three replicas: requests per hour on the server:", "",
                  "| library | settings | worst-case failover F (s) | requests per hour | "
                  "by method per hour | watch streams |", "|---|---|---:|---:|---|---:|"]
        for lib, r in res["replicas"].items():
            p = r["params"]
            names = ("L", "R", "T", "poll") if lib.startswith("ours") else ("L", "R", "RD")
            shown = ", ".join(f"{k}={p[k]}" for k in names if k in p)
            methods = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(r["by_method_per_hour"].items()))
            lines.append(f"| {LIBS[lib]} | {shown} | {r['failover_bound_s']:g} | "
                         f"{r['requests_per_hour']:,.0f} | {methods} | "
                         f"{(r['open_watches'] or {}).get('all', '-')} |")
    if "renewal_cpu" in res:
        r = res["renewal_cpu"]
        s, prof = r["ours"], r["ours-profiled"]
        lines += ["", "Client CPU per renewal (trio_lease, asyncio; the second row ran under the "
                  "profiler):", "",
                  "| leases | window s | renewals | CPU µs/renewal | client % core | losses | "
                  "watch streams |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for row in (s, prof):
            emu = row["raw"].get("emulator", {})
            lines.append(
                f"| {row['held']} | {row['params']['window']:g} | {row['renewals']} | "
                f"{row['client_cpu_us_per_renewal'] or math.nan:,.0f} | "
                f"{row['client_cpu_pct_of_core']:.1f} | {row['losses']} | "
                f"{emu.get('open_watches', {}).get('all', '-')} |")
        profile = prof["raw"].get("profile")
        if profile:
            tool = profile.get("tool", "in-process sampler")
            lines += ["", f"Profile of the second row ({tool}, "
                      f"{profile['busy_samples']} busy samples): share of busy samples by "
                      "innermost frame, by module and by function:", "",
                      "| module | % | function | % |", "|---|---:|---|---:|"]
            lines += [f"| {m} | {mv} | {f} | {fv} |" for (m, mv), (f, fv)
                      in zip(profile["self_pct_by_module"], profile["self_pct_by_function"],
                             strict=False)]
    return "\n".join(lines) + "\n" if lines else ""
