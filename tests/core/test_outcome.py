"""The rule of trio_lease._outcome: what leaves a scope, given the body's and the library's
exceptions (the matrix in test_no_error_lost.py holds every entry point to it)."""

from __future__ import annotations

import anyio
import pytest

from trio_lease import BackendUnavailable, LeaseLost
from trio_lease._outcome import Outcome

pytestmark = pytest.mark.anyio


class Boom(Exception):
    """The body's own error."""


async def _cancellation() -> BaseException:
    """The running loop's cancellation exception, as a cancelled scope raises it."""
    caught: list[BaseException] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)
        except BaseException as exc:
            caught.append(exc)
            raise
    return caught[0]


def _settle(outcome: Outcome, library: BaseException | None) -> BaseException | None:
    try:
        outcome.settle(library)
    except BaseException as exc:
        return exc
    return None


async def test_the_body_error_wins_over_a_cancellation_bare() -> None:
    """A cancellation raised around the body's error is dropped; the error leaves bare."""
    outcome, boom = Outcome(), Boom()
    outcome.given(boom)
    cancelled = await _cancellation()
    assert _settle(outcome, cancelled) is boom
    assert _settle(outcome, BaseExceptionGroup("g", [boom, cancelled])) is boom


async def test_a_library_error_at_the_same_time_is_the_body_errors_context() -> None:
    """A LeaseLost raised as the body's error leaves becomes its __context__, never dropped."""
    outcome, boom = Outcome(), Boom()
    outcome.given(boom)
    lost = LeaseLost("job", "taken over")
    assert _settle(outcome, lost) is boom
    assert boom.__context__ is lost


async def test_a_library_error_next_to_the_body_errors_own_context_is_a_note() -> None:
    """When the body's error has a context of its own, the library's error is noted instead."""
    outcome, boom = Outcome(), Boom()
    own = KeyError("own")
    boom.__context__ = own
    outcome.given(boom)
    assert _settle(outcome, LeaseLost("job", "taken over")) is boom
    assert boom.__context__ is own
    assert any("LeaseLost" in note for note in boom.__notes__)


async def test_a_library_error_alone_leaves_bare_out_of_its_group() -> None:
    """Without a body error, one library error leaves bare, the cancellation beside it dropped."""
    error = BackendUnavailable("down")
    group = BaseExceptionGroup("g", [error, await _cancellation()])
    assert _settle(Outcome(), group) is error


async def test_a_cancellation_alone_passes_unchanged() -> None:
    """Without a body or library error, settle() returns: the cancellation passes as it is."""
    assert _settle(Outcome(), await _cancellation()) is None
    assert _settle(Outcome(), None) is None


async def test_several_library_errors_stay_a_group_without_cancellations() -> None:
    """Two library errors at once leave as a group of the two, cancellations left out."""
    first, second = BackendUnavailable("a"), LeaseLost("job", "b")
    group = BaseExceptionGroup("g", [first, await _cancellation(), second])
    left = _settle(Outcome(), group)
    assert isinstance(left, BaseExceptionGroup)
    assert list(left.exceptions) == [first, second]
