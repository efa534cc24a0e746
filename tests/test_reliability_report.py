"""docs/reliability.md is a report of what was run, not a log of how the code came to be: no
commit hashes and no stories of fixes (git and CHANGELOG.md keep those), and the sections a
reader needs to judge the results."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "reliability.md"

#: A commit hash: a word of 7 to 40 hex digits with at least one letter and one digit (a seed or
#: a count is digits only; an English word has no digit), or any such word quoted as code.
COMMIT = re.compile(
    r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b|`[0-9a-f]{7,40}`", flags=re.I
)
#: How a fix came about, instead of what the code does now.
STORY = re.compile(
    r"\b(?:before|after|since) the (?:fix|change)\b"
    r"|\bthe fix\b"
    r"|\bfixed\b"
    r"|\bfindings?\b"
    r"|\bused to\b"
    r"|\bno longer\b"
    r"|\bwas found\b",
    flags=re.I,
)
#: What a reader needs, by heading.
SECTIONS = (
    "## Machine and settings",
    "## Results: one lease under faults",
    "### Partitioned work under faults",
    "## What each checker counts as a violation",
    "## Bad input: the hostile-server suite",
    "## What is not covered",
    "## Reproduce",
)


def _lines(pattern: re.Pattern[str]) -> list[str]:
    return [
        f"docs/reliability.md:{number}: {line.strip()[:120]}"
        for number, line in enumerate(REPORT.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]


def test_the_report_names_no_commit() -> None:
    """docs/reliability.md carries no commit hash: runs are named by date, command and load."""
    assert _lines(COMMIT) == []


def test_the_report_tells_no_story_of_a_fix() -> None:
    """docs/reliability.md says what the code does and what was measured, not how it was fixed."""
    assert _lines(STORY) == []


def test_the_report_has_the_sections_a_reader_needs() -> None:
    """Method, machine, results, violations, what is not covered and how to reproduce."""
    text = REPORT.read_text()
    assert [heading for heading in SECTIONS if f"\n{heading}\n" not in text] == []


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("same command, commit `0640906` (2026-11-23)", COMMIT),
        ("the library at 22cbc64 and a77dec6f", COMMIT),
        ("Earlier runs, before the fix (the harness of that time)", STORY),
        ("**Finding (fixed): a stalled holder took one more step**", STORY),
        ("In the runs before the change, every long pause", STORY),
        ("What it found (each fixed, each pinned by a named test)", STORY),
    ],
)
def test_the_patterns_catch_what_they_are_for(line: str, pattern: re.Pattern[str]) -> None:
    """Each kind of text the report must not carry is caught."""
    assert pattern.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "TRIO_LEASE_HOSTILE_SEED=20261123 .venv/bin/python -m pytest tests/hostile -s",
        "10,049 (10,042 / 2 / 5) handovers, accepted earlier, a decade of faults",
        "the fencing store accepted 47,452 writes; 0xdeadbeef is not in it",
    ],
)
def test_the_patterns_spare_ordinary_text(line: str) -> None:
    """Seeds, counts and ordinary words are not mistaken for hashes or stories."""
    assert not COMMIT.search(line)
    assert not STORY.search(line)
