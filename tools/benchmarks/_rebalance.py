"""Time to balance and keys moved of ``run_partitioned``, with real member processes.

    python -m tools.benchmarks._rebalance [--smoke] [--backend sqlite|etcd ...] [--out DIR]

Each repetition starts from an empty store (a fresh SQLite file, a fresh etcd prefix) and runs
K keys on member processes (tools/benchmarks/_partition_member.py) through six steps:

- *join* 1→2, 2→3 and 3→4: a new member process starts; timed from its ``ready`` event
  (backend open, about to join: the interpreter's start-up is not counted);
- *leave* 4→3: SIGTERM to the newest member, which leaves cleanly; timed from the signal;
- *crash* 3→2: SIGKILL to a member; timed from the kill;
- *replace* 2→2: SIGKILL to a member and, :data:`REPLACE_AFTER` later, a new member process in
  its place (what a supervisor does); timed from the kill.

A step ends once the keys are *balanced* and stay so for L: every key runs on exactly one
member, every such member is alive, and each live member runs ⌊K/M⌋ or ⌈K/M⌉ keys. Its *time to
balance* is from the step's start to the last moment the keys became balanced, replayed from
the members' events in order of their timestamps (CLOCK_MONOTONIC, shared by every process), so
when the runner reads the events does not matter. In the *crash* and *replace* steps the run also
measures the *failover*: from the kill until every key the dead member ran runs again on a live
member; and, read from the store right after the kill, the dead member's *last renewal* (the
latest ``renewed_at`` of its records, its group lease and its keys', as seconds from the kill:
negative). The documented bound of a failover, L + R + T + ``wait_interval`` (plus the members'
pacing of key starts), counts from that last renewal (docs/partitioning.md).
*Keys moved* counts the key starts in the
step; its *minimum* is the keys that had to move: the newcomer's share after a join, the
leaver's share before a leave or a crash. The run also counts any key that started on a member
while it ran on another (there must be none), and the releases the members reported as timed
out (bounded by T = R/2): a key whose release timed out moves only once its lease has expired,
L after its last renewal, which a loaded machine shows as a step of about 1.5 L.

Times are reported in units of L (``1.3 L``) with L = 3 s (R = 0.5 s), large enough that
scheduling noise on a shared machine stays small against it. Writes ``rebalance.json`` (raw
samples, parameters, machine) and ``rebalance.md`` (the table) to ``--out`` (default
``tools/benchmarks/results``); ``--smoke`` runs one small repetition on SQLite into a
temporary directory (what tests/benchmarks/test_rebalance_smoke.py runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ._common import machine, percentile
from ._one_watch import source
from ._partition_member import make_backend

ROOT = Path(__file__).resolve().parents[2]
FULL: dict[str, Any] = {"keys": 24, "L": 3.0, "R": 0.5, "repetitions": 8}
SMOKE: dict[str, Any] = {"keys": 6, "L": 2.0, "R": 0.4, "repetitions": 1}
#: The steps of one repetition: (kind, members before, members after).
STEPS = [
    ("join", 1, 2), ("join", 2, 3), ("join", 3, 4), ("leave", 4, 3), ("crash", 3, 2),
    ("replace", 2, 2),
]
#: Seconds between the kill and the replacement's start in the *replace* step.
REPLACE_AFTER = 0.5

Event = dict[str, Any]


class Unsettled(RuntimeError):
    """The keys did not balance within the step's time limit."""


#: What a member logs when it lost a lease by its deadline, no renewal confirmed in time.
STARVED = "no renewal was confirmed before the holder's deadline"


def starved_members(workdir: Path) -> list[str]:
    """The members' log lines (their ``*.err`` in ``workdir``) saying they lost a lease by its
    deadline: a member starved of CPU or of the store, not a fault of the assignment."""
    return [
        line.strip()
        for path in sorted(workdir.glob("*.err"))
        for line in path.read_text(errors="replace").splitlines()
        if STARVED in line
    ][:5]


@dataclass
class Replay:
    """The keys' state built from events in timestamp order."""

    keys: int
    live: set[str] = field(default_factory=set)
    holders: dict[str, set[str]] = field(default_factory=dict)
    overlaps: int = 0

    def apply(self, event: Event) -> None:
        kind, member = event["event"], str(event["member"])
        if kind == "spawn":
            self.live.add(member)
        elif kind == "gone":  # a leave (its keys still run until their `end`) or a crash
            self.live.discard(member)
            if event.get("crash"):
                for running in self.holders.values():
                    running.discard(member)
        elif kind == "start":
            running = self.holders.setdefault(event["key"], set())
            if running - {member}:
                self.overlaps += 1
            running.add(member)
        elif kind == "end":
            self.holders.get(event["key"], set()).discard(member)

    def balanced(self) -> bool:
        if not self.live:
            return False
        counts: Counter[str] = Counter()
        for running in self.holders.values():
            if len(running) != 1 or not running <= self.live:
                return False
            counts.update(running)
        if sum(counts.values()) != self.keys:
            return False
        low, high = self.keys // len(self.live), -(-self.keys // len(self.live))
        return all(low <= counts[member] <= high for member in self.live)

    def share(self, member: str) -> int:
        return sum(member in running for running in self.holders.values())


class Rig:
    """Member processes on one store, their events gathered by one reader thread each."""

    def __init__(self, store: dict[str, Any], plan: dict[str, Any], workdir: Path) -> None:
        self.store, self.plan, self.workdir = store, plan, workdir
        self.inbox: queue.Queue[Event] = queue.Queue()
        self.log: list[Event] = []
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.online = Replay(plan["keys"])  # in arrival order: only to know when to go on

    def _record(self, event: Event) -> None:
        self.log.append(event)
        self.online.apply(event)

    def spawn(self, member: str) -> None:
        params = {**self.store, "owner": member, "keys": self.plan["keys"],
                  "L": self.plan["L"], "R": self.plan["R"]}
        self._record({"event": "spawn", "member": member, "t": time.monotonic()})
        stderr = (self.workdir / f"{member}.err").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tools.benchmarks._partition_member", json.dumps(params)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
        stderr.close()
        self.procs[member] = proc

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("{"):
                    self.inbox.put(json.loads(line))

        threading.Thread(target=read, daemon=True).start()

    def stop(self, member: str, *, crash: bool) -> float:
        """SIGKILL (crash) or SIGTERM (clean leave) ``member``; the time it was sent."""
        sent = time.monotonic()
        self._record({"event": "gone", "member": member, "t": sent, "crash": crash})
        self.procs[member].send_signal(signal.SIGKILL if crash else signal.SIGTERM)
        return sent

    def wait_event(self, kind: str, member: str, timeout: float) -> Event:
        deadline = time.monotonic() + timeout
        while True:
            event = self._next(deadline - time.monotonic())
            if event is None:
                raise Unsettled(f"no {kind} event of {member} within {timeout:g} s")
            if event["event"] == kind and event.get("member") == member:
                return event

    def _next(self, timeout: float) -> Event | None:
        try:
            event = self.inbox.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None
        self._record(event)
        return event

    def settle(self, hold: float, limit: float) -> float:
        """Read events until the keys are balanced and stay so for ``hold``; the time then."""
        deadline = time.monotonic() + limit
        since = time.monotonic() if self.online.balanced() else None
        while since is None or time.monotonic() - since < hold:
            if time.monotonic() > deadline:
                raise Unsettled(f"not balanced within {limit:g} s: {self.online.holders}")
            wait = 0.05 if since is None else hold - (time.monotonic() - since)
            if self._next(min(wait, 0.05)) is not None:
                if not self.online.balanced():
                    since = None
                elif since is None:
                    since = time.monotonic()
        return time.monotonic()

    def measure(self, start: float, end: float, dead: str | None = None) -> dict[str, Any]:
        """Replay every event up to ``end``: when the keys last became balanced after
        ``start``, how many keys started after it, and whether any ran twice at once; with
        ``dead`` (killed at ``start``), when every key it ran then ran again elsewhere."""
        replay = Replay(self.plan["keys"])
        balanced_at: float | None = None
        starts = 0
        orphans: set[str] | None = None  # the dead member's keys not yet started elsewhere
        failover_at: float | None = None
        for event in sorted(self.log, key=lambda e: e["t"]):
            if event["t"] > end:
                break
            if dead is not None and orphans is None and event["t"] >= start:
                orphans = {key for key, running in replay.holders.items() if dead in running}
            was = replay.balanced()
            replay.apply(event)
            if event["t"] >= start:
                starts += event["event"] == "start"
                if replay.balanced() and not was:
                    balanced_at = event["t"]
                elif not replay.balanced():
                    balanced_at = None
                if orphans and event["event"] == "start" and event["member"] != dead:
                    orphans.discard(event["key"])
                    if not orphans:
                        failover_at = event["t"]
        if balanced_at is None:
            raise Unsettled("the replay does not end balanced")
        sample = {"seconds": balanced_at - start, "moved": starts, "overlaps": replay.overlaps,
                  "shares": {m: replay.share(m) for m in sorted(replay.live)}}
        if dead is not None:
            if failover_at is None:
                raise Unsettled(f"the keys of {dead} did not all run again")
            sample["failover"] = failover_at - start
        return sample

    def release_timeouts(self) -> int:
        """Releases the members reported as timed out (bounded by T) so far: such a key waits
        for its lease to expire, L after its last renewal, before it moves."""
        return sum(
            path.read_text().count("timed out; it expires after the heartbeat timeout")
            for path in self.workdir.glob("*.err")
        )

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def last_renewal(store: dict[str, Any], member: str) -> float:
    """When ``member`` last renewed any of its records (its group lease, its keys' leases), as
    the store has them: the latest ``renewed_at`` (the wall clock its writes stamp), converted
    to this machine's monotonic clock (shared with the members' event stamps)."""

    async def read() -> list[float]:
        stamps = []
        async with make_backend(store) as backend:
            for name in await backend.names():
                record = await backend.get(name)
                if record is None or not record.holder.startswith(f"{member}_"):
                    continue
                if record.renewed_at is not None:
                    stamps.append(record.renewed_at.timestamp())
        return stamps

    stamps = anyio.run(read)
    if not stamps:
        raise Unsettled(f"no record of {member} in the store")
    return max(stamps) - (time.time() - time.monotonic())


def repetition(store: dict[str, Any], plan: dict[str, Any], workdir: Path) -> list[dict[str, Any]]:
    """One pass through :data:`STEPS` on an empty store; one sample per step."""
    L = plan["L"]
    hold, limit = L, 20 * L + 20
    rig = Rig(store, plan, workdir)
    samples = []
    try:
        rig.spawn("m1")
        rig.settle(hold, limit)
        for kind, before, after in STEPS:
            if kind == "join":
                member = f"m{after}"
                rig.spawn(member)
                start = rig.wait_event("ready", member, limit)["t"]
                minimum = None  # the newcomer's share once balanced
            else:
                member = {"leave": f"m{before}", "crash": "m2", "replace": "m3"}[kind]
                minimum = rig.online.share(member)
                start = rig.stop(member, crash=kind != "leave")
                if kind != "leave":  # read before the others take its keys (L after)
                    renewed = last_renewal(store, member) - start
                if kind == "replace":
                    time.sleep(max(0.0, start + REPLACE_AFTER - time.monotonic()))
                    rig.spawn("m5")
                    ready_after = rig.wait_event("ready", "m5", limit)["t"] - start
            timeouts = rig.release_timeouts()
            end = rig.settle(hold, limit)
            sample = rig.measure(start, end, dead=member if kind in ("crash", "replace") else None)
            sample["release_timeouts"] = rig.release_timeouts() - timeouts
            if kind in ("crash", "replace"):
                sample["last_renewal"] = renewed
            if minimum is None:
                minimum = sample["shares"][member]
            if kind == "replace":
                sample["replacement_ready_after"] = ready_after
            sample.update(kind=kind, members=[before, after], member=member, minimum=minimum,
                          L=L, in_L=sample["seconds"] / L)
            samples.append(sample)
            if kind == "leave":
                rig.procs[member].wait(timeout=limit)
        for member in sorted(rig.online.live):
            rig.stop(member, crash=False)
        for member in sorted(rig.procs):
            rig.procs[member].wait(timeout=limit)
    finally:
        rig.close()
    return samples


@contextlib.contextmanager
def stores(backend: str, workdir: Path) -> Iterator[Iterator[dict[str, Any]]]:
    """An endless supply of empty stores of ``backend``: one per repetition."""
    if backend == "sqlite":

        def files() -> Iterator[dict[str, Any]]:
            for n in range(1_000_000):
                yield {"backend": "sqlite", "path": str(workdir / f"rep{n}.sqlite3")}

        yield files()
        return
    from tests.etcd_server import etcd_cluster

    with etcd_cluster(size=1) as cluster:

        def prefixes() -> Iterator[dict[str, Any]]:
            for n in range(1_000_000):
                yield {"backend": "etcd", "endpoints": cluster.endpoints,
                       "prefix": f"bench/rebalance/{n}/"}

        yield prefixes()


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """p50/max of the time to balance (in L) and of the keys moved over the minimum, by step."""
    table: dict[str, Any] = {}
    for kind, before, after in STEPS:
        mine = [s for s in samples if s["kind"] == kind and s["members"] == [before, after]]
        times = [s["in_L"] for s in mine]
        moved = [s["moved"] for s in mine]
        ratio = [s["moved"] / s["minimum"] for s in mine if s["minimum"]]
        table[f"{kind} {before}→{after}"] = {
            "n": len(mine),
            "in_L": {"p50": percentile(times, 50), "max": max(times, default=float("nan"))},
            "moved": {"p50": percentile(moved, 50), "max": max(moved, default=0)},
            "minimum": {"p50": percentile([s["minimum"] for s in mine], 50)},
            "moved_over_minimum": {"p50": percentile(ratio, 50),
                                   "max": max(ratio, default=float("nan"))},
            "overlaps": sum(s["overlaps"] for s in mine),
            "release_timeouts": sum(s["release_timeouts"] for s in mine),
        }
    return table


def render(results: dict[str, Any]) -> str:
    """The Markdown table of a results document."""
    plan = results["plan"]
    lines = [
        "# Rebalancing of run_partitioned with real member processes",
        "",
        f"`python -m tools.benchmarks._rebalance`: {plan['keys']} keys, members 1→2→3→4 "
        f"(joins), 4→3 (a clean leave), 3→2 (a crash, SIGKILL), 2→2 (a SIGKILL and a new member "
        f"{REPLACE_AFTER:g} s later); L = {plan['L']:g} s, "
        f"R = {plan['R']:g} s; {plan['repetitions']} repetitions per backend, each on an "
        "empty store. Time to balance in units of L; keys moved against the minimum (the "
        "newcomer's share, or the leaver's).",
        "",
        "| backend | step | n | time to balance p50 | max | keys moved p50 (minimum) "
        "| moved / minimum p50 | max | a key on two members at once | releases timed out |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for backend, part in results["results"].items():
        for kind, row in part["summary"].items():
            lines.append(
                f"| {backend} | {kind} | {row['n']} | {row['in_L']['p50']:.2f} L "
                f"| {row['in_L']['max']:.2f} L | {row['moved']['p50']:g} "
                f"({row['minimum']['p50']:g}) | {row['moved_over_minimum']['p50']:.2f} "
                f"| {row['moved_over_minimum']['max']:.2f} | {row['overlaps']} "
                f"| {row['release_timeouts']} |"
            )
    m = results["machine"]
    lines += [
        "",
        f"Measured {m['date_utc']} on {m['cores']} cores ({m['cpu']}), Python {m['python']}, "
        f"commit `{results['source']['head']}`, load average {m['loadavg_start'][0]:.1f} at "
        f"the start and {m['loadavg_end'][0]:.1f} at the end.",
        "",
    ]
    return "\n".join(lines)


#: One repetition of a benchmark on an empty store: its samples.
Repetition = Callable[[dict[str, Any], dict[str, Any], Path], list[dict[str, Any]]]


def run_on_stores(
    name: str,
    plan: dict[str, Any],
    backends: list[str],
    out: Path,
    mode: str,
    repetition: Repetition,
    render: Callable[[dict[str, Any]], str],
    summarize: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run ``plan["repetitions"]`` repetitions per backend, each on an empty store, and write
    ``<name>.json`` (raw samples, parameters, machine) and ``<name>.md`` (``render``) to
    ``out``; with ``summarize``, each backend's samples are summarized too."""
    results: dict[str, Any] = {"machine": machine(mode), "source": source(), "plan": plan,
                               "results": {}}
    with tempfile.TemporaryDirectory(prefix=f"trio-lease-{name}-") as tmp:
        for backend in backends:
            workdir = Path(tmp) / backend
            workdir.mkdir()
            samples: list[dict[str, Any]] = []
            with stores(backend, workdir) as empty:
                for n in range(plan["repetitions"]):
                    (workdir / f"rep{n}").mkdir()
                    samples += repetition(next(empty), plan, workdir / f"rep{n}")
            part: dict[str, Any] = {"samples": samples}
            if summarize is not None:
                part["summary"] = summarize(samples)
            results["results"][backend] = part
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"{name}.md").write_text(render(results))
    return results


def command_line(
    doc: str,
    name: str,
    plans: tuple[dict[str, Any], dict[str, Any]],
    run: Callable[[dict[str, Any], list[str], Path, str], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
    more: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    """A benchmark's ``main``: ``--smoke`` (one small repetition on SQLite, written nowhere
    unless ``--out``), ``--backend``, ``--out``, and the options ``more`` adds (each an
    override of the plan entry of its name, when given); prints the table."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one small repetition on SQLite")
    parser.add_argument("--backend", action="append", choices=["sqlite", "etcd"],
                        help="the stores to measure (default: sqlite and etcd)")
    if more is not None:
        more(parser)
    parser.add_argument("--out", type=Path, help=f"where to write {name}.{{json,md}} (default: "
                        "tools/benchmarks/results; with --smoke, nowhere)")
    args = parser.parse_args()
    # Terminated: leave through the `finally` blocks, which stop the member processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    full, smoke = plans
    plan = dict(smoke if args.smoke else full)
    for key, value in vars(args).items():
        if key in plan and value is not None:
            plan[key] = value
    backends = args.backend or (["sqlite"] if args.smoke else ["sqlite", "etcd"])
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or (Path(tmp) if args.smoke else ROOT / "tools" / "benchmarks" / "results")
        results = run(plan, backends, out, "smoke" if args.smoke else "full")
    print(render(results))


def run(plan: dict[str, Any], backends: list[str], out: Path, mode: str) -> dict[str, Any]:
    """Measure :data:`STEPS` on each backend (see the module docstring)."""
    return run_on_stores("rebalance", plan, backends, out, mode, repetition, render, summarize)


def main() -> None:
    command_line(__doc__ or "", "rebalance", (FULL, SMOKE), run, render)


if __name__ == "__main__":
    main()
