"""tools/benchmarks/_leave_many.py runs at smoke size with real member processes (no timing)."""

from __future__ import annotations

from pathlib import Path

from ._smoke import run_smoke


def test_leave_figures_run_at_smoke_size(tmp_path: Path) -> None:
    """A member leaving with SIGTERM: every one of its keys runs again on another member, none
    on two at once, and the sample is well formed."""
    _, document = run_smoke("_leave_many", "leave", tmp_path)
    (sample,) = document["results"]["sqlite"]["samples"]
    keys = document["plan"]["keys"]
    assert sample["leaver_keys"] == keys // 3
    assert sample["missing"] == 0
    assert sample["overlaps"] == 0
    assert sample["moved"] >= sample["leaver_keys"]
    assert sorted(sample["shares"].values()) == [keys // 2, keys // 2]
    assert 0 <= sample["p50_key"] <= sample["all_running_again"]
    assert sample["leaver_exited"] >= 0
    assert "all running again" in (tmp_path / "leave.md").read_text()
