"""Child supervision for ``trio-lease run``: start CMD, stop it, and its exit code.

The child gets ``TRIO_LEASE_NAME``, ``TRIO_LEASE_OWNER`` and ``TRIO_LEASE_FENCING_TOKEN`` in its
environment. When the lease is lost or ``trio-lease`` is asked to stop, the child gets SIGTERM,
then SIGKILL after the grace period (the settings' ``stop_timeout``, which the safety inequality
accounts for). On Linux the child is also SIGKILLed by the kernel if ``trio-lease`` itself dies
(``kill -9``), so it can never outlive the lease it ran under. A child killed by signal N exits
128+N, as shells report it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys

import anyio
from anyio.abc import Process

from .._exceptions import LeaseConfigError

__all__ = ["check_command", "run_child"]

# Runs in the child, between fork and exec of CMD (Linux only). It asks the kernel to SIGKILL
# the child when trio-lease dies: otherwise `kill -9` of trio-lease orphans CMD, which keeps
# running after another owner takes the lease over. SIGKILL, because nobody is left to escalate
# a SIGTERM. The getppid() check closes the race of trio-lease dying before prctl ran. Python
# ignores SIGPIPE and SIGXFSZ at startup; ignored signals survive exec, so restore them.
_LAUNCHER = """\
import ctypes, os, signal, sys
if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:
    print("trio-lease: prctl(PR_SET_PDEATHSIG):", os.strerror(ctypes.get_errno()), file=sys.stderr)
    os._exit(126)
if os.getppid() != int(sys.argv[1]):
    os._exit(128 + signal.SIGKILL)
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    print(f"trio-lease: cannot run {sys.argv[2]!r}: {exc}", file=sys.stderr)
    os._exit(127)
"""


def check_command(command: list[str]) -> None:
    """Fail before acquiring anything if CMD cannot be started (exit 78, not a held lease)."""
    program = command[0]
    if os.sep in program:
        found = os.path.isfile(program) and os.access(program, os.X_OK)
    else:
        found = shutil.which(program) is not None
    if not found:
        raise LeaseConfigError(f"cannot start {program!r}: no such executable")


def _child_argv(command: list[str]) -> list[str]:
    """CMD, wrapped on Linux so that the kernel kills it if trio-lease dies (see _LAUNCHER)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return command
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), *command]


async def run_child(command: list[str], lease_env: dict[str, str], grace: float) -> int:
    """Run CMD with ``lease_env`` added to the environment until it exits; its exit code.

    Cancelled (the lease lost, or a signal to stop), it stops the child before returning.
    """
    try:
        process = await anyio.open_process(
            _child_argv(command), stdin=None, stdout=None, stderr=None,
            env=os.environ | lease_env,
        )
    except OSError as exc:
        raise LeaseConfigError(f"cannot start {command[0]!r}: {exc}") from None
    try:
        returncode = await process.wait()
    finally:
        if process.returncode is None:
            await _stop(process, grace)  # noqa: ASYNC102  _stop shields itself; grace, then SIGKILL
    return 128 - returncode if returncode < 0 else returncode


async def _stop(process: Process, grace: float) -> None:
    """SIGTERM, then SIGKILL after the grace period; shielded, as it runs when cancelled."""
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            process.terminate()
        with anyio.move_on_after(grace):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
