"""What the hostile suite checks, in one place: outcomes, oracles, time and request-rate bounds.

Every call the suite makes ends in an outcome: ``result`` or the name of the exception. Typed
outcomes are :class:`~trio_lease.LeaseError` subclasses; anything else (``KeyError``,
``TypeError``, ``RecursionError``, an ``ExceptionGroup``, a hang past the call's bound) is a
failure. Failures are collected, not raised at once, so one run reports every distinct problem;
each names the backend, the call, the reply that caused it and what went wrong, and the
assertion message carries the random seed to replay the run.

Request-rate bound (the "no spinning" check), derived from the library's waits: the shortest
pause of any retry loop is 5 ms (the acquire conflict pause, doubling from there), 50 ms (the
Kubernetes 429 floor, the etcd watch's first back-off), 200 ms (the waiting loop's first
back-off after a failed attempt) or the renewal retry gap T/4. One acquire attempt sends at most
``4 conflicting rounds x (read, pre-write read, write)`` plus a resolving read and a release
write: 14 requests, which a healthy client sends within well under 100 ms on loopback. A waiting
call adds its watch (a list and a watch request per reconnect) and, once granted, a renewal or a
resolving read per T/4. So a call that waits where it should sends at most
:data:`MAX_PER_100MS` requests in any 100 ms and :data:`MAX_PER_SECOND` in any second (three
attempts fit in one second with back-offs of 0.2 s and 0.4 s: 42, plus the watch and renewals).
A retry loop without a pause sends hundreds per second on loopback and trips both.

Time bound: a call ends within the bound its settings give it plus :data:`SLACK`, counting its
time less the time the event loop's thread waited for a CPU meanwhile (:func:`cpu_wait`): on a
machine whose other processes (other test workers) keep the loop from running, its timeouts fire
late by exactly that wait, which says nothing about the call. A call that spins still counts in
full (its own CPU time is not waiting), and a hang still ends at the hard limit.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio

from trio_lease import (
    BackendAuthError,
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
    LeaseRecord,
)
from trio_lease._algorithm import echo_problem

__all__ = [
    "MAX_PER_100MS",
    "MAX_PER_SECOND",
    "SLACK",
    "CallOutcome",
    "Expect",
    "Failure",
    "Tally",
    "Truth",
    "judge_error",
    "judge_record",
    "judge_write",
    "outcome_name",
    "rate_problem",
    "run_call",
]

MAX_PER_100MS = 20
MAX_PER_SECOND = 60
#: Added to every time bound derived from the settings: real sockets on a shared 2-core machine.
SLACK = 1.0

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Truth:
    """A record as the fake's true store holds it (read by the fake, never from a reply)."""

    holder: str
    token: int
    duration: float
    version: str


ExpectKind = Literal[
    "truthful", "info", "content", "plausible", "identity", "error", "lie", "absent"
]


@dataclasses.dataclass(frozen=True)
class Expect:
    """What a reply allows the backend to return (the oracle of one reply).

    ``truthful``: the true state, exactly. ``info``: a field that is informational only (a
    time, an advisory field) is broken: the true state, an unreadable record or a typed error.
    ``content``: a field that decides the record is broken: an unreadable record or
    BackendUnavailable. ``plausible``: an optional field is absent/null, which the protocol
    reads as its default (``default``: record attributes and their values). ``identity``: not
    our object, or no version: BackendUnavailable (BackendProtocolError). ``error``: not an
    answer (5xx, HTML, 429, ...): one of ``errors``. ``lie``: a well-formed write echo that
    does not show the write. ``absent``: the reply says there is no record (a 404 or an empty
    range).
    """

    kind: ExpectKind
    label: str
    base: Truth | None = None
    default: object = None
    errors: tuple[type[BaseException], ...] = (BackendUnavailable,)


TRUTHFUL = Expect("truthful", "truthful")


@dataclasses.dataclass(frozen=True)
class Failure:
    """One wrong behaviour. ``key`` deduplicates: the same problem from many replies is one."""

    backend: str
    call: str
    reply: str
    what: str
    detail: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.backend, self.call, self.reply.split("#")[0], self.what)

    def __str__(self) -> str:
        extra = f" [{self.detail}]" if self.detail else ""
        return f"{self.backend} | {self.call} | reply {self.reply} | {self.what}{extra}"


class Tally:
    """Counts replies and outcomes, and collects failures, for one test (and the session)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.replies: Counter[tuple[str, str]] = Counter()
        self.outcomes: Counter[tuple[str, str, str]] = Counter()
        self.failures: list[Failure] = []

    def fail(self, failure: Failure) -> None:
        self.failures.append(failure)

    def outcome(self, backend: str, level: str, outcome: str) -> None:
        self.outcomes[(backend, level, outcome)] += 1

    def merge(self, other: Tally) -> None:
        self.replies.update(other.replies)
        self.outcomes.update(other.outcomes)
        self.failures.extend(other.failures)

    def hostile_replies(self, backend_prefix: str) -> int:
        return sum(
            n for (backend, cls), n in self.replies.items()
            if backend.startswith(backend_prefix) and cls != "truthful"
        )

    def distinct_failures(self) -> list[tuple[Failure, int]]:
        counts: Counter[tuple[str, str, str, str]] = Counter(f.key for f in self.failures)
        first: dict[tuple[str, str, str, str], Failure] = {}
        for failure in self.failures:
            first.setdefault(failure.key, failure)
        return [(first[key], n) for key, n in counts.most_common()]

    def report(self) -> str:
        lines = []
        backends = sorted({b for b, _ in self.replies})
        for backend in backends:
            by_class = Counter(
                {cls.split(":")[0]: 0 for (b, cls) in self.replies if b == backend}
            )
            for (b, cls), n in self.replies.items():
                if b == backend:
                    by_class[cls.split(":")[0]] += n
            hostile = sum(n for cls, n in by_class.items() if cls != "truthful")
            classes = ", ".join(f"{cls} {n}" for cls, n in sorted(by_class.items()))
            lines.append(f"  {backend}: {hostile} hostile replies ({classes})")
        levels = sorted({(b, lvl) for b, lvl, _ in self.outcomes})
        for backend, level in levels:
            outcomes = ", ".join(
                f"{o} {n}"
                for (b, lvl, o), n in sorted(self.outcomes.items())
                if (b, lvl) == (backend, level)
            )
            lines.append(f"  {backend} {level} calls: {outcomes}")
        lines.append(f"  wrong: {len(self.failures)}")
        return "\n".join(lines)

    def assert_clean(self, what: str) -> None:
        if not self.failures:
            return
        distinct = self.distinct_failures()
        shown = "\n".join(f"  {n}x {failure}" for failure, n in distinct[:25])
        more = f"\n  ... and {len(distinct) - 25} more" if len(distinct) > 25 else ""
        raise AssertionError(
            f"{what}: {len(self.failures)} wrong behaviours ({len(distinct)} distinct); replay "
            f"with TRIO_LEASE_HOSTILE_SEED={self.seed}\n{shown}{more}"
        )


def outcome_name(exc: BaseException | None) -> str:
    if exc is None:
        return "result"
    if isinstance(exc, BaseExceptionGroup):
        inner = ", ".join(type(e).__name__ for e in exc.exceptions)
        return f"ExceptionGroup[{inner}]"
    return type(exc).__name__


def untyped_problem(exc: BaseException) -> str:
    """"" for an exception of our tree; else what is wrong with it."""
    if isinstance(exc, BaseExceptionGroup):
        return f"raised an ExceptionGroup ({outcome_name(exc)}) instead of one typed error"
    if not isinstance(exc, LeaseError):
        return f"raised untyped {type(exc).__name__}"
    return ""


@dataclasses.dataclass
class CallOutcome:
    """How one call ended: its result or exception, and when it started and ended."""

    result: Any
    exc: BaseException | None
    start: float
    end: float
    hung: bool = False
    #: Seconds the event loop's thread waited for a CPU during the call (:func:`cpu_wait`).
    starved: float = 0.0

    @property
    def elapsed(self) -> float:
        return self.end - self.start

    @property
    def own_time(self) -> float:
        """The call's time without the time its event loop waited for a CPU."""
        return self.elapsed - self.starved

    def over(self, bound: float) -> str:
        """"" if the call kept to ``bound`` (plus :data:`SLACK`); else what it took."""
        if self.own_time <= bound + SLACK:
            return ""
        return (f"took {self.elapsed:.2f} s ({self.starved:.2f} s of it waiting for a CPU), "
                f"over its bound {bound:g} s + slack")


def cpu_wait() -> float:
    """Seconds this thread has been runnable but waiting for a CPU so far (Linux's
    /proc/thread-self/schedstat); 0 where the kernel does not say."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


async def run_call(fn: Callable[[], Awaitable[T]], hard_limit: float) -> CallOutcome:
    """Run ``fn``; catch whatever it raises; give up (``hung``) after ``hard_limit`` seconds."""
    start, waited = anyio.current_time(), cpu_wait()
    result: Any = None
    exc: BaseException | None = None
    with anyio.move_on_after(hard_limit) as scope:
        try:
            result = await fn()
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as error:  # judging every exception is the point
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
            exc = error
    return CallOutcome(result, exc, start, anyio.current_time(), scope.cancelled_caught,
                       cpu_wait() - waited)


# -- oracles ----------------------------------------------------------------------------------


def _fields(record: LeaseRecord) -> tuple[str, int, float, str]:
    return (record.holder, record.fencing_token, record.lease_duration, record.version)


def _truth_fields(truth: Truth) -> tuple[str, int, float, str]:
    return (truth.holder, truth.token, truth.duration, truth.version)


def judge_error(expect: Expect, exc: BaseException) -> str:
    """"" if raising ``exc`` is a correct answer to a reply judged by ``expect``."""
    problem = untyped_problem(exc)
    if problem:
        return problem
    if expect.kind == "truthful":
        if isinstance(exc, BackendProtocolError):
            return "a valid reply was refused as malformed"
        return ""
    if expect.kind == "absent":
        return ""
    if expect.kind == "error":
        if not isinstance(exc, expect.errors):
            wanted = "/".join(e.__name__ for e in expect.errors)
            return f"{type(exc).__name__} where {wanted} was expected"
        return ""
    if isinstance(exc, ConflictError):
        return "a malformed or lying reply was read as a definite conflict (not written)"
    if not isinstance(exc, BackendUnavailable):
        return f"{type(exc).__name__} for a malformed reply (expected BackendProtocolError)"
    return ""


def judge_record(expect: Expect, result: object) -> str:
    """"" if returning ``result`` (a record or None) is a correct reading of the reply."""
    kind = expect.kind
    if result is None:
        if kind == "absent" or (kind in ("truthful", "info", "plausible") and expect.base is None):
            return ""
        return "read as no record (free) although the reply does not say so"
    if not isinstance(result, LeaseRecord):
        return f"returned {type(result).__name__}, not a LeaseRecord"
    if result.unreadable:
        if result.holder:
            return "an unreadable record names a holder (contract: holder is empty)"
        if kind in ("content", "info", "plausible", "lie"):
            return ""
        if kind == "identity":
            return "another object or a missing version read as an unreadable record " \
                "(contract: BackendProtocolError)"
        if kind == "truthful":
            return f"a valid record was read as unreadable ({result.unreadable})"
        return f"a {kind} reply was read as an unreadable record"
    if kind in ("truthful", "info"):
        if expect.base is None:
            return "a record was read from a reply without one"
        if _fields(result) != _truth_fields(expect.base):
            return (
                f"read {_fields(result)!r} where the reply says {_truth_fields(expect.base)!r}"
            )
        return ""
    if kind == "plausible":
        assert expect.base is not None
        assert isinstance(expect.default, dict)
        wanted = dataclasses.replace(expect.base, **expect.default)
        if _fields(result) not in (_truth_fields(wanted), _truth_fields(expect.base)):
            return f"read {_fields(result)!r} where the reply says {_truth_fields(wanted)!r}"
        return ""
    if kind == "lie":
        return ""
    if kind == "content":
        return "a malformed field was read as a well-formed record"
    if kind == "identity":
        return "a reply that is not our object (or has no version) was read as a record"
    if kind == "absent":
        return "a reply saying 'no record' was read as a record"
    return "an error reply was read as a record"


def judge_write(
    expect: Expect,
    result: object,
    written: LeaseRecord,
    expected_version: str | None,
    applied: bool,
) -> str:
    """Like :func:`judge_record` for a write's answer, plus: an answer that confirms the write
    (``echo_problem`` finds nothing) while the store did not apply it is a lie accepted."""
    confirmed = isinstance(result, LeaseRecord) and not result.unreadable and not echo_problem(
        result, written, expected_version
    )
    if confirmed and not applied:
        return "a reply that does not show the write confirmed it (the store was unchanged)"
    return judge_record(expect, result)


def rate_problem(times: Sequence[float]) -> str:
    """"" unless the requests at ``times`` came faster than the bounds in the module docstring."""
    ordered = sorted(times)
    for window, limit in ((0.1, MAX_PER_100MS), (1.0, MAX_PER_SECOND)):
        for i, start in enumerate(ordered):
            count = bisect.bisect_right(ordered, start + window) - i
            if count > limit:
                return f"{count} requests within {window:g} s (bound {limit})"
    return ""


def expected_errors(*names: str) -> tuple[type[BaseException], ...]:
    table: dict[str, type[BaseException]] = {
        "unavailable": BackendUnavailable,
        "auth": BackendAuthError,
        "config": LeaseConfigError,
        "backend": BackendError,
    }
    return tuple(table[n] for n in names)


def pick_weighted(rng: Any, items: Iterable[tuple[T, float]]) -> T:
    pairs = list(items)
    total = sum(w for _, w in pairs)
    point = rng.random() * total
    for item, weight in pairs:
        point -= weight
        if point <= 0:
            return item
    return pairs[-1][0]
