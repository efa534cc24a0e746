"""Run parameters: the backend, the random seed, the lease timing, the faults and the stop rule."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

__all__ = [
    "FAULTS_BY_BACKEND", "PARTITIONED_FAULTS_BY_BACKEND", "SEMAPHORE_FAULTS_BY_BACKEND",
    "STORE_OUTAGE_KINDS", "RunConfig",
]

_COMMON = ("kill", "pause-short", "pause-long", "pause-in-write", "skew-within")
_PROXY = ("proxy-latency", "proxy-blackhole", "proxy-reset", "proxy-slicer", "skew-beyond")
_EMULATOR = (
    "emu-drop-reply", "emu-409", "emu-429", "emu-503", "emu-watch-cut", "emu-410", "emu-pause",
)

#: Which nemeses make sense for each backend (SQLite has no network to break).
FAULTS_BY_BACKEND: dict[str, tuple[str, ...]] = {
    "kubernetes": _COMMON + _PROXY + _EMULATOR,
    "etcd": (*_COMMON, *_PROXY, "backend-pause"),
    "sqlite": _COMMON,
}

#: The partitioned mode's faults: kills, pauses and, where there is a network, partitions
#: (a member's connection blackholed or reset). Clock skew and the emulator's own faults
#: stay with the lease mode: run_partitioned takes no injected clock.
_PARTITION = ("proxy-blackhole", "proxy-reset")
PARTITIONED_FAULTS_BY_BACKEND: dict[str, tuple[str, ...]] = {
    "kubernetes": ("kill", "pause-short", "pause-long", *_PARTITION),
    "etcd": ("kill", "pause-short", "pause-long", *_PARTITION),
    "sqlite": ("kill", "pause-short", "pause-long"),
}

#: The semaphore mode's faults: kills with a restart, SIGTERM with a restart, pauses of a holder
#: (short, and past L), a waiter paused past L, and, where there is a network, partitions.
_SEMAPHORE = ("kill", "term", "pause-short", "pause-long", "pause-waiter")
SEMAPHORE_FAULTS_BY_BACKEND: dict[str, tuple[str, ...]] = {
    "kubernetes": (*_SEMAPHORE, *_PARTITION),
    "etcd": (*_SEMAPHORE, *_PARTITION),
    "sqlite": _SEMAPHORE,
}

#: Faults that may stop the store for every member, by backend: a SQLite member stopped inside
#: a write transaction keeps the file's write lock until it resumes.
STORE_OUTAGE_KINDS: dict[str, frozenset[str]] = {
    "kubernetes": frozenset({"emu-pause"}),
    "etcd": frozenset({"backend-pause"}),
    "sqlite": frozenset({"pause-long", "pause-waiter"}),
}


@dataclasses.dataclass
class RunConfig:
    """One campaign run. Times are seconds; ``settings`` are LeaseSettings keyword arguments."""

    backend: str = "kubernetes"
    seed: int = 1
    duration: float = 60.0
    handovers: int | None = None
    rounds: int | None = None  # stop after this many rounds of fault kinds (then settle 2 s)
    workers: int = 5
    out_dir: Path | None = None
    settings: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {
            "heartbeat_timeout": 2.0,
            "heartbeat_interval": 0.4,
            "lease_operation_timeout": 0.25,
            "stop_timeout": 0.3,
        }
    )
    faults: tuple[str, ...] | None = None  # None: every fault the backend supports
    fault_gap: tuple[float, float] = (4.0, 8.0)  # quiet time between two fault episodes
    p_long: float = 0.0  # share of long holds when no fault asks for one
    gap: float = 0.1  # seconds between fenced writes during a long hold
    long_hold: tuple[float, float] = (0.5, 1.0)  # length of a long hold, in units of L
    rest: float = 0.03  # a worker rests up to this long between two holds
    #: "", "no-fencing", "reply-anchor" or (semaphore mode) "over-limit": broken variants
    broken: str = ""
    blackhole: tuple[float, float] = (0.3, 1.5)  # proxy-blackhole length, in units of L
    slow_reply: float = 0.0  # delay every lease write's reply (seconds, after the commit)
    controller_loop: str = "trio"
    progress: bool = False  # print a progress line to stderr every 30 s
    #: "lease" (workers contend for one lease), "partitioned" or "semaphore"
    mode: str = "lease"
    keys: int = 40  # partitioned: how many keys the members share
    key_write_gap: float = 0.5  # partitioned: seconds between fenced writes of a running key
    #: partitioned: a key may stay unrun for L plus this many seconds while a member is alive.
    unrun_bound: float = 6.0
    limit: int = 3  # semaphore: the limit every worker uses
    hold: tuple[float, float] = (0.05, 0.3)  # semaphore: seconds a worker holds its slot
    #: semaphore: a waiter must be granted within L plus this many seconds of its own wait.
    wait_bound: float = 6.0
    #: kubernetes: serve the emulator from a process of its own (``trio-lease emulate``)
    #: instead of inside the harness; the ``emu-*`` faults need it inside.
    emulator_process: bool = False
    #: kubernetes, emulator in its own process: its nice value (0: the harness's).
    emulator_nice: int = 0

    def fault_kinds(self) -> tuple[str, ...]:
        if self.faults is not None:
            return self.faults
        if self.mode == "partitioned":
            return PARTITIONED_FAULTS_BY_BACKEND[self.backend]
        if self.mode == "semaphore":
            return SEMAPHORE_FAULTS_BY_BACKEND[self.backend]
        return FAULTS_BY_BACKEND[self.backend]

    @classmethod
    def short(cls, backend: str = "kubernetes", seed: int = 1, **overrides: Any) -> RunConfig:
        """The CI mix: one round of every fault kind of the backend (well under a minute).

        Pauses inside a write come twice per round, so that the run's "stale writes reached
        the store" check does not hang on one scheduling race.
        """
        faults = (*FAULTS_BY_BACKEND[backend], "pause-in-write")
        config = cls(backend=backend, seed=seed, duration=90.0, rounds=1, fault_gap=(0.3, 0.8),
                     faults=faults)
        return dataclasses.replace(config, **overrides)

    @classmethod
    def partitioned(
        cls, backend: str = "kubernetes", seed: int = 1, **overrides: Any
    ) -> RunConfig:
        """The partitioned mode: four members over 40 keys, a fault every 1-3 s, the emulator
        in a process of its own (the harness's proxies must not delay its replies)."""
        config = cls(backend=backend, seed=seed, duration=180.0, mode="partitioned", workers=4,
                     fault_gap=(1.0, 3.0), emulator_process=True)
        return dataclasses.replace(config, **overrides)

    @classmethod
    def semaphore(cls, backend: str = "kubernetes", seed: int = 1, **overrides: Any) -> RunConfig:
        """The semaphore mode: six workers at limit 3, a fault every 1-3 s, the emulator in a
        process of its own."""
        config = cls(backend=backend, seed=seed, duration=180.0, mode="semaphore", workers=6,
                     fault_gap=(1.0, 3.0), emulator_process=True, gap=0.05)
        return dataclasses.replace(config, **overrides)

    @classmethod
    def semaphore_smoke(
        cls, backend: str = "kubernetes", seed: int = 1, **overrides: Any
    ) -> RunConfig:
        """The semaphore mode's CI run: one round of a kill, a SIGTERM, a holder and a waiter
        each stopped past L (each followed by a restart or a resume): about 15-20 s, ended
        after 40 s on a machine too loaded to finish the round sooner."""
        config = cls.semaphore(backend, seed=seed, rounds=1, duration=40.0, fault_gap=(0.3, 0.8),
                               faults=("kill", "term", "pause-long", "pause-waiter"))
        return dataclasses.replace(config, **overrides)

    @classmethod
    def broken_variant(cls, variant: str, seed: int = 1, **overrides: Any) -> RunConfig:
        """A run of a deliberately broken variant, with the faults that expose it."""
        if variant == "no-fencing":
            config = cls(
                seed=seed, duration=30.0, broken=variant, faults=("pause-in-write",),
                fault_gap=(0.3, 0.8),
            )
        elif variant in ("reply-anchor", "slow-replies"):
            # D close to L (legal), replies 0.27 s late (< T), and the clock of the holder
            # stands still while its write is in flight: its deadline ends D after the reply.
            # "slow-replies" is the same run with the library's own clock: the control, which
            # must stay clean.
            config = cls(
                seed=seed, duration=30.0, broken="" if variant == "slow-replies" else variant,
                slow_reply=0.27, faults=("proxy-blackhole",), fault_gap=(0.3, 0.8),
                blackhole=(1.2, 1.5), long_hold=(2.5, 3.5),
                settings={
                    "heartbeat_timeout": 2.0, "heartbeat_interval": 0.4,
                    "lease_operation_timeout": 0.3, "holder_deadline": 1.85,
                    "stop_timeout": 0.1, "poll_interval": 0.05,
                },
            )
        else:
            raise ValueError(
                f"unknown variant {variant!r}: no-fencing, reply-anchor or slow-replies"
            )
        return dataclasses.replace(config, **overrides)
