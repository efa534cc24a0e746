"""The partitioned mode's live state and nemesis: M member processes run ``run_partitioned``
over K keys, and the faults aim at a member that runs keys right now.

The harness, the proxies, the fencing store, the process control and the fault episodes are the
lease mode's (:mod:`._state`, :mod:`._nemesis`); what differs is the member program
(:mod:`._pworker`), the live count of key moves (the stop rule ``handovers`` counts them) and
how a target is chosen: a member running at least one key, not stopped, picked by the run's
seeded random generator.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from ._nemesis import Nemesis
from ._state import Harness, Worker

__all__ = ["ManyHoldersHarness", "PartitionedHarness", "PartitionedNemesis"]


class ManyHoldersHarness(Harness):
    """What the modes of many leases share: grants judged from the workers' own events (no
    single record to follow), and when the harness began stopping the workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop_started: float | None = None

    async def stop_workers(self) -> None:
        if self.stop_started is None:
            self.stop_started = time.monotonic()
        await super().stop_workers()

    async def watch_records(self) -> None:
        """Tokens are judged from the workers' grants; no single record to follow."""
        await anyio.sleep_forever()


class PartitionedHarness(ManyHoldersHarness):
    """The live state of a partitioned run: which keys each member runs, and the moves."""

    worker_module = "tools.campaign._pworker"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.running: dict[int, set[str]] = {w.slot: set() for w in self.workers}
        self.last_identity: dict[str, str] = {}  # key -> identity of its latest grant

    def record(self, event: dict[str, Any]) -> None:
        self.log_event(event)
        slot, kind = event["slot"], event["ev"]
        if kind == "start":
            key = str(event["key"])
            self.running[slot].add(key)
            previous = self.last_identity.get(key)
            if previous is not None and previous != event["identity"]:
                self.handovers_live += 1
            self.last_identity[key] = str(event["identity"])
        elif kind == "end":
            self.running[slot].discard(str(event["key"]))
        elif kind in ("killed", "gone", "exit"):
            self.running[slot].clear()

    def worker_config(self, worker: Worker) -> dict[str, Any]:
        return {**super().worker_config(worker), "keys": self.config.keys,
                "gap": self.config.key_write_gap}

class PartitionedNemesis(Nemesis):
    """The lease mode's fault episodes, aimed at a member that runs keys."""

    h: PartitionedHarness

    async def holder(
        self, timeout: float = 10.0, hold: tuple[float, float] | None = None
    ) -> Worker | None:
        """A member running at least one key and not stopped, or None after ``timeout``."""
        with anyio.move_on_after(timeout):
            while True:
                busy = [
                    w for w in self.h.workers
                    if self.h.running[w.slot] and not w.stopped and w.process is not None
                ]
                if busy:
                    return self.rng.choice(busy)
                await anyio.sleep(0.05)
        return None
