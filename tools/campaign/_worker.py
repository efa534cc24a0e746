"""One contending worker process: holds the lease through the public API, logs what it believes.

    python -m tools.campaign._worker CONFIG_JSON

Each round runs ``async with lease.held() as grant:`` and, inside, the guarded work: writes of
``grant.fencing_token`` to the fencing store, ``gap`` apart, for a short or (sometimes) a long
hold. The body never checks the lease itself before a write: like most user code it relies on
being cancelled on loss, so a holder that wakes from a long pause may still send a write, and the
fencing store must reject it.

Every event is one JSON line on stdout, stamped with ``time.monotonic()`` (CLOCK_MONOTONIC,
system-wide on Linux, so stamps from different processes compare): ``ready``, ``start`` (first
thing in the body, after the grant), ``end`` (in the body's ``finally``, so after the guarded
work has fully exited and before the release), ``lost``, ``released``, ``error``, and ``stall``
(``t0``, ``t1``: the worker's own event loop woke a sampler task that much later than asked;
``cpu``: the CPU time the process used in that wait; see :func:`watch_stalls`).

Commands arrive as JSON lines on stdin: ``{"rate": r}`` sets the injected clock's rate;
``{"poise": s}`` makes the next write of a long hold first block the process for ``s`` seconds
after logging ``poised`` (the window a ``pause-in-write`` lands in). When
stdin closes, or on SIGTERM, the worker leaves its scope (releasing the lease) and exits.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Hashable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio

from trio_lease import (
    BackendUnavailable,
    Lease,
    LeaseBackend,
    LeaseLost,
    LeaseRecord,
    LeaseSettings,
)

from ._clock import ReplyAnchorClock, SkewedClock
from ._fencing import FencingClient
from ._proc import exit_with_parent

__all__ = ["SlowReplyBackend", "main"]


def emit(event: str, **fields: Any) -> None:
    """Print one event line, stamped with the system-wide monotonic clock."""
    sys.stdout.write(json.dumps({"ev": event, "t": time.monotonic(), **fields}) + "\n")
    sys.stdout.flush()


#: How often the stall sampler asks to wake, and how late a wake-up must be to be logged (s).
STALL_PERIOD = 0.05
STALL_LOGGED = 0.1


async def watch_stalls() -> None:
    """Log ``stall`` (``t0``, ``t1``) whenever this process's event loop wakes a task more than
    :data:`STALL_LOGGED` seconds after it asked: from ``t0``, when the wake-up was due, to
    ``t1``, when it came, nothing in the process ran (a SIGSTOP, or the machine giving the
    process no CPU). The checker treats a stall beyond the safety margin like an injected long
    pause: the lease's guarantees hold for a process that runs."""
    while True:
        due, cpu = time.monotonic() + STALL_PERIOD, time.process_time()
        await anyio.sleep(STALL_PERIOD)
        woke = time.monotonic()
        if woke - due > STALL_LOGGED:
            # The CPU time this process used meanwhile tells a process that got no CPU
            # (little) from one whose own code blocked its loop (most of the stall).
            emit("stall", t0=due, t1=woke, cpu=round(time.process_time() - cpu, 4))


class SlowReplyBackend(LeaseBackend):
    """Wraps a backend: renewals commit, then their reply is delayed (a slow network reply).

    Only renewals (and releases) are slow: writes that keep the fencing token this worker last
    wrote. A new grant replies at once, so the next holder's belief starts at its commit. With a
    :class:`ReplyAnchorClock` the clock stands still while a renewal is in flight, so the
    library's send-anchored deadline effectively starts at the reply: the deliberately broken
    variant of docs/design.md §4.2.
    """

    def __init__(self, inner: LeaseBackend, delay: float, clock: ReplyAnchorClock | None) -> None:
        self.inner = inner
        self.delay = delay
        self.clock = clock
        self.supports_watch = inner.supports_watch
        self._token = -1  # the fencing token of our last write

    @property
    def store_key(self) -> Hashable:
        return self.inner.store_key

    def validate_settings(self, settings: LeaseSettings) -> None:
        self.inner.validate_settings(settings)

    async def get(self, name: str) -> LeaseRecord | None:
        return await self.inner.get(name)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        self._token = record.fencing_token
        return await self.inner.create(record)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        if record.fencing_token != self._token:  # a new grant: reply at once
            self._token = record.fencing_token
            return await self.inner.update(record, expected_version)
        return await self._slow(self.inner.update(record, expected_version))

    async def _slow(self, write: Any) -> LeaseRecord:
        if self.clock is not None:
            self.clock.freeze()
        try:
            stored: LeaseRecord = await write
            await anyio.sleep(self.delay)
            return stored
        finally:
            if self.clock is not None:
                self.clock.thaw()

    def watch(self, name: str) -> AbstractAsyncContextManager[AsyncIterator[LeaseRecord | None]]:
        return self.inner.watch(name)

    async def aclose(self) -> None:
        await self.inner.aclose()


def make_backend(config: dict[str, Any]) -> LeaseBackend:
    """The backend named in the worker's configuration."""
    kind = config["backend"]
    if kind == "kubernetes":
        from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend

        cluster = ClusterConfig(
            server=config["server"], credentials=Credentials(token=config["token"])
        )
        return KubernetesBackend(cluster)
    if kind == "sqlite":
        from trio_lease.backends.sqlite import SqliteBackend

        return SqliteBackend(config["path"], watch_interval=0.02)
    if kind == "etcd":
        from trio_lease.backends.etcd import EtcdBackend

        return EtcdBackend([config["server"]])
    raise ValueError(f"unknown backend {kind!r}")


async def _commands(
    clock: SkewedClock, config: dict[str, Any], done: anyio.CancelScope
) -> None:
    """Apply commands from stdin (clock rate, long holds); leave when it closes."""
    while line := await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True):
        command = json.loads(line) if line.strip() else {}
        if "rate" in command:
            clock.set_rate(float(command["rate"]))
            emit("rate", rate=clock.rate)
        if "p_long" in command:
            config["p_long"] = float(command["p_long"])
        if "poise" in command:
            config["poise"] = float(command["poise"])
        if "long_hold" in command:
            config["long_hold"] = [float(x) for x in command["long_hold"]]
    done.cancel()


async def _signals(done: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            done.cancel()
            return


async def contend(lease: Lease, fencing: FencingClient, config: dict[str, Any]) -> None:
    """Hold the lease over and over, doing fenced guarded work inside."""
    rng = random.Random(config["seed"])
    gap = float(config["gap"])
    heartbeat_timeout = lease.settings.heartbeat_timeout
    while True:
        token = 0
        try:
            async with lease.held() as grant:
                token = grant.fencing_token
                # Decided once held, so the harness's latest request for long holds applies.
                long_hold = rng.random() < config["p_long"]
                low, high = config["long_hold"]
                hold = rng.uniform(low, high) * heartbeat_timeout if long_hold else 0.0
                writes = max(2, round(hold / gap)) if long_hold else 2
                emit("start", token=token, identity=grant.identity, hold=hold)
                try:
                    for i in range(writes):
                        poise = config.pop("poise", 0.0) if long_hold else 0.0
                        if poise:
                            # A synchronous step between deciding to write and writing (a
                            # blocking driver, a GC pause): the harness SIGSTOPs us in it.
                            emit("poised", token=token)
                            time.sleep(poise)  # noqa: ASYNC251 - blocking is the point
                        ok = await fencing.write("res", token)
                        if not ok:
                            emit("stale", token=token)
                        if i + 1 < writes:
                            await anyio.sleep(gap if long_hold else rng.uniform(0.002, 0.01))
                finally:
                    emit("end", token=token)
            emit("released", token=token)
        except LeaseLost as exc:
            emit("lost", token=token, cause=str(exc.__cause__ or exc)[:200])
        except (BackendUnavailable, OSError, anyio.BrokenResourceError) as exc:
            emit("error", token=token, error=f"{type(exc).__name__}: {exc}"[:200])
            await anyio.sleep(0.05)
        await anyio.sleep(rng.uniform(0.0, config["rest"]))


async def main(config: dict[str, Any]) -> None:
    """Contend until stdin closes or SIGTERM."""
    broken = config.get("broken", "")
    clock: SkewedClock = ReplyAnchorClock() if broken == "reply-anchor" else SkewedClock()
    clock.set_rate(float(config.get("rate", 1.0)))
    settings = LeaseSettings(**config["settings"])
    backend = make_backend(config)
    if config.get("slow_reply", 0.0) > 0:
        anchor = clock if isinstance(clock, ReplyAnchorClock) else None
        backend = SlowReplyBackend(backend, float(config["slow_reply"]), anchor)
    fencing = FencingClient(int(config["fencing_port"]), f"w{config['slot']}")
    async with backend:
        lease = Lease(config["lease"], f"w{config['slot']}", backend, settings, clock=clock)
        emit(
            "ready", identity=lease.identity, slot=config["slot"], pid=os.getpid(),
            loop=config.get("loop", "asyncio"),
        )
        with anyio.CancelScope() as done:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_stalls)
                tg.start_soon(_commands, clock, config, done)
                tg.start_soon(_signals, done)
                tg.start_soon(exit_with_parent, done)
                tg.start_soon(contend, lease, fencing, config)
        await fencing.aclose()
    emit("exit")


if __name__ == "__main__":
    worker_config = json.loads(sys.argv[1])
    anyio.run(main, worker_config, backend=worker_config.get("loop", "asyncio"))
