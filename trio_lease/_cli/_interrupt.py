"""Ctrl-C while a command starts: it ends the process at once until the event loop handles it.

Python's own SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread is. While
modules are imported or an event loop is built, that can be a weak-reference callback of the
import system or a finaliser. Python then reports the exception as ignored and goes on, and the
command runs as if no Ctrl-C had come. Or a half-built event loop's finaliser prints a traceback.

So from the start of :func:`trio_lease._cli.main` until the event loop's own handling is in
place, SIGINT prints one line and ends the process with exit 130 at once: nothing is taken
before the loop runs, so nothing is left behind. The loop's handling then replaces it:

- asyncio's runner cancels the main task (and raises ``KeyboardInterrupt`` once it ended);
- trio raises ``KeyboardInterrupt`` in the main task at its next checkpoint
  (``restrict_keyboard_interrupt_to_checkpoints``), never inside a finaliser.

Both install their handler only over Python's default one, so the default is put back at the
last moment: on asyncio by the loop factory, once the loop exists, right before the runner
installs its own; on trio just before the run starts.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from .._loops import run_options

__all__ = ["EXIT_INTERRUPTED", "hand_over", "loop_options", "quit_while_starting"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _quit(signum: int, frame: FrameType | None) -> None:
    """End at once: a ``SystemExit`` raised here could be lost just as a KeyboardInterrupt."""
    print("trio-lease: interrupted", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)


@contextlib.contextmanager
def quit_while_starting() -> Iterator[None]:
    """SIGINT ends the process at once inside this block, until :func:`hand_over`; the handler
    found on entry is put back on exit (main thread only: no other thread can set one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _quit)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is _quit:  # None: a handler set outside Python
            signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)


def hand_over() -> None:
    """Put Python's default SIGINT handler back, if the start's is still in place, so that the
    event loop about to start installs its own over it (or a plain call gets the default)."""
    if signal.getsignal(signal.SIGINT) is _quit:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def loop_options(backend: str) -> dict[str, Any]:
    """``anyio.run``'s backend options for ``backend`` that hand SIGINT over to the loop; the
    backend's module is imported now, while a Ctrl-C still ends the process at once."""
    with contextlib.suppress(ImportError):  # anyio's own module; anyio.run imports it anyway
        importlib.import_module(f"anyio._backends._{backend}")
    options = run_options(backend, hand_over)
    if backend == "trio":  # never raised inside a finaliser, where Python would lose it
        options["restrict_keyboard_interrupt_to_checkpoints"] = True
    return options
