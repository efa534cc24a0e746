"""OpenTelemetry tracing: acquire, hold and release spans of each grant.

Spans go to an SDK TracerProvider made per test (never the global one) with an in-memory
exporter. Timestamps follow the event loop's clock, so on virtual time span durations are the
virtual seconds the lease waited and held.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from trio_lease import AcquireTimeout, Lease
from trio_lease import tracing as tracing_module
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.tracing import OpenTelemetryTracing

from ._observed import fail_until_lost, lose, takeover, wait_behind_a_holder
from .conftest import SETTINGS

pytestmark = pytest.mark.anyio

NS = 1e9
DOC = Path(__file__).resolve().parents[1] / "docs" / "tracing.md"


@dataclasses.dataclass
class Traced:
    """A tracing observer writing to its own SDK provider, and what it exported."""

    provider: TracerProvider
    exporter: InMemorySpanExporter
    tracing: OpenTelemetryTracing

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.spans(name)
        return span


@pytest.fixture
def traced() -> Traced:
    """An OpenTelemetryTracing on a TracerProvider of the test's own."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Traced(provider, exporter, OpenTelemetryTracing(tracer_provider=provider))


def seconds(span: ReadableSpan) -> float:
    assert span.start_time is not None and span.end_time is not None
    return (span.end_time - span.start_time) / NS


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def events(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    found: int = span.context.span_id
    return found


async def test_held_makes_acquire_hold_release_spans_in_one_trace(traced: Traced) -> None:
    """held(): acquire (in the caller's span) → hold → release, identified, renewals counted."""
    lease = Lease("job", "me", MemoryBackend(), SETTINGS, observers=[traced.tracing])
    tracer = traced.provider.get_tracer("test")
    with tracer.start_as_current_span("run job") as outer:
        async with lease.held() as grant:
            await anyio.sleep(SETTINGS.heartbeat_interval * 3 + 0.1)
    acquire = traced.one("trio_lease.acquire")
    hold = traced.one("trio_lease.hold")
    release = traced.one("trio_lease.release")
    assert parent_of(acquire) == outer.get_span_context().span_id
    assert parent_of(hold) == span_id(acquire)
    assert parent_of(release) == span_id(hold)
    identity = {
        "trio_lease.lease.name": "job",
        "trio_lease.lease.owner": "me",
        "trio_lease.holder.identity": lease.identity,
        "trio_lease.fencing_token": grant.fencing_token,
    }
    for span in (acquire, hold, release):
        assert attrs(span).items() >= identity.items()
        assert span.status.status_code is trace.StatusCode.UNSET
    assert attrs(acquire)["trio_lease.waited_s"] == 0.0
    assert attrs(acquire)["trio_lease.wait.attempts"] == 0
    assert seconds(acquire) == 0
    assert attrs(hold)["trio_lease.renewals"] == 3
    assert attrs(hold)["trio_lease.renewal_failures"] == 0
    assert attrs(hold)["trio_lease.renewal.max_latency_s"] >= 0
    assert attrs(hold)["trio_lease.release.written"] is True
    assert attrs(release)["trio_lease.release.written"] is True
    assert seconds(hold) == pytest.approx(SETTINGS.heartbeat_interval * 3 + 0.1, abs=1e-3)
    assert attrs(hold)["trio_lease.held_s"] == pytest.approx(seconds(hold), abs=1e-3)
    assert acquire.end_time == hold.start_time and release.end_time == hold.end_time
    assert traced.tracing._cycles == {}


async def test_a_waiting_contenders_acquire_span_covers_its_wait(traced: Traced) -> None:
    """The acquire span starts when the wait did, ends at the grant, and names the holder."""
    holder, _ = await wait_behind_a_holder(traced.tracing)
    acquire = traced.one("trio_lease.acquire")
    assert seconds(acquire) == pytest.approx(3.9, abs=0.1)
    assert seconds(acquire) == pytest.approx(attrs(acquire)["trio_lease.waited_s"], abs=1e-6)
    (waiting,) = events(acquire, "trio_lease.waiting")
    assert waiting["trio_lease.waiting.holder"] == holder.identity
    assert 0 < waiting["trio_lease.waiting.expires_in_s"] <= SETTINGS.heartbeat_timeout
    assert waiting["trio_lease.wait.attempts"] == attrs(acquire)["trio_lease.wait.attempts"] >= 1
    assert acquire.start_time is not None and acquire.events[0].timestamp >= acquire.start_time
    assert traced.one("trio_lease.hold").start_time == acquire.end_time


async def test_a_wait_that_gave_up_is_not_in_the_next_acquire_span(traced: Traced) -> None:
    """Waiting seen before an AcquireTimeout does not appear in a later acquisition's span."""
    store = MemoryStore()
    holder = Lease("job", "a", MemoryBackend(store), SETTINGS)
    waiter = Lease("job", "b", MemoryBackend(store), SETTINGS, observers=[traced.tracing])
    async with holder.held():
        with pytest.raises(AcquireTimeout):
            async with waiter.held(timeout=1):
                pass
    assert traced.spans("trio_lease.acquire") == []
    async with waiter.held():
        pass
    acquire = traced.one("trio_lease.acquire")
    assert events(acquire, "trio_lease.waiting") == []
    assert attrs(acquire)["trio_lease.wait.attempts"] == 0


async def test_a_takeover_ends_the_hold_span_with_an_error_and_a_loss_event(
    traced: Traced,
) -> None:
    """A foreign takeover: hold span ended, error status, loss event with the cause; no release."""
    await lose(Lease("job", "me", MemoryBackend(), SETTINGS, observers=[traced.tracing]), takeover)
    hold = traced.one("trio_lease.hold")
    assert hold.status.status_code is trace.StatusCode.ERROR
    assert "intruder" in (hold.status.description or "")
    (lost,) = events(hold, "trio_lease.lost")
    assert "intruder" in lost["trio_lease.loss.cause"]
    assert attrs(hold)["error.type"] == "trio_lease.LeaseLost"
    assert "trio_lease.release.written" not in attrs(hold)
    assert traced.spans("trio_lease.release") == []
    assert traced.tracing._cycles == {}


async def test_failing_renewals_are_events_of_the_hold_span(traced: Traced) -> None:
    """A store that stops answering: renewal_failed events (cause, time left), then the loss."""
    await fail_until_lost(traced.tracing)
    hold = traced.one("trio_lease.hold")
    failed = events(hold, "trio_lease.renewal_failed")
    assert len(failed) >= 2 and attrs(hold)["trio_lease.renewal_failures"] == len(failed)
    assert all(f["trio_lease.renewal.cause"] for f in failed)
    left = [f["trio_lease.renewal.time_left_s"] for f in failed]
    assert left == sorted(left, reverse=True) and left[-1] >= 0
    assert hold.events[-1].name == "trio_lease.lost"
    assert hold.status.status_code is trace.StatusCode.ERROR
    assert seconds(hold) == pytest.approx(SETTINGS.deadline, abs=1e-3)


class SpyTracerProvider(trace.NoOpTracerProvider):
    """The API's no-op provider, keeping every span it hands out."""

    def __init__(self) -> None:
        self.spans: list[trace.Span] = []

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        spy = self

        class SpyTracer(trace.NoOpTracer):
            def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
                span = super().start_span(*args, **kwargs)
                spy.spans.append(span)
                return span

        return SpyTracer()


async def hold_then_lose(tracing: OpenTelemetryTracing) -> None:
    """A wait, a released grant, then a grant lost to a takeover, all observed by ``tracing``."""
    _, lease = await wait_behind_a_holder(
        tracing, holding=1, body=SETTINGS.heartbeat_interval + 0.1
    )
    await lose(lease, takeover)


async def test_without_an_sdk_nothing_is_recorded_and_nothing_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On the API's no-op provider every span is non-recording and the lease works as without."""
    spy = SpyTracerProvider()
    tracing = OpenTelemetryTracing(tracer_provider=spy)
    await hold_then_lose(tracing)
    assert len(spy.spans) == 5  # acquire, hold, release; acquire, hold
    assert not any(span.is_recording() for span in spy.spans)
    assert "failed in" not in caplog.text
    assert tracing._cycles == {}


async def test_the_default_global_provider_without_an_sdk_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """tracer_provider=None before any SDK is set: the lease works and no observer fails."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    tracing = OpenTelemetryTracing()
    with caplog.at_level(logging.ERROR, logger="trio_lease"):
        await hold_then_lose(tracing)
    assert "failed in" not in caplog.text
    assert tracing._cycles == {}


def test_importing_trio_lease_does_not_import_opentelemetry() -> None:
    """`import trio_lease` (with its observers) loads no opentelemetry module."""
    code = (
        "import sys, trio_lease, trio_lease.backends.memory\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_opentelemetry_the_import_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """trio_lease.tracing without opentelemetry-api: ImportError naming trio_lease[otel]."""
    hidden: Sequence[str] = [m for m in sys.modules if m.split(".")[0] == "opentelemetry"]
    for module in [*hidden, "opentelemetry"]:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.delitem(sys.modules, "trio_lease.tracing")
    with pytest.raises(ImportError, match=r"pip install 'trio_lease\[otel\]'"):
        importlib.import_module("trio_lease.tracing")


def test_the_docs_snippet_prints_what_its_comment_says() -> None:
    """docs/tracing.md's wiring snippet runs and its spans are the ones its last comment lists."""
    (snippet,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    expected = snippet.rstrip().splitlines()[-1].removeprefix("# ")
    out = subprocess.run(
        [sys.executable, "-c", snippet], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == expected


def test_every_attribute_is_in_the_docs_table() -> None:
    """Each attribute name trio_lease.tracing writes has a row in docs/tracing.md."""
    names = [
        value
        for key, value in vars(tracing_module).items()
        if key.isupper() and isinstance(value, str) and ("." in value)
    ]
    assert len(names) >= 17
    rows = {
        line.split("|")[1].strip().strip("`")
        for line in DOC.read_text().splitlines()
        if line.startswith("| `")
    }
    assert sorted(set(names) - rows) == []
