"""The emulated cluster's state: served types, objects, tokens, watches, faults and requests.

:class:`Cluster` is what the API handlers (:mod:`._api` and the modules it calls) read and
change, and nothing more: the administrator's conveniences (``apply``, ``grant``, cutting
watches) and the ways to serve it are in :class:`~._emulator.KubeEmulator`, which is a
:class:`Cluster`. So the layers run one way: store, validation and status at the bottom, this
state above them, the handlers above it, the transports and the server above those, and the
emulator on top.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime

import anyio

from ._compaction import Compactor
from ._crds import Establisher
from ._faults import Faults
from ._http import RecordedRequest
from ._rbac import ADMIN, User
from ._resources import (
    BUILTIN_TYPES,
    ResourceType,
    crd_established,
    crd_established_status,
    types_from_crd,
)
from ._status import JSON, ApiError
from ._store import Event, Store
from ._watch import WatchStream

__all__ = ["Cluster"]


class Cluster:
    """The state one emulated API server serves; see :class:`~._emulator.KubeEmulator`."""

    #: A request without a bearer token is 401 (else it acts as a cluster admin).
    require_auth: bool
    #: Seconds of quiet between BOOKMARK events on watches that allow them.
    bookmark_interval: float
    #: Answer a too-old watch with HTTP 410 instead of an in-stream ERROR event.
    watch_expired_status: bool
    #: The fault plan: ``fail``, ``delay``, ``drop_reply``, ``pause``, ``partition``.
    faults: Faults
    #: Objects, the revision counter and the event history.
    store: Store
    #: Compacts the history every ``compaction_interval`` seconds (etcd's compactor).
    compactor: Compactor
    #: Served types by (group, version, plural).
    types: dict[tuple[str, str, str], ResourceType]
    #: New CRDs waiting for their ``Established`` condition (see :mod:`._crds`).
    establisher: Establisher
    #: Open watches (closed ones are dropped as events arrive).
    watches: list[WatchStream]
    #: Seconds a read from the watch cache waits for a resourceVersion it has not reached yet
    #: (``waitUntilFreshAndBlock``'s 3 s), before 504 "Too large resource version".
    fresh_wait: float
    #: Every request received, oldest first, without its Authorization header: assert on
    #: User-Agent, Content-Type, ``?timeout=`` or how many requests a client made.
    requests: list[RecordedRequest]

    def __init__(
        self,
        *,
        require_auth: bool,
        history: int | None,
        bookmark_interval: float,
        watch_expired_status: bool,
        wall_clock: Callable[[], datetime] | None,
        crd_establish_delay: float = 0.0,
        coordinated_leader_election: bool = False,
        compaction_interval: float | None = 300.0,
        fresh_wait: float = 3.0,
    ) -> None:
        self.require_auth = require_auth
        self.fresh_wait = fresh_wait
        self._revision_waiters: list[anyio.Event] = []
        self.bookmark_interval = bookmark_interval
        self.watch_expired_status = watch_expired_status
        self.faults = Faults()
        self.store = Store(
            wall_clock or (lambda: datetime.now(UTC)),
            history if history is not None else sys.maxsize,
            self._dispatch,
        )
        self.compactor = Compactor(compaction_interval)
        self.store.coordinated_leader_election = coordinated_leader_election
        self.establisher = Establisher(crd_establish_delay)
        self.types = {}
        for rt in BUILTIN_TYPES:
            self._register(rt)
        self._tokens: dict[str, User] = {}
        self.watches = []
        self.requests = []

    # --- types -----------------------------------------------------------------------------

    def _register(self, rt: ResourceType) -> None:
        self.types[(rt.group, rt.version, rt.plural)] = rt

    def resource_type(self, api_version: str, plural: str) -> ResourceType | None:
        """The served type at ``api_version`` (``coordination.k8s.io/v1``, ``v1``) and plural."""
        group, _, version = api_version.rpartition("/")
        return self.types.get((group, version, plural))

    def crd_changed(self, crd: JSON, deleted: bool) -> None:
        """Keep served types in step with CustomResourceDefinitions (called by the handler)."""
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        for key in [k for k in self.types if k[0] == group and k[2] == plural]:
            del self.types[key]
        if deleted:
            self.store.drop_bucket((group, plural))
            self.establisher.forget(crd["metadata"]["name"])
            for watch in [w for w in self.watches if w.rt.storage_key == (group, plural)]:
                watch.cut(abrupt=False)
            return
        served = types_from_crd(crd)
        if not crd_established(crd):
            self.establisher.schedule(crd["metadata"]["name"])
            self.settle_crds()
            return
        for rt in served:
            self._register(rt)

    def settle_crds(self) -> None:
        """Establish the CRDs whose window is over (see :mod:`._crds`) and serve them."""
        try:
            now: float | None = anyio.current_time()
        except RuntimeError:  # no event loop: KubeEmulator.apply before anything runs
            now = None
        crds = self.types[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]
        for name in self.establisher.due(now):
            crd = self.store.find(crds, "", name)
            if crd is None or crd_established(crd):
                continue
            self.store.write_status(
                crds, "", name, crd_established_status(crd, self.store.timestamp())
            )
            for rt in types_from_crd(crd):
                self._register(rt)

    def namespace_deleted(self, namespace: str) -> None:
        """Delete everything in a deleted namespace (the namespace controller's job)."""
        owners = [rt for rt in self.types.values() if rt.namespaced and rt.stored_as is None]
        for rt in {rt.storage_key: rt for rt in owners}.values():
            for obj in self.store.items(rt, namespace):
                self.store.delete(rt, namespace, obj["metadata"]["name"], {})

    @property
    def resource_version(self) -> str:
        """The latest revision (what a list would report)."""
        return str(self.store.revision)

    # --- authentication and RBAC -----------------------------------------------------------

    def authenticate(self, token: str | None, now: float) -> User:
        """The user behind a request's token; :class:`ApiError` 401 if unknown or expired."""
        if token is None:
            if self.require_auth:
                raise ApiError.unauthorized()
            return ADMIN
        user = self._tokens.get(token)
        if user is None or (user.expires_at is not None and now >= user.expires_at):
            raise ApiError.unauthorized()
        return user

    def rbac_objects(self, plural: str, namespace: str) -> list[JSON]:
        """The stored RBAC objects of ``plural`` in ``namespace`` (what the RBAC check reads)."""
        return self.store.items(self.types[("rbac.authorization.k8s.io", "v1", plural)], namespace)

    # --- watches ---------------------------------------------------------------------------

    def open_watches(self) -> list[WatchStream]:
        """The watches still open (closed ones are dropped from :attr:`watches` now)."""
        self.watches = [w for w in self.watches if not w.closed]
        return self.watches

    async def wait_for_revision(self, wanted: int) -> bool:
        """Wait up to :attr:`fresh_wait` for the store to reach ``wanted``; False if it did not."""
        with anyio.move_on_after(self.fresh_wait):  # noqa: ASYNC912  a deadline on the wait; the loop awaits
            while self.store.revision < wanted:
                waiter = anyio.Event()
                self._revision_waiters.append(waiter)
                await waiter.wait()
        return self.store.revision >= wanted

    def _dispatch(self, event: Event) -> None:
        waiters, self._revision_waiters = self._revision_waiters, []
        for waiter in waiters:
            waiter.set()
        self.compactor.advance(self.store, event.rv - 1)
        # One serialization per commit, one private copy per watch it matches: encoding the
        # object again for each watch was a third of a busy emulator's time (four processes,
        # each watching a hundred leases renewed every 0.4 s).
        text: str | None = None
        for watch in self.open_watches():
            if watch.matches(event.storage_key, event.namespace, event.name):
                if text is None:
                    text = json.dumps(event.obj)
                watch.offer(event.type, json.loads(text), event.prev)
