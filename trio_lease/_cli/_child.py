"""Child supervision for ``trio-lease run``: start CMD, stop it, and its exit code.

The child gets ``TRIO_LEASE_NAME``, ``TRIO_LEASE_OWNER`` and ``TRIO_LEASE_FENCING_TOKEN`` in its
environment. When the lease is lost or ``trio-lease`` is asked to stop, the child gets SIGTERM,
then SIGKILL after the grace period (the settings' ``stop_timeout``, which the safety inequality
accounts for). On Linux the child is also SIGKILLed by the kernel if ``trio-lease`` itself dies
(``kill -9``), so it can never outlive the lease it ran under. A child killed by signal N exits
128+N, as shells report it.

On Linux the kernel's parent-death signal belongs to the *thread* that forked the child, not to
the process: a child forked by a worker thread is killed when that thread ends (trio ends an
idle worker thread after 10 s, and ``trio.lowlevel.open_process`` forks from one). So on Linux
the child is forked by the event loop's own thread, which lives as long as the run, and waited
for through a pidfd; asyncio forks from the loop's thread anyway, so both loops behave alike.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from typing import Protocol

import anyio

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
    print(f"trio-lease: cannot run {sys.argv[2]!r}: {exc.strerror or exc}", file=sys.stderr)
    os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""

#: The exit code of a command that was found but cannot be executed, and of one not found,
#: as shells report them.
EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127


class NotExecutable(LeaseConfigError):
    """CMD exists but cannot be executed: exit 126 (as shells), before the lease is taken."""

    exit_code = EXIT_CANNOT_EXECUTE


def check_command(command: list[str]) -> None:
    """Fail before acquiring anything if CMD cannot be started: not found (exit 78), found
    but not executable (:class:`NotExecutable`, exit 126), so no lease is held for nothing.

    A file that is executable but holds no program the kernel can run (no ``#!`` line, not a
    binary) is refused too, by reading its first bytes.
    """
    program = command[0]
    path = program if os.sep in program else shutil.which(program)
    if path is None and os.sep not in program:
        any_file = shutil.which(program, mode=os.F_OK)
        if any_file is None:
            raise LeaseConfigError(f"cannot start {program!r}: no such command on PATH")
        path = any_file
    assert path is not None
    if not os.path.exists(path):
        raise LeaseConfigError(f"cannot start {program!r}: no such file")
    if os.path.isdir(path):
        raise NotExecutable(f"cannot start {program!r}: it is a directory, not a program")
    if not os.access(path, os.X_OK):
        raise NotExecutable(
            f"cannot start {program!r}: not executable (no execute permission; chmod +x it, "
            "or run it through its interpreter)"
        )
    if not _looks_runnable(path):
        raise NotExecutable(
            f"cannot start {program!r}: not an executable format (neither a binary nor a "
            "script starting with #!)"
        )


#: The first bytes of the formats the kernel runs: ELF, a #! script, Mach-O, PE (Windows).
_RUNNABLE = (
    b"\x7fELF", b"#!", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"MZ",
)  # fmt: skip


def _looks_runnable(path: str) -> bool:
    """Whether the file starts like a program; True when it cannot be read (exec decides)."""
    try:
        with open(path, "rb") as file:
            head = file.read(4)
    except OSError:
        return True
    return head.startswith(_RUNNABLE)


def _with_parent_death_signal() -> bool:
    """Whether CMD runs under _LAUNCHER (Linux, with a Python executable to run it)."""
    return sys.platform.startswith("linux") and bool(sys.executable)


def _child_argv(command: list[str]) -> list[str]:
    """CMD, wrapped on Linux so that the kernel kills it if trio-lease dies (see _LAUNCHER)."""
    if not _with_parent_death_signal():
        return command
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), *command]


class _Child(Protocol):
    """What run_child needs of a started child: anyio's Process has it, and so has _Forked."""

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class _Forked:
    """A child forked by the event loop's thread, waited for without a thread of its own.

    The wait is a pidfd (readable once the child has exited), so no worker thread is held for the
    child's life; on a kernel without ``pidfd_open`` (before Linux 5.3) it polls every 50 ms.
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        try:
            self._pidfd: int | None = os.pidfd_open(popen.pid)
        except OSError:  # ENOSYS on an old kernel, EPERM under some seccomp profiles
            self._pidfd = None

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        while (code := self._popen.poll()) is None:
            if self._pidfd is None:
                await anyio.sleep(0.05)
            else:
                await anyio.wait_readable(self._pidfd)
        return code

    def terminate(self) -> None:
        self._popen.terminate()  # Popen signals only a child it has not reaped (no pid reuse)

    def kill(self) -> None:
        self._popen.kill()

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


async def _start(command: list[str], env: dict[str, str]) -> _Child:
    """Start CMD; on Linux from this thread, the one the parent-death signal is tied to."""
    argv = _child_argv(command)
    if not _with_parent_death_signal():  # any thread may fork
        return await anyio.open_process(argv, stdin=None, stdout=None, stderr=None, env=env)
    return _fork_here(argv, env)


def _fork_here(argv: list[str], env: dict[str, str]) -> _Forked:
    """Fork and exec from the calling thread (the event loop's), blocking it meanwhile.

    The block lasts as long as vfork and exec take, as in asyncio's own subprocess support; a
    worker thread would take the child down with it when it ends (see the module docstring).
    """
    return _Forked(subprocess.Popen(argv, stdin=None, stdout=None, stderr=None, env=env))


async def run_child(command: list[str], lease_env: dict[str, str], grace: float) -> int:
    """Run CMD with ``lease_env`` added to the environment until it exits; its exit code.

    Cancelled (the lease lost, or a signal to stop), it stops the child before returning.
    """
    try:
        process = await _start(command, os.environ | lease_env)
    except OSError as exc:
        raise LeaseConfigError(f"cannot start {command[0]!r}: {exc}") from None
    try:
        returncode = await process.wait()
    finally:
        if process.returncode is None:
            await _stop(process, grace)  # noqa: ASYNC102  _stop shields itself; grace, then SIGKILL
        if isinstance(process, _Forked):
            process.close()
    return 128 - returncode if returncode < 0 else returncode


async def _stop(process: _Child, grace: float) -> None:
    """SIGTERM, then SIGKILL after the grace period; shielded, as it runs when cancelled.

    Not bounded as a whole: the SIGKILL is bounded by the kernel, and returning before the
    child is gone would let it outlive the lease it runs under.
    """
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            process.terminate()
        with anyio.move_on_after(grace):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
