"""The nemesis: seeded fault episodes, applied one after another and logged.

Kinds are taken in rounds: each round is the backend's fault kinds in an order shuffled by the
seed, so even a short run meets every kind, and a long run meets them equally often. Each
episode's parameters (durations, targets, counts) come from the same seeded generator; what
actually happened (with the monotonic times it started and ended) goes to the nemesis log,
which the checker reads. Faults aimed at "the holder" first ask every worker to make its next
hold a long one, so the fault lands on a holder that is busy renewing.

With L = heartbeat_timeout and M = the safety margin L(1−ρ) − D(1+ρ):

- ``kill``: SIGKILL the holder, restart it (a new incarnation) 0.1–0.5 s later;
- ``pause-short``: SIGSTOP the holder for 0.2–0.6 × (M − T_stop), then SIGCONT (safe);
- ``pause-long``: SIGSTOP the holder for 1.3–2 × L (beyond any lease), wherever it is: the
  library cancels the body when it resumes (on asyncio after at most one step);
- ``pause-in-write``: the same pause, landing between the holder's decision to write and the
  write (the holder blocks in a synchronous step, and is stopped there): no lease can close
  that window, so the write reaches the store stale and fencing must reject it;
- ``proxy-latency`` / ``proxy-slicer``: 10–40 ms ± 0–20 ms per chunk, or responses in
  16–64-byte slices 2–10 ms apart, on the holder's connection for 1–3 s;
- ``proxy-blackhole``: the holder's connection moves no bytes for 0.3–1.5 × L (during a hold of
  1–2 L, so the longer ones outlast its deadline);
- ``proxy-reset``: every connection of the holder is reset at once;
- ``emu-drop-reply`` / ``emu-409`` / ``emu-429`` / ``emu-503``: the holder's next 1–3 writes
  commit and lose their reply, or answer 409 / 429 / 503 (503 half the time after committing);
- ``emu-watch-cut`` / ``emu-410``: every watch is cut, or expired with 410 Gone;
- ``emu-pause`` / ``backend-pause``: the emulator hangs (or etcd is SIGSTOPped) 0.2–1.2 × L;
- ``skew-within``: every worker's clock rate is set anew within 1 ± 0.9ρ;
- ``skew-beyond``: the holder's clock runs at half speed (far beyond ρ) while its connection
  is blackholed for 1.5 × L, then both heal; the holder was asked for a 2.5–3 L hold, so its
  body still runs when a contender takes over.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ._state import Harness, Worker

__all__ = ["Nemesis"]

#: How long a worker blocks right before a write when asked to (pause-in-write aims in there).
POISE_WINDOW = 1.0


class Nemesis:
    """Runs fault episodes against one harness until cancelled or the handover goal is met."""

    def __init__(self, harness: Harness, tg: TaskGroup) -> None:
        self.h = harness
        self.tg = tg
        self.rng = random.Random(harness.config.seed)
        self.settings = harness.settings

    async def run(self) -> None:
        config = self.h.config
        kinds = list(config.fault_kinds())
        # Let every worker start and the first handovers happen before the first fault.
        await anyio.sleep(2.0)
        rounds = 0
        while config.rounds is None or rounds < config.rounds:
            rounds += 1
            self.rng.shuffle(kinds)
            for kind in kinds:
                if config.handovers is not None and self.h.handovers_live >= config.handovers:
                    return
                await anyio.sleep(self.rng.uniform(*config.fault_gap))
                if self.h.emulator is not None:
                    self.h.emulator.requests.clear()  # the emulator keeps every request
                await getattr(self, "_" + kind.replace("-", "_"))(kind)
        await anyio.sleep(2.0)  # let the last fault's aftermath be logged

    # -- helpers ---------------------------------------------------------------------------------

    def log(self, kind: str, target: int | None, t0: float, **params: Any) -> None:
        self.h.log_fault({"kind": kind, "target": target, "t0": t0, "t1": time.monotonic(),
                          **params})

    async def holder(
        self, timeout: float = 10.0, hold: tuple[float, float] | None = None
    ) -> Worker | None:
        """A worker in a long hold (asked for), or None if none came in ``timeout``.

        ``hold`` (in units of L) asks for longer holds than usual, for faults that must outlast
        the holder's deadline while its body still runs.
        """
        config = self.h.config
        base = config.p_long
        hold = hold or config.long_hold
        shortest = 0.99 * hold[0] * self.settings.heartbeat_timeout
        for worker in self.h.workers:
            await self.h.send(worker, {"p_long": 1.0, "long_hold": hold})
        try:
            with anyio.move_on_after(timeout):
                while True:
                    for worker in self.h.workers:
                        holding = worker.holding
                        if holding is not None and holding[2] >= shortest and not worker.stopped:
                            _token, start, planned = holding
                            if time.monotonic() - start < 0.4 * planned:
                                await anyio.sleep(self.rng.uniform(0.0, 0.2 * planned))
                                if worker.holding == holding:
                                    return worker
                    await anyio.sleep(0.01)
            return None
        finally:
            for worker in self.h.workers:
                await self.h.send(worker, {"p_long": base, "long_hold": config.long_hold})

    def proxy(self, worker: Worker) -> Any:
        return self.h.proxies[worker.slot]

    # -- processes -------------------------------------------------------------------------------

    async def _kill(self, kind: str) -> None:
        worker = await self.holder()
        if worker is None:
            return
        t0 = time.monotonic()
        await self.h.kill_worker(worker)
        self.log(kind, worker.slot, t0)
        await anyio.sleep(self.rng.uniform(0.1, 0.5))
        await self.h.start_worker(worker, self.tg)

    async def _pause(self, kind: str, seconds: float) -> None:
        worker = await self.holder()
        if worker is None:
            return
        await self._stop(worker, kind, seconds)

    async def _stop(
        self, worker: Worker, kind: str, seconds: float, *, poised: float | None = None
    ) -> None:
        """SIGSTOP ``worker`` for ``seconds``, then SIGCONT and log the episode.

        ``poised``: when the worker logged "poised" (pause-in-write); the episode is logged as
        ``missed`` if the stop came after its blocking step had ended.
        """
        t0 = time.monotonic()
        self.h.signal_worker(worker, signal.SIGSTOP)
        try:
            await anyio.sleep(seconds)
        finally:
            self.h.signal_worker(worker, signal.SIGCONT)
            # Cut short when the run ended during the pause: then it proves nothing.
            truncated = time.monotonic() - t0 < seconds - 0.01
            extra = {} if poised is None else {"missed": t0 - poised > 0.8 * POISE_WINDOW}
            self.log(kind, worker.slot, t0, seconds=seconds, truncated=truncated, **extra)

    async def _pause_in_write(self, kind: str) -> None:
        worker = await self.holder()
        if worker is None:
            return
        worker.poised_event = poised_event = anyio.Event()
        await self.h.send(worker, {"poise": POISE_WINDOW})
        with anyio.move_on_after(2 * self.h.config.gap + POISE_WINDOW):
            await poised_event.wait()
        worker.poised_event = None
        if not poised_event.is_set() or worker.holding is None:
            return  # its hold ended before the next write: nothing to aim at
        seconds = self.rng.uniform(1.3, 2.0) * self.settings.heartbeat_timeout
        await self._stop(worker, kind, seconds, poised=worker.poised_at)

    async def _pause_short(self, kind: str) -> None:
        budget = self.settings.safety_margin - self.settings.stop_timeout
        await self._pause(kind, self.rng.uniform(0.2, 0.6) * max(budget, 0.01))

    async def _pause_long(self, kind: str) -> None:
        await self._pause(kind, self.rng.uniform(1.3, 2.0) * self.settings.heartbeat_timeout)

    async def _backend_pause(self, kind: str) -> None:
        pid = self.h.backend_pid
        assert pid is not None
        seconds = self.rng.uniform(0.2, 1.2) * self.settings.heartbeat_timeout
        t0 = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            await anyio.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
            self.log(kind, None, t0, seconds=seconds)

    # -- clocks ----------------------------------------------------------------------------------

    async def _skew_within(self, kind: str) -> None:
        rho = self.settings.clock_rate_tolerance
        t0 = time.monotonic()
        rates = {}
        for worker in self.h.workers:
            rates[worker.slot] = 1.0 + self.rng.uniform(-0.9, 0.9) * rho
            await self.h.send(worker, {"rate": rates[worker.slot]})
        self.log(kind, None, t0, rates=rates)

    async def _skew_beyond(self, kind: str) -> None:
        worker = await self.holder(hold=(2.5, 3.0))
        if worker is None:
            return
        seconds = 1.5 * self.settings.heartbeat_timeout
        t0 = time.monotonic()
        await self.h.send(worker, {"rate": 0.5})
        self.proxy(worker).blackhole()
        try:
            await anyio.sleep(seconds)
        finally:
            self.proxy(worker).clear()
            # Back to the true rate only once the slow deadline has surely passed.
            await anyio.sleep(self.settings.deadline)
            await self.h.send(worker, {"rate": 1.0})
            self.log(kind, worker.slot, t0, rate=0.5, blackhole=seconds)

    # -- the network -----------------------------------------------------------------------------

    async def _proxy_latency(self, kind: str) -> None:
        worker = await self.holder()
        if worker is None:
            return
        latency, jitter = self.rng.uniform(0.01, 0.04), self.rng.uniform(0.0, 0.02)
        seconds = self.rng.uniform(1.0, 3.0)
        t0 = time.monotonic()
        self.proxy(worker).latency(latency, jitter)
        try:
            await anyio.sleep(seconds)
        finally:
            self.proxy(worker).clear()
            self.log(kind, worker.slot, t0, latency=latency, jitter=jitter)

    async def _proxy_slicer(self, kind: str) -> None:
        worker = await self.holder()
        if worker is None:
            return
        size, gap = self.rng.randint(16, 64), self.rng.uniform(0.002, 0.01)
        seconds = self.rng.uniform(1.0, 3.0)
        t0 = time.monotonic()
        self.proxy(worker).slicer(size, gap)
        try:
            await anyio.sleep(seconds)
        finally:
            self.proxy(worker).clear()
            self.log(kind, worker.slot, t0, size=size, gap=gap)

    async def _proxy_blackhole(self, kind: str) -> None:
        low, high = self.h.config.long_hold
        worker = await self.holder(hold=(max(1.0, low), max(2.0, high)))
        if worker is None:
            return
        shortest, longest = self.h.config.blackhole
        seconds = self.rng.uniform(shortest, longest) * self.settings.heartbeat_timeout
        t0 = time.monotonic()
        self.proxy(worker).blackhole()
        try:
            await anyio.sleep(seconds)
        finally:
            self.proxy(worker).clear()
            self.log(kind, worker.slot, t0, seconds=seconds)

    async def _proxy_reset(self, kind: str) -> None:
        worker = await self.holder()
        if worker is None:
            return
        t0 = time.monotonic()
        count = self.proxy(worker).reset()
        self.log(kind, worker.slot, t0, connections=count)

    # -- the API emulator ------------------------------------------------------------------------

    async def _emulator_fault(self, kind: str, add: Any) -> None:
        worker = await self.holder()
        if worker is None:
            return
        faults = self.h.emulator.faults
        times = self.rng.randint(1, 3)
        t0 = time.monotonic()
        fault = add(faults, worker.token, times)
        try:
            # Long enough for the holder's next renewals to meet the fault.
            await anyio.sleep(2 * self.settings.heartbeat_interval + times * 0.1)
        finally:
            if fault in faults._faults:
                faults.remove(fault)
            self.log(kind, worker.slot, t0, times=times, left=max(fault.times or 0, 0))

    async def _emu_drop_reply(self, kind: str) -> None:
        await self._emulator_fault(
            kind, lambda f, tok, n: f.drop_reply(token=tok, verbs={"update"}, times=n)
        )

    async def _emu_409(self, kind: str) -> None:
        await self._emulator_fault(
            kind, lambda f, tok, n: f.fail(409, token=tok, verbs={"update"}, times=n)
        )

    async def _emu_429(self, kind: str) -> None:
        await self._emulator_fault(
            kind, lambda f, tok, n: f.fail(429, token=tok, verbs={"get", "update"}, times=n)
        )

    async def _emu_503(self, kind: str) -> None:
        after = self.rng.random() < 0.5
        await self._emulator_fault(
            kind,
            lambda f, tok, n: f.fail(503, token=tok, verbs={"update"}, times=n, after_commit=after),
        )

    async def _emu_watch_cut(self, kind: str) -> None:
        t0 = time.monotonic()
        count = self.h.emulator.cut_watches()
        self.log(kind, None, t0, watches=count)

    async def _emu_410(self, kind: str) -> None:
        t0 = time.monotonic()
        fault = self.h.emulator.faults.fail(410, verbs={"watch"}, times=self.h.config.workers)
        count = self.h.emulator.expire_watches()
        await anyio.sleep(self.settings.heartbeat_interval)
        if fault in self.h.emulator.faults._faults:
            self.h.emulator.faults.remove(fault)
        self.log(kind, None, t0, watches=count)

    async def _emu_pause(self, kind: str) -> None:
        seconds = self.rng.uniform(0.2, 1.2) * self.settings.heartbeat_timeout
        t0 = time.monotonic()
        self.h.emulator.faults.pause()
        try:
            await anyio.sleep(seconds)
        finally:
            self.h.emulator.faults.resume()
            self.log(kind, None, t0, seconds=seconds)
