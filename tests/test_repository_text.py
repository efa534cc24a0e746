"""The repository's files speak for themselves: no reference to a file outside the repository,
and no story of how the code was made ("session N", "issue N", "the seed", "the lead").

Every tracked file is read (``git ls-files``); files that are not UTF-8 text are skipped. This
file is exempt: it must spell out what it looks for.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXEMPT = {"tests/test_repository_text.py"}

#: Files the repository does not contain, named as if it did.
OUTSIDE = re.compile(r"DESIGN\.md|DESIGN §|KUBERNETES-API\.md|\.\./shared/|/work/shared")
#: How the code came to be, instead of what it is.
HISTORY = re.compile(
    r"\bsessions? \d+"
    r"|\bissues? ?[-#]?\d+"
    r"|(?<![\w&/#-])#\d+\b"
    r"|\bthe seed\b"
    r"|\bthe lead\b"
    r"|\bprevious session",
    flags=re.IGNORECASE,
)


def tracked_texts() -> dict[str, str]:
    """Every tracked file's text, by path, for the files that are UTF-8 text."""
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    texts: dict[str, str] = {}
    for name in names:
        path = ROOT / name
        if not name or name in EXEMPT or not path.is_file():
            continue
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return texts


TEXTS = tracked_texts()


def hits(pattern: re.Pattern[str]) -> list[str]:
    return [
        f"{name}:{number}: {line.strip()[:120]}"
        for name, text in TEXTS.items()
        for number, line in enumerate(text.splitlines(), start=1)
        if pattern.search(line)
    ]


def test_the_scan_reads_the_repository() -> None:
    """The scan covers the package, the tests, the docs and the tools."""
    assert {"README.md", "docs/design.md", "trio_lease/_settings.py", "pyproject.toml"} <= set(
        TEXTS
    )
    assert len(TEXTS) > 200


def test_no_reference_to_a_file_outside_the_repository() -> None:
    """No tracked file cites DESIGN.md, KUBERNETES-API.md or a sibling folder of the checkout:
    the design is docs/design.md, by the same section numbers."""
    assert hits(OUTSIDE) == []


def test_no_development_history_in_tracked_files() -> None:
    """No tracked file tells how the code was made ("session N", "issue N", "#N", "the seed",
    "the lead"): Akka's defaults and keys are named as Akka's, findings cite the benchmark
    report, and each random seed is named as one."""
    assert hits(HISTORY) == []


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("see DESIGN §4.2", OUTSIDE),
        ("the contract is DESIGN.md", OUTSIDE),
        ("as in KUBERNETES-API.md §6", OUTSIDE),
        ("measured in session 12", HISTORY),
        ('README, "Issue 15, session 7"', HISTORY),
        ("the hot spots issue 13 rewrote", HISTORY),
        ("fixed in #42", HISTORY),
        ("the seed's defaults", HISTORY),
        ("after the lead's two changes", HISTORY),
    ],
)
def test_the_patterns_catch_what_they_are_for(line: str, pattern: re.Pattern[str]) -> None:
    """Each kind of phrase the scan forbids is caught by its pattern."""
    assert pattern.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "docs/design.md §4.2",
        "the leader releases",
        "drawn from the run's seed",
        "PKCS#8 PEM",
        "kubernetes/kubernetes#138219 answers a Status",
        "one etcd member for the whole session",
    ],
)
def test_the_patterns_spare_ordinary_text(line: str) -> None:
    """Ordinary words near the forbidden phrases are not caught."""
    assert not OUTSIDE.search(line)
    assert not HISTORY.search(line)


def test_the_changelog_keeps_a_changelog() -> None:
    """CHANGELOG.md follows Keep a Changelog: an Unreleased section first, then releases."""
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)
    assert sections[0] == "Unreleased"
    assert len(sections) >= 2
    assert "keepachangelog.com" in text
