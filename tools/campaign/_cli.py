"""``python -m tools.campaign``: run one campaign and print its totals.

Examples::

    python -m tools.campaign --short                                 # the CI mix (one round)
    python -m tools.campaign --backend kubernetes --seed 7 --handovers 10000 --duration 3600
    python -m tools.campaign --broken no-fencing                     # must report violations
    python -m tools.campaign --mode partitioned --backend sqlite --keys 40 --handovers 2000
    python -m tools.campaign --mode semaphore --backend etcd --limit 3 --duration 300

Exit status: 0 when the run is clean and its faults bit, 1 otherwise (with ``--broken``:
0 only when the checker did find violations).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
from pathlib import Path
from typing import Any

from ._config import FAULTS_BY_BACKEND, RunConfig
from ._harness import run_any

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.campaign",
        description="Fault-injection safety campaign for trio_lease.",
    )
    parser.add_argument("--backend", choices=sorted(FAULTS_BY_BACKEND), default="kubernetes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("--handovers", type=int, help="stop once this many handovers happened")
    parser.add_argument("--workers", type=int,
                        help="worker processes (default 5; partitioned: 4; semaphore: 6)")
    parser.add_argument("--mode", choices=["lease", "partitioned", "semaphore"], default="lease",
                        help="contend for one lease, run_partitioned over --keys keys, or loop "
                        "Semaphore(limit=--limit).held()")
    parser.add_argument("--keys", type=int, default=40, help="partitioned: how many keys")
    parser.add_argument("--unrun-bound", type=float, default=6.0,
                        help="partitioned: a key may stay unrun for L plus this many seconds")
    parser.add_argument("--limit", type=int, default=3, help="semaphore: the limit")
    parser.add_argument("--wait-bound", type=float, default=6.0,
                        help="semaphore: a waiter must be granted within L plus this many seconds")
    parser.add_argument("--emulator", choices=["harness", "process"],
                        help="kubernetes: serve the emulator inside the harness or as a process "
                        "of its own (default: partitioned mode a process, lease mode the "
                        "harness, whose emu-* faults need it there)")
    parser.add_argument("--emulator-nice", type=int, default=0, metavar="N",
                        help="kubernetes, emulator in its own process: run it at nice N (a "
                        "negative N, which needs root, keeps a shared machine's other work "
                        "from delaying the store's replies)")
    parser.add_argument("--short", action="store_true", help="the short CI mix")
    parser.add_argument("--broken", choices=["no-fencing", "reply-anchor"],
                        help="run a deliberately broken variant (the checker must bite)")
    parser.add_argument("--slow-replies", action="store_true",
                        help="the reply-anchor run's setup with the correct library (control)")
    parser.add_argument("--faults", help="comma-separated fault kinds (default: all)")
    parser.add_argument("--fault-gap", type=float, nargs=2, metavar=("MIN", "MAX"),
                        help="quiet seconds between fault episodes")
    parser.add_argument("--out", type=Path, help="directory for the logs (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run configuration the command line asks for."""
    if args.broken:
        config = RunConfig.broken_variant(args.broken, seed=args.seed)
    elif args.slow_replies:
        config = RunConfig.broken_variant("slow-replies", seed=args.seed)
    elif args.mode == "partitioned":
        config = RunConfig.partitioned(args.backend, seed=args.seed, keys=args.keys,
                                       unrun_bound=args.unrun_bound)
    elif args.mode == "semaphore":
        config = RunConfig.semaphore(args.backend, seed=args.seed, limit=args.limit,
                                     wait_bound=args.wait_bound)
    elif args.short:
        config = RunConfig.short(args.backend, seed=args.seed)
    else:
        config = RunConfig(backend=args.backend, seed=args.seed, duration=3600.0)
    changes: dict[str, Any] = {"out_dir": args.out, "progress": True}
    if args.workers is not None:
        changes["workers"] = args.workers
    if args.emulator is not None:
        changes["emulator_process"] = args.emulator == "process"
    if args.emulator_nice:
        changes["emulator_nice"] = args.emulator_nice
    if args.duration is not None:
        changes["duration"] = args.duration
    if args.handovers is not None:
        changes["handovers"] = args.handovers
    if args.faults:
        changes["faults"] = tuple(kind.strip() for kind in args.faults.split(","))
    if args.fault_gap:
        changes["fault_gap"] = tuple(args.fault_gap)
    return dataclasses.replace(config, **changes)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    config = config_from_args(args)
    report, out_dir = run_any(config)
    summary = json.loads((out_dir / "report.json").read_text())
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary, out_dir))
    if config.broken:
        return 0 if report.violations else 1
    return 0 if report.ok else 1


def format_summary(summary: dict[str, Any], out_dir: Path) -> str:
    """A human-readable table of one run's totals."""
    if summary.get("mode") == "partitioned":
        return _format_partitioned(summary, out_dir)
    if summary.get("mode") == "semaphore":
        return _format_semaphore(summary, out_dir)
    lines = [
        f"campaign: backend={summary['backend']} seed={summary['seed']} "
        f"broken={summary['broken'] or 'no'} seconds={summary['seconds']} "
        f"machine={platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        f"  settings: {summary['settings']} (safety margin {summary['safety_margin']:.3f} s)",
        f"  grants {summary['grants']}, handovers {summary['handovers']} "
        f"{summary['handovers_by_kind']}",
        f"  faults {sum(summary['faults_by_kind'].values())}: {summary['faults_by_kind']}",
        f"  overlaps {summary['overlaps']} "
        f"(explained by pause/skew/stall {summary['overlaps_explained']}, of them by a "
        f"stall alone {summary['overlaps_explained_by_stall']})",
        f"  worker stalls {summary['stalls']} (longest {summary['longest_stall']:.3f} s)",
        f"  writes accepted {summary['writes_accepted']}, stale rejected "
        f"{summary['stale_rejected']}, stale accepted {summary['stale_accepted']}",
        f"  long pauses by kind/loop {summary['pauses_by_loop']}, stale writes sent in or "
        f"within 2 s after them {summary['stale_after_pause']}",
        f"  losses {summary['losses']} (false {summary['false_losses']}), "
        f"worker errors {summary['errors']}",
        f"  violations {len(summary['violations'])}, bite failures "
        f"{len(summary['bite_failures'])}: {'OK' if summary['ok'] else 'FAIL'}",
    ]
    return "\n".join([*lines, *_closing_lines(summary, out_dir)])


def _format_partitioned(summary: dict[str, Any], out_dir: Path) -> str:
    lines = [
        f"campaign (partitioned): backend={summary['backend']} seed={summary['seed']} "
        f"members={summary['workers']} keys={summary['keys']} seconds={summary['seconds']} "
        f"machine={platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        f"  settings: {summary['settings']} (safety margin {summary['safety_margin']:.3f} s)",
        f"  key grants {summary['grants']}, key moves {summary['moves']}",
        f"  faults {sum(summary['faults_by_kind'].values())}: {summary['faults_by_kind']}",
        f"  overlaps {summary['overlaps']} (explained by pause/stall "
        f"{summary['overlaps_explained']}, of them by a stall alone "
        f"{summary['overlaps_explained_by_stall']})",
        f"  member stalls {summary['stalls']} (longest {summary['longest_stall']:.3f} s)",
        f"  longest unrun {summary['longest_unrun']:.2f} s (limit L + bound "
        f"{summary['unrun_limit']:.2f} s; stretches cut by a fault on the key's assignee "
        f"{summary['unrun_restarted']})",
        f"  writes accepted {summary['writes_accepted']}, stale rejected "
        f"{summary['stale_rejected']}, stale accepted {summary['stale_accepted']}",
        f"  member losses {summary['losses']}, errors {summary['errors']}",
        f"  harness loop lag (ms) {summary['harness_loop_lag_ms']}, CPU seconds "
        f"{summary['cpu_seconds']}, emulator {summary['emulator'] or '-'}",
        f"  violations {len(summary['violations'])}, bite failures "
        f"{len(summary['bite_failures'])}: {'OK' if summary['ok'] else 'FAIL'}",
    ]
    return "\n".join([*lines, *_closing_lines(summary, out_dir)])


def _format_semaphore(summary: dict[str, Any], out_dir: Path) -> str:
    lines = [
        f"campaign (semaphore): backend={summary['backend']} seed={summary['seed']} "
        f"workers={summary['workers']} limit={summary['limit']} seconds={summary['seconds']} "
        f"machine={platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        f"  settings: {summary['settings']} (safety margin {summary['safety_margin']:.3f} s)",
        f"  grants {summary['grants']}, slot moves {summary['moves']}, most holders at once "
        f"{summary['most_at_once']}",
        f"  faults {sum(summary['faults_by_kind'].values())}: {summary['faults_by_kind']}",
        f"  overlaps {summary['overlaps']} (explained by pause/stall "
        f"{summary['overlaps_explained']}, of them by a stall alone "
        f"{summary['overlaps_explained_by_stall']})",
        f"  worker stalls {summary['stalls']} (longest {summary['longest_stall']:.3f} s)",
        f"  waits granted {summary['waits']}, longest {summary['longest_wait']:.2f} s (limit "
        f"L + bound {summary['wait_limit']:.2f} s; restarted by a fault on the waiter "
        f"{summary['waits_restarted']})",
        f"  writes accepted {summary['writes_accepted']}, stale rejected "
        f"{summary['stale_rejected']}, stale accepted {summary['stale_accepted']}",
        f"  worker losses {summary['losses']}, errors {summary['errors']}",
        f"  violations {len(summary['violations'])}, bite failures "
        f"{len(summary['bite_failures'])}: {'OK' if summary['ok'] else 'FAIL'}",
    ]
    return "\n".join([*lines, *_closing_lines(summary, out_dir)])


def _closing_lines(summary: dict[str, Any], out_dir: Path) -> list[str]:
    """What both modes print last: the first problems, the library's commit, the logs."""
    problems = [*summary["violations"], *summary["bite_failures"]][:20]
    lines = [f"    - {problem}" for problem in problems]
    library = summary.get("library") or {}
    lines.append(
        f"  library: commit {str(library.get('commit', '?'))[:12]}, uncommitted changes: "
        f"{', '.join(library.get('uncommitted', [])) or 'none'}"
    )
    lines.append(f"  logs: {out_dir}")
    return lines
