"""A Kubernetes API server emulator for tests: Leases, CRDs, RBAC, watches and faults.

No real kube-apiserver runs in our tests, so :class:`KubeEmulator` reproduces the parts of its
behaviour a lease client depends on, checked against the Kubernetes sources (see
``docs/testing-kube-emulator.md`` for what was looked up and where the emulator is simpler)::

    emulator = KubeEmulator(namespaces=["jobs"])
    emulator.apply(Path("lease.yml").read_text())          # serve akka.io/v1 leases too
    async with httpx.AsyncClient(transport=emulator.transport(),
                                 base_url="https://kube.test") as client:
        ...                                                  # in-process, virtual-time safe
    async with emulator.serve() as server:                   # HTTPS on 127.0.0.1, fresh CA
        server.write_kubeconfig("kubeconfig", token="t")

Tokens and RBAC: :meth:`KubeEmulator.add_token`, :meth:`~KubeEmulator.add_service_account_token`,
:meth:`~KubeEmulator.expire_token`, :meth:`~KubeEmulator.grant`. Faults:
``emulator.faults`` (:class:`Faults`: ``fail``, ``delay``, ``drop_reply``, ``pause``,
``partition``) and :meth:`~KubeEmulator.cut_watches`, :meth:`~KubeEmulator.expire_watches`.
Every request is recorded, without credentials, in :attr:`KubeEmulator.requests`.
"""

from ... import _public
from ._cli import add_emulate_command as add_emulate_command
from ._emulator import KubeEmulator as KubeEmulator
from ._faults import Fault as Fault
from ._faults import Faults as Faults
from ._http import RecordedRequest as RecordedRequest
from ._rbac import User as User
from ._server import KubeServer as KubeServer
from ._transport import KubeTransport as KubeTransport

__all__ = [
    "Fault",
    "Faults",
    "KubeEmulator",
    "KubeServer",
    "KubeTransport",
    "RecordedRequest",
    "User",
    "add_emulate_command",
]

_public.publish(globals())
