"""Kubernetes Events (``events.k8s.io/v1``) when a lease is acquired, released or lost; opt-in.

:class:`KubernetesEvents` is a :class:`trio_lease.LeaseObserver`: each ``acquired``,
``released`` and ``lost`` call builds one Event and only puts it into a bounded queue (observers
must not await; when the queue is full the oldest Event is dropped and counted in
:attr:`KubernetesEvents.dropped`). A task it runs while entered as an async context manager
POSTs them through the backend's API layer (:class:`._api.KubeApi`: the same client, bounds,
credentials and error mapping as the lease requests). A failed send (403 without the RBAC rule,
an unreachable server, a 422) is logged at INFO and counted in :attr:`KubernetesEvents.failed`,
never raised into the lease. On exit, what is queued is sent for at most ``flush_timeout``
seconds.

Each Event mirrors client-go's leader election events (``reason`` ``LeaderElection``, "became
leader" / "stopped leading"), in the ``events.k8s.io/v1`` shape:

=============  ==========  ============  ================================================
step           ``type``    ``reason``    ``note``
=============  ==========  ============  ================================================
acquired       Normal      Acquired      ``<identity> became leader (fencing token N)``
released       Normal      Released      ``<identity> stopped leading: released ...``
lost           Warning     Lost          ``<identity> stopped leading: lost (<cause>) ...``
=============  ==========  ============  ================================================

``action`` is ``LeaderElection``; ``regarding`` is the object that stores the lease (its kind,
apiVersion, name and namespace); ``reportingController`` / ``reportingInstance`` say who wrote
it. The note carries the holder identity and fencing token, never a credential.

The observer cannot tell which backend a lease uses, so register it for the leases of this
backend (``Lease(..., observers=[events])`` or ``LeaseProvider(config, observers=[events])``);
registered process-wide, it reports every lease as an object of this backend.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import time
from datetime import UTC, datetime
from typing import Final, Protocol, Self

import anyio

from ..._exceptions import LeaseConfigError, LeaseError
from ..._observer import LeaseInfo, LeaseObserver
from ..._wire import JsonObject
from ._api import KubeApi
from ._errors import RequestContext, parse_status
from ._identity import default_owner
from ._models import LeaseKind

__all__ = ["EVENTS", "KubernetesEvents"]

logger = logging.getLogger("trio_lease.kubernetes.events")

#: The resource Events are written to (RBAC: ``create`` on ``events`` in ``events.k8s.io``).
EVENTS: Final = LeaseKind(
    name="events.k8s.io/v1",
    group="events.k8s.io",
    version="v1",
    plural="events",
    kind="Event",
    verbs=("create",),
)
#: Limits of pkg/apis/core/validation/events.go.
_INSTANCE_LIMIT: Final = 128
_NOTE_LIMIT: Final = 1024
_NAME_LIMIT: Final = 253
#: A qualified name (apimachinery IsQualifiedName): an optional DNS subdomain prefix and "/",
#: then at most 63 characters.
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


class KubernetesBackend(Protocol):
    """What Events need of a :class:`~trio_lease.backends.kubernetes.KubernetesBackend`."""

    kind: LeaseKind
    namespace: str
    _api: KubeApi

    def object_name(self, key: str) -> str: ...


class KubernetesEvents(LeaseObserver):
    """Writes an ``events.k8s.io/v1`` Event per acquire, release and loss; see the module doc.

    Args:
        backend: the backend whose leases it reports (its namespace, kind and API client).
        reporting_controller: ``reportingController``, a qualified name (``trio-lease``).
        reporting_instance: ``reportingInstance`` (at most 128 characters); default:
            ``POD_NAME``, else the host name.
        queue_size: Events kept while the sender is busy; the oldest is dropped beyond it.
        flush_timeout: on exit, how long queued Events may still be sent.
    """

    def __init__(
        self,
        backend: KubernetesBackend,
        *,
        reporting_controller: str = "trio-lease",
        reporting_instance: str | None = None,
        queue_size: int = 100,
        flush_timeout: float = 5.0,
    ) -> None:
        if not _QUALIFIED.match(reporting_controller) or len(reporting_controller) > 317:
            raise LeaseConfigError(
                f"reporting_controller must be a qualified name such as 'trio-lease' or "
                f"'example.com/my-app', got {reporting_controller!r}"
            )
        instance = reporting_instance or default_owner()[:_INSTANCE_LIMIT]
        if len(instance) > _INSTANCE_LIMIT:
            raise LeaseConfigError(
                f"reporting_instance can have at most {_INSTANCE_LIMIT} characters"
            )
        if queue_size < 1:
            raise LeaseConfigError("queue_size must be at least 1")
        self.backend = backend
        self.reporting_controller = reporting_controller
        self.reporting_instance = instance
        self.flush_timeout = flush_timeout
        #: Events sent (the server answered 201), dropped (queue full) and failed to send.
        self.sent: int = 0
        self.dropped: int = 0
        self.failed: int = 0
        self._queue: collections.deque[JsonObject] = collections.deque(maxlen=queue_size)
        self._wake: anyio.Event | None = None
        self._closing = False
        self._last_stamp = 0
        self._stack: contextlib.AsyncExitStack | None = None

    def __repr__(self) -> str:
        return f"<KubernetesEvents {self.backend!r} controller={self.reporting_controller!r}>"

    # -- the observer hooks: build and queue, never await ---------------------------------------

    def acquired(
        self, lease: LeaseInfo, *, fencing_token: int, waited: float, valid_for: float
    ) -> None:
        note = f"{lease.identity} became leader (fencing token {fencing_token})"
        self._queue_event(lease, "Normal", "Acquired", note)

    def released(self, lease: LeaseInfo, *, fencing_token: int, held: float, written: bool) -> None:
        how = "released" if written else "stopped renewing (the lease expires)"
        note = (
            f"{lease.identity} stopped leading: {how} after {held:.1f} s "
            f"(fencing token {fencing_token})"
        )
        self._queue_event(lease, "Normal", "Released", note)

    def lost(self, lease: LeaseInfo, *, fencing_token: int, cause: str) -> None:
        note = f"{lease.identity} stopped leading: lost ({cause}) (fencing token {fencing_token})"
        self._queue_event(lease, "Warning", "Lost", note)

    def _queue_event(self, lease: LeaseInfo, type_: str, reason: str, note: str) -> None:
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
            logger.info("lease %r: Event queue full, the oldest Event was dropped", lease.name)
        self._queue.append(self.event_body(lease, type_, reason, note))
        if self._wake is not None:
            self._wake.set()

    def event_body(self, lease: LeaseInfo, type_: str, reason: str, note: str) -> JsonObject:
        """The Event for ``lease`` (``type_`` Normal or Warning), as it is POSTed."""
        backend = self.backend
        object_name = backend.object_name(lease.name)
        now = datetime.now(UTC)
        regarding = {
            "kind": backend.kind.kind,
            "namespace": backend.namespace,
            "name": object_name,
            "apiVersion": backend.kind.api_version,
        }
        cached = backend._api.objects.get(object_name) or {}
        uid = (cached.get("metadata") or {}).get("uid")
        if isinstance(uid, str) and uid:
            regarding["uid"] = uid  # what kubectl describe matches Events by
        return {
            "apiVersion": EVENTS.api_version,
            "kind": EVENTS.kind,
            "metadata": {
                "name": self._event_name(object_name),
                "namespace": backend.namespace,
            },
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": "LeaderElection",
            "reason": reason,
            "regarding": regarding,
            "note": note[:_NOTE_LIMIT],
            "type": type_,
        }

    def _event_name(self, object_name: str) -> str:
        """``<object>.<hex nanoseconds>`` as client-go names Events, unique in this process."""
        stamp = max(time.time_ns(), self._last_stamp + 1)
        self._last_stamp = stamp
        suffix = f".{stamp:x}"
        base = object_name[: _NAME_LIMIT - len(suffix)].rstrip("-.")
        return base + suffix

    # -- the sender -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError("this KubernetesEvents is already running")
        stack = contextlib.AsyncExitStack()
        group = await stack.enter_async_context(anyio.create_task_group())
        self._closing = False
        self._wake = anyio.Event()
        self._done = anyio.Event()
        group.start_soon(self._send_queued)
        self._stack, self._group = stack, group
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        assert stack is not None
        self._closing = True
        assert self._wake is not None
        self._wake.set()
        try:
            with anyio.move_on_after(self.flush_timeout):
                await self._done.wait()  # noqa: ASYNC102  a best-effort flush: bounded; a cancel cuts it
        finally:
            self._group.cancel_scope.cancel()
            self._wake = None
            await stack.aclose()  # not shielded: exits its task group, cancelled above

    async def _send_queued(self) -> None:
        try:
            while True:
                while self._queue:
                    await self._send(self._queue.popleft())
                if self._closing:
                    return
                self._wake = anyio.Event()
                await self._wake.wait()
        finally:
            self._done.set()

    async def _send(self, body: JsonObject) -> None:
        api = self.backend._api
        path = EVENTS.collection_path(api.namespace)
        ctx = RequestContext("create", EVENTS, api.namespace)
        try:
            response = await api.request("POST", path, ctx, body=body)
        except (LeaseError, RuntimeError) as exc:
            self.failed += 1
            logger.info("Event not sent to namespace %r: %s", api.namespace, exc)
            return
        if response.status_code in (200, 201):
            self.sent += 1
            return
        self.failed += 1
        status = parse_status(response)
        hint = ""
        if status.code == 403:
            hint = (
                " (grant create on events in API group events.k8s.io: the Role in lease.yml "
                "has the rule)"
            )
        logger.info(
            "Event not sent to namespace %r: %d %s %s%s",
            api.namespace,
            status.code,
            status.reason,
            status.message,
            hint,
        )
