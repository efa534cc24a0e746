"""Whether an idle socket is quiet: one non-blocking ``poll``, on every loop."""

from __future__ import annotations

import select

__all__ = ["quiet"]

_poll = getattr(select, "poll", None)  # select.select where there is no poll (Windows)


def quiet(fd: int) -> bool:
    """True unless the socket ``fd`` is readable (closed by the server, or unasked bytes)."""
    if fd < 0:
        return True
    try:
        if _poll is not None:
            poller = _poll()
            poller.register(fd, select.POLLIN)
            return not poller.poll(0)
        return not select.select([fd], [], [], 0)[0]
    except (OSError, ValueError):
        return False
