"""Type checkers see LeaseSettings' settings by name and type (its ``__init__`` took ``**Any``).

A snippet with a misspelled setting, a wrong value type and a wrong form of ``async with lease:``
is checked by ``mypy --strict``, as a user's code would be; each wrong line must be reported,
and the same snippet's right lines must not be.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

REPOSITORY = Path(__file__).resolve().parent.parent.parent

SNIPPET = '''\
from datetime import timedelta

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.memory import MemoryBackend

good = LeaseSettings(heartbeat_timeout="2s", heartbeat_interval=0.2, stop_timeout=timedelta(0))
also_good = LeaseSettings(holder_deadline=None, clock_rate_tolerance=1e-3, poll_interval="1s")
from_toml = LeaseSettings.from_mapping({"heartbeat-timeout": "2s"})
misspelled = LeaseSettings(heartbeat_timout="2s")  # WRONG call-arg
wrong_type = LeaseSettings(heartbeat_timeout=[2])  # WRONG arg-type
wrong_rate = LeaseSettings(clock_rate_tolerance="fast")  # WRONG arg-type
positional = LeaseSettings(2.0)  # WRONG call-arg


async def main() -> None:
    lease = Lease("job", "me", MemoryBackend(), good)
    async with lease.host():
        await lease.acquire()
    async with lease.held():
        pass
    async with lease:  # WRONG attr-defined
        pass
'''


def _mypy(source: Path) -> list[tuple[int, str]]:
    """(line, error code) of each error ``mypy --strict`` reports on ``source``."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(source)],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        timeout=600,
        check=False,
    )
    found = re.findall(r":(\d+): error: .*\[([a-z-]+)\]$", result.stdout, flags=re.MULTILINE)
    assert found or result.returncode == 0, result.stdout + result.stderr
    return sorted({(int(line), code) for line, code in found})


def test_mypy_reports_misspelled_and_mistyped_settings_and_async_with_lease(
    tmp_path: Path,
) -> None:
    """mypy --strict flags a misspelled setting, a wrong value type and `async with lease:`."""
    source = tmp_path / "user_code.py"
    source.write_text(SNIPPET)
    expected = sorted(
        (number, line.rsplit("# WRONG ", 1)[1])
        for number, line in enumerate(SNIPPET.splitlines(), start=1)
        if "# WRONG " in line
    )
    reported = _mypy(source)
    # Every wrong line is reported with its code; no right line is reported at all.
    assert {line for line, _ in reported} == {line for line, _ in expected}, reported
    for line, code in expected:
        assert (line, code) in reported, (line, code, reported)
