"""Helpers for the processes the harness starts."""

from __future__ import annotations

import os

import anyio

__all__ = ["exit_with_parent"]


async def exit_with_parent(done: anyio.CancelScope) -> None:
    """Leave when the harness is gone (we were re-parented), even if stdin stays open.

    (PR_SET_PDEATHSIG cannot be used: it follows the *thread* that forked us, and trio starts
    processes from a worker thread that exits when idle.)
    """
    parent = os.getppid()
    while os.getppid() == parent:  # noqa: ASYNC110 - no event tells us; poll
        await anyio.sleep(0.5)
    done.cancel()
