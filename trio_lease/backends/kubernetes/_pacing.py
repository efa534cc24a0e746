"""How often a watch may be reopened: the resume point, what counts as news, and the backoff.

Both watches (the per-lease field-selector watch, :mod:`._watch`, and the shared label watch,
:mod:`._feed`) reopen their stream when the server ends it, and a server decides how soon it
does. Reopening at once is right after a stream that lived and brought changes (the server's
normal end after ``timeoutSeconds``); anything else waits a backoff, or a server whose streams
end at once would be asked again hundreds of times a second. What decides it:

- **News.** An event is progress only if its resourceVersion was not seen before in the
  cursor's life. :class:`Cursor` remembers the last :data:`SEEN_VERSIONS` versions it met
  (a bounded ring, not the highest: resourceVersions are opaque strings, compared for equality
  only). A server that replays old versions ("2", "1", "2", … one event a stream) therefore
  brings no news after the first two and is paced like a server that sends nothing.
- **Life.** A stream that ended sooner than :data:`FIRST_BACKOFF` after it was opened never
  resets the backoff, news or not: even a server that invents a new version for every stream
  cannot drive reopenings faster than the backoff floor. A stream that lived at least the
  backoff's cap (``watch_poll_interval``) resets it whatever it brought, so an idle lease is
  not left unwatched.

:meth:`Backoff.after_stream` is that decision; :meth:`Backoff.sleep` the wait, jittered,
starting at :data:`FIRST_BACKOFF` and doubling up to the cap.
"""

from __future__ import annotations

from typing import Final

import anyio

from ..._backoff import Backoff

__all__ = ["FIRST_BACKOFF", "SEEN_VERSIONS", "Cursor", "WatchBackoff"]

#: The first wait before reopening a watch that ended without a useful event (doubles up to
#: ``watch_poll_interval``); a stream shorter than this never resets the backoff.
FIRST_BACKOFF: Final = 0.1
#: How many resourceVersions a cursor remembers to tell news from replays.
SEEN_VERSIONS: Final = 64


class Cursor:
    """The resume point (the last resourceVersion seen) and the useful events so far.

    ``state_version``: the version of the state read with the resume point (the LIST's object;
    None: none), which is no news either.
    """

    __slots__ = ("_seen", "useful", "version")

    def __init__(self, version: str, state_version: str | None) -> None:
        self.version = version
        #: Useful events so far: events at a version this cursor had not seen (news).
        self.useful = 0
        #: The versions seen lately, oldest first (a dict as an ordered, bounded set).
        self._seen: dict[str, None] = {}
        self.saw(version)
        if state_version is not None:
            self.saw(state_version)

    def saw(self, version: str) -> bool:
        """Remember ``version``; True if it is news (not among the last ones seen)."""
        seen = self._seen
        if not version or version in seen:
            return False
        seen[version] = None
        if len(seen) > SEEN_VERSIONS:
            del seen[next(iter(seen))]
        return True

    def moved_to(self, version: str) -> None:
        """An event of our object at ``version`` (a change or a deletion): the resume point,
        and one more useful event if it is news."""
        self.version = version
        if self.saw(version):
            self.useful += 1


class WatchBackoff(Backoff):
    """The backoff of reopening a watch: from FIRST_BACKOFF up to ``cap``, each pause jittered
    down to half; see the module docstring."""

    __slots__ = ()

    def __init__(self, cap: float) -> None:
        cap = max(cap, 0.01)  # never a zero wait, whatever the poll interval
        super().__init__(min(FIRST_BACKOFF, cap), cap, jitter=(0.5, 1.0))

    async def after_stream(self, news: bool, opened: float) -> None:
        """After a stream opened at ``opened`` ended cleanly: reopen at once if it lived and
        brought ``news`` (or lived at least the cap), else wait the backoff."""
        lived = anyio.current_time() - opened
        if lived >= self.cap or (news and lived >= self.first):
            self.reset()
        else:
            await self.sleep()
