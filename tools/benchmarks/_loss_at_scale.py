"""Takeover to cancel while a process holds many leases: the loss row at the steady row's scale.

``python -m tools.benchmarks._loss_at_scale [--leases 1000] [--victims 60] [--spread 60]
[--rounds 1] [--loop asyncio|trio] [--tree DIR]`` starts the emulator (its own process), then,
``rounds`` times, a fresh worker (``_ours loss``) that holds ``leases`` leases (L = 15 s, R = 1.5 s,
acquired over ``leases / 100`` seconds) while ``victims`` of them, picked at random, are taken
over by another writer at moments spread at random over ``spread`` seconds. It prints the
takeover → body cancelled latencies (p50, p99, max), the holder's own noticed → cancelled, and
the longest garbage collection of each generation in that window: what the `loss` row of the
full run (20 leases, all taken over within 2R) cannot show, a takeover meeting a process that
renews a thousand leases and now and then pauses for a full collection.

``--tree DIR``: in each round, the same worker run from another checkout of the repository (its
library, its ``_ours``) right after this one's, against a fresh emulator each: old code against
new, alternated.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from ._common import percentile
from ._procs import ROOT, Emulator, Proc

TIMINGS = {"L": 15, "R": 1.5, "T": 1.0, "RD": 10}


def _one_round(
    emulator: Emulator, args: argparse.Namespace, index: int, tree: Path
) -> dict[str, Any]:
    params = {
        **TIMINGS,
        "n": args.leases,
        "victims": args.victims,
        "spread": args.spread,
        "ramp": args.leases / 100,
        "prefix": f"loss-scale-{index}",
        "backend": "kube",
        "kubeconfig": str(emulator.kubeconfig),
        "anyio_backend": args.loop,
    }
    watcher = Proc("tools.benchmarks._watch_stamps", str(emulator.kubeconfig))
    proc = Proc("tools.benchmarks._ours", "loss", json.dumps(params), cwd=tree)
    try:
        if watcher.readline(30).strip() != "ready":
            raise RuntimeError("the bare watcher did not start")
        while True:
            event = proc.event(args.spread + 300)
            if event["event"] == "result":
                break
    finally:
        proc.stop()
        seen = _stamps(watcher)
    # The server's part of a holder's watch delay (takeover → a bare watcher in a process of its
    # own saw it), and the holder process's own part (→ its confirming read began).
    injected, confirming = event.get("injected_at", {}), event.get("confirming_at", {})
    event["inject_to_sent_s"] = [seen[k] - injected[k] for k in injected if k in seen]
    event["sent_to_confirming_s"] = [confirming[k] - seen[k] for k in confirming if k in seen]
    return event


def _stamps(watcher: Proc) -> dict[str, float]:
    """The bare watcher's stamps, once its stdin is closed (it then exits)."""
    assert watcher.popen.stdin is not None
    watcher.popen.stdin.close()
    seen: dict[str, float] = {}
    try:
        while True:
            line = watcher.readline(10)
            if line.startswith("{"):
                stamp = json.loads(line)
                seen[stamp["name"]] = stamp["seen"]
    except (EOFError, TimeoutError):
        pass
    watcher.stop()
    return seen


def _ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description="Takeover to cancel with many leases held.")
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--victims", type=int, default=60)
    parser.add_argument("--spread", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--loop", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--tree", type=Path, help="alternate with the checkout in this folder")
    parser.add_argument("--out", type=Path, help="also write the rounds' raw results here (JSON)")
    args = parser.parse_args()
    if not 1 <= args.victims <= args.leases:
        parser.error("--victims must be between 1 and --leases")
    trees = [ROOT] if args.tree is None else [ROOT, args.tree.resolve()]
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            for index in range(args.rounds):
                for tree in trees:
                    emulator.restart()
                    rounds.append({"tree": str(tree), **_one_round(emulator, args, index, tree)})
        finally:
            emulator.stop()
    for index, result in enumerate(rounds):
        taken, noticed = result["inject_to_cancel_s"], result["noticed_to_cancel_s"]
        longest = ", ".join(f"{s * 1000:.0f}" for s in result["longest_collection_s"])
        print(
            f"round {index // len(trees) + 1}, {result['tree']}: {len(taken)} of "
            f"{args.victims} cancelled "
            f"({result['seen_on_watch']} seen on the watch); takeover → cancelled "
            f"p50 {_ms(taken, 50)} p99 {_ms(taken, 99)} max {_ms(taken, 100)} ms; noticed → "
            f"cancelled p99 {_ms(noticed, 99)} ms; takeover → confirming read begun p50 "
            f"{_ms(result['inject_to_confirming_s'], 50)} p99 "
            f"{_ms(result['inject_to_confirming_s'], 99)} ms, that read → noticed p50 "
            f"{_ms(result['confirming_to_noticed_s'], 50)} p99 "
            f"{_ms(result['confirming_to_noticed_s'], 99)} ms; of the watch's delay the server's"
            f" (takeover → a bare watcher saw it) p50 {_ms(result['inject_to_sent_s'], 50)} p99 "
            f"{_ms(result['inject_to_sent_s'], 99)} ms, the holder's (→ its read began) p50 "
            f"{_ms(result['sent_to_confirming_s'], 50)} p99 "
            f"{_ms(result['sent_to_confirming_s'], 99)} ms; longest collection by generation "
            f"{longest} ms ({result['collections']} collections)"
        )
    for tree in trees:
        everything = [
            value for result in rounds if result["tree"] == str(tree)
            for value in result["inject_to_cancel_s"]
        ]
        if everything:
            print(f"{tree}, all rounds: median takeover → cancelled "
                  f"{statistics.median(everything) * 1000:.1f} ms, p99 {_ms(everything, 99)} ms")
    if args.out is not None:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out),
                                                                 "tree": str(args.tree)},
                                        "timings": TIMINGS, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
