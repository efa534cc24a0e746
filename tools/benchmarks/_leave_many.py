"""A member leaving with many keys: how soon its keys run again on the others.

    python -m tools.benchmarks._leave_many [--smoke] [--backend sqlite|etcd ...] [--keys K]
        [--repetitions N] [--R SECONDS] [--out DIR]

Each repetition starts three member processes (tools/benchmarks/_partition_member.py) together
on an empty store (a fresh SQLite file, a fresh etcd prefix) with K keys, waits until the keys
are balanced (K/3 each), then sends SIGTERM to one member, which leaves cleanly: it leaves the
group, then releases its keys a few at a time. Measured from the signal, on the system-wide
monotonic clock every process stamps its events with:

- *all running again*: until the last of the leaver's keys started on another member;
- *p50 key*: the median of the same, per key;
- *leaver exited*: until the leaver's process said it exits (its releases done);
- *keys moved*: key starts after the signal until the keys are balanced again (the minimum is
  the leaver's share);
- *releases timed out*: releases the members logged as timed out (bounded by T); such a key
  waits for its lease to expire, L after its last renewal.

Writes ``leave.json`` (raw samples, parameters, machine and its load) and ``leave.md`` (the
table) to ``--out`` (default ``tools/benchmarks/results``); ``--smoke`` runs one small
repetition on SQLite into a temporary directory (tests/benchmarks/test_leave_smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ._common import percentile
from ._rebalance import Rig, Unsettled, command_line, run_on_stores, starved_members

FULL: dict[str, Any] = {"keys": 2000, "L": 15.0, "R": 3.0, "repetitions": 2, "members": 3}
SMOKE: dict[str, Any] = {"keys": 30, "L": 2.0, "R": 0.4, "repetitions": 1, "members": 3}


def repetition(store: dict[str, Any], plan: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Three members, one leaves: one sample."""
    L = plan["L"]
    limit = 20 * L + 60
    rig = Rig(store, plan, workdir)
    try:
        members = [f"m{i + 1}" for i in range(plan["members"])]
        for member in members:
            rig.spawn(member)
        rig.settle(min(L, 3.0), limit)
        leaver = members[-1]
        theirs = {key for key, holders in rig.online.holders.items() if leaver in holders}
        timeouts = rig.release_timeouts()
        sent = rig.stop(leaver, crash=False)
        end = rig.settle(min(L, 3.0), limit)
        said = [e["t"] for e in rig.log if e["event"] == "exit" and e["member"] == leaver]
        exited = said[0] if said else rig.wait_event("exit", leaver, limit)["t"]
        again: dict[str, float] = {}
        for event in sorted(rig.log, key=lambda e: e["t"]):
            key = event.get("key")
            if (
                event["event"] == "start"
                and key in theirs
                and key not in again
                and event["member"] != leaver
                and event["t"] >= sent
            ):
                again[key] = event["t"] - sent
        measured = rig.measure(sent, end)
        sample = {
            "leaver_keys": len(theirs),
            "all_running_again": max(again.values()),
            "p50_key": percentile(list(again.values()), 50),
            "leaver_exited": exited - sent,
            "moved": measured["moved"],
            "overlaps": measured["overlaps"],
            "shares": measured["shares"],
            "release_timeouts": rig.release_timeouts() - timeouts,
            "missing": len(theirs) - len(again),
            "loadavg": list(os.getloadavg()),
        }
        for member in members[:-1]:
            rig.stop(member, crash=False)
        for proc in rig.procs.values():
            proc.wait(timeout=limit)
    finally:
        rig.close()
    return sample


def render(results: dict[str, Any]) -> str:
    """The Markdown table of a results document."""
    plan = results["plan"]
    lines = [
        "# A member of run_partitioned leaving with many keys",
        "",
        f"`python -m tools.benchmarks._leave_many`: {plan['keys']} keys on {plan['members']} "
        f"member processes; SIGTERM to one (a clean leave); L = {plan['L']:g} s, "
        f"R = {plan['R']:g} s; {plan['repetitions']} repetitions per backend, each on an empty "
        "store. Seconds from the signal.",
        "",
        "| backend | leaver's keys | all running again | p50 key | leaver exited "
        "| keys moved | releases timed out | a key on two members at once | load average |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for backend, part in results["results"].items():
        for s in part["samples"]:
            if "error" in s:
                lines.append(f"| {backend} | did not settle: {s['error'][:80]} | | | | | | "
                             f"| {s['loadavg'][0]:.1f} |")
                continue
            lines.append(
                f"| {backend} | {s['leaver_keys']} | {s['all_running_again']:.2f} s "
                f"| {s['p50_key']:.2f} s | {s['leaver_exited']:.2f} s | {s['moved']} "
                f"| {s['release_timeouts']} | {s['overlaps']} | {s['loadavg'][0]:.1f} |"
            )
    m = results["machine"]
    lines += [
        "",
        f"Measured {m['date_utc']} on {m['cores']} cores ({m['cpu']}), Python {m['python']}, "
        f"commit `{results['source']['head']}`, load average {m['loadavg_start'][0]:.1f} at "
        f"the start and {m['loadavg_end'][0]:.1f} at the end (the machine was shared with "
        "other work).",
        "",
    ]
    return "\n".join(lines)


def _one(store: dict[str, Any], plan: dict[str, Any], workdir: Path) -> list[dict[str, Any]]:
    """One repetition as a list of one sample; a repetition that did not settle (members lost
    their group leases) is a sample saying so, with the members' lines saying they lost a lease
    by its deadline (starved of CPU or of the store), if any."""
    try:
        sample = repetition(store, plan, workdir)
    except Unsettled as exc:
        sample = {"error": str(exc)[:300], "loadavg": list(os.getloadavg()),
                  "starved": starved_members(workdir)}
    print(store["backend"], json.dumps(sample), flush=True)
    return [sample]


def run(plan: dict[str, Any], backends: list[str], out: Path, mode: str) -> dict[str, Any]:
    """Measure a leave on each backend (see the module docstring)."""
    return run_on_stores("leave", plan, backends, out, mode, _one, render)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repetitions", type=int, help="repetitions per backend")
    parser.add_argument("--R", type=float, help="the heartbeat interval (seconds)")
    parser.add_argument("--keys", type=int, help="the number of keys (default 2000)")


def main() -> None:
    command_line(__doc__ or "", "leave", (FULL, SMOKE), run, render, _options)


if __name__ == "__main__":
    main()
