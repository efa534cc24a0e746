"""Every code block of README.md and docs/ runs as written or is a marked fragment that compiles,
and every relative link of every tracked Markdown file resolves (docs/README.md, "Code blocks").

- ``python`` blocks run as a script in a fresh interpreter (in a temporary directory), except a
  block after a ``<!-- fragment -->`` line, which must compile (top-level ``await`` allowed), and
  docs/testing.md's blocks, which name the test file they belong to and run under pytest in
  tests/test_docs.py;
- ``toml``, ``yaml`` and ``json`` blocks parse; ``sh`` blocks pass ``bash -n``;
- a block without a language (or ``text``) is a diagram, a transcript or output, not code.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from trio_lease import LeaseSettings
from trio_lease._settings import SETTINGS_KEYS, parse_duration
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.kubernetes._section import BACKEND_KEYS, CONNECTION_KEYS
from trio_lease.backends.memory import MemoryBackend
from trio_lease.backends.sqlite import SqliteBackend

ROOT = Path(__file__).resolve().parents[1]
FRAGMENT = "<!-- fragment -->"
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown page."""

    path: Path
    line: int
    language: str
    fragment: bool
    text: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` (indented fences too), with the line of their opening fence."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        indent, language = opening.groups()
        end = i + 1
        while not re.match(rf"^{indent}```\s*$", lines[end]):
            end += 1
        text = "\n".join(line[len(indent):] for line in lines[i + 1 : end]) + "\n"
        fragment = i > 0 and lines[i - 1].strip() == FRAGMENT
        blocks.append(Block(path, i + 1, language, fragment, text))
        i = end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in fenced_blocks(page)]


def of(*languages: str) -> list[Block]:
    return [block for block in BLOCKS if block.language in languages]


def runs_elsewhere(block: Block) -> bool:
    """docs/testing.md's blocks are test files, run under pytest by tests/test_docs.py."""
    return block.path == ROOT / "docs" / "testing.md" and block.text.startswith("# ")


RUNNABLE = [b for b in of("python") if not b.fragment and not runs_elsewhere(b)]
FRAGMENTS = [b for b in of("python") if b.fragment]


def test_every_block_has_a_known_language() -> None:
    """A fence names a language the snippet test knows, or none (a diagram or output)."""
    known = {"", "text", "python", "toml", "yaml", "json", "sh", "console"}
    assert [b.name for b in BLOCKS if b.language not in known] == []
    # A console transcript runs only where a test replays it: docs/cli.md's Examples
    # (tests/cli/test_cli_docs.py).
    assert {b.name.partition(":")[0] for b in BLOCKS if b.language == "console"} <= {"docs/cli.md"}
    assert len(RUNNABLE) >= 8


def test_a_fragment_marker_stands_only_before_a_block() -> None:
    """Every `<!-- fragment -->` line is followed by a fence, so no marker is lost in an edit."""
    for page in PAGES:
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines[:-1], start=1):
            if line.strip() == FRAGMENT:
                assert lines[number].lstrip().startswith("```"), f"{page}:{number}"


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_python_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    """The block runs to its end as a script, in a fresh interpreter, without errors."""
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("TRIO_LEASE_SQLITE_PATH", None)
    done = subprocess.run(
        [sys.executable, "-c", block.text], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, f"{block.name}\n{done.stdout}\n{done.stderr}"


def test_python_blocks_pass_mypy_strict(tmp_path: Path) -> None:
    """Every runnable block type-checks under `mypy --strict`, as a user's project would."""
    files = []
    for number, block in enumerate(RUNNABLE):
        path = tmp_path / f"snippet_{number:02d}.py"
        path.write_text(block.text)
        files.append(str(path))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *files],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )
    names = {f"snippet_{number:02d}.py": block.name for number, block in enumerate(RUNNABLE)}
    report = done.stdout
    for file, name in names.items():
        report = report.replace(str(tmp_path / file), name)
    assert done.returncode == 0, report


@pytest.mark.parametrize("block", FRAGMENTS, ids=[b.name for b in FRAGMENTS])
def test_python_fragment_compiles(block: Block) -> None:
    """A marked fragment is valid Python (top-level `await` and `async with` allowed)."""
    compile(block.text, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("block", of("toml", "yaml", "json"),
                         ids=[b.name for b in of("toml", "yaml", "json")])
def test_data_block_parses(block: Block) -> None:
    """TOML, YAML and JSON blocks are well formed."""
    if block.language == "toml":
        tomllib.loads(block.text)
    elif block.language == "yaml":
        list(yaml.safe_load_all(block.text))
    else:
        json.loads(block.text)


@pytest.mark.parametrize("block", of("sh"), ids=[b.name for b in of("sh")])
def test_shell_block_is_valid_shell(block: Block) -> None:
    """Shell blocks are valid bash (`bash -n`)."""
    done = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def tracked_markdown() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).exists()]


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page, plus its explicit `<a id>` anchors."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    found = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The link targets of a page, outside code blocks and inline code."""
    text = re.sub(r"^\s*```.*?^\s*```", "", path.read_text(), flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_relative_link_resolves() -> None:
    """Each relative link in a tracked Markdown file names an existing file, and an anchor in a
    Markdown target exists there."""
    broken = []
    checked = 0
    for page in tracked_markdown():
        for target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            checked += 1
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such anchor)")
    assert broken == []
    assert checked > 20


def section(path: Path, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading."""
    text = path.read_text()
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def table(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``text``, as stripped cells."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def seconds(cell: str) -> float:
    return float(cell.removesuffix(" s").replace(",", ""))


def span(cell: str) -> tuple[float, float]:
    low, high = cell.removesuffix(" s").split("–")
    return float(low), float(high)


FAQ = ROOT / "docs" / "faq.md"
TIMINGS = table(section(FAQ, "Choosing timings"))


def settings_of(cell: str) -> LeaseSettings:
    """The LeaseSettings that a table cell's keyword arguments (or "(none)") construct."""
    arguments = cell.strip("`")
    return LeaseSettings() if arguments == "(none)" else eval(f"LeaseSettings({arguments})")


@pytest.mark.parametrize("row", TIMINGS, ids=[row[0] for row in TIMINGS])
def test_faq_timing_row_is_what_lease_settings_computes(row: list[str]) -> None:
    """Each row of the FAQ's timing table validates, and its D, T_stop, failover window and
    renewals per hour are the values LeaseSettings derives."""
    _, arguments, d, t_stop, failover, per_hour = row
    settings = settings_of(arguments)
    assert settings.deadline == pytest.approx(seconds(d), abs=5e-4)
    assert settings.stop_timeout == pytest.approx(seconds(t_stop), abs=5e-4)
    big_l, r = settings.heartbeat_timeout, settings.heartbeat_interval
    assert span(failover) == pytest.approx((big_l - r, big_l))
    assert float(per_hour.replace(",", "")) == pytest.approx(3600 / r)


def test_faq_timing_table_covers_the_common_cases() -> None:
    """The timing table has a row per common case, Akka's defaults and client-go's included."""
    cases = " ".join(row[0] for row in TIMINGS)
    assert len(TIMINGS) >= 5
    assert "Akka's defaults" in cases and "client-go" in cases


PARTITIONS = table(section(FAQ, "Network partitions"))


@pytest.mark.parametrize("row", PARTITIONS, ids=[row[0] for row in PARTITIONS])
def test_faq_partition_row_follows_from_the_timing_model(row: list[str]) -> None:
    """Holder cancelled D−R to D after the partition, stopped by D + T_stop; a contender takes
    over L−R to L after it; nobody holds for L − D − T_stop; and the holder stops first."""
    name, cancelled, stopped, takeover, gap = row
    given = dict(re.findall(r"(L|R|D|T_stop) ([\d.]+) s", name))
    [settings_row] = [r for r in TIMINGS if r[0].startswith(name.split(" (")[0])]
    settings = settings_of(settings_row[1])
    big_l, r = settings.heartbeat_timeout, settings.heartbeat_interval
    d, t_stop = settings.deadline, settings.stop_timeout
    assert [float(given[k]) for k in ("L", "R", "D", "T_stop")] == pytest.approx(
        [big_l, r, d, t_stop], abs=5e-4)
    assert span(cancelled) == pytest.approx((d - r, d), abs=5e-4)
    assert seconds(stopped) == pytest.approx(d + t_stop, abs=5e-4)
    assert span(takeover) == pytest.approx((big_l - r, big_l), abs=5e-4)
    assert seconds(gap) == pytest.approx(big_l - d - t_stop, abs=5e-4)
    assert d + t_stop < big_l


PROVIDER = ROOT / "docs" / "recipes" / "provider-toml.md"


def documented_keys(heading: str) -> set[str]:
    """The keys named in the first column of a backend's table in provider-toml.md."""
    return {key for row in table(section(PROVIDER, heading))
            for key in re.findall(r"`([a-z-]+)`", row[0])}


def test_provider_reference_names_every_key_the_code_accepts() -> None:
    """provider-toml.md's tables list exactly the keys of LeaseSettings, the provider, and each
    built-in backend (their constructors and section checks)."""
    assert documented_keys("Every section") == SETTINGS_KEYS | {"lease-class"}
    sqlite = {p.replace("_", "-") for p in inspect.signature(SqliteBackend).parameters}
    assert documented_keys("sqlite") == sqlite
    assert documented_keys("kubernetes") == CONNECTION_KEYS | BACKEND_KEYS | {"owner"}
    etcd = {p.replace("_", "-") for p in inspect.signature(EtcdBackend).parameters}
    assert documented_keys("etcd") == (etcd - {"transport"}) | {"password-file"}
    assert inspect.signature(MemoryBackend.from_config).parameters.keys() == {"config"}
    assert "No keys" in section(PROVIDER, "memory")


def test_provider_reference_defaults_are_the_codes() -> None:
    """The defaults quoted for sqlite and etcd are the constructors' defaults."""
    for backend, heading in ((SqliteBackend, "sqlite"), (EtcdBackend, "etcd")):
        rows = {row[0].strip("`"): row[1] for row in table(section(PROVIDER, heading))}
        for name, parameter in inspect.signature(backend).parameters.items():
            key = name.replace("_", "-")
            if key in rows and type(parameter.default) in (float, int):  # not a bool
                default = rows[key].strip("`")
                assert parse_duration(default) == pytest.approx(parameter.default), key
