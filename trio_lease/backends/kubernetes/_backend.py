"""KubernetesBackend: leases as Kubernetes objects, compare-and-swap on resourceVersion.

The protocol (KUBERNETES-API.md):

- ``get``: a quorum GET (never ``resourceVersion=0``); 404 → ``None``.
- ``create``: POST; 409 AlreadyExists → :class:`ConflictError`.
- ``update``: one PUT of the last object we saw with the record written over it, carrying
  ``metadata.resourceVersion`` (the compare-and-swap) and ``metadata.uid`` (so a PUT to a lease
  that was deleted does not silently re-create it). The backend keeps the last object it saw per
  lease, so a steady-state renewal is exactly one request. It GETs first only when it has no
  object at ``expected_version`` (after a conflict or an unknown outcome, which drop the cached
  object). A 201 to a PUT, or a uid precondition failure, means the lease is lost.
- Release is the core's ``update`` with holder ``""`` and lease duration 1 after a fresh ``get``:
  one PUT, which keeps ``leaseTransitions`` (the fencing token).

The apiserver skips a PUT that changes nothing and keeps the resourceVersion; the SPI wants a new
version for every write, so such a write carries a fresh ``trio-lease.io/write-nonce``
annotation. The request timeout is the settings' ``lease_operation_timeout`` (learnt in
:meth:`KubernetesBackend.validate_settings`) unless ``request_timeout`` is given.

Every request is bounded by min(request timeout, time left in the caller's cancel scope), and
that bound is sent to the server as ``?timeout=Ns``. A 429 is retried after ``Retry-After`` only
while that fits in the bound (a 429 is a request the server did not run, so retrying a write is
safe). Everything else is mapped by :mod:`._errors`.

Every reply body is parsed with :func:`trio_lease._wire.load_json` (size and nesting capped)
and read in one place, :meth:`KubernetesBackend.read_object` with the checks of
:mod:`._models`: the answer to a GET, POST or PUT must be a ``Lease`` of our kind and
apiVersion, named as asked, with a uid and a resourceVersion, or the call raises
:class:`BackendProtocolError` (for a write: an unknown outcome, which the core resolves by
reading again). A 200 to a PUT whose object has another ``metadata.uid`` than the one we sent is
a protocol error too, not a conflict: the server ignored our uid precondition, so whether our
write landed somewhere is unknown, and only a fresh read can tell.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import AsyncGenerator, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Self

import anyio
import httpx

from ..._abc import LeaseBackend, LeaseRecord
from ..._exceptions import BackendProtocolError, ConflictError, LeaseConfigError
from ..._http import Answer
from ..._wire import JsonObject, Malformed, load_json
from ._client import ClientLease, acquire_client
from ._config import ClusterConfig, resolve_config
from ._errors import (
    RequestContext,
    clean_text,
    error_for,
    error_from,
    map_transport_error,
    parse_status,
    tls_verification_failed,
)
from ._models import COORDINATION, LeaseKind, kind_named
from ._names import KEY_ANNOTATION, lease_name_for, validate_lease_name
from ._reading import KubernetesLeaseRecord, resource_version

if TYPE_CHECKING:
    from ..._settings import LeaseSettings
    from ._check import CheckReport

__all__ = ["KubernetesBackend"]

DEFAULT_REQUEST_TIMEOUT = 5.0
#: Shortest wait before retrying a 429, and the wait when it gives no usable Retry-After.
MIN_RETRY_WAIT = 0.05
DEFAULT_RETRY_WAIT = 1.0
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

    supports_watch = True

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
        self._transport = transport
        self._request_timeout = request_timeout
        self.preferred_holder_grace = preferred_holder_grace
        #: When we first saw spec.preferredHolder name someone else, per object name.
        self._step_down_since: dict[str, float] = {}
        self._client_lease: ClientLease | None = None
        self._closed = False
        #: The last object seen per object name: resourceVersion, uid and unmodelled fields.
        self._objects: dict[str, JsonObject] = {}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> KubernetesBackend:
        """Build from a provider TOML section (kebab-case keys; see docs/kubernetes.md)."""
        from ._section import backend_kwargs, check_section

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
        transport = id(self._transport) if self._transport is not None else None
        return ("kubernetes", self.config.server_url, transport, self.namespace, self.kind.name)

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
                    f"heartbeat_interval: {settings.deadline:g} s > {limit:g} s"
                )
        if self._request_timeout is None:
            self._request_timeout = settings.lease_operation_timeout

    # -- names ---------------------------------------------------------------------------------

    def object_name(self, key: str) -> str:
        """The Kubernetes object name that stores the lease ``key``."""
        return lease_name_for(key) if self.map_names else validate_lease_name(key)

    def _check_key(self, key: str, obj: JsonObject) -> None:
        metadata = obj.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
        # Not a string, or no object at all: the record reads as unreadable (see _models).
        stored = annotations.get(KEY_ANNOTATION) if isinstance(annotations, dict) else None
        if isinstance(stored, str) and stored != key:
            raise LeaseConfigError(
                f"lease name collision: {key!r} maps to the object "
                f"{self.object_name(key)!r}, which stores the lease {clean_text(stored, 100)!r}; "
                "rename one"
            )

    def read_object(
        self, body: object, object_name: str, ctx: RequestContext, *, listed: bool = False
    ) -> JsonObject:
        """``body`` if it is our kind's object ``object_name``, else BackendProtocolError.

        The one place where an object from the server is accepted (replies to GET, POST and
        PUT here; LIST items and watch events in :mod:`._watch`, with ``listed``).
        """
        try:
            return self.kind.check_object(body, object_name, self.namespace, listed=listed)
        except Malformed as exc:
            raise BackendProtocolError(
                f"the answer to {ctx.verb} of {ctx.target} is not that {self.kind.kind} "
                f"({self.kind.api_version}): {exc}{_unknown(ctx)}"
            ) from None

    def _read(self, response: Answer, object_name: str, ctx: RequestContext) -> JsonObject:
        what = f"the answer to {ctx.verb} of {ctx.target}"
        return self.read_object(load_json(response.content, what), object_name, ctx)

    def _record(self, key: str, obj: JsonObject) -> KubernetesLeaseRecord:
        """The record in ``obj`` (checked by :meth:`read_object`); keeps it for the next PUT."""
        self._check_key(key, obj)
        # List items of built-in kinds come without these; a PUT needs them.
        obj.setdefault("apiVersion", self.kind.api_version)
        obj.setdefault("kind", self.kind.kind)
        self._objects[self.object_name(key)] = obj
        return self.kind.to_record(key, obj)

    # -- requests ------------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        if self._closed:
            raise RuntimeError("this KubernetesBackend is closed")
        if self._client_lease is None:
            self._client_lease = acquire_client(self.config, self._transport)
        return self._client_lease.client

    async def _replace_client(self) -> httpx.AsyncClient:
        """Drop our pooled client (TLS verification failed) and take a freshly built one."""
        old = self._client_lease
        if old is not None:
            old.evict()
            self._client_lease = None
            await old.release()
        return self._client()

    def _budget(self) -> tuple[float, float]:
        """(now, deadline): min(request timeout, the caller's effective deadline)."""
        now = anyio.current_time()
        own = self._request_timeout or DEFAULT_REQUEST_TIMEOUT
        return now, min(now + own, anyio.current_effective_deadline())

    async def request(
        self,
        method: str,
        path: str,
        ctx: RequestContext,
        *,
        body: JsonObject | None = None,
        params: dict[str, str] | None = None,
    ) -> Answer:
        """One request within the budget; 429s retried after Retry-After while it fits."""
        self._client()
        lease = self._client_lease
        assert lease is not None
        slots = lease.slots
        now, deadline = self._budget()
        reloaded_ca = False
        extensions = {}
        if self.config.tls_server_name:
            extensions["sni_hostname"] = self.config.tls_server_name
        while True:
            left = max(deadline - now, 0.0)  # -inf when the caller's scope is cancelled
            query = dict(params or {})
            query["timeout"] = f"{max(1, math.floor(left))}s"
            try:
                with anyio.fail_after(left):
                    await slots.acquire()  # renewals first; no checkpoint when one is free
                    try:
                        response = await lease.send(method, path, query, body, extensions)
                    finally:
                        slots.release()
            except (httpx.HTTPError, TimeoutError, OSError) as exc:
                reload = self.config.ca_file is not None and not reloaded_ca
                if reload and tls_verification_failed(exc):
                    # The CA file may have been rotated: a fresh client re-reads it. Nothing
                    # was sent (the handshake failed), so retrying is safe.
                    reloaded_ca = True
                    await self._replace_client()
                    lease = self._client_lease
                    assert lease is not None
                    slots = lease.slots
                    now = anyio.current_time()
                    continue
                raise map_transport_error(exc, ctx) from None
            if response.status_code != 429:
                return response
            status = parse_status(response)
            wait = _retry_wait(status.retry_after)
            now = anyio.current_time()
            if now + wait >= deadline:
                raise error_for(status, ctx)
            await anyio.sleep(wait)
            now = anyio.current_time()

    def _ctx(self, verb: str, name: str = "") -> RequestContext:
        return RequestContext(verb=verb, kind=self.kind, namespace=self.namespace, name=name)

    async def get_object(self, name: str) -> JsonObject | None:
        """GET the object ``name`` (a quorum read, checked); None if it does not exist."""
        ctx = self._ctx("get", name)
        response = await self.request("GET", self.kind.item_path(self.namespace, name), ctx)
        if response.status_code == 200:
            return self._read(response, name, ctx)
        if response.status_code == 404:
            status = parse_status(response)
            if status.missing_resource or status.missing_namespace:
                raise error_for(status, ctx)
            return None
        raise error_from(response, ctx)

    # -- the SPI -------------------------------------------------------------------------------

    async def get(self, name: str) -> LeaseRecord | None:
        object_name = self.object_name(name)
        obj = await self.get_object(object_name)
        if obj is None:
            self._objects.pop(object_name, None)
            return None
        return self._record(name, obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        object_name = self.object_name(record.name)
        annotations = {KEY_ANNOTATION: record.name} if object_name != record.name else {}
        body = self.kind.new_object(object_name, record, annotations)
        ctx = self._ctx("create", object_name)
        response = await self.request(
            "POST", self.kind.collection_path(self.namespace), ctx, body=body
        )
        if response.status_code in (200, 201):
            return self._record(record.name, self._read(response, object_name, ctx))
        raise error_from(response, ctx)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        object_name = self.object_name(record.name)
        ctx = self._ctx("update", object_name)
        base = self._objects.get(object_name)
        if base is None or _version(base) != expected_version:
            # No object at that version in hand: learn uid and version first.
            base = await self.get_object(object_name)
            if base is None:
                self._objects.pop(object_name, None)
                raise ConflictError(f"{ctx.target} does not exist")
            self._check_key(record.name, base)
            self._objects[object_name] = base
            if _version(base) != expected_version:
                raise ConflictError(
                    f"{ctx.target} is at resourceVersion {clean_text(_version(base), 40)!r}, "
                    f"not {clean_text(expected_version, 40)!r}"
                )
        self._refuse_renewal(object_name, base, record, ctx)
        body = self.kind.apply(base, record)
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
        sent_uid = metadata.get("uid")
        path = self.kind.item_path(self.namespace, object_name)
        try:
            response = await self.request("PUT", path, ctx, body=body)
            if response.status_code == 200:
                stored = self._read(response, object_name, ctx)
                if stored["metadata"]["uid"] != sent_uid:
                    raise BackendProtocolError(
                        f"the answer to update of {ctx.target} is another object (its "
                        "metadata.uid is not the one we sent, so the server ignored our "
                        "precondition); the outcome is unknown"
                    )
                return self._record(record.name, stored)
        except BaseException:
            self._objects.pop(object_name, None)  # unknown outcome: re-read before next write
            raise
        self._objects.pop(object_name, None)
        if response.status_code == 201:
            raise ConflictError(
                f"{ctx.target} had been deleted: the update re-created it (201), so the lease "
                "we held is lost"
            )
        raise error_from(response, ctx)

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
        renewal). Never writing a release here keeps DESIGN §4.4: release only after the body.
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

    async def check(self) -> CheckReport:
        """Report what would stop this backend from working, each with its fix."""
        from ._check import check

        return await check(self)

    def watch(self, name: str) -> AsyncGenerator[LeaseRecord | None]:
        from ._watch import watch_lease

        return watch_lease(self, name)

    async def __aenter__(self) -> Self:
        return self

    async def aclose(self) -> None:
        self._closed = True
        self._objects.clear()
        lease, self._client_lease = self._client_lease, None
        if lease is not None:
            await lease.release()


def _version(obj: JsonObject) -> str:
    """The resourceVersion of an object read_object accepted (so it has one)."""
    try:
        return resource_version(obj)
    except Malformed:
        return ""


def _unknown(ctx: RequestContext) -> str:
    return "; the outcome is unknown" if ctx.verb in ("create", "update") else ""


def _retry_wait(retry_after: float | None) -> float:
    """How long to wait before retrying a 429: Retry-After, at least MIN_RETRY_WAIT.

    ``retry_after`` is finite or None (parse_status sees to it); this is the last guard, so a
    NaN or infinity can never reach a sleep. The caller still refuses any wait that would end
    past the request bound.
    """
    if retry_after is None or not math.isfinite(retry_after):
        return DEFAULT_RETRY_WAIT
    return max(MIN_RETRY_WAIT, retry_after)
