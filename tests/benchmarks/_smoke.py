"""Running a benchmark module at smoke size, as the smoke tests do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from trio_lease import LeaseLost

ROOT = Path(__file__).resolve().parents[2]


def run_smoke(module: str, name: str, out: Path) -> tuple[str, dict[str, Any]]:
    """Run ``python -m tools.benchmarks.<module> --smoke --out <out>`` and check it succeeded:
    its standard output and the ``<name>.json`` document it wrote."""
    result = subprocess.run(
        [sys.executable, "-m", f"tools.benchmarks.{module}", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, json.loads((out / f"{name}.json").read_text())


def settled(sample: dict[str, Any]) -> dict[str, Any]:
    """``sample``, checked to be a measurement: a repetition that did not settle fails here,
    raised from the ``LeaseLost`` of a member that lost a lease by its deadline if one did (the
    suite's STARVED rule then runs the test again: a starved member says nothing of the
    assignment)."""
    if "error" in sample:
        starved = sample.get("starved") or []
        cause = LeaseLost("a member's lease", starved[0]) if starved else None
        raise AssertionError(f"the repetition did not settle: {sample['error']}") from cause
    return sample
