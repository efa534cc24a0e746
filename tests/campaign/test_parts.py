"""The fencing store, the injected clocks and the command line, without running a campaign."""

from __future__ import annotations

import io
import json

import anyio
import pytest
from anyio.abc import SocketAttribute

from tools.campaign._cli import _parser, config_from_args
from tools.campaign._clock import ReplyAnchorClock, SkewedClock
from tools.campaign._config import FAULTS_BY_BACKEND, RunConfig
from tools.campaign._fencing import FencingClient, FencingStore


class FakeTime:
    """A hand-driven monotonic source."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_store_keeps_the_highest_token_and_logs_every_write() -> None:
    """Lower tokens are rejected, equal and higher accepted, and each write is logged."""
    log = io.StringIO()
    store = FencingStore(log)
    assert store.apply("r", 3, "a") == (True, 3)
    assert store.apply("r", 3, "a") == (True, 3)
    assert store.apply("r", 2, "b") == (False, 3)
    assert store.apply("r", 4, "b") == (True, 4)
    assert store.apply("other", 1, "c") == (True, 1)
    entries = [json.loads(line) for line in log.getvalue().splitlines()]
    assert [(e["token"], e["ok"]) for e in entries] == [
        (3, True), (3, True), (2, False), (4, True), (1, True),
    ]


def test_store_without_check_accepts_stale_tokens() -> None:
    """The broken store (--no-check) accepts everything, for the checker's self-test."""
    store = FencingStore(io.StringIO(), check=False)
    store.apply("r", 5, "a")
    assert store.apply("r", 1, "b") == (True, 5)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time on both backends: the client test uses a real socket."""
    backend: str = request.param
    return backend


@pytest.mark.anyio
async def test_client_talks_to_the_store() -> None:
    """FencingClient writes over TCP and learns whether the store accepted."""
    store = FencingStore(io.StringIO())
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, store.serve_one)
        client = FencingClient(listener.extra(SocketAttribute.local_port), "w0")
        with anyio.fail_after(10):
            assert await client.write("r", 2)
            assert not await client.write("r", 1)
            assert await client.write("r", 2)
        await client.aclose()
        tg.cancel_scope.cancel()


def test_skewed_clock_runs_at_its_rate_and_stays_continuous() -> None:
    """Changing the rate re-anchors: no jump, then the new rate applies."""
    source = FakeTime()
    clock = SkewedClock(1.0, source)
    start = clock()
    source.now += 1.0
    assert clock() == pytest.approx(start + 1.0)
    clock.set_rate(0.5)
    assert clock() == pytest.approx(start + 1.0)
    source.now += 2.0
    assert clock() == pytest.approx(start + 2.0)
    with pytest.raises(ValueError):
        clock.set_rate(0)


def test_reply_anchor_clock_loses_the_time_a_write_is_in_flight() -> None:
    """The broken clock stands still between freeze() and thaw(), then resumes from there."""
    source = FakeTime()
    clock = ReplyAnchorClock(source)
    start = clock()
    clock.freeze()
    source.now += 0.3
    assert clock() == start
    clock.thaw()
    source.now += 1.0
    assert clock() == pytest.approx(start + 1.0)


def test_short_mix_covers_every_fault_kind() -> None:
    """The CI mix includes every nemesis its backend supports."""
    for backend, kinds in FAULTS_BY_BACKEND.items():
        assert set(RunConfig.short(backend).fault_kinds()) == set(kinds)


def test_command_line_builds_the_run() -> None:
    """Options map to the run configuration."""
    args = _parser().parse_args(
        ["--backend", "sqlite", "--seed", "7", "--handovers", "50", "--faults", "kill,pause-long"]
    )
    config = config_from_args(args)
    assert (config.backend, config.seed, config.handovers) == ("sqlite", 7, 50)
    assert config.faults == ("kill", "pause-long")
    broken = config_from_args(_parser().parse_args(["--broken", "no-fencing"]))
    assert broken.broken == "no-fencing"


def test_cli_builds_the_partitioned_mode() -> None:
    """--mode partitioned gives four members, the asked keys and bound, and its own faults."""
    args = _parser().parse_args(
        ["--mode", "partitioned", "--backend", "etcd", "--keys", "60", "--unrun-bound", "4"]
    )
    config = config_from_args(args)
    assert (config.mode, config.workers, config.keys, config.unrun_bound) == (
        "partitioned", 4, 60, 4.0
    )
    assert config.fault_kinds() == (
        "kill", "pause-short", "pause-long", "proxy-blackhole", "proxy-reset"
    )
    assert config_from_args(_parser().parse_args([])).workers == 5
