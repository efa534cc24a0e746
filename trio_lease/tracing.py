"""OpenTelemetry traces of leases: an acquire, a hold and a release span per grant.

:class:`OpenTelemetryTracing` is a :class:`~trio_lease.LeaseObserver` (``pip install
'trio_lease[otel]'``); register it with :func:`trio_lease.add_observer` or ``observers=[...]``.
It needs only ``opentelemetry-api``: without an SDK the API's tracer is a no-op and nothing is
recorded. docs/tracing.md lists the spans, events and attributes.

One grant makes one chain of spans, all in one trace:

- ``trio_lease.acquire``: from the start of the wait (``acquired``'s ``waited`` before the
  grant; zero long when granted at once) to the grant, with a ``trio_lease.waiting`` event per
  holder seen while waiting. Its parent is the span current in the task that acquired, if any.
- ``trio_lease.hold``: child of the acquire span, from the grant to its release or loss;
  ``trio_lease.renewal_failed`` events, and on a loss a ``trio_lease.lost`` event and an error
  status. Confirmed renewals are counted in an attribute, not recorded one by one (a day's
  hold renews thousands of times; an SDK keeps 128 events a span).
- ``trio_lease.release``: child of the hold span, at the release (zero long: ``released`` is
  told after the write and does not say how long it took).

Spans are made when the step that ends them is told, with explicit start times, so a span never
stays open in a contender that gives up waiting (no step tells that). Timestamps are the event
loop's monotonic clock mapped onto wall time at each grant: durations are exact on the loop's
clock (virtual time in tests) and a wall-clock step during a hold does not bend them.
"""

from __future__ import annotations

import dataclasses
import time

import anyio

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError as _missing:
    raise ImportError(
        "trio_lease.tracing needs the OpenTelemetry API, which is not installed: "
        "pip install 'trio_lease[otel]' (and an SDK, such as opentelemetry-sdk, to record spans)"
    ) from _missing

from . import _public
from ._observer import LeaseInfo, LeaseObserver
from ._version import __version__

__all__ = ["OpenTelemetryTracing"]

#: Holders seen while waiting that become events of one acquire span (further changes are
#: counted in the last event's attempts).
MAX_WAITING_EVENTS = 16
#: Slack (seconds) for "this waiting belongs to this acquisition" (float rounding only).
_SAME_WAIT = 1e-6

# Span and event attribute names (docs/tracing.md).
LEASE_NAME = "trio_lease.lease.name"
LEASE_OWNER = "trio_lease.lease.owner"
HOLDER_IDENTITY = "trio_lease.holder.identity"
FENCING_TOKEN = "trio_lease.fencing_token"
WAITED = "trio_lease.waited_s"
WAIT_ATTEMPTS = "trio_lease.wait.attempts"
WAITING_HOLDER = "trio_lease.waiting.holder"
WAITING_EXPIRES_IN = "trio_lease.waiting.expires_in_s"
HELD = "trio_lease.held_s"
RENEWALS = "trio_lease.renewals"
RENEWAL_FAILURES = "trio_lease.renewal_failures"
RENEWAL_MAX_LATENCY = "trio_lease.renewal.max_latency_s"
RENEWAL_CAUSE = "trio_lease.renewal.cause"
RENEWAL_TIME_LEFT = "trio_lease.renewal.time_left_s"
LOSS_CAUSE = "trio_lease.loss.cause"
RELEASE_WRITTEN = "trio_lease.release.written"
ERROR_TYPE = "error.type"  # OpenTelemetry's general attribute for the class of an error


def _loop_now() -> float:
    """The event loop's clock (observers run inline in a lease's task, so there is one)."""
    try:
        return anyio.current_time()
    except RuntimeError:  # no event loop (anyio's NoEventLoopError): an observer called by hand
        return time.monotonic()


@dataclasses.dataclass(slots=True)
class _Waited:
    """A run of attempts that found the lease held by one holder."""

    at: float  # loop clock
    holder: str
    expires_in: float
    attempts: int = 1


@dataclasses.dataclass(slots=True)
class _Cycle:
    """What one (name, identity) is doing: waiting, then holding one grant."""

    waited: list[_Waited] = dataclasses.field(default_factory=list)
    hold: trace.Span | None = None
    #: Wall-clock ns and loop-clock s at the grant: the mapping of loop times onto wall time.
    wall_at_grant: int = 0
    loop_at_grant: float = 0.0
    renewals: int = 0
    renewal_failures: int = 0
    max_latency: float | None = None

    def timestamp(self, loop_time: float) -> int:
        """``loop_time`` as wall-clock nanoseconds."""
        return self.wall_at_grant + round((loop_time - self.loop_at_grant) * 1e9)

    def counts(self) -> dict[str, int | float]:
        counts: dict[str, int | float] = {
            RENEWALS: self.renewals,
            RENEWAL_FAILURES: self.renewal_failures,
        }
        if self.max_latency is not None:
            counts[RENEWAL_MAX_LATENCY] = self.max_latency
        return counts


class OpenTelemetryTracing(LeaseObserver):
    """Traces every grant as acquire, hold and release spans (module docstring).

    ``tracer_provider``: where spans go; ``None`` uses the global one
    (``opentelemetry.trace.set_tracer_provider``), read when a span is made, so this can be
    created before the application sets it. State is kept per (lease name, holder identity)
    from the first ``waiting`` to the release or loss.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("trio_lease", __version__, tracer_provider=tracer_provider)
        self._cycles: dict[tuple[str, str], _Cycle] = {}

    def __repr__(self) -> str:
        return f"<OpenTelemetryTracing of {len(self._cycles)} leases>"

    def waiting(self, lease: LeaseInfo, *, holder: str, expires_in: float) -> None:
        cycle = self._cycles.setdefault((lease.name, lease.identity), _Cycle())
        if cycle.hold is not None:
            return  # holding already: not a wait of this identity's
        runs = cycle.waited
        if runs and (runs[-1].holder == holder or len(runs) >= MAX_WAITING_EVENTS):
            runs[-1].attempts += 1
            runs[-1].expires_in = expires_in
        else:
            runs.append(_Waited(_loop_now(), holder, expires_in))

    def acquired(
        self, lease: LeaseInfo, *, fencing_token: int, waited: float, valid_for: float
    ) -> None:
        key = (lease.name, lease.identity)
        previous = self._cycles.pop(key, None)
        if previous is not None and previous.hold is not None:
            previous.hold.end()  # a grant never told ended: do not leak its span
        now = _loop_now()
        cycle = _Cycle(wall_at_grant=time.time_ns(), loop_at_grant=now)
        self._cycles[key] = cycle
        # Runs from an earlier wait that gave up (timeout, cancelled) started before this one.
        started = now - waited - _SAME_WAIT
        runs = [run for run in previous.waited if run.at >= started] if previous else []
        attributes = _identify(lease, fencing_token)
        acquire = self._tracer.start_span(
            "trio_lease.acquire",
            context=otel_context.get_current(),
            start_time=cycle.timestamp(now - waited),
            attributes={
                **attributes,
                WAITED: waited,
                WAIT_ATTEMPTS: sum(run.attempts for run in runs),
            },
        )
        for run in runs:
            acquire.add_event(
                "trio_lease.waiting",
                {
                    WAITING_HOLDER: run.holder,
                    WAITING_EXPIRES_IN: run.expires_in,
                    WAIT_ATTEMPTS: run.attempts,
                },
                timestamp=cycle.timestamp(run.at),
            )
        acquire.end(end_time=cycle.wall_at_grant)
        cycle.hold = self._tracer.start_span(
            "trio_lease.hold",
            context=trace.set_span_in_context(acquire),
            start_time=cycle.wall_at_grant,
            attributes=attributes,
        )

    def renewed(
        self, lease: LeaseInfo, *, fencing_token: int, latency: float, valid_for: float
    ) -> None:
        cycle = self._holding(lease)
        if cycle is not None:
            cycle.renewals += 1
            cycle.max_latency = max(latency, cycle.max_latency or 0.0)

    def renewal_failed(
        self, lease: LeaseInfo, *, fencing_token: int, cause: str, time_left: float
    ) -> None:
        cycle = self._holding(lease)
        if cycle is not None and cycle.hold is not None:
            cycle.renewal_failures += 1
            cycle.hold.add_event(
                "trio_lease.renewal_failed",
                {RENEWAL_CAUSE: cause, RENEWAL_TIME_LEFT: time_left},
                timestamp=cycle.timestamp(_loop_now()),
            )

    def lost(self, lease: LeaseInfo, *, fencing_token: int, cause: str) -> None:
        cycle = self._ending(lease)
        if cycle is None or cycle.hold is None:
            return
        hold = cycle.hold
        end = cycle.timestamp(_loop_now())
        hold.add_event("trio_lease.lost", {LOSS_CAUSE: cause}, timestamp=end)
        hold.set_attributes({**cycle.counts(), ERROR_TYPE: "trio_lease.LeaseLost"})
        hold.set_status(trace.Status(trace.StatusCode.ERROR, f"lease lost: {cause}"))
        hold.end(end_time=end)

    def released(self, lease: LeaseInfo, *, fencing_token: int, held: float, written: bool) -> None:
        cycle = self._ending(lease)
        if cycle is None or cycle.hold is None:
            return
        hold = cycle.hold
        end = cycle.timestamp(_loop_now())
        hold.set_attributes({**cycle.counts(), HELD: held, RELEASE_WRITTEN: written})
        release = self._tracer.start_span(
            "trio_lease.release",
            context=trace.set_span_in_context(hold),
            start_time=end,
            attributes={**_identify(lease, fencing_token), RELEASE_WRITTEN: written},
        )
        release.end(end_time=end)
        hold.end(end_time=end)

    def _holding(self, lease: LeaseInfo) -> _Cycle | None:
        cycle = self._cycles.get((lease.name, lease.identity))
        return cycle if cycle is not None and cycle.hold is not None else None

    def _ending(self, lease: LeaseInfo) -> _Cycle | None:
        """The holding cycle, forgotten (the grant ends with this step)."""
        key = (lease.name, lease.identity)
        cycle = self._cycles.get(key)
        if cycle is None or cycle.hold is None:
            return None  # not seen acquiring (an observer added mid-hold), or waiting only
        del self._cycles[key]
        return cycle


def _identify(lease: LeaseInfo, fencing_token: int) -> dict[str, str | int]:
    return {
        LEASE_NAME: lease.name,
        LEASE_OWNER: lease.owner,
        HOLDER_IDENTITY: lease.identity,
        FENCING_TOKEN: fencing_token,
    }


_public.publish(globals())
