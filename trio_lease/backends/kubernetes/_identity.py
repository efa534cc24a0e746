"""The default owner name in a pod: ``POD_NAME``, else the host name.

Set ``POD_NAME`` with the downward API (see docs/kubernetes.md). The identity written to the
Lease is this owner name plus ``_`` and the process's incarnation id, which :class:`Lease` adds
(docs/design.md §4.7): a restarted pod with the same name does not silently inherit the lease its
previous incarnation held, it waits like any other contender.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

__all__ = ["default_owner"]


def default_owner(env: Mapping[str, str] | None = None) -> str:
    """``POD_NAME``, else the host name (the Lease adds the incarnation id)."""
    env = os.environ if env is None else env
    return env.get("POD_NAME") or socket.gethostname() or "unknown-host"
