"""docs/cli.md's examples, run as written against `trio-lease emulate`, a real etcd and SQLite.

Each ``$ `` line of the console block under "## Examples" runs in a shell, in a folder holding
the emulator's ``emulator.kubeconfig``; the lines after it are its output (stdout and stderr),
``...`` standing for the rest. The etcd address of the examples is replaced by the test's etcd,
and a prefix of the test's own keeps its keys apart.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from pathlib import Path

from tests.etcd_server import EtcdCluster

from ._stores import ROOT, start_emulator
from .conftest import Cli

DOC_ENDPOINT = "http://127.0.0.1:2379"

#: What the CLI says when the backend was slower than its operation timeout and then answered:
#: a report of this run's machine (a loaded one), not of the example, so not in the docs.
SLOW_BACKEND = re.compile(
    r"trio-lease: (lease '[^']*': the backend answers again after [0-9.]+ s"
    r"|waiting for [^:]*: the backend has been failing for .*)"
)


def examples() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of each ``$`` line in the Examples block."""
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("\n## Examples\n", 1)[1]
    block = re.search(r"```console\n(.*?)```", section, re.DOTALL)
    assert block is not None, "docs/cli.md has no console block under ## Examples"
    pairs: list[tuple[str, list[str]]] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        else:
            pairs[-1][1].append(line)
    return pairs


def test_the_examples_are_there() -> None:
    """The Examples block shows Kubernetes, etcd, SQLite, an error and manifests."""
    commands = " ".join(command for command, _ in examples())
    for shown in ("--kubeconfig", "--endpoints", "--sqlite-path", "--timeout", "manifests"):
        assert shown in commands


def test_the_examples_print_what_the_docs_show(cli: Cli, etcd_server: EtcdCluster) -> None:
    """Every example exits as shown and prints the lines shown (``...``: the rest)."""
    emulator = start_emulator(cli)
    assert emulator.kubeconfig == cli.tmp / "emulator.kubeconfig"
    bin_dir = str(Path(sys.executable).parent)
    env = cli.env | {
        "PATH": f"{bin_dir}:{cli.env.get('PATH', '')}",
        "TRIO_LEASE_PREFIX": f"docs-{secrets.token_hex(4)}/",
    }
    for command, expected in examples():
        shell = command.replace(DOC_ENDPOINT, etcd_server.endpoints[0])
        done = subprocess.run(
            ["bash", "-c", f"{shell} 2>&1"], cwd=cli.tmp, env=env, capture_output=True,
            text=True, timeout=60, check=False,
        )
        actual = [
            line.rstrip() for line in done.stdout.splitlines() if not SLOW_BACKEND.fullmatch(line)
        ]
        if "..." in expected:
            cut = expected.index("...")
            assert actual[:cut] == [line.rstrip() for line in expected[:cut]], (command, actual)
        else:
            assert actual == [line.rstrip() for line in expected], (command, actual)
