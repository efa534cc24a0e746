"""tools/benchmarks/_census.py runs on each loop and counts what each held lease keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("loop", "task"), [("asyncio", "_asyncio.Task"), ("trio", "trio.lowlevel.Task")]
)
def test_the_census_counts_each_held_leases_tasks(loop: str, task: str) -> None:
    """Each held lease keeps its body's task and the holder's own tasks (more than one: the
    heartbeat runs beside the body), and the per-type counts add up to the total."""
    done = subprocess.run(
        [sys.executable, "-m", "tools.benchmarks._census", "--leases", "20", "--loop", loop,
         "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    census = json.loads(done.stdout)
    assert census["loop"] == loop and census["leases"] == 20
    assert census["per_type"][task] >= 2
    assert census["total"] == pytest.approx(sum(census["per_type"].values()))


def test_the_census_refuses_no_leases() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.benchmarks._census", "--leases", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2 and "--leases must be at least 1" in done.stderr
