"""The short CI mix: real worker processes, real faults, and the checker's verdict.

These runs take real time (about two minutes together): each starts five worker processes,
a fencing store process and the backend, injects seeded faults, and stops everything. The
broken variants prove the checker bites in the same harness.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import require_etcd
from tools.campaign._config import FAULTS_BY_BACKEND, PARTITIONED_FAULTS_BY_BACKEND, RunConfig
from tools.campaign._harness import run, run_partitioned_mode, run_semaphore_mode

pytestmark = pytest.mark.slow


def assert_no_process_left(out_dir: Path, at_least: int = 5) -> None:
    """Every worker process the run started is gone."""
    pids = [
        event["pid"]
        for event in map(json.loads, (out_dir / "events.jsonl").read_text().splitlines())
        if event["ev"] == "ready"
    ]
    assert len(pids) >= at_least
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_kubernetes_short_mix_is_clean(tmp_path: Path) -> None:
    """Every nemesis against the emulator: no violation, and the faults bit."""
    config = RunConfig.short("kubernetes", seed=11, out_dir=tmp_path, controller_loop="asyncio")
    report, out_dir = run(config)
    assert report.violations == []
    assert report.bite_failures == []
    assert set(report.faults_by_kind) == set(FAULTS_BY_BACKEND["kubernetes"])
    assert report.handovers > 0
    assert report.stale_rejected > 0
    assert_no_process_left(out_dir)


def test_sqlite_short_mix_is_clean(tmp_path: Path) -> None:
    """Kills, pauses and clock skew against SQLite: no violation, and the faults bit."""
    config = RunConfig.short("sqlite", seed=12, out_dir=tmp_path, duration=15.0)
    report, out_dir = run(config)
    assert report.violations == []
    assert report.bite_failures == []
    assert_no_process_left(out_dir)


def test_etcd_short_mix_is_clean(tmp_path: Path) -> None:
    """Kills, pauses, TCP faults and an etcd pause against a real etcd: no violation."""
    require_etcd()
    config = RunConfig.short("etcd", seed=13, out_dir=tmp_path, duration=25.0)
    report, out_dir = run(config)
    assert report.violations == []
    assert report.bite_failures == []
    assert_no_process_left(out_dir)


def test_partitioned_short_mix_is_clean(tmp_path: Path) -> None:
    """Four run_partitioned members over 12 keys against the emulator, one round of kill,
    pauses and partitions: keys move, and none is run twice at once, re-granted a lower
    token or left unrun beyond L + bound."""
    config = RunConfig.partitioned(
        "kubernetes", seed=16, keys=12, rounds=1, duration=40.0, fault_gap=(0.3, 0.8),
        out_dir=tmp_path, controller_loop="asyncio",
    )
    report, out_dir = run_partitioned_mode(config)
    assert report.violations == []
    assert report.bite_failures == []
    assert set(report.faults_by_kind) == set(PARTITIONED_FAULTS_BY_BACKEND["kubernetes"])
    assert report.moves > 0
    assert report.writes_accepted > 0
    assert_no_process_left(out_dir, at_least=4)


@pytest.mark.parametrize("backend", ["sqlite", "etcd"])
def test_partitioned_short_mix_is_clean_on_sqlite_and_etcd(backend: str, tmp_path: Path) -> None:
    """The partitioned mode's round of faults (kill, pauses and, on etcd, partitions) against
    SQLite and a real etcd: no key run twice at once, re-granted a lower token or left unrun
    beyond L + bound."""
    if backend == "etcd":
        require_etcd()
    config = RunConfig.partitioned(
        backend, seed=16, keys=12, rounds=1, duration=40.0, fault_gap=(0.3, 0.8),
        out_dir=tmp_path,
    )
    report, out_dir = run_partitioned_mode(config)
    assert report.violations == []
    assert report.bite_failures == []
    assert set(report.faults_by_kind) == set(PARTITIONED_FAULTS_BY_BACKEND[backend])
    assert report.writes_accepted > 0
    assert_no_process_left(out_dir, at_least=4)


@pytest.mark.parametrize("backend", ["sqlite", "etcd", "kubernetes"])
def test_semaphore_smoke_is_clean(backend: str, tmp_path: Path) -> None:
    """Six workers looping Semaphore(limit=3).held() under a kill and a SIGTERM (each with a
    restart) and a holder and a waiter stopped past L: never more than 3 holders, one per slot,
    tokens rising per slot, and every waiter granted within L + bound of its own wait."""
    if backend == "etcd":
        require_etcd()
    config = RunConfig.semaphore_smoke(backend, seed=21, out_dir=tmp_path)
    report, out_dir = run_semaphore_mode(config)
    assert report.violations == []
    assert report.bite_failures == []
    assert set(report.faults_by_kind) == {"kill", "term", "pause-long", "pause-waiter"}
    assert report.most_at_once <= 3
    assert report.waits > 0
    assert_no_process_left(out_dir, at_least=6)


def test_semaphore_checker_catches_a_contender_over_the_limit(tmp_path: Path) -> None:
    """One worker configured with limit 4 among workers at limit 3: the checker reports more
    than 3 holders at once (short pauses only, until the slots have moved 40 times)."""
    config = RunConfig.semaphore_smoke(
        "sqlite", seed=22, out_dir=tmp_path, broken="over-limit", faults=("pause-short",),
        rounds=None, handovers=40,
    )
    report, out_dir = run_semaphore_mode(config)
    assert report.most_at_once == 4
    assert any("outside 0..2" in v for v in report.violations)
    assert any("more than the limit 3" in v for v in report.violations)
    assert_no_process_left(out_dir, at_least=6)


def test_checker_catches_a_store_without_fencing(tmp_path: Path) -> None:
    """With the store's token check off, long pauses produce accepted stale writes."""
    config = RunConfig.broken_variant("no-fencing", seed=14, out_dir=tmp_path, duration=20.0)
    report, out_dir = run(config)
    assert report.stale_accepted > 0
    assert any(v.startswith("stale write accepted") for v in report.violations)
    assert_no_process_left(out_dir)


def test_checker_catches_a_deadline_anchored_at_the_reply(tmp_path: Path) -> None:
    """Slow replies plus a deadline counted from the reply make unexplained overlaps."""
    config = RunConfig.broken_variant(
        "reply-anchor", seed=15, out_dir=tmp_path, duration=20.0, controller_loop="asyncio"
    )
    report, out_dir = run(config)
    assert any(v.startswith("overlap of") for v in report.violations)
    assert_no_process_left(out_dir)
