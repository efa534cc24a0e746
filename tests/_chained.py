"""What an exception would show anywhere: for tests that a secret is in none of it."""

from __future__ import annotations

from collections.abc import Iterator


def chained_texts(exc: BaseException) -> Iterator[str]:
    """str, repr and args of ``exc`` and of everything chained to it (causes, contexts, groups),
    suppressed or not: what a traceback print or a debugger could show."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield str(current)
        yield repr(current)
        yield from (repr(arg) for arg in current.args)
        pending += [current.__cause__, current.__context__]
        if isinstance(current, BaseExceptionGroup):
            pending += current.exceptions
