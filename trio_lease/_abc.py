"""The backend SPI: a compare-and-swap store of small lease records.

A backend stores :class:`LeaseRecord` values atomically and nothing more. It never decides
whether a lease is expired, who may take it, or what the fencing token is: the core does all of
that (expiry is judged on the contender's own monotonic clock, so the timestamps a backend
stores are for humans only).

To write a backend, subclass :class:`LeaseBackend` and implement:

``get(name)``
    Return the latest committed record, or ``None`` if there is none. Must be a linearizable
    (quorum) read: never serve a cached, possibly stale, record.
``create(record)``
    Store ``record`` if no record of that name exists, and return it with the new ``version``
    filled in (the ``version`` you were given is meaningless). Raise :class:`ConflictError` if
    a record already exists.
``update(record, expected_version)``
    Replace the record only if its current version equals ``expected_version``; return the
    stored record with a new version. Raise :class:`ConflictError` if the version moved on or
    the record no longer exists. Every successful write must produce a version never used before
    for that name (versions are compared for equality only, never ordered).
``watch(name)`` (optional; set ``supports_watch = True``)
    An async context manager handing out a receive stream: first the current record (or
    ``None``), then each later state as it changes. It may coalesce changes and may deliver a
    state twice, but must eventually deliver the latest state after every change. Build it with
    :class:`~trio_lease.abc.Changes` from an async function that awaits ``emit(state)``:
    ``return Changes(functools.partial(self._follow, name))``; the function runs in a task the
    context owns, so its own timers and task groups never wrap the caller's loop body. (An
    async generator ``watch``, the form of older versions, still works: the core runs it in a
    task of its own, and a ``watch`` returning anything else is a BackendProtocolError.)
``watch_feed()`` (optional, with ``supports_watch``)
    Return a :class:`~trio_lease.abc.WatchFeed` that follows many leases with one stream (a
    watch by label, a prefix watch, one poller). The core runs one per backend object and
    hands its changes to every waiter (woken at once) and every holder (which learns of a
    takeover or a deletion without waiting for its next renewal). The default returns None:
    the core then follows each watched lease with its own ``watch(name)``.
``aclose()``
    Release connections, threads, files.
``from_config(config)`` (optional classmethod)
    Build the backend from the keys of a :class:`~trio_lease.LeaseProvider` section that are
    not the provider's or the settings' (kebab-case, as written in TOML). The default passes
    them to the constructor as snake_case keyword arguments and names any key it does not take;
    override it to parse, check or rename keys (a list given as one string, a password file).
``names()`` (optional)
    Return the names of every lease in the store (``trio-lease status`` without names lists
    them). The default raises :class:`NotImplementedError`: the store cannot list its leases.
    ``foreign_names()`` (optional) says which of them another program wrote.

Replies are input: every value read from the store (an HTTP reply, a row, a file) is checked
where it enters the backend, and becomes either a well-formed record or a typed error:

- a reply that is not a record at all (not JSON, the wrong kind of object, a missing or
  unreadable version) raises :class:`BackendProtocolError` naming the operation, the object and
  the field; for a write that is an unknown outcome, which the core resolves by reading again;
- a record whose version can be read but whose content cannot (a holder that is not a string,
  a duration out of range, someone else's data under our key) is returned with
  :attr:`LeaseRecord.unreadable` saying what and where. The core treats it as held by an
  unknown holder: contenders wait until the same version has stood for L, and never take it
  over at all when its fencing token could not be read (``fencing_token`` -1), since the next
  token would not be known to be greater. Unknown is never free and never held.

Nothing else may escape from a backend call: no ``KeyError``, ``TypeError``, ``ValueError``,
``RecursionError`` or ``OverflowError`` from a reply (the core maps any that do to
:class:`BackendProtocolError`, as a last line of defence).

Errors: raise :class:`BackendUnavailable` for anything transient (the outcome of a write is then
*unknown*: the core re-reads to learn the truth), :class:`BackendAuthError` for credentials or
permissions, :class:`LeaseConfigError` for configuration the user must fix. Do not retry writes
inside the backend: the core bounds every call by its own deadline (it wraps each call in a
cancel scope), so backends must be cancellation-safe: a cancelled write is an unknown outcome,
exactly like a timeout.

Prove an implementation with :func:`trio_lease.testing.check_backend`.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Hashable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

import anyio

from ._exceptions import LeaseConfigError

if TYPE_CHECKING:
    from ._settings import LeaseSettings

__all__ = ["LeaseBackend", "LeaseRecord", "Publish", "WatchFeed", "Watched"]


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One lease as a backend stores it.

    Attributes:
        name: the lease name (the key).
        holder: the holder's identity; ``""`` means free.
        lease_duration: seconds the holder promises to stay valid without renewing (the holder's
            heartbeat timeout). Contenders wait at least this long, on their own clock, after
            the last change they observed before taking over.
        fencing_token: strictly increases with every new grant; kept across renewals and release.
        acquired_at: wall-clock time of the current grant (UTC, informational only).
        renewed_at: wall-clock time of the last renewal (UTC, informational only).
        version: opaque version string set by the backend on every write (a resourceVersion, a
            row counter, a mod_revision). Compared for equality only.
        handover_to: the identity of a contender that asked the holder to hand the lease over
            (``Lease.request_handover()``); kept by renewals and by the release, cleared by the
            next grant. A free record naming someone else here is reserved for them: other
            contenders wait until it has stood unchanged for L, as for a silent holder.
        unreadable: empty for a well-formed record; otherwise what could not be read and where
            (for example ``"spec.holderIdentity: expected a string, got a list"``). Such a
            record is held by an unknown holder (never free, never ours); ``holder`` is then
            ``""`` and ``fencing_token`` the stored token, or -1 if that was unreadable too.
    """

    name: str
    holder: str = ""
    lease_duration: float = 0.0
    fencing_token: int = 0
    acquired_at: datetime | None = None
    renewed_at: datetime | None = None
    version: str = ""
    unreadable: str = ""
    handover_to: str = ""

    @property
    def is_free(self) -> bool:
        """True when the record is readable and no owner is recorded as holder."""
        return self.holder == "" and not self.unreadable


class LeaseBackend(abc.ABC):
    """A compare-and-swap store of :class:`LeaseRecord`; see the module docstring."""

    #: Set to True when :meth:`watch` is implemented.
    supports_watch: bool = False

    @abc.abstractmethod
    async def get(self, name: str) -> LeaseRecord | None:
        """Return the latest committed record named ``name``, or ``None``."""

    @abc.abstractmethod
    async def create(self, record: LeaseRecord) -> LeaseRecord:
        """Store a new record; :class:`ConflictError` if one of that name exists."""

    @abc.abstractmethod
    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        """Replace the record if at ``expected_version``, else raise :class:`ConflictError`."""

    def watch(self, name: str) -> AbstractAsyncContextManager[AsyncIterator[LeaseRecord | None]]:
        """The current record, then each change (optional; see ``supports_watch``).

        ``async with backend.watch(name) as records: async for record in records: ...``
        """
        raise NotImplementedError(f"{type(self).__name__} does not support watch")

    def watch_feed(self) -> WatchFeed | None:
        """One feed for every watched lease of this backend (optional; see the module docstring).

        Called once per backend object; the feed keeps its resume point between runs.
        """
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release the backend's resources."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """Build a backend from a provider section's backend keys (kebab-case).

        The default gives them to the constructor as snake_case keyword arguments
        (``busy-timeout`` becomes ``busy_timeout``) and raises :class:`LeaseConfigError` naming
        the keys it does not take (unless it takes ``**kwargs``). Override it to parse or check
        keys yourself; raise :class:`LeaseConfigError` (or ``ValueError``/``TypeError``) for a
        bad section. The provider adds the file and section to the message.
        """
        kwargs = {key.replace("-", "_"): value for key, value in config.items()}
        parameters = inspect.signature(cls).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            unknown = sorted(k for k in kwargs if k not in parameters)
            if unknown:
                raise LeaseConfigError(
                    f"unknown key(s) for {cls.__name__}: "
                    f"{', '.join(k.replace('_', '-') for k in unknown)}"
                )
        return cls(**kwargs)

    async def names(self) -> list[str]:
        """The names of every lease in the store (optional; for ``trio-lease status``).

        The default raises :class:`NotImplementedError`: this store cannot list its leases.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot list its leases")

    async def foreign_names(self) -> list[str]:
        """Of :meth:`names`, those of records another program wrote (optional; for
        ``trio-lease status``, which marks them), such as a Kubernetes Lease of a controller's
        leader election in the same namespace. The default: none.
        """
        return []

    @property
    def store_key(self) -> Hashable:
        """Identifies the store, so that two backend objects on one store share holdings.

        The core keeps one holding per (store, lease name, owner identity) in a process; that
        is how reentrancy works across :class:`Lease` objects. Override this when two backend
        instances can point at the same store (the SQLite backend returns its file path).
        """
        return self

    def validate_settings(self, settings: LeaseSettings) -> None:  # noqa: B027 - optional hook
        """Reject settings this backend cannot store (raise :class:`LeaseConfigError`)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):  # closes when cancelled
            await self.aclose()


#: ``publish(name, state)``: a watched lease changed; ``state`` is its record now (None: gone).
Publish = Callable[[str, LeaseRecord | None], None]


class Watched:
    """The names of the leases a feed follows now; grows and shrinks while the feed runs."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._changed: anyio.Event | None = None
        #: Bumped on every change of the set (a feed can tell whether it moved since it looked).
        self.generation: int = 0

    def __contains__(self, name: object) -> bool:
        return name in self._counts

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._counts))

    def __len__(self) -> int:
        return len(self._counts)

    def __repr__(self) -> str:
        return f"<Watched {len(self._counts)} lease(s)>"

    async def wait_changed(self) -> None:
        """Return after the next change of the set."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def add(self, name: str) -> None:
        """One more subscriber of ``name`` (the hub's; feeds only read)."""
        count = self._counts.get(name, 0)
        self._counts[name] = count + 1
        if count == 0:
            self._bump()

    def discard(self, name: str) -> None:
        """One subscriber of ``name`` fewer (the hub's; feeds only read)."""
        count = self._counts.get(name, 0)
        if count <= 1:
            if self._counts.pop(name, None) is not None:
                self._bump()
        else:
            self._counts[name] = count - 1

    def _bump(self) -> None:
        self.generation += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None


class WatchFeed(abc.ABC):
    """One stream of changes for many leases of one backend; see the module docstring."""

    @abc.abstractmethod
    async def run(self, watched: Watched, publish: Publish) -> None:
        """Publish every change of the watched leases until cancelled."""
