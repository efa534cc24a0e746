"""What leaves a scope of the library: the one rule every public scope and runner follows.

Each scope the library hands out (``held()``, ``try_held()``, the host of ``acquire()``, a watch
stream, a semaphore's or group's scope, ``run_singleton``, ``run_partitioned``, the health
server) wraps the caller's body, or ``fn``, in machinery of its own: a task group, a
heartbeat, a release. On its way out that machinery may raise as well: the caller's cancel
scope was cancelled meanwhile (its deadline passed while the body blocked without a
checkpoint), so the task group's exit raises that cancellation (asyncio) or a group of it and
the body's error (trio); the lease was lost; the store failed. Left to the loops, the body's
error is then dropped for a cancellation, or arrives inside an ``ExceptionGroup``.

:class:`Outcome` decides once, for all of them (docs/design.md §4.5, "no exception is lost"):

- the body's own exception leaves bare (never in an ``ExceptionGroup``), with its own
  ``__cause__`` and ``__context__``; a cancellation raised around it is dropped (the cancelled
  scope sees the body's error pass, as it would had the body raised a moment earlier), and a
  library error raised around it becomes its ``__context__`` (a note, if it has a context);
- without a body error, a library error leaves bare (several: their group);
- only cancellations: they pass through unchanged.

Usage, around a body that runs inside the library's machinery::

    outcome = Outcome()
    with outcome.settled():          # raises what the rule says, on the way out
        async with anyio.create_task_group() as tg:
            ...
            with outcome.body():     # records the body's own error (cancellation passes)
                yield grant

A scope whose body's exception is handed to a task group's ``__aexit__`` instead records it
with :meth:`Outcome.given` and settles what that exit raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import NoReturn, TypeAlias

import anyio

__all__ = ["ExcInfo", "FirstError", "Outcome", "is_cancellation", "reraise", "sole_error"]

#: What an async context manager's exit is given: the exception's type, the exception and its
#: traceback (all three None when the block ended without one).
ExcInfo: TypeAlias = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]


def is_cancellation(exc: BaseException) -> bool:
    """True for the running loop's cancellation and for GeneratorExit (a closed generator)."""
    return isinstance(exc, anyio.get_cancelled_exc_class() | GeneratorExit)


class Outcome:
    """The body's own error, and the rule for what leaves the scope (see the module docstring)."""

    __slots__ = ("body_error", "noted")

    def __init__(self) -> None:
        #: The body's own exception (never a cancellation), once it raised one.
        self.body_error: BaseException | None = None
        #: Library errors to keep on the body's error, should the body raise one.
        self.noted: list[BaseException] = []

    def note(self, error: BaseException | None) -> None:
        """Keep ``error`` on the body's error if there is one (what raises it is the caller's)."""
        if error is not None:
            self.noted.append(error)

    def given(self, exc: BaseException | None) -> None:
        """Note ``exc``, the exception the body left with, if it is the body's own error."""
        if exc is not None and not is_cancellation(exc):
            self.body_error = exc

    @contextmanager
    def body(self) -> Iterator[None]:
        """Run the body: its own exception is kept (raised by :meth:`settle`), a cancellation
        passes through the scopes it belongs to."""
        try:
            yield
        except (anyio.get_cancelled_exc_class(), GeneratorExit):
            raise  # cancellation passes through the scopes it belongs to
        except BaseException as exc:
            self.body_error = exc

    @contextmanager
    def settled(self) -> Iterator[None]:
        """Around the library's machinery: on the way out, :meth:`settle` what it raised."""
        try:
            yield
        except BaseException as exc:
            self.settle(exc)
            raise  # settle() returned: a cancellation only, passing through unchanged
        self.settle(None)

    def settle(self, library: BaseException | None) -> None:
        """Raise what leaves the scope, given what the library's machinery raised (if anything).

        Returns only when nothing is to be raised, or when ``library`` is to pass unchanged.
        """
        errors: list[BaseException] = []
        leaves = 0
        if library is not None:
            for leaf in _leaves(library, self.body_error):
                leaves += 1
                if leaf is not self.body_error and not is_cancellation(leaf):
                    errors.append(leaf)
        body = self.body_error
        if body is not None:
            for error in [*self.noted, *errors]:
                _attach(body, error)
            reraise(body)
        if len(errors) == 1:
            reraise(errors[0])
        if errors and len(errors) < leaves:
            # Library errors next to cancellations: the errors, without the cancellations.
            raise BaseExceptionGroup("several errors in trio_lease's scope", errors)


def _leaves(exc: BaseException, stop: BaseException | None) -> Iterator[BaseException]:
    """The exceptions inside ``exc`` (nested groups opened), not opening ``stop`` itself."""
    if exc is stop or not isinstance(exc, BaseExceptionGroup):
        yield exc
        return
    for inner in exc.exceptions:
        yield from _leaves(inner, stop)


def _attach(body: BaseException, error: BaseException) -> None:
    """Keep ``error`` (the library's, raised while ``body`` left the scope) on ``body``."""
    if _chained(body, error):
        return
    if body.__context__ is None:
        body.__context__ = error
    else:
        body.add_note(f"trio_lease: as this error left the scope, the scope also failed: {error!r}")


def _chained(exc: BaseException, target: BaseException) -> bool:
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        if current is target:
            return True
        seen.add(id(current))
        pending += [current.__cause__, current.__context__]
    return False


def reraise(exc: BaseException) -> NoReturn:
    """Raise ``exc`` (taken out of a group) with its own ``__cause__``/``__context__`` kept."""
    chain = exc.__cause__, exc.__context__, exc.__suppress_context__
    try:
        raise exc
    finally:
        exc.__cause__, exc.__context__, exc.__suppress_context__ = chain


def sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside ``group`` (nested groups included), or None if there are more."""
    found: BaseException | None = None
    for inner in group.exceptions:
        leaf = sole_error(inner) if isinstance(inner, BaseExceptionGroup) else inner
        if leaf is None or found is not None:
            return None
        found = leaf
    return found


class FirstError:
    """``async with FirstError(errors): ...``: the first error a task of the block put in
    ``errors`` leaves the block as a body's own error would (bare, winning over the
    cancellation that ended the block), by the rule of :class:`Outcome`."""

    __slots__ = ("_errors",)

    def __init__(self, errors: list[BaseException]) -> None:
        self._errors = errors

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        outcome = Outcome()
        outcome.given(self._errors[0] if self._errors else None)
        outcome.settle(exc_info[1])
