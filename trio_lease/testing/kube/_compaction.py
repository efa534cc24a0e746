"""Time-based history: the API server's etcd compactor, on anyio's clock.

kube-apiserver compacts etcd every ``--etcd-compaction-interval`` (5 minutes by default):
at each tick it compacts to the revision it recorded at the previous tick, so "after
compaction, it will only contain keys set during last interval"
(``apiserver/pkg/storage/etcd3/compact.go``). A watch or a paginated list from a revision
older than that is "too old" (410 Expired), however few events happened since.

The emulator runs this lazily instead of in a task: :meth:`Compactor.advance` is called before
every commit and before every watch or list reads the history, and performs the ticks that
have passed since the last call. Between two calls the store's revision did not change, so
the revision "recorded at a tick" is exactly what the real compactor would have seen. The
clock is :func:`anyio.current_time` (virtual time under trio's MockClock); the first call
inside an event loop starts it, as the server starts its compactor when it starts.
"""

from __future__ import annotations

import anyio

from ._store import Store

__all__ = ["Compactor", "compact_to"]


def compact_to(store: Store, revision: int) -> None:
    """Forget the events below ``revision`` (etcd ``Compact(revision)``)."""
    while store.history and store.history[0].rv < revision:
        store.history.popleft()
    store.compacted = max(store.compacted, revision - 1)


class Compactor:
    """Compacts a store's history every ``interval`` seconds (None: never)."""

    #: Seconds between compactions; None turns time-based compaction off.
    interval: float | None

    def __init__(self, interval: float | None) -> None:
        self.interval = interval
        self._epoch: float | None = None
        self._ticks = 0
        self._recorded: int | None = None

    def advance(self, store: Store, revision: int) -> None:
        """Run the compactions due by now; the store was at ``revision`` since the last call."""
        if not self.interval:
            return
        try:
            now = anyio.current_time()
        except RuntimeError:  # no event loop yet (an emulator built in synchronous code)
            return
        if self._epoch is None:
            self._epoch = now
            return
        due = int((now - self._epoch) // self.interval)
        if due <= self._ticks:
            return
        if self._recorded is not None:
            compact_to(store, self._recorded)
        if due - self._ticks >= 2:  # a later tick recorded this same revision and compacted to it
            compact_to(store, revision)
        self._recorded = revision
        self._ticks = due
