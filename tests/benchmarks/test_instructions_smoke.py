"""tools/benchmarks/_instructions.py: its worker (run here without valgrind, which only counts
what it does) and the arithmetic of its result."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tools.benchmarks._instructions import LAYERS, collected, per_write
from tools.benchmarks._procs import Emulator

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("loop", "layer"),
    [("asyncio", "update"), ("trio", "update"), ("bare", "update"),
     *((loop, layer) for layer in LAYERS[1:] for loop in ("asyncio", "trio"))],
)
def test_the_worker_renews_each_lease_the_times_asked_with_this_trees_library(
    loop: str, layer: str
) -> None:
    """On each loop, through each layer (``--layers``), and sent bare (``--bare``: the same
    writes as _floor sends them). A write that does not renew fails the worker."""
    with tempfile.TemporaryDirectory() as tmp:
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            done = subprocess.run(
                [sys.executable, "-m", "tools.benchmarks._instructions", "worker", str(ROOT),
                 str(emulator.kubeconfig), loop, "3", "4", layer],
                cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
            )
        finally:
            emulator.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["writes"] == 12
    assert Path(report["trio_lease"]).is_relative_to(ROOT / "trio_lease")


def test_the_count_is_read_from_callgrinds_summary() -> None:
    stderr = "==12== Events    : Ir\n==12== Collected : 3,988,152,393\n==12==\n"
    assert collected(stderr) == 3_988_152_393
    with pytest.raises(RuntimeError, match="no instruction count"):
        collected("==12== valgrind: command not found\n")


def test_one_write_costs_the_difference_over_the_writes_it_adds() -> None:
    # 20 tasks: 20 writes each, then 120 each: 2,000 more writes for 1,140,000,000 more.
    assert per_write(2_847_000_000, 3_987_000_000, (20, 120), 20) == 570_000
