"""The calls the suite makes against a fake, and how each one is judged.

Two levels:

- **SPI** (:func:`spi_worker`): ``get``, ``create``, ``update`` and the first items of
  ``watch``, each on a fresh lease name (so the fake can tell which requests belong to which
  call), judged against the oracle of the last reply the call received
  (:mod:`._checks`). This is where the volume of generated replies goes.
- **core** (:func:`core_worker`): ``Lease.try_held()``, ``Lease.held(timeout=...)`` and
  ``acquire()``/``release()`` inside ``async with lease.host():``, with a renewal period short
  enough that renewals meet hostile replies too. At every grant the fake's *true* store must name
  our identity with the grant's fencing token, and tokens of successive grants strictly increase.

Every call must end in a typed outcome within its time bound (derived from the settings plus
:data:`~._checks.SLACK`) and send requests no faster than the bounds of :mod:`._checks`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
import httpx

from trio_lease import Lease, LeaseBackend, LeaseRecord, LeaseSettings
from trio_lease._writing import MAX_CONFLICTS
from trio_lease.backends.kubernetes._models import LeaseKind

from ._checks import (
    CallOutcome,
    Failure,
    Tally,
    Truth,
    judge_error,
    judge_record,
    judge_write,
    outcome_name,
    rate_problem,
    run_call,
    untyped_problem,
)
from ._etcd import LABEL as ETCD
from ._etcd import EtcdFake
from ._fake import Exchange
from ._kube import KubeFake, kind_label

__all__ = ["Target", "core_worker", "spi_worker", "takeover_contender"]

WALL = datetime(2026, 1, 1, tzinfo=UTC)


@dataclasses.dataclass
class Target:
    """One backend kind behind one fake, reached by socket (``url``) or by ``transport``."""

    fake: KubeFake | EtcdFake
    kind: LeaseKind | None
    url: str | None
    transport: httpx.AsyncBaseTransport | None

    @property
    def label(self) -> str:
        return kind_label(self.kind) if self.kind is not None else ETCD

    @property
    def path(self) -> str:
        return "socket" if self.url is not None else "transport"

    def truth(self, name: str) -> Truth | None:
        if isinstance(self.fake, KubeFake):
            assert self.kind is not None
            return self.fake.truth(self.kind, name)
        return self.fake.truth(name)

    def seed(self, name: str, holder: str, token: int, duration: int) -> Truth:
        if isinstance(self.fake, KubeFake):
            assert self.kind is not None
            return self.fake.seed(self.kind, name, holder, token, duration)
        return self.fake.seed(name, holder, token, float(duration))

    def protect(self, name: str, hold: float) -> Truth:
        if isinstance(self.fake, KubeFake):
            assert self.kind is not None
            return self.fake.protect_lease(self.kind, name, hold)
        return self.fake.protect_lease(name, hold)

    def history(self, name: str) -> list[Truth]:
        return self.fake.history.get((self.label, name), [])

    def first_shown(self, name: str) -> float | None:
        """When a reply first showed the protected record ``name`` (None: not yet)."""
        guard = self.fake.protected.get((self.label, name))
        return None if guard is None else guard.first_sent

    def exchanges(self, name: str, start: float, end: float) -> list[Exchange]:
        return [
            e for e in self.fake.by_key.get((self.label, name), [])
            if start - 1e-3 <= e.arrived <= end + 1e-3
        ]

    def backend(self, token: str, *, bound: float, auth: bool = False) -> LeaseBackend:
        if isinstance(self.fake, KubeFake):
            assert self.kind is not None
            return self.fake.backend(self.kind, url=self.url, transport=self.transport,
                                     token=token, request_timeout=bound)
        return self.fake.backend(url=self.url, transport=self.transport,
                                 username=token if auth else None, request_timeout=bound,
                                 connect_timeout=bound)

    def spi_bound(self, call: str, bound: float, auth: bool) -> float:
        """How long one SPI call may take: its requests' bounds, from the backend's settings."""
        if isinstance(self.fake, KubeFake):
            # get/create: one request bounded by request_timeout (429 retries and the 401
            # refresh included); update: a read first when the object is not cached.
            return (2 if call == "update" else 1) * bound
        # etcd: connect + read per request; with auth, an authenticate first, and one
        # re-authentication after an invalid token.
        return (4 if auth else 1) * 2 * bound


def _judge_common(
    target: Target, tally: Tally, call: str, name: str, outcome: CallOutcome, bound: float,
) -> tuple[list[Exchange], Exchange | None]:
    exchanges = target.exchanges(name, outcome.start, outcome.end)
    last = exchanges[-1] if exchanges else None
    reply = last.label if last is not None else "(none)"
    where = f"{target.label}/{target.path}"
    if outcome.hung:
        tally.fail(Failure(where, call, reply, f"did not end within {3 * bound + 5:g} s"))
    elif outcome.over(bound):
        tally.fail(Failure(where, call, reply, outcome.over(bound),
                           f"replies: {[e.label for e in exchanges][-6:]}"))
    problem = rate_problem([e.arrived for e in exchanges])
    if problem:
        labels = sorted({e.label for e in exchanges})[:6]
        tally.fail(Failure(where, call, reply, f"spins: {problem}", f"replies: {labels}"))
    return exchanges, last


async def _spi_call(
    target: Target, backend: LeaseBackend, tally: Tally, rng: random.Random, worker: int,
    serial: int, bound: float, auth: bool,
) -> None:
    op = rng.choices(["get", "get-absent", "create", "update", "watch"], [4, 1, 2, 4, 0.6])[0]
    name = f"s{worker}-{serial}"
    if isinstance(target.fake, EtcdFake):
        target.fake.auth_names[f"w{worker}"] = name
    where = f"{target.label}/{target.path}"
    if op in ("get", "update", "watch"):
        holder = rng.choice(["", "someone_0123456789ab", f"me-{worker}"])
        target.seed(name, holder, rng.randint(0, 50), rng.choice([1, 2, 15]))
    before = target.truth(name)
    written: LeaseRecord | None = None
    expected: str | None = None
    call: Callable[[], Awaitable[Any]]
    if op in ("get", "get-absent"):
        call = lambda: backend.get(name)  # noqa: E731
    elif op == "create":
        created = written = LeaseRecord(name, f"me-{worker}", 3.0, 1, WALL, WALL)
        call = lambda: backend.create(created)  # noqa: E731
    elif op == "update":
        assert before is not None
        updated = written = LeaseRecord(name, f"me-{worker}", 3.0, before.token + 1, WALL, WALL)
        expected = version = before.version
        call = lambda: backend.update(updated, version)  # noqa: E731
    else:
        await _watch_call(target, backend, tally, rng, name, bound)
        return
    limit = target.spi_bound("update" if op == "update" else "get", bound, auth)
    outcome = await run_call(call, 3 * limit + 5)
    exchanges, last = _judge_common(target, tally, op, name, outcome, limit)
    tally.outcome(target.label, "spi", outcome_name(outcome.exc))
    if last is None:
        if outcome.exc is not None and untyped_problem(outcome.exc):
            tally.fail(Failure(where, op, "(none)", untyped_problem(outcome.exc)))
        return
    if outcome.hung:
        return
    if outcome.exc is not None:
        problem = judge_error(last.expect, outcome.exc)
        detail = f"{type(outcome.exc).__name__}: {str(outcome.exc)[:160]}"
    elif written is not None:
        after = target.truth(name)
        applied = any(e.applied for e in exchanges) or after != before
        expect = last.expect
        if expect.kind == "truthful" and expect.base is None:
            expect = dataclasses.replace(expect, base=after)
        problem = judge_write(expect, outcome.result, written, expected, applied)
        detail = repr(outcome.result)[:200]
    else:
        problem = judge_record(last.expect, outcome.result)
        detail = repr(outcome.result)[:200]
    if problem:
        tally.fail(Failure(where, op, last.label, problem,
                           f"{detail}; reply: {last.excerpt}"))


async def _watch_call(
    target: Target, backend: LeaseBackend, tally: Tally, rng: random.Random, name: str,
    bound: float,
) -> None:
    """Read a watch for a short window, changing the record once; judge every item."""
    window = 0.6
    items: list[object] = []
    if rng.random() < 0.25:  # every stream of this watch ends at once (after one bookmark)
        target.fake.watch_storm.add((target.label, name))

    async def watch() -> None:
        async with backend.watch(name) as stream:
            with anyio.move_on_after(window):
                async for item in stream:
                    items.append(item)
                    if len(items) == 1:
                        truth = target.truth(name)
                        token = truth.token + 1 if truth is not None else 1
                        target.seed(name, f"changed-{rng.randint(0, 9)}", token, 2)

    limit = window + 2 * bound + 1.0
    outcome = await run_call(watch, 3 * limit + 5)
    _judge_common(target, tally, "watch", name, outcome, limit)
    tally.outcome(target.label, "spi", outcome_name(outcome.exc))
    where = f"{target.label}/{target.path}"
    if outcome.exc is not None:
        problem = untyped_problem(outcome.exc)
        if problem:
            tally.fail(Failure(where, "watch", "(stream)", problem, repr(outcome.exc)[:200]))
    exchanges = target.exchanges(name, outcome.start, outcome.end)
    allowed = {(t.holder, t.token, t.duration, t.version) for t in target.history(name)}
    for exchange in exchanges:  # an absent optional field reads as its default: a fair reading
        expect = exchange.expect
        if expect.kind == "plausible" and expect.base is not None:
            assert isinstance(expect.default, dict)
            wanted = dataclasses.replace(expect.base, **expect.default)
            allowed.add((wanted.holder, wanted.token, wanted.duration, wanted.version))
    for item in items:
        if item is None:
            continue
        if not isinstance(item, LeaseRecord):
            tally.fail(Failure(where, "watch", "(stream)", f"yielded {type(item).__name__}"))
            continue
        if item.unreadable:
            if item.holder:
                tally.fail(Failure(where, "watch", "(stream)",
                                   "an unreadable record names a holder"))
            continue
        seen = (item.holder, item.fencing_token, item.lease_duration, item.version)
        if seen not in allowed:
            labels = sorted({e.label for e in exchanges})
            tally.fail(Failure(where, "watch", ",".join(labels)[:160],
                               "yielded a record the store never held",
                               f"{seen}; the store held {sorted(allowed)[:4]}"))


async def spi_worker(
    target: Target, tally: Tally, rng: random.Random, worker: int, *, bound: float,
    enough: Callable[[], bool], auth: bool = False,
) -> None:
    """SPI calls on fresh names until ``enough()``; one backend object for all of them."""
    etcd_user = isinstance(target.fake, EtcdFake) and auth
    token = f"w{worker}" if etcd_user else f"tok-{rng.getrandbits(48):012x}"
    backend = target.backend(token, bound=bound, auth=auth)
    async with backend:
        serial = 0
        while not enough():
            serial += 1
            await _spi_call(target, backend, tally, rng, worker, serial, bound, auth)


# -- the core API --------------------------------------------------------------------------


def acquire_bound(settings: LeaseSettings) -> float:
    """An acquire attempt: up to MAX_CONFLICTS rounds of a read and a write, each bounded by
    T, then a resolving read and a release write after an unknown outcome; plus the pauses."""
    T = settings.lease_operation_timeout
    return (2 * MAX_CONFLICTS + 2) * T + 0.2


class _Grants:
    """The tokens of successive grants per lease (they must strictly increase)."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}


def _check_grant(
    target: Target, tally: Tally, call: str, name: str, lease: Lease, token: int,
    grants: _Grants,
) -> None:
    where = f"{target.label}/{target.path}"
    truth = target.truth(name)
    if truth is None or truth.holder != lease.identity or truth.token != token:
        labels = [e.label for e in target.fake.by_key.get((target.label, name), [])][-6:]
        tally.fail(Failure(where, call, ",".join(labels),
                           "a grant the store does not show",
                           f"grant token {token}; store {truth}"))
    previous = grants.last.get(name)
    if previous is not None and token <= previous:
        tally.fail(Failure(where, call, "(sequence)",
                           f"fencing token {token} after an earlier grant's {previous}"))
    grants.last[name] = token


async def core_worker(
    target: Target, tally: Tally, rng: random.Random, name: str, settings: LeaseSettings,
    calls: int,
) -> None:
    """``calls`` core calls on one lease name (so grants follow each other on that lease)."""
    grants = _Grants()
    token = f"tok-{rng.getrandbits(48):012x}"
    backend = target.backend(token, bound=settings.lease_operation_timeout)
    where = f"{target.label}/{target.path}"
    T = settings.lease_operation_timeout
    body_time = 2.5 * settings.heartbeat_interval
    async with backend:
        lease = Lease(name, f"owner-{name}", backend, settings)

        async def try_held() -> None:
            async with lease.try_held() as grant:
                _check_grant(target, tally, "try_held", name, lease, grant.fencing_token, grants)
                await anyio.sleep(body_time)

        async def held(timeout: float) -> None:
            async with lease.held(timeout=timeout) as grant:
                _check_grant(target, tally, "held", name, lease, grant.fencing_token, grants)
                await anyio.sleep(body_time)

        async def acquire_release() -> None:
            async with lease.host():
                acquired = await run_call(lease.acquire, acquire_bound(settings) * 3)
                _judge_step(target, tally, "acquire", name, acquired, acquire_bound(settings))
                if acquired.exc is not None:
                    raise acquired.exc
                if acquired.result:
                    _check_grant(target, tally, "acquire", name, lease, _akka_token(lease),
                                 grants)
                    await anyio.sleep(body_time)
                    released = await run_call(lease.release, T * 3 + 5)
                    _judge_step(target, tally, "release", name, released, T)
                    if released.exc is not None:
                        raise released.exc

        for _ in range(calls):
            mode = rng.choice(["try_held", "held", "acquire"])
            timeout = rng.choice([0.5, 1.0, 1.5])
            run: Callable[[], Awaitable[None]]
            if mode == "try_held":
                run, limit = try_held, acquire_bound(settings) + body_time + T
            elif mode == "held":
                run = partial(held, timeout)
                limit = timeout + acquire_bound(settings) + body_time + T
            else:
                run, limit = acquire_release, acquire_bound(settings) + body_time + 2 * T
            outcome = await run_call(run, 3 * limit + 5)
            _judge_common(target, tally, mode, name, outcome, limit)
            tally.outcome(target.label, "core", outcome_name(outcome.exc))
            if outcome.exc is not None:
                problem = untyped_problem(outcome.exc)
                if problem:
                    tally.fail(Failure(where, mode, "(any)", problem, f"{outcome.exc!r}"[:200]))


def _akka_token(lease: Lease) -> int:
    hold = lease._akka._hold  # the grant acquire() made
    assert hold is not None
    return hold.holding.token


def _judge_step(
    target: Target, tally: Tally, call: str, name: str, outcome: CallOutcome, bound: float
) -> None:
    where = f"{target.label}/{target.path}"
    if outcome.hung or outcome.over(bound):
        tally.fail(Failure(where, call, "(any)",
                           outcome.over(bound) or f"did not end within {outcome.elapsed:.2f} s"))
    tally.outcome(target.label, "core", f"{call}:{outcome_name(outcome.exc)}")


async def takeover_contender(
    target: Target, tally: Tally, rng: random.Random, name: str, settings: LeaseSettings,
    mode: str, watch_for: float,
) -> None:
    """Contend for a lease another owner holds (and never renews) for ``watch_for`` seconds
    after a reply first showed it (on a loaded machine, the first such reply may come late;
    at most ten windows are waited for it).

    The fake refuses and records any write that would take it over before L has passed since
    the first reply that showed its version; here we also check each grant against the store.
    """
    token = f"tok-{rng.getrandbits(48):012x}"
    backend = target.backend(token, bound=settings.lease_operation_timeout)
    where = f"{target.label}/{target.path}"
    grants = _Grants()
    T = settings.lease_operation_timeout
    async with backend:
        lease = Lease(name, f"contender-{mode}", backend, settings)
        give_up = anyio.current_time() + 10 * watch_for

        def end() -> float:
            shown = target.first_shown(name)
            return give_up if shown is None else min(shown + watch_for, give_up)

        while anyio.current_time() < end():
            if mode == "held":
                async def run() -> None:
                    async with lease.held(timeout=watch_for) as grant:
                        _check_grant(target, tally, "held", name, lease, grant.fencing_token,
                                     grants)

                limit = watch_for + acquire_bound(settings) + T
            elif mode == "acquire":
                async def run() -> None:
                    async with lease.host():
                        if await lease.acquire():
                            _check_grant(target, tally, "acquire", name, lease,
                                         _akka_token(lease), grants)
                            await lease.release()

                limit = acquire_bound(settings) + 2 * T
            else:
                async def run() -> None:
                    async with lease.try_held() as grant:
                        _check_grant(target, tally, "try_held", name, lease,
                                     grant.fencing_token, grants)

                limit = acquire_bound(settings) + T
            outcome = await run_call(run, 3 * limit + 5)
            _judge_common(target, tally, f"takeover-{mode}", name, outcome, limit)
            tally.outcome(target.label, "takeover", outcome_name(outcome.exc))
            if outcome.exc is not None and untyped_problem(outcome.exc):
                tally.fail(Failure(where, f"takeover-{mode}", "(any)",
                                   untyped_problem(outcome.exc), repr(outcome.exc)[:200]))
            await anyio.sleep(0.05)
