"""The lease configuration file (TOML), read with errors that say what is wrong with it.

Shared by :class:`~trio_lease.LeaseProvider` and the backends' commands that read the same file
(``trio-lease check``); it knows nothing of sections or backends.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ._exceptions import LeaseConfigError

__all__ = ["load_toml"]


def load_toml(path: Path) -> dict[str, Any]:
    """The lease configuration file at ``path``, parsed; :class:`LeaseConfigError` saying what
    is wrong with it otherwise (missing, unreadable, not UTF-8, not TOML). Nothing of the file's
    text is quoted: it may hold a secret."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise LeaseConfigError(f"lease configuration file {path} does not exist") from None
    except OSError as exc:
        raise LeaseConfigError(
            f"cannot read the lease configuration file {path}: {exc.strerror or exc}"
        ) from None
    try:
        text: str | None = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        text = None  # raised below, not chained: the error holds the file's bytes
    if text is None:
        raise LeaseConfigError(f"{path} is not UTF-8 text (line {line}); TOML files are UTF-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LeaseConfigError(f"{path} is not valid TOML: {exc}") from None
