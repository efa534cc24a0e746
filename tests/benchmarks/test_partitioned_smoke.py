"""tools/benchmarks/_partitioned.py runs at smoke size and prints its figures (no timing)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_partitioned_figures_run_at_smoke_size() -> None:
    """The idle-cost and hand-off program completes and prints both figures, well formed."""
    result = subprocess.run(
        [sys.executable, "-m", "tools.benchmarks._partitioned", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"update: [\d,]+", result.stdout)
    assert re.search(r"hand-offs: p50 [\d.]+ ms, p99 [\d.]+ ms", result.stdout)
