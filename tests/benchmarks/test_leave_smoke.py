"""tools/benchmarks/_leave_many.py runs at smoke size with real member processes (no timing)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REAL_TIME_RERUNS, STARVED
from tools.benchmarks._rebalance import STARVED as _STARVED_PHRASE

from ._smoke import run_smoke, settled


@pytest.mark.flaky(reruns=REAL_TIME_RERUNS, only_rerun=[STARVED])
def test_leave_figures_run_at_smoke_size(tmp_path: Path) -> None:
    """A member leaving with SIGTERM: every one of its keys runs again on another member, none
    on two at once, and the sample is well formed."""
    _, document = run_smoke("_leave_many", "leave", tmp_path)
    (sample,) = map(settled, document["results"]["sqlite"]["samples"])
    keys = document["plan"]["keys"]
    assert sample["leaver_keys"] == keys // 3
    assert sample["missing"] == 0
    assert sample["overlaps"] == 0
    assert sample["moved"] >= sample["leaver_keys"]
    assert sorted(sample["shares"].values()) == [keys // 2, keys // 2]
    assert 0 <= sample["p50_key"] <= sample["all_running_again"]
    assert sample["leaver_exited"] >= 0
    assert "all running again" in (tmp_path / "leave.md").read_text()


def test_an_unsettled_sample_fails_from_its_starved_members_lease_lost() -> None:
    """A repetition that did not settle fails the smoke test; when a member lost a lease by its
    deadline, the failure is raised from that LeaseLost (the STARVED rule's evidence), else from
    nothing."""
    line = "lease 'jobs~partition-member~0' lost by m3_0: " + _STARVED_PHRASE
    with pytest.raises(AssertionError, match="did not settle") as caught:
        settled({"error": "not balanced within 100 s", "starved": [line]})
    assert re.search(STARVED, f"{type(caught.value.__cause__).__name__}: {caught.value.__cause__}")
    with pytest.raises(AssertionError) as bare:
        settled({"error": "not balanced within 100 s", "starved": []})
    assert bare.value.__cause__ is None
    assert settled({"moved": 3}) == {"moved": 3}
