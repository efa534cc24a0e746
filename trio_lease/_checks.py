"""Checks of the arguments every public constructor shares, written once.

:class:`~trio_lease.Lease`, :class:`~trio_lease.Group`, :class:`~trio_lease.Semaphore` and
:func:`~trio_lease.run_partitioned` check their name and owner here, so a bad one is refused
the same way (``LeaseConfigError`` naming the argument) before anything is read or written.
"""

from __future__ import annotations

import inspect
import logging
import warnings
import weakref
from collections.abc import Hashable

from ._exceptions import LeaseConfigError
from ._namespace import SEPARATOR, RecordName

__all__ = [
    "check_async_callable",
    "check_name",
    "check_semaphore_limit",
    "check_text",
    "is_text",
]

logger = logging.getLogger("trio_lease")


def is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text (encodable as UTF-8: no lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_name(value: object, what: str) -> str:
    """``value`` if it is a name a user may give (:func:`check_text`, and outside the records'
    reserved namespace: no :data:`~._namespace.SEPARATOR`), else ``LeaseConfigError``.

    ``what`` names the argument in the message ("lease name", "group name", "a key", ...). A
    :class:`~._namespace.RecordName` (a feature's own record) passes.
    """
    check_text(value, what)
    assert isinstance(value, str)
    if SEPARATOR in value and not isinstance(value, RecordName):
        raise LeaseConfigError(
            f"{_article(what)} {what} {value!r} contains {SEPARATOR!r}, which is reserved: "
            f"semaphores, groups and run_partitioned name their own records "
            f"<name>{SEPARATOR}<role>{SEPARATOR}<part>, and a name with {SEPARATOR!r} could be "
            f"one of them; choose a name without {SEPARATOR!r}"
        )
    return value


def check_text(value: object, what: str) -> str:
    """``value`` if it is a non-empty string of Unicode text, else ``LeaseConfigError``.

    ``what`` names the argument in the message ("owner", ...).
    """
    if not isinstance(value, str) or not value:
        raise LeaseConfigError(f"{_article(what)} {what} must be a non-empty string, got {value!r}")
    if not is_text(value):  # no store could keep it: every one writes UTF-8
        raise LeaseConfigError(
            f"the {what} {value!r} holds a lone UTF-16 surrogate (\\ud800-\\udfff), "
            "which is not Unicode text: no store can keep it; fix the name"
        )
    return value


def check_async_callable(value: object, what: str) -> None:
    """``TypeError`` unless ``value`` is an async function (or an object whose ``__call__``
    is one), so a plain function is refused before it is first called, not when its result
    is awaited."""
    if inspect.iscoroutinefunction(value):
        return
    call = getattr(value, "__call__", None)  # noqa: B004  the method itself is inspected
    if callable(value) and not inspect.isroutine(value) and inspect.iscoroutinefunction(call):
        return
    raise TypeError(
        f"{what} must be an async function (async def ...), got {value!r}: "
        "wrap a plain function in one"
    )


#: The live Semaphores of this process by (store, name), and the names already warned about.
_live: dict[tuple[Hashable, str], weakref.WeakSet[object]] = {}
_warned: set[tuple[Hashable, str]] = set()


def check_semaphore_limit(semaphore: object, store: Hashable, name: str, limit: int) -> None:
    """Warn once per semaphore name when ``semaphore`` asks for another limit than a live
    Semaphore of this process on the same store and name has now (the bound is then the
    largest of them)."""
    where = (store, name)
    if where not in _live:
        for stale in [key for key, live in _live.items() if not live]:
            del _live[stale]
    live = _live.setdefault(where, weakref.WeakSet())
    others: set[int] = {
        seen for other in live if isinstance(seen := getattr(other, "limit", None), int)
    }
    live.add(semaphore)
    if not others or others == {limit} or where in _warned:
        return
    _warned.add(where)
    message = (
        f"Semaphore {name!r} is made with limit {limit} in this process, where another has "
        f"limit {max(others)}: the bound is the largest limit any live contender uses; "
        "give every contender the same limit (set_limit to change it)"
    )
    logger.warning("%s", message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _article(what: str) -> str:
    return "an" if what[:1] in "aeiou" else "a"
