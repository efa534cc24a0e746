"""The README's two commands: the first runs the main job; .ci/run runs the second verbatim."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```sh\n(.+?)\n```", text)


def test_readme_starts_with_exactly_two_commands() -> None:
    """The README opens with the install-and-run command and the test command."""
    commands = readme_commands()
    assert len(commands) == 2
    assert "trio-lease run nightly-report -- echo hello" in commands[0]
    assert "pytest" in commands[1]
    first_heading_after = (ROOT / "README.md").read_text().split("```sh")[0]
    assert first_heading_after.strip() == "# trio_lease"


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run calls the README's test command as written."""
    assert readme_commands()[1] in (ROOT / ".ci" / "run").read_text().splitlines()


def test_main_job_runs_on_the_sqlite_default(tmp_path: Path) -> None:
    """`trio-lease run nightly-report -- echo hello` prints hello, on the per-user SQLite path."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path))
    env.pop("TRIO_LEASE_SQLITE_PATH", None)
    script = Path(sys.executable).parent / "trio-lease"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "trio_lease._cli"]
    result = subprocess.run(
        [*command, "run", "nightly-report", "--", "echo", "hello"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello\n"
    assert (tmp_path / "trio-lease" / "leases.sqlite3").exists()
