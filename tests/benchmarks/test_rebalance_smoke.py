"""tools/benchmarks/_rebalance.py runs at smoke size with real member processes; the crash and
replace steps fail over within the bound counted from the dead member's last renewal."""

from __future__ import annotations

from pathlib import Path

from trio_lease import LeaseSettings
from trio_lease._partitioned import START_PACE

from ._smoke import run_smoke


def test_rebalance_figures_run_at_smoke_size(tmp_path: Path) -> None:
    """The joins, the clean leave, the crash and the crash replaced at once each end balanced,
    with well-formed samples: no key ever runs on two members at once, no step moves fewer keys
    than it must, and a crash fails over within the documented bound of the dead member's last
    renewal, also when a replacement joins at once."""
    stdout, document = run_smoke("_rebalance", "rebalance", tmp_path)
    samples = document["results"]["sqlite"]["samples"]
    assert [(s["kind"], s["members"]) for s in samples] == [
        ("join", [1, 2]), ("join", [2, 3]), ("join", [3, 4]), ("leave", [4, 3]), ("crash", [3, 2]),
        ("replace", [2, 2]),
    ]
    keys = document["plan"]["keys"]
    for sample in samples:
        shares = sample["shares"]
        assert len(shares) == sample["members"][1]
        assert sum(shares.values()) == keys
        assert max(shares.values()) - min(shares.values()) <= 1
        assert sample["overlaps"] == 0
        assert sample["moved"] >= sample["minimum"] > 0
        assert sample["seconds"] >= 0
        assert sample["release_timeouts"] >= 0
    plan = document["plan"]
    settings = LeaseSettings(heartbeat_timeout=plan["L"], heartbeat_interval=plan["R"])
    # The crashed member's keys wait for its leases to expire, L after its last renewal, which
    # it wrote within its deadline D before the kill (else it had stopped them itself).
    crash, replaced = samples[-2], samples[-1]
    assert crash["seconds"] >= settings.heartbeat_timeout - settings.deadline
    # docs/partitioning.md: a crash fails over within L + R + T + wait_interval, also when a
    # replacement joins at once (it never counts the dead member alive, so it asks it for no
    # key, whose write would make the key wait L more), counted from the dead member's last
    # renewal as the store has it (on a loaded machine it may come well before the kill), plus
    # the members' pacing of key starts. Nor do its keys move before L after that renewal.
    bound = (
        settings.heartbeat_timeout + settings.heartbeat_interval
        + settings.lease_operation_timeout + settings.wait_interval + keys * START_PACE
    )
    for sample in (crash, replaced):
        assert -settings.deadline <= sample["last_renewal"] <= 0.0
        assert sample["failover"] <= sample["last_renewal"] + bound, sample
        assert sample["failover"] >= sample["last_renewal"] + settings.heartbeat_timeout - 0.05
    markdown = (tmp_path / "rebalance.md").read_text()
    assert "| sqlite | crash 3→2 | 1 |" in markdown
    assert "time to balance" in stdout
