"""Paths from configuration: ``~`` expanded, and refused with a message naming where they came from.

A path in a TOML section, a kubeconfig, an environment variable or a command-line option is
input from a person. ``Path.expanduser`` raises a bare :class:`RuntimeError` for ``~nobody/x``
(no such user) or ``~`` without a home directory, and the operating system raises a bare
:class:`ValueError` for a NUL character when the file is opened, much later and far from the
place that named it. :func:`user_path` turns both into a :class:`~trio_lease.LeaseConfigError`
that names the key, variable or option (``where``) at the moment the configuration is read.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._exceptions import LeaseConfigError

__all__ = ["user_path"]


def user_path(value: str | os.PathLike[str], where: str) -> Path:
    """``value`` with a leading ``~`` or ``~user`` expanded, as a :class:`Path`.

    ``where`` names the source in the error ("'ca-file' in the kubernetes section",
    "KUBECONFIG", "--sqlite-path"). Raises :class:`LeaseConfigError` when the path holds a NUL
    character (no file name can) or its ``~`` cannot be expanded.
    """
    text = os.fspath(value)
    if "\0" in text:
        raise LeaseConfigError(
            f"{where}: the path contains a NUL character, which no file name can hold; "
            "fix the path"
        )
    try:
        return Path(text).expanduser()
    except RuntimeError:  # "Could not determine home directory."
        user = text[1:].split(os.sep, 1)[0]
        reason = f"there is no user {user!r}" if user else "the home directory is unknown"
        raise LeaseConfigError(
            f"{where}: cannot expand '~{user}' in {text!r}: {reason}; write the path out in "
            "full"
        ) from None
