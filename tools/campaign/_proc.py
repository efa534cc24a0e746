"""Helpers for the processes of a run: where they start, where their output goes, and how the
children leave when the harness is gone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

import anyio

__all__ = ["ROOT", "append_log", "exit_with_parent"]

#: The repository root (``tools/campaign/`` is two levels down): children start there, so
#: ``python -m tools.campaign._worker`` and ``tests.etcd_server`` import.
ROOT = Path(__file__).resolve().parents[2]


def append_log(path: Path) -> IO[bytes]:
    """A log file for a child's output (opened before the child starts, closed after)."""
    return open(path, "ab")


async def exit_with_parent(done: anyio.CancelScope) -> None:
    """Leave when the harness is gone (we were re-parented), even if stdin stays open.

    (PR_SET_PDEATHSIG cannot be used: it follows the *thread* that forked us, and trio starts
    processes from a worker thread that exits when idle.)
    """
    parent = os.getppid()
    while os.getppid() == parent:  # noqa: ASYNC110 - no event tells us; poll
        await anyio.sleep(0.5)
    done.cancel()
