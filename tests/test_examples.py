"""Every example program runs, as a real subprocess, and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("program", ["hold_trio.py", "hold_asyncio.py"])
def test_hold_examples_run_and_print_a_token(tmp_path: Path, program: str) -> None:
    """The README's held() examples run on trio and asyncio; tokens grow across runs."""
    db = str(tmp_path / "leases.sqlite3")
    assert run_example(program, db, "0.1").strip() == "running with fencing token 1"
    assert run_example(program, db, "0.1").strip() == "running with fencing token 2"


def test_akka_style_example(tmp_path: Path) -> None:
    """acquire/check_lease/release behave as the seed's contract says."""
    out = run_example("akka_style.py", str(tmp_path / "leases.sqlite3"))
    assert out.splitlines() == [
        "node-a acquired: True",
        "node-b acquired: False",
        "node-a check_lease: True",
        "node-a released: True",
        "node-b acquired: True",
    ]


def test_custom_backend_example() -> None:
    """A user-written backend passes check_backend and holds a lease."""
    out = run_example("custom_backend.py")
    assert out.splitlines() == ["DictBackend passes check_backend", "held with fencing token 1"]
