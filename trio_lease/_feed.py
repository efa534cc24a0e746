"""The shared watch's source: one stream of changes for every watched lease of a backend.

(:class:`WatchFeed`, :class:`Watched` and ``Publish`` live in :mod:`._abc`, with the rest of the
backend SPI; this module has the default feed and the checks on what a backend's watch yields.)

A backend that can follow many leases with one stream (a Kubernetes watch by label, an etcd
prefix watch, one poller of a SQLite file) returns a :class:`WatchFeed` from
:meth:`~trio_lease.abc.LeaseBackend.watch_feed`. The core keeps one
:class:`~trio_lease._shared_watch.SharedWatch` per backend object, which runs the feed in one
task and hands each change to every waiter and holder of that lease in the process
(docs/design.md §5, docs/architecture.md). A backend with only ``watch(name)`` gets
:class:`PerNameFeed`: the same hub, one ``watch(name)`` stream per watched name.

Writing a feed:

``run(watched, publish)``
    Follow the leases whose names are in ``watched`` until cancelled, calling
    ``publish(name, state)`` after each change with the state after it (``None``: deleted).
    It may publish a state twice, publish names that are not watched (they are dropped), and
    coalesce changes, but after every change of a watched lease it must eventually publish its
    latest state. ``watched`` changes while the feed runs (:meth:`Watched.wait_changed`); a
    feed that follows names one by one starts and stops following them as it changes.

    The hub may cancel ``run`` at any time (the task hosting it left) and call it again on the
    same feed object: keep the resume point (a resourceVersion, a revision) on the feed, so
    the next run resumes where the last one stopped instead of listing everything again.
    Handle reconnects, expired resume points and backoff inside ``run``; raise only what
    retrying cannot fix (:class:`~trio_lease.BackendAuthError`,
    :class:`~trio_lease.LeaseConfigError`): the hub logs it, wakes every subscriber (whose next
    request meets the error and reports it) and runs the feed again after a pause.

A feed's states are hints, never evidence: a waiter attempts again when woken, and a holder
that sees a state it did not write confirms it with a linearizable read before it gives up
the grant. So a feed that lags, replays old events or drops them costs time, never safety.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar, cast

import anyio

from ._abc import LeaseBackend, LeaseRecord, Publish, Watched, WatchFeed
from ._exceptions import BackendProtocolError, BackendUnavailable, LeaseError
from ._host import reraise, sole_error
from ._streams import Changes, Emit

__all__ = ["PerNameFeed", "checked_watch", "closing", "untyped"]

T = TypeVar("T")

logger = logging.getLogger("trio_lease")

class PerNameFeed(WatchFeed):
    """A feed made of one ``backend.watch(name)`` stream per watched name.

    For backends that implement only :meth:`~trio_lease.abc.LeaseBackend.watch`. Failures of
    one stream end that stream only; it is opened again after ``retry`` seconds.
    """

    def __init__(self, backend: LeaseBackend, *, retry: float = 1.0) -> None:
        self.backend: LeaseBackend = backend
        self.retry: float = retry

    async def run(self, watched: Watched, publish: Publish) -> None:
        scopes: dict[str, anyio.CancelScope] = {}
        async with anyio.create_task_group() as tg:
            while True:
                for name in watched:
                    if name not in scopes:
                        scopes[name] = anyio.CancelScope()
                        tg.start_soon(self._follow, name, scopes[name], publish)
                for name in [n for n in scopes if n not in watched]:
                    scopes.pop(name).cancel()
                await watched.wait_changed()

    async def _follow(self, name: str, scope: anyio.CancelScope, publish: Publish) -> None:
        with scope:
            while True:
                try:
                    async with checked_watch(self.backend, name) as states:
                        async for state in states:
                            publish(name, state)
                except BackendUnavailable as exc:  # opened again after a pause
                    logger.info("watch of lease %r failed (%s); opening it again", name, exc)
                # Anything else (credentials, configuration) ends the run: the hub wakes every
                # subscriber, whose next request meets the error, and runs the feed again.
                await anyio.sleep(self.retry)


def checked_watch(backend: LeaseBackend, name: str) -> Changes[LeaseRecord | None]:
    """``backend.watch(name)``, each item checked, anything untyped it raises made typed.

    Takes both forms of ``watch``: an async context manager handing out a receive stream (the
    SPI), or an async iterator (the form of older versions), which is run in the stream's own
    task and closed when the caller leaves; anything else is a
    :class:`~trio_lease.BackendProtocolError`.
    """
    return Changes(
        functools.partial(_forward_watch, backend, name), what=f"the watch of lease {name!r}"
    )


async def _forward_watch(
    backend: LeaseBackend, name: str, emit: Emit[LeaseRecord | None]
) -> None:
    what = f"watching lease {name!r}"
    try:
        opened: object = backend.watch(name)
        if hasattr(opened, "__aenter__") and hasattr(opened, "__aexit__"):
            async with cast(AbstractAsyncContextManager[object], opened) as stream:
                await _forward(backend, name, stream, emit)
        elif isinstance(opened, AsyncIterator):
            async with closing(opened) as stream:
                await _forward(backend, name, stream, emit)
        else:
            raise BackendProtocolError(
                f"{what}: {type(backend).__name__}.watch() returned {type(opened).__name__}; "
                "it must return an async context manager that hands out a receive stream "
                "(trio_lease.abc.Changes), or an async iterator"
            )
    except LeaseError:
        raise
    except Exception as exc:  # the SPI boundary: a backend's own bug, made typed and chained
        single = sole_error(exc) if isinstance(exc, ExceptionGroup) else exc
        if isinstance(single, LeaseError):
            reraise(single)
        raise untyped(exc, backend, what) from exc


async def _forward(
    backend: LeaseBackend, name: str, stream: object, emit: Emit[LeaseRecord | None]
) -> None:
    if not isinstance(stream, AsyncIterable):
        raise BackendProtocolError(
            f"watching lease {name!r}: {type(backend).__name__}.watch() handed out "
            f"{type(stream).__name__}, not an async iterable of LeaseRecord or None"
        )
    async for record in stream:
        if record is not None and not isinstance(record, LeaseRecord):
            raise BackendProtocolError(
                f"watching lease {name!r}: {backend!r} yielded "
                f"{type(record).__name__}, not a LeaseRecord or None"
            )
        await emit(record)


def untyped(exc: Exception, backend: LeaseBackend, what: str) -> BackendProtocolError:
    """The typed error for an exception outside the LeaseError tree escaping a backend call.

    Backends check their replies where they enter (trio_lease._wire); this is the last line of
    defence for a backend that does not (a third-party one, or a reply nobody foresaw). The
    exception's text is not quoted: it may carry what the server sent.
    """
    return BackendProtocolError(
        f"{what}: {backend!r} raised {type(exc).__name__} (a reply it could not read, or a bug "
        "in the backend); the outcome is unknown"
    )


@asynccontextmanager
async def closing(stream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Close an async iterator ``watch`` (the form of older versions) when we stop reading it."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await aclose()
