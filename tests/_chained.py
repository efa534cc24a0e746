"""What an exception would show anywhere: for tests that a secret is in none of it."""

from __future__ import annotations

from collections.abc import Iterator


def chain(exc: BaseException, *, groups: bool = True) -> Iterator[BaseException]:
    """``exc`` and everything chained to it (causes and contexts, suppressed or not, and with
    ``groups`` the members of exception groups), each once."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [current.__cause__, current.__context__]
        if groups and isinstance(current, BaseExceptionGroup):
            pending += current.exceptions


def chained_texts(exc: BaseException) -> Iterator[str]:
    """str, repr and args of ``exc`` and of everything chained to it (causes, contexts, groups),
    suppressed or not: what a traceback print or a debugger could show."""
    for current in chain(exc):
        yield str(current)
        yield repr(current)
        yield from (repr(arg) for arg in current.args)
