"""The exception tree of trio_lease.

Every error the library raises on purpose is a :class:`LeaseError`::

    LeaseError
    ├── LeaseLost              the lease ended while we believed we held it
    ├── LeaseBusy              another owner holds it (try_held)
    ├── AcquireTimeout         also a TimeoutError (held(timeout=...))
    ├── LeaseConfigError       also a ValueError: bad settings, bad TOML, bad names
    └── BackendError           the store misbehaved or refused
        ├── ConflictError      compare-and-swap lost: the record exists or moved on
        ├── BackendUnavailable transient; for a write, the outcome is unknown
        │   └── BackendProtocolError  the answer could not be read (not JSON, wrong shape,
        │                             a field of the wrong type or out of range)
        └── BackendAuthError   401/403: the message says how to fix the credentials or RBAC

Messages say what happened and what to do about it. They never carry secrets (tokens, keys,
passwords): backends build messages from names, verbs and status codes only.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AcquireTimeout",
    "BackendAuthError",
    "BackendError",
    "BackendProtocolError",
    "BackendUnavailable",
    "ConflictError",
    "LeaseBusy",
    "LeaseConfigError",
    "LeaseError",
    "LeaseLost",
]


class LeaseError(Exception):
    """Base class of every error raised by trio_lease."""


class LeaseLost(LeaseError):
    """The lease ended while this owner believed it held it.

    Raised by :meth:`Lease.held` after the guarded body was cancelled. ``cause`` says why:
    another owner took the record over, the record disappeared, or the holder's deadline passed
    without a confirmed renewal (the backend could not be reached in time).
    """

    def __init__(self, lease_name: str, cause: str) -> None:
        super().__init__(f"lease {lease_name!r} was lost: {cause}")
        self.lease_name = lease_name
        self.cause = cause


class LeaseBusy(LeaseError):
    """Another owner holds the lease (raised by :meth:`Lease.try_held`).

    ``holder`` is the holder's identity as stored in the record; ``expires_in`` is how long this
    contender will wait, on its own clock, before it may take over if the holder stays silent
    (``math.inf`` for a holder in this process: only its release frees the lease).
    """

    def __init__(self, lease_name: str, holder: str, expires_in: float) -> None:
        if expires_in == float("inf"):  # held in this process: it ends with a release only
            when = "it is held in this process and is free once that holder releases it"
        else:
            when = f"it may be taken over in {expires_in:.3f} s if the holder stops renewing"
        super().__init__(f"lease {lease_name!r} is held by {holder!r}; {when}")
        self.lease_name = lease_name
        self.holder = holder
        self.expires_in = expires_in


class AcquireTimeout(LeaseError, TimeoutError):
    """``held(timeout=...)`` gave up waiting for the lease.

    ``last_error`` is the backend error of the last attempt when the backend was still failing
    as the wait ended (``None`` when the wait ended because another owner held the lease).
    """

    def __init__(self, message: str, *, last_error: BackendError | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error


class LeaseConfigError(LeaseError, ValueError):
    """The settings, configuration file or arguments are invalid; the message names the fix.

    ``problems`` lists each rule a set of settings breaks, one sentence each (the message joins
    them), for a reader that shows one per line, as the ``trio-lease`` command does; it is empty
    for an error whose message is one sentence.
    """

    def __init__(self, *args: object, problems: Iterable[str] = ()) -> None:
        super().__init__(*args)
        #: Each rule that failed, in the order the message gives them; empty when not listed.
        self.problems: tuple[str, ...] = tuple(problems)


class BackendError(LeaseError):
    """The backend failed or refused an operation."""


class ConflictError(BackendError):
    """A compare-and-swap lost: the record already exists (create) or has moved on (update)."""


class BackendUnavailable(BackendError):
    """The backend could not be reached or answered with a transient error.

    For a write, the outcome is *unknown*: the write may have been applied. The core resolves
    that by reading the record again.
    """


class BackendProtocolError(BackendUnavailable):
    """The backend answered something that is not a valid reply.

    Raised where a reply enters a backend: a body that is not JSON, too large or too deeply
    nested, an object of the wrong kind or shape, a field of the wrong type or out of range.
    The message names the operation, the object and the field, never the body itself. For a
    write the outcome is unknown, exactly as for any :class:`BackendUnavailable`: the core
    re-reads to learn the truth, and contenders keep waiting (unknown is never free).
    """


class BackendAuthError(BackendError):
    """The backend rejected our credentials (401) or permissions (403).

    Not transient: retrying does not help. The message says which permission is missing and how
    to grant it, and never contains the credential itself.
    """


def own_copy(error: LeaseError) -> LeaseError:
    """A caller's own copy of ``error``, one error shared by several callers (a batch's): each
    raise then sets its own traceback. ``error`` itself if its type cannot be rebuilt from its
    args."""
    try:
        copied = type(error)(*error.args)
    except Exception:  # an error type that cannot be rebuilt from its args
        return error
    copied.__cause__ = error.__cause__
    copied.__suppress_context__ = error.__suppress_context__
    return copied
