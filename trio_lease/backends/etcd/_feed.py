"""EtcdFeed: the shared watch of an :class:`~trio_lease.backends.etcd.EtcdBackend`.

One watch stream on the backend's whole key prefix (``range_end`` is the prefix with its last
byte plus one, etcd's idiom for "every key starting with it") follows every lease the process
watches, whatever their number. Each PUT event is published as the record it carries, each
DELETE as None; a key under the prefix maps back to its lease name by dropping the prefix (the
backend's ``prefix + name`` encoding). Values are checked in :mod:`._replies` like every other
reply: a value that is not a trio_lease record is published as an ``unreadable`` record.

The feed keeps :attr:`EtcdFeed.revision`, the revision up to which every change has been
published, so a stream cut by a failure (or a run the hub cancelled) resumes from the next
revision and loses nothing. Before its first stream, and when etcd has compacted the history
past that revision, the feed reads the keys under the prefix with one range read (in pages,
pinned to the first page's revision), publishes the state of each watched lease (None for a
watched lease with no key) and watches from that read's revision on. The stream asks for
progress notifications, so an idle stream still moves the resume point forward.

Most events a holder's stream carries are its own renewals. The backend remembers the revision
of each txn of held states it wrote (a txn's header revision is the ``mod_revision`` of every
key it wrote; a batched txn, :mod:`._batch`, writes several); a line whose events are all such
writes is skipped before it is decoded (:meth:`EtcdFeed._own_write`), and only moves the resume
point. A release or a handover request is never skipped: the waiters and holders of this
process must see it.

Every reopening waits a jittered pause that doubles up to
:data:`~._backend.WATCH_BACKOFF_MAX` while streams end without delivering anything, as the
per-key watch does. Only authentication and configuration errors escape :meth:`EtcdFeed.run`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from typing import Any, Final

from ..._abc import Publish, Watched, WatchFeed
from ..._backoff import Backoff
from ..._exceptions import BackendAuthError, BackendError, LeaseConfigError
from ._client import EtcdClient
from ._codec import b64
from ._replies import PrefixBatch, read_prefix_range, read_prefix_watch

__all__ = ["EtcdFeed", "prefix_end"]

logger = logging.getLogger("trio_lease")

#: First pause before a stream reopens (seconds); doubles up to BACKOFF_MAX (the per-key
#: watch's values, :data:`._backend.WATCH_BACKOFF`).
BACKOFF: Final = 0.05
BACKOFF_MAX: Final = 2.0
#: Keys per page of the range read that (re)starts the feed.
PAGE: Final = 500
#: How many of its own write revisions a backend remembers (the oldest are dropped first).
OWN_WRITES_KEPT: Final = 4096
#: An event's ``mod_revision`` in a raw watch line. Keys and values are base64 and every other
#: field is a number or a boolean, so a match is always that field, never text inside a value.
_MOD_REVISION: Final = re.compile(rb'"mod_revision"\s*:\s*"(\d{1,19})"')
#: Fields of a line that must be decoded: the watch was compacted, canceled or failed.
_CONTROL: Final = re.compile(rb'"(?:compact_revision|canceled|error|fragment)"')


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes a range or watch cover every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\0"  # etcd: every key from ``key`` on
    return stripped[:-1] + bytes([stripped[-1] + 1])


class EtcdFeed(WatchFeed):
    """One prefix watch for every watched lease of one backend object; see the module."""

    def __init__(
        self, client: EtcdClient, prefix: str, own_writes: dict[int, str] | None = None
    ) -> None:
        self._client = client
        #: Revisions of held states the backend wrote → lease name; shared with the backend.
        self.own_writes: dict[int, str] = {} if own_writes is None else own_writes
        #: Lines of this process's own writes skipped without decoding.
        self.own_skipped: int = 0
        #: The backend's key prefix (a lease's key is ``prefix + name``).
        self.prefix: str = prefix
        #: Every change up to this revision has been published; None: read the keys first.
        self.revision: int | None = None
        #: How many watch streams were opened, and how many range reads (re)started the feed.
        self.streams: int = 0
        self.reads: int = 0
        self._backoff = Backoff(BACKOFF, BACKOFF_MAX, jitter=(0.5, 1.0))
        self._subject = f" for the leases under prefix {prefix!r}"

    def __repr__(self) -> str:
        return f"<EtcdFeed prefix={self.prefix!r} revision={self.revision}>"

    async def run(self, watched: Watched, publish: Publish) -> None:
        try:
            key = self.prefix.encode()
        except UnicodeEncodeError:
            raise LeaseConfigError("the etcd `prefix` is not valid Unicode text") from None
        while True:
            try:
                if self.revision is None:
                    self.revision = await self._read(key, watched, publish)
                await self._follow(key, watched, publish)
            except BackendAuthError:
                raise
            except BackendError as exc:  # a read: retrying it is safe
                logger.info("the etcd watch%s failed (%s); opening it again", self._subject, exc)
            await self._backoff.sleep()

    async def _read(self, key: bytes, watched: Watched, publish: Publish) -> int:
        """Publish every watched lease's state as of now; return the revision read at.

        Each page is asked from the key after the previous page's last one, and
        :func:`read_prefix_range` refuses a page that does not reach the key it was asked from,
        so every request starts strictly later than the one before: a gateway repeating a page
        gets a protocol error (and the backoff of :meth:`run`), never the same request again at
        once. There is no cap on the number of pages: each one is a round trip for keys not yet
        read, paced by the server like the events of a watch, and a real prefix ends.
        """
        self.reads += 1
        body: dict[str, Any] = {"key": b64(key), "range_end": b64(prefix_end(key))}
        body["limit"] = str(PAGE)
        start = key
        revision = 0
        seen: set[str] = set()
        while True:
            read = functools.partial(read_prefix_range, prefix=key, start=start)
            page = await self._client.call(
                "kv/range", body, write=False, read=read, subject=self._subject
            )
            if not revision:
                revision = page.revision
                body["revision"] = str(revision)  # later pages: the same snapshot
            for name, state in page.states:
                seen.add(name)
                if name in watched:
                    publish(name, state)
            if not page.more:
                break
            start = page.last_key + b"\0"
            body["key"] = b64(start)
        for name in watched:
            if name not in seen:
                publish(name, None)
        return revision

    async def _follow(self, key: bytes, watched: Watched, publish: Publish) -> None:
        """Follow one stream from the next revision until it ends or fails."""
        assert self.revision is not None
        self.streams += 1
        lines = self._client.watch(
            key,
            self.revision + 1,
            read=functools.partial(read_prefix_watch, prefix=key),
            subject=self._subject,
            range_end=prefix_end(key),
            skip=self._own_write,
        )
        async with contextlib.aclosing(lines):
            async for batch in lines:
                for name, state in batch.states:
                    if name in watched:
                        publish(name, state)
                if batch.revision > self.revision:
                    self.revision = batch.revision
                    self._backoff.reset()  # the stream delivers: it is healthy
                if batch.compacted:
                    logger.info("the etcd watch%s was compacted; reading again", self._subject)
                    self.revision = None
                    return
                if batch.ended:
                    return

    def _own_write(self, line: bytes) -> PrefixBatch | None:
        """The batch of a line whose events are all this process's held-state writes, undecoded.

        None: decode the line (no own write in it, another event with it, or a control field).
        Skipping withholds only a hint from this process's subscribers (a holder ignores its own
        writes; a waiter's countdown restarts at its next read instead, the safe side).
        """
        own = self.own_writes
        if not own or _CONTROL.search(line):
            return None
        revisions = [int(found) for found in _MOD_REVISION.findall(line)]
        if not revisions or any(revision not in own for revision in revisions):
            return None
        for revision in set(revisions):  # a batched txn's events share its revision
            del own[revision]
        self.own_skipped += 1
        return PrefixBatch([], max(revisions), False, False)
