"""Every example program runs, as a real subprocess, and prints what it promises."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("program", ["hold_trio.py", "hold_asyncio.py"])
def test_hold_examples_run_and_print_a_token(tmp_path: Path, program: str) -> None:
    """The README's held() examples run on trio and asyncio; tokens grow across runs."""
    db = str(tmp_path / "leases.sqlite3")
    assert run_example(program, db, "0.1").strip() == "running with fencing token 1"
    assert run_example(program, db, "0.1").strip() == "running with fencing token 2"


def test_akka_style_example(tmp_path: Path) -> None:
    """acquire/check_lease/release behave as Akka's Lease contract says."""
    out = run_example("akka_style.py", str(tmp_path / "leases.sqlite3"))
    assert out.splitlines() == [
        "node-a acquired: True",
        "node-b acquired: False",
        "node-a check_lease: True",
        "node-a released: True",
        "node-b acquired: True",
    ]


def test_custom_backend_example() -> None:
    """A user-written backend passes check_backend and holds a lease."""
    out = run_example("custom_backend.py")
    assert out.splitlines() == ["DictBackend passes check_backend", "held with fencing token 1"]


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_fenced_writes_example_rejects_the_stale_holders_write(backend: str) -> None:
    """The partitioned holder is cancelled before the takeover, and its delayed write, carrying
    the old fencing token, is rejected by the store after the new holder's write."""
    out = run_example("fenced_writes.py", backend)
    assert out.splitlines() == [
        "node-a: holds 'report' with fencing token 1",
        "store: accepted 'draft by node-a' (token 1)",
        "node-a: partitioned; its next write is stuck in the network",
        "node-a: lease lost, guarded work cancelled",
        "node-b: holds 'report' with fencing token 2",
        "store: accepted 'final by node-b' (token 2)",
        "network: partition healed, delivering node-a's delayed write",
        "store: rejected 'final by node-a' (token 1 < 2)",
        "store: report = 'final by node-b'",
    ]


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_operated_singleton_example(tmp_path: Path, loop: str) -> None:
    """The operations example: probes and metrics follow leadership through a handover
    (graceful stop of the old replica, the new one next with the next token) and the release."""
    out = run_example("operated_singleton.py", str(tmp_path / "leases.sqlite3"), loop)
    held = 'trio_lease_held{name="nightly-report"}'
    assert out.splitlines() == [
        "old: leading with fencing token 1",
        f"while old leads: /healthz 200, /readyz?leader=1 200, {held} 1.0",
        "old: stopping gracefully",
        "new: leading with fencing token 2",
        f"while new leads: /healthz 200, /readyz?leader=1 200, {held} 1.0",
        "new: stopping gracefully",
        f"after both stopped: /healthz 200, /readyz?leader=1 503, {held} 0.0",
    ]


def test_partitioned_consumers_scale_from_one_to_three_replicas(tmp_path: Path) -> None:
    """Three replicas of the partitioned-consumers example started one after another on one
    SQLite file: no tenant is consumed by two replicas at once, tokens grow per tenant, and
    once all three run each consumes two tenants."""
    db = str(tmp_path / "leases.sqlite3")
    program = str(ROOT / "examples" / "partitioned_consumers.py")
    replicas = []
    for index, seconds in enumerate((14, 11, 5)):  # the third leaves first, at 11 s
        replicas.append(
            subprocess.Popen(
                [sys.executable, program, db, f"replica-{index + 1}", str(seconds)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        time.sleep(3)
    events = []
    for replica in replicas:
        out, err = replica.communicate(timeout=60)
        assert replica.returncode == 0, err
        events += [json.loads(line) for line in out.splitlines()]
    events.sort(key=lambda event: event["t"])
    holders: dict[str, str] = {}
    tokens: dict[str, list[int]] = {}
    shares_with_three: list[dict[str, int]] = []
    for event in events:
        if event["event"] == "end" and event["replica"] == "replica-3" and not shares_with_three:
            # The third replica leaves first: this is the last state with all three running.
            shares_with_three.append(dict(Counter(holders.values())))
        if event["event"] == "start":
            assert event["tenant"] not in holders, f"two consumers of {event['tenant']}"
            holders[event["tenant"]] = event["replica"]
            tokens.setdefault(event["tenant"], []).append(event["token"])
        elif event["event"] == "end":
            assert holders.pop(event["tenant"]) == event["replica"]
    assert shares_with_three == [{"replica-1": 2, "replica-2": 2, "replica-3": 2}]
    for tenant_tokens in tokens.values():
        assert tenant_tokens == sorted(set(tenant_tokens))
