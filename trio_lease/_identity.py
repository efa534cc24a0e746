"""The process's incarnation id: the part of a holder identity that changes on every restart.

A holder identity is the owner name plus this id (``worker-1_3f2a9c1b7d4e``), so a restarted
process (or a forked child) never silently inherits a lease that its previous life still holds
in the store: it waits like any other contender (docs/design.md §4.7).
"""

from __future__ import annotations

import os
import uuid

__all__ = ["incarnation"]

_incarnation = uuid.uuid4().hex[:12]


def _new_incarnation() -> None:
    global _incarnation
    _incarnation = uuid.uuid4().hex[:12]


# A forked child is a new process: it must not inherit the parent's identity (docs/design.md §4.7).
os.register_at_fork(after_in_child=_new_incarnation)


def incarnation() -> str:
    """This process's incarnation id, appended to owner names to form identities."""
    return _incarnation
