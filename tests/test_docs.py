"""The documentation's numbers and code are real: docs/tuning.md's presets and snippet,
docs/testing.md's snippets (run with pytest as written) and docs/cli.md's TOML section."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from trio_lease import LeaseConfigError, LeaseProvider, LeaseSettings
from trio_lease._cli._options import CLI_DEFAULTS
from trio_lease._settings import parse_duration

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def section(path: Path, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading."""
    text = path.read_text()
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``text``, as stripped cells."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def seconds(cell: str) -> float:
    return parse_duration(cell.removesuffix("(set)").strip())


PRESETS = table_rows(section(DOCS / "tuning.md", "Presets"))


def test_tuning_presets_table_is_not_empty() -> None:
    """docs/tuning.md has a presets table including the CLI's and Akka's defaults."""
    names = [row[0] for row in PRESETS]
    assert len(names) >= 4
    assert any("CLI default" in name for name in names)
    assert any("Akka default" in name for name in names)


@pytest.mark.parametrize("row", PRESETS, ids=[row[0] for row in PRESETS])
def test_tuning_preset_validates_and_its_numbers_match_lease_settings(row: list[str]) -> None:
    """Each preset row validates, and its D, margin, slack and failover window are the values
    LeaseSettings computes."""
    _, big_l, r, t, t_stop, d, margin, slack, failover = row
    options: dict[str, object] = {
        "heartbeat_timeout": seconds(big_l),
        "heartbeat_interval": seconds(r),
        "lease_operation_timeout": seconds(t),
        "stop_timeout": seconds(t_stop),
    }
    if d.endswith("(set)"):
        options["holder_deadline"] = seconds(d)
    settings = LeaseSettings.from_mapping(options)
    assert settings.deadline == pytest.approx(seconds(d), abs=5e-4)
    assert settings.safety_margin == pytest.approx(seconds(margin), abs=5e-4)
    assert settings.safety_margin - settings.stop_timeout == pytest.approx(seconds(slack), abs=5e-4)
    low, high = failover.removesuffix(" s").split("–")
    assert float(low) == pytest.approx(settings.heartbeat_timeout - settings.heartbeat_interval)
    assert float(high) == pytest.approx(settings.heartbeat_timeout)


def test_cli_defaults_in_the_presets_are_the_clis() -> None:
    """The "CLI default" preset is what `trio-lease` uses without options."""
    [row] = [row for row in PRESETS if row[0].startswith("CLI default")]
    expected = [
        parse_duration(CLI_DEFAULTS[key])
        for key in (
            "heartbeat_timeout",
            "heartbeat_interval",
            "lease_operation_timeout",
            "stop_timeout",
        )
    ]
    assert [seconds(cell) for cell in row[1:5]] == expected


def test_tuning_snippet_prints_what_its_comment_says() -> None:
    """The Python snippet in docs/tuning.md runs and prints the output shown in its comment."""
    [snippet] = code_blocks((DOCS / "tuning.md").read_text(), "python")
    expected = [line.removeprefix("# ") for line in snippet.splitlines() if line.startswith("# ")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet, "docs/tuning.md", "exec"), {})
    assert out.getvalue().splitlines() == expected


@pytest.mark.parametrize(
    "options",
    [
        {"heartbeat_timeout": 3, "heartbeat_interval": 2},
        {
            "heartbeat_timeout": 15,
            "heartbeat_interval": 2,
            "lease_operation_timeout": 1,
            "stop_timeout": 5,
        },
    ],
    ids=["interval", "safety"],
)
def test_tuning_error_examples_are_the_real_messages(options: dict[str, float]) -> None:
    """The validation messages quoted in docs/tuning.md are, line for line and with their
    `invalid lease settings:` prefix, the ones LeaseSettings raises."""
    with pytest.raises(LeaseConfigError) as caught:
        LeaseSettings(**options)
    message = str(caught.value)
    assert message.startswith("invalid lease settings: ")
    [quoted] = code_blocks(section(DOCS / "tuning.md", "Validation rules"), "")
    assert message in quoted.splitlines()


def snippet_files_of_the_testing_guide() -> dict[str, str]:
    """docs/testing.md's snippets by the file named on their first line, continuations joined."""
    files: dict[str, str] = {}
    for snippet in code_blocks((DOCS / "testing.md").read_text(), "python"):
        first, _, body = snippet.partition("\n")
        match = re.fullmatch(r"# (\w+\.py)( \(continued\))?", first)
        assert match, f"a snippet in docs/testing.md does not name its file: {first!r}"
        name, continued = match.groups()
        assert (name in files) == bool(continued), f"{name}: 'continued' out of place"
        files[name] = files.get(name, "") + ("\n\n" if continued else "") + body
    return files


def test_testing_guide_snippets_pass_as_written(tmp_path: Path) -> None:
    """Every snippet in docs/testing.md, saved as the file it names, passes under pytest on
    both anyio backends."""
    files = snippet_files_of_the_testing_guide()
    assert {"conftest.py", "test_my_job.py", "test_my_backend.py"} <= set(files)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    tests = sum(text.count("\nasync def test_") for text in files.values())
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        # As a user runs them: without the outer run's options (CI's coverage).
        env={name: value for name, value in os.environ.items() if name != "PYTEST_ADDOPTS"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{2 * tests} passed" in result.stdout, result.stdout
    assert "skipped" not in result.stdout


def test_cli_guide_toml_section_loads_with_the_cli_defaults(tmp_path: Path) -> None:
    """The TOML section shown in docs/cli.md loads as a LeaseProvider section with the CLI's
    default timings."""
    [snippet] = code_blocks((DOCS / "cli.md").read_text(), "toml")
    # Its database's folder (/var/lib/myapp) must exist: this machine's stands in for it.
    [folder] = re.findall(r'^path = "(/[^"]*)/[^/"]+"$', snippet, flags=re.MULTILINE)
    snippet = snippet.replace(f'"{folder}/', f'"{tmp_path}/')
    provider = LeaseProvider(tomllib.loads(snippet))
    backend, settings = provider._backend_for("leases.cli")
    assert type(backend).__name__ == "SqliteBackend"
    assert settings == LeaseSettings.from_mapping(CLI_DEFAULTS)


#: A requirement naming this package (with extras or a version), as an index would resolve it.
_PACKAGE_BY_NAME = re.compile(r"trio[-_.]?lease(\[.*\])?([<>=!~].*)?$", re.IGNORECASE)


def _pip_install_lines() -> list[tuple[str, str]]:
    """Every ``pip install ...`` command in README.md, docs/ and examples/: (file, command)."""
    files = [
        ROOT / "README.md",
        *sorted(DOCS.rglob("*.md")),
        *sorted((ROOT / "examples").rglob("*")),
    ]
    found = []
    for path in files:
        if not path.is_file() or path.suffix not in {".md", ".py", ".txt", ".sh", ".yaml", ".yml"}:
            continue
        for line in path.read_text().splitlines():
            for match in re.finditer(r"pip install([^`#;&|\n]*)", line):
                found.append((str(path.relative_to(ROOT)), match.group(1)))
    return found


def test_no_docs_pip_install_takes_the_package_from_an_index() -> None:
    """A `pip install` in the docs installs this repository (`.`, `-e .`), never trio_lease by
    name, which no index serves: `pip install "trio_lease[examples]"` failed."""
    lines = _pip_install_lines()
    assert len(lines) >= 4, lines  # the README's, the extras', the example's
    by_name = [
        (where, command)
        for where, command in lines
        for word in command.split()
        if _PACKAGE_BY_NAME.match(word.strip("'\""))
    ]
    assert not by_name, by_name
