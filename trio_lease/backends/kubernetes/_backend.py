"""KubernetesBackend: the lease SPI on Kubernetes objects, compare-and-swap on resourceVersion.

The protocol (docs/design.md §8):

- ``get``: a quorum GET (never ``resourceVersion=0``); 404 → ``None``.
- ``create``: POST; 409 AlreadyExists → :class:`ConflictError`.
- ``update``: one PUT of the last object we saw with the record written over it, carrying
  ``metadata.resourceVersion`` (the compare-and-swap) and ``metadata.uid`` (so a PUT to a lease
  that was deleted does not silently re-create it). The object cache (:mod:`._cache`) keeps the
  last object seen per lease, so a steady-state renewal is exactly one request. It GETs first
  only when it has no object at ``expected_version`` (after a conflict or an unknown outcome,
  which drop the cached object). A 201 to a PUT, or a uid precondition failure, means the lease
  is lost.
- Release is the core's ``update`` with holder ``""`` and lease duration 1 after a fresh ``get``:
  one PUT, which keeps ``leaseTransitions`` (the fencing token).

The apiserver skips a PUT that changes nothing and keeps the resourceVersion; the SPI wants a new
version for every write, so such a write carries a fresh ``trio-lease.io/write-nonce``
annotation. A 200 to a PUT whose object has another ``metadata.uid`` than the one we sent is a
protocol error, not a conflict: the server ignored our uid precondition, so whether our write
landed somewhere is unknown, and only a fresh read can tell.

Requests (their time bound, 429s, CA reload) and the checks of every reply are the API layer's
(:mod:`._api`); waiting for changes is :mod:`._watch` (one lease) and :mod:`._feed` (the
shared watch, by the label every object we create carries); ``check()`` is :mod:`._check`.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, Self

import anyio
import httpx

from ..._abc import LeaseBackend, LeaseRecord, WatchFeed
from ..._exceptions import BackendProtocolError, ConflictError, LeaseConfigError
from ..._wire import JsonObject, Malformed
from ...abc import Changes
from ._api import KubeApi
from ._check import CheckReport, missing_namespace, run_check
from ._client import encode_body
from ._cluster import ClusterConfig
from ._config import resolve_config
from ._errors import RequestContext, clean_text, error_from
from ._feed import KubernetesFeed
from ._listing import list_leases
from ._models import COORDINATION, LeaseKind, kind_named
from ._names import KEY_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL
from ._reading import resource_version
from ._section import backend_kwargs, check_section
from ._watch import watch_lease

if TYPE_CHECKING:
    from ..._settings import LeaseSettings

__all__ = ["KubernetesBackend", "check"]

NONCE_ANNOTATION = "trio-lease.io/write-nonce"


class KubernetesBackend(LeaseBackend):
    """Leases stored as ``coordination.k8s.io/v1`` Leases (default) or ``akka.io/v1`` objects.

    Args:
        config: the API server and credentials; default: :func:`resolve_config` of an empty
            section (explicit → kubeconfig → in-cluster → ~/.kube/config).
        lease_kind: ``"coordination.k8s.io/v1"`` (default) or ``"akka.io/v1"``.
        namespace: overrides the configuration's namespace.
        transport: an httpx transport (tests: the emulator's in-process transport).
        request_timeout: upper bound of one request; default: the settings'
            ``lease_operation_timeout`` once :meth:`validate_settings` saw them, else 5 s.
        map_names: map lease names that are not valid object names with
            :func:`lease_name_for` (default) instead of rejecting them.
        watch: wait for changes with a watch (default); False polls.
        watch_poll_interval: how often to poll when the watch is forbidden or failing.
        preferred_holder_grace: coordinated leader election: once ``spec.preferredHolder`` names
            another identity, renewals continue for this long (default 0 s), then stop, so
            the holder's deadline passes and its body is cancelled; a body that ends sooner
            releases at once. See :meth:`_refuse_renewal`.
    """

    supports_watch: bool = True
    #: The API server and credentials (with ``namespace`` applied).
    config: ClusterConfig
    #: The resource that stores leases.
    kind: LeaseKind
    namespace: str
    map_names: bool
    #: Whether :meth:`watch` uses a watch (else it polls).
    watch_enabled: bool
    watch_poll_interval: float
    preferred_holder_grace: float

    def __init__(
        self,
        config: ClusterConfig | None = None,
        *,
        lease_kind: str | LeaseKind = COORDINATION,
        namespace: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        request_timeout: float | None = None,
        map_names: bool = True,
        watch: bool = True,
        watch_poll_interval: float = 5.0,
        preferred_holder_grace: float = 0.0,
    ) -> None:
        if config is None:
            config = resolve_config({})
        if namespace is not None:
            config = dataclasses.replace(config, namespace=namespace)
        kind = kind_named(lease_kind) if isinstance(lease_kind, str) else lease_kind
        if kind is None:
            raise LeaseConfigError(
                f"unknown lease kind {lease_kind!r}: use 'coordination.k8s.io/v1' or 'akka.io/v1'"
            )
        if request_timeout is not None and request_timeout <= 0:
            raise LeaseConfigError("request-timeout must be positive")
        self.config = config
        self.kind = kind
        self.namespace = config.namespace
        self.map_names = map_names
        self.watch_enabled = watch
        self.watch_poll_interval = watch_poll_interval
        self.preferred_holder_grace = preferred_holder_grace
        self._api = KubeApi(
            config, kind, transport=transport, request_timeout=request_timeout,
            map_names=map_names,
        )
        #: When we first saw spec.preferredHolder name someone else, per object name.
        self._step_down_since: dict[str, float] = {}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> KubernetesBackend:
        """Build from a provider TOML section (kebab-case keys; see docs/kubernetes.md)."""
        check_section(config)
        return cls(resolve_config(config), **backend_kwargs(config))

    def __repr__(self) -> str:
        return (
            f"<KubernetesBackend {self.kind.name} {self.config.server_url} "
            f"namespace={self.namespace!r}>"
        )

    @property
    def store_key(self) -> Hashable:
        """The objects' place: server, namespace and kind (not the credentials used)."""
        transport = self._api.transport
        where = id(transport) if transport is not None else None
        return ("kubernetes", self.config.server_url, where, self.namespace, self.kind.name)

    def validate_settings(self, settings: LeaseSettings) -> None:
        """Reject lease durations the object cannot store; adopt T as the request bound."""
        L = settings.heartbeat_timeout
        if self.kind is COORDINATION and (L < 1 or not float(L).is_integer()):
            raise LeaseConfigError(
                f"heartbeat_timeout must be a whole number of seconds >= 1 for Kubernetes "
                f"Leases (spec.leaseDurationSeconds is an integer), got {L:g} s"
            )
        if self.kind is not COORDINATION:
            limit = L - 3 * settings.heartbeat_interval
            if settings.deadline > limit:
                raise LeaseConfigError(
                    "akka.io/v1 leases follow Akka's wall-clock expiry (spec.time + "
                    "heartbeat_timeout - 2 * heartbeat_interval, assuming clock skew below "
                    "heartbeat_interval), so holder_deadline must be <= heartbeat_timeout - 3 * "
                    f"heartbeat_interval: {settings.deadline:g} s > {limit:g} s; lower "
                    f"holder_deadline (to at most {limit:g} s) or heartbeat_interval, or raise "
                    "heartbeat_timeout"
                )
        if self._api.request_timeout is None:
            self._api.request_timeout = settings.lease_operation_timeout

    def object_name(self, key: str) -> str:
        """The Kubernetes object name that stores the lease ``key``."""
        return self._api.objects.object_name(key)

    # -- the SPI -------------------------------------------------------------------------------

    async def get(self, name: str) -> LeaseRecord | None:
        objects = self._api.objects
        object_name = objects.object_name(name)
        obj = await self._api.get_object(object_name)
        if obj is None:
            objects.forget(object_name)
            return None
        return objects.record(name, obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        api = self._api
        object_name = api.objects.object_name(record.name)
        annotations = {KEY_ANNOTATION: record.name} if object_name != record.name else {}
        labels = {MANAGED_BY_LABEL: MANAGED_BY}  # the shared watch selects by it (._feed)
        body = self.kind.new_object(object_name, record, annotations, labels)
        ctx = api.ctx("create", object_name)
        response = await api.request("POST", api.collection_path(), ctx, body=body)
        if response.status_code in (200, 201):
            return api.objects.record(record.name, api.read_reply(response, object_name, ctx))
        raise error_from(response, ctx)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        api, objects = self._api, self._api.objects
        object_name = objects.object_name(record.name)
        ctx = api.ctx("update", object_name)
        base = objects.get(object_name)
        if base is None or _version(base) != expected_version:  # not the kept object: GET it
            base = await self._base(record.name, object_name, expected_version, ctx)
        self._refuse_renewal(object_name, base, record, ctx)
        body = _put_body(self.kind.apply(base, record), base, object_name, expected_version)
        sent_uid = body["metadata"].get("uid")
        data = encode_body(body)
        del body  # a write waiting for a slot holds its bytes, not these dicts
        objects.writing += 1
        try:
            response = await api.request("PUT", api.item_path(object_name), ctx, body=data)
            if response.status_code == 200:
                stored = api.read_reply(response, object_name, ctx)
                if stored["metadata"]["uid"] != sent_uid:
                    raise BackendProtocolError(
                        f"the answer to update of {ctx.target} is another object (its "
                        "metadata.uid is not the one we sent, so the server ignored our "
                        "precondition); the outcome is unknown"
                    )
                written = objects.record(record.name, stored)
                if written.holder and not written.handover_to:
                    # Only a held state's event may be skipped undecoded (._feed): a release or
                    # a handover request is news to the waiters and holders of this process.
                    objects.wrote(object_name, written.version)
                return written
        except BaseException:
            objects.forget(object_name)  # unknown outcome: re-read before the next write
            raise
        finally:
            objects.writing -= 1
        objects.forget(object_name)
        if response.status_code == 201:
            raise ConflictError(
                f"{ctx.target} had been deleted: the update re-created it (201), so the lease "
                "we held is lost"
            )
        raise error_from(response, ctx)

    async def _base(
        self, key: str, object_name: str, expected_version: str, ctx: RequestContext
    ) -> JsonObject:
        """The object at ``expected_version`` to write over, read with a GET (the caller found
        none kept at that version)."""
        objects = self._api.objects
        base = await self._api.get_object(object_name)
        if base is None:
            objects.forget(object_name)
            raise ConflictError(f"{ctx.target} does not exist")
        objects.check_key(key, base)
        objects.keep(object_name, base)
        if _version(base) != expected_version:
            raise ConflictError(
                f"{ctx.target} is at resourceVersion {clean_text(_version(base), 40)!r}, "
                f"not {clean_text(expected_version, 40)!r}"
            )
        return base

    def _refuse_renewal(
        self, object_name: str, base: JsonObject, record: LeaseRecord, ctx: RequestContext
    ) -> None:
        """Coordinated leader election: stop renewing when another holder is preferred.

        A *renewal* (same holder, same fencing token) of a Lease whose ``spec.preferredHolder``
        names another identity is refused with :class:`ConflictError` once
        ``preferred_holder_grace`` has passed since we first saw the request. Nothing is
        written: the core re-reads, still finds itself holder, and its deadline runs out, so the
        guarded body is cancelled and the lease expires for the preferred holder, the way
        client-go steps down. A body that ends first releases normally (a release is not a
        renewal). Not releasing here keeps docs/design.md §4.4: release only after the body.
        """
        spec = base.get("spec")
        if not isinstance(spec, dict):
            spec = {}  # an unreadable record: nothing to step down for
        preferred = spec.get("preferredHolder")
        asked = isinstance(preferred, str) and preferred not in ("", record.holder)
        renewal = (
            asked
            and record.holder != ""
            and spec.get("holderIdentity") == record.holder
            and self.kind.to_record(record.name, base).fencing_token == record.fencing_token
        )
        if not renewal:
            if self._step_down_since:
                self._step_down_since.pop(object_name, None)
            return
        since = self._step_down_since.setdefault(object_name, anyio.current_time())
        if anyio.current_time() - since >= self.preferred_holder_grace:
            raise ConflictError(
                f"{ctx.target}: spec.preferredHolder asks for {preferred!r}, so this holder "
                "steps down (renewal refused; the lease expires for the preferred holder)"
            )

    async def names(self) -> list[str]:
        """Every lease in the namespace, other programs' Leases included (:mod:`._listing`)."""
        return [key for key, _ in await list_leases(self._api)]

    async def foreign_names(self) -> list[str]:
        """The Leases in the namespace this backend did not create (no managed-by label)."""
        return [key for key, foreign in await list_leases(self._api) if foreign]

    async def missing_namespace(self) -> str | None:
        """What is wrong if the namespace does not exist, None if it does or cannot be told
        (``trio-lease status``, ``handover`` and ``release`` refuse a missing one, as ``run``
        and ``check`` do); see :func:`._check.missing_namespace`. It writes nothing."""
        return await missing_namespace(self._api)

    async def check(self) -> CheckReport:
        """Report what would stop this backend from working, each with its fix."""
        return await run_check(self._api)

    def watch_feed(self) -> WatchFeed | None:
        """One label watch for every lease of this backend (:mod:`._feed`); None if polling.

        With ``watch=False`` the core follows each lease with :meth:`watch`, which polls.
        """
        if not self.watch_enabled:
            return None
        return KubernetesFeed(self._api, poll_interval=self.watch_poll_interval)

    def watch(self, name: str) -> Changes[LeaseRecord | None]:
        produce = functools.partial(
            watch_lease,
            self._api,
            name,
            watch=self.watch_enabled,
            poll_interval=self.watch_poll_interval,
        )
        return Changes(produce, what=f"KubernetesBackend.watch({name!r})")

    async def __aenter__(self) -> Self:
        return self

    async def aclose(self) -> None:
        await self._api.aclose()


async def check(backend: KubernetesBackend) -> CheckReport:
    """Check reachability, credentials, RBAC and the resource; see :mod:`._check`."""
    return await backend.check()


def _put_body(
    body: JsonObject, base: JsonObject, object_name: str, expected_version: str
) -> JsonObject:
    """``body`` (the record applied to ``base``) made a compare-and-swap PUT at that version."""
    metadata = body["metadata"]  # an object: read_object checked it
    if body == base:
        # The apiserver skips a write that changes nothing and keeps the resourceVersion;
        # the SPI needs a new version for every successful write.
        annotations = metadata.get("annotations")
        if not isinstance(annotations, dict):
            annotations = metadata["annotations"] = {}
        annotations[NONCE_ANNOTATION] = secrets.token_hex(4)
    metadata["resourceVersion"] = expected_version
    metadata["name"] = object_name
    # Not sent: the server keeps the live object's managedFields when an update carries none
    # (FieldManager.Update, k8s.io/apimachinery/pkg/util/managedfields/internal/
    # fieldmanager.go: "If the managed field is empty ... let's try the live object"; an empty
    # list would reset them). They are most of a Lease's bytes: a smaller body to encode, send
    # and parse per renewal.
    metadata.pop("managedFields", None)
    return body


def _version(obj: JsonObject) -> str:
    """The resourceVersion of an object read_object accepted (so it has one)."""
    try:
        return resource_version(obj)
    except Malformed:
        return ""
