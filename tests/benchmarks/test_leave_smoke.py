"""tools/benchmarks/_leave_many.py runs at smoke size with real member processes (no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_leave_figures_run_at_smoke_size(tmp_path: Path) -> None:
    """A member leaving with SIGTERM: every one of its keys runs again on another member, none
    on two at once, and the sample is well formed."""
    result = subprocess.run(
        [sys.executable, "-m", "tools.benchmarks._leave_many", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads((tmp_path / "leave.json").read_text())
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
