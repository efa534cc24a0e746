"""KubeEmulator: the public face of the API server emulator."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import datetime

import yaml

from ._api import handle
from ._cluster import Cluster
from ._gc import collect_garbage
from ._http import Request, Response
from ._rbac import User, service_account_user
from ._resources import ResourceType
from ._server import KubeServer, serve
from ._status import JSON
from ._transport import KubeTransport
from ._watch import WatchStream

__all__ = ["KubeEmulator"]


class KubeEmulator(Cluster):
    """An in-memory kube-apiserver for namespaces, Leases, CRDs, custom resources and RBAC.

    Serve it in-process with :meth:`transport` (an ``httpx.AsyncBaseTransport`` that also
    carries the backends' unary request seam: no sockets, works under virtual time) or on a
    loopback port with :meth:`serve` (HTTPS with a fresh CA, or plain HTTP). Every path runs
    the same request handler, so they behave identically. Its state (:attr:`store`,
    :attr:`faults`, :attr:`requests`, ...) is that of :class:`~._cluster.Cluster`.

    Args:
        namespaces: namespaces that exist from the start.
        require_auth: if true, a request without a bearer token is 401; if false (default),
            it acts as a cluster admin. Registered tokens are always checked either way.
        history: at most this many events are kept for watches to resume from (None, the
            default: no count limit, only ``compaction_interval`` decides).
        bookmark_interval: seconds between BOOKMARK events on watches that allow them (the
            watch cache's one minute); one also comes 2 s before ``timeoutSeconds`` ends.
        compaction_interval: seconds between history compactions (etcd's compactor, every
            5 minutes by default as ``--etcd-compaction-interval``): a watch or a continued
            list from a resourceVersion older than the previous compaction is 410 Expired.
            None never compacts by time.
        watch_expired_status: answer a too-old watch with HTTP 410 instead of an in-stream
            ERROR event (the watch cache's behaviour, the default).
        wall_clock: the clock for creationTimestamp (UTC ``datetime``); defaults to the system
            clock. Nothing in the emulator *decides* by it.
        crd_establish_delay: seconds between a CRD's creation and its ``Established``
            condition; until then its resources answer ``404 page not found`` (0, the default:
            at once, as the second write after the create).
        coordinated_leader_election: the ``CoordinatedLeaderElection`` feature gate. Off (the
            default, as on every release up to 1.35) a Lease's ``strategy`` and
            ``preferredHolder`` are dropped silently on create and update; on, they are kept
            and validated.
        fresh_wait: seconds a list from the watch cache with a ``resourceVersion`` the server
            has not reached waits for it before 504 "Too large resource version" (the
            apiserver's 3 s); tests set a short one.
    """

    def __init__(
        self,
        *,
        namespaces: Iterable[str] = ("default",),
        require_auth: bool = False,
        history: int | None = None,
        bookmark_interval: float = 60.0,
        compaction_interval: float | None = 300.0,
        watch_expired_status: bool = False,
        wall_clock: Callable[[], datetime] | None = None,
        crd_establish_delay: float = 0.0,
        coordinated_leader_election: bool = False,
        fresh_wait: float = 3.0,
    ) -> None:
        super().__init__(
            fresh_wait=fresh_wait,
            require_auth=require_auth,
            history=history,
            bookmark_interval=bookmark_interval,
            watch_expired_status=watch_expired_status,
            wall_clock=wall_clock,
            crd_establish_delay=crd_establish_delay,
            coordinated_leader_election=coordinated_leader_election,
            compaction_interval=compaction_interval,
        )
        for name in namespaces:
            self.create_namespace(name)

    # --- types -----------------------------------------------------------------------------

    def _type_for_kind(self, api_version: str, kind: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        for rt in self.types.values():
            if (rt.group, rt.version, rt.kind) == (group, version, kind):
                return rt
        raise ValueError(f"no resource type for apiVersion {api_version!r} kind {kind!r}")

    # --- objects ---------------------------------------------------------------------------

    def create_namespace(self, name: str) -> None:
        """Create a namespace if it does not exist."""
        rt = self.types[("", "v1", "namespaces")]
        if self.store.find(rt, "", name) is None:
            self.store.create(rt, "", {"metadata": {"name": name}})

    def apply(self, manifest: str | JSON | Iterable[JSON]) -> list[JSON]:
        """Create or replace the objects of a manifest (YAML text, one object or a list).

        This is the administrator's path: no authentication, no faults. Applying a
        CustomResourceDefinition starts serving its resource; applying ``lease.yml`` enables
        ``akka.io/v1`` leases and its Role and RoleBinding.
        """
        if isinstance(manifest, str):
            docs: list[JSON] = [d for d in yaml.safe_load_all(manifest) if d]
        elif isinstance(manifest, dict):
            docs = [manifest]
        else:
            docs = list(manifest)
        applied = []
        for doc in docs:
            rt = self._type_for_kind(doc.get("apiVersion", ""), doc.get("kind", ""))
            meta = doc.get("metadata") or {}
            namespace = (meta.get("namespace") or "default") if rt.namespaced else ""
            if rt.namespaced:
                self.create_namespace(namespace)
            existing = self.store.find(rt, namespace, meta.get("name", ""))
            body = copy.deepcopy(doc)
            if existing is None:
                obj = self.store.create(rt, namespace, body)
            else:
                body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                obj = self.store.update(rt, namespace, meta["name"], body)[1]
            if rt.plural == "customresourcedefinitions":
                self.crd_changed(obj, deleted=False)
            applied.append(obj)
        return applied

    def get(self, api_version: str, plural: str, name: str, namespace: str = "") -> JSON | None:
        """The stored object (a copy), or None: for assertions in tests."""
        rt = self.resource_type(api_version, plural)
        if rt is None:
            return None
        obj = self.store.find(rt, namespace if rt.namespaced else "", name)
        return None if obj is None else self.store.present(rt, obj)

    def delete(self, api_version: str, plural: str, name: str, namespace: str = "") -> bool:
        """Delete an object as an administrator would (watchers see DELETED); False if absent.

        This is "someone deleted the lease behind the holder's back" in tests.
        """
        rt = self.resource_type(api_version, plural)
        scope = namespace if rt is not None and rt.namespaced else ""
        if rt is None or self.store.find(rt, scope, name) is None:
            return False
        self.store.delete(rt, scope, name, {})
        collect_garbage(self)
        return True

    def get_lease(self, name: str, namespace: str = "default") -> JSON | None:
        """The ``coordination.k8s.io/v1`` Lease ``namespace/name``, or None."""
        return self.get("coordination.k8s.io/v1", "leases", name, namespace)

    # --- authentication and RBAC -----------------------------------------------------------

    def add_token(
        self,
        token: str,
        user: str | User,
        groups: Iterable[str] = (),
        *,
        expires_at: float | None = None,
    ) -> User:
        """Accept ``token`` as ``user``; ``expires_at`` is on :func:`anyio.current_time`'s clock.

        ``groups=("system:masters",)`` makes the user a cluster admin.
        """
        if isinstance(user, str):
            user = User(user, (*groups, "system:authenticated"))
        if expires_at is not None:
            user = User(user.name, user.groups, expires_at)
        self._tokens[token] = user
        return user

    def add_service_account_token(
        self, token: str, namespace: str, name: str, *, expires_at: float | None = None
    ) -> User:
        """Accept ``token`` as ``system:serviceaccount:<namespace>:<name>``."""
        return self.add_token(token, service_account_user(namespace, name), expires_at=expires_at)

    def expire_token(self, token: str) -> None:
        """Make ``token`` answer 401 from now on (token rotation: add the new one first)."""
        user = self._tokens.get(token)
        if user is not None:
            self._tokens[token] = User(user.name, user.groups, float("-inf"))

    def grant(
        self,
        subject: str,
        verbs: Iterable[str],
        *,
        resources: Iterable[str] = ("leases",),
        api_groups: Iterable[str] = ("coordination.k8s.io",),
        namespace: str = "default",
        resource_names: Iterable[str] = (),
    ) -> None:
        """Create a Role and a RoleBinding giving user ``subject`` ``verbs`` on ``resources``.

        ``subject`` may be a service-account user name (``system:serviceaccount:ns:name``).
        """
        role_name = f"emulator-grant-{len(self.store.items(self.types[_ROLES], namespace))}"
        rule: JSON = {"apiGroups": list(api_groups), "resources": list(resources),
                      "verbs": list(verbs)}
        if resource_names:
            rule["resourceNames"] = list(resource_names)
        meta = {"name": role_name, "namespace": namespace}
        self.apply([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
             "rules": [rule]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
             "subjects": [{"kind": "User", "name": subject}],
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": role_name}},
        ])

    # --- watches ---------------------------------------------------------------------------

    def _targets(self, token: str | None) -> list[WatchStream]:
        return [w for w in self.open_watches() if token is None or w.token == token]

    def cut_watches(self, token: str | None = None, *, abrupt: bool = True) -> int:
        """Cut open watches (one client's, or all); returns how many were cut."""
        targets = self._targets(token)
        for watch in targets:
            watch.cut(abrupt=abrupt)
        return len(targets)

    def expire_watches(self, token: str | None = None) -> int:
        """Send a 410 Expired ERROR event to open watches and forget all history."""
        self.store.compact()
        targets = self._targets(token)
        for watch in targets:
            watch.expire(f"too old resource version: {watch.last_rv} ({self.store.compacted})")
        return len(targets)

    def compact(self) -> None:
        """Forget all history: watches from an earlier resourceVersion get 410 Expired."""
        self.store.compact()

    def send_bookmarks(self) -> None:
        """Send a BOOKMARK now on every open watch that allows them."""
        for watch in self._targets(None):
            watch.bookmark()

    # --- serving ---------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        """Answer one HTTP request (what the transports and the server do with each)."""
        return await handle(self, request)

    def transport(self) -> KubeTransport:
        """An httpx transport that serves requests in-process (no sockets, virtual-time safe).

        It also carries the unary request seam (:meth:`KubeTransport.unary`): a backend given
        it sends its unary requests through the production request code, in-process.
        """
        return KubeTransport(self)

    @asynccontextmanager
    async def serve(
        self, host: str = "127.0.0.1", port: int = 0, *, tls: bool = True
    ) -> AsyncIterator[KubeServer]:
        """Serve on ``host:port`` (0 picks a free port) until the block exits."""
        async with serve(self, host, port, tls=tls) as server:
            yield server


_ROLES = ("rbac.authorization.k8s.io", "v1", "roles")
