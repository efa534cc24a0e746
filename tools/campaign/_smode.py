"""The semaphore mode's live state and nemesis: N worker processes loop
``Semaphore(limit=k).held()``, and the faults aim at a worker that holds a slot (or, for
``pause-waiter``, at one that waits for a slot).

The harness, the proxies, the fencing store, the process control and most fault episodes are
the lease mode's (:mod:`._state`, :mod:`._nemesis`); what differs is the worker program
(:mod:`._sworker`), the live count of slot moves (the stop rule ``handovers`` counts them), how
a target is chosen (by the run's seeded random generator among the workers holding, or
waiting, and not stopped), and two episodes of its own:

- ``term``: SIGTERM a holder (it leaves its scope, releasing the slot, and exits), restart it
  0.1–0.5 s later;
- ``pause-waiter``: SIGSTOP a waiting worker for 1.3–2 × L, then SIGCONT: its reservation
  lapses while it is stopped, and once back it must ask again and be granted in time.

The broken variant ``over-limit`` gives worker 0 the limit plus one (a contender configured
apart from the others): the checker must report more than ``limit`` holders.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import anyio

from ._nemesis import Nemesis
from ._pmode import ManyHoldersHarness
from ._state import Worker

__all__ = ["SemaphoreHarness", "SemaphoreNemesis"]


class SemaphoreHarness(ManyHoldersHarness):
    """The live state of a semaphore run: which worker holds a slot, which waits, the moves."""

    worker_module = "tools.campaign._sworker"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holding: dict[int, int | None] = {w.slot: None for w in self.workers}
        self.waiting: dict[int, float | None] = {w.slot: None for w in self.workers}
        self.last_identity: dict[int, str] = {}  # semaphore slot -> identity of its latest grant

    def record(self, event: dict[str, Any]) -> None:
        self.log_event(event)
        slot, kind = event["slot"], event["ev"]
        if kind == "want":
            self.waiting[slot] = float(event["t"])
        elif kind == "start":
            seat = int(event["sem_slot"])
            self.waiting[slot], self.holding[slot] = None, seat
            previous = self.last_identity.get(seat)
            if previous is not None and previous != event["identity"]:
                self.handovers_live += 1
            self.last_identity[seat] = str(event["identity"])
        elif kind == "end":
            self.holding[slot] = None
        elif kind in ("error", "lost"):
            self.waiting[slot] = None
        elif kind in ("killed", "gone", "exit"):
            self.holding[slot] = self.waiting[slot] = None

    def worker_config(self, worker: Worker) -> dict[str, Any]:
        config = self.config
        # The deliberately broken variant: one worker uses a higher limit than the others.
        limit = config.limit + (config.broken == "over-limit" and worker.slot == 0)
        return {**super().worker_config(worker), "limit": limit, "hold": config.hold}


class SemaphoreNemesis(Nemesis):
    """The lease mode's fault episodes aimed at a slot holder, plus ``term`` and
    ``pause-waiter``."""

    h: SemaphoreHarness

    async def _pick(self, table: dict[int, Any], timeout: float) -> Worker | None:
        with anyio.move_on_after(timeout):
            while True:
                ready = [
                    w for w in self.h.workers
                    if table[w.slot] is not None and not w.stopped and w.process is not None
                ]
                if ready:
                    return self.rng.choice(ready)
                await anyio.sleep(0.02)
        return None

    async def holder(
        self, timeout: float = 10.0, hold: tuple[float, float] | None = None
    ) -> Worker | None:
        """A worker holding a slot and not stopped, or None after ``timeout``."""
        return await self._pick(self.h.holding, timeout)

    async def _term(self, kind: str) -> None:
        worker = await self.holder()
        if worker is None or worker.process is None:
            return
        process = worker.process
        t0 = time.monotonic()
        self.h.signal_worker(worker, signal.SIGTERM)
        with anyio.move_on_after(10):
            await process.wait()
        if process.returncode is None:  # it did not leave: a hang, which the log shows
            await self.h.kill_worker(worker)
        self.log(kind, worker.slot, t0, returncode=process.returncode)
        await anyio.sleep(self.rng.uniform(0.1, 0.5))
        await self.h.start_worker(worker, self.tg)

    async def _pause_waiter(self, kind: str) -> None:
        worker = await self._pick(self.h.waiting, 10.0)
        if worker is None:
            return
        await self._stop(worker, kind, self.rng.uniform(1.3, 2.0) * self.settings.heartbeat_timeout)
