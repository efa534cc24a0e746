"""The job-scheduler singleton example runs, on asyncio and trio, with one leader at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_job_scheduler_hands_over_gracefully(tmp_path: Path, backend: str) -> None:
    """node-a leads, stops gracefully on shutdown, then node-b leads with a larger token."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "job_scheduler.py"),
            str(tmp_path / "db"),
            backend,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    shutdown = lines.index("shutting node-a down")
    before, after = lines[:shutdown], lines[shutdown + 1 :]
    assert before[0] == "node-a: leading with fencing token 1"
    assert all(line.startswith("node-a:") for line in before)
    assert after[0] == "node-a: stopping gracefully"
    assert after[1] == "node-b: leading with fencing token 2"
    assert all(line.startswith("node-b:") for line in after[1:])
    assert any("scheduled job" in line for line in after)
