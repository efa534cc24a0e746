"""Running a benchmark module at smoke size, as the smoke tests do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
