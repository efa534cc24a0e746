"""Run a job on exactly one replica of a Deployment at a time (see deployment.yaml).

Every replica runs this program. Each one waits for the lease; the holder runs the job with its
fencing token, renewing in the background; if it loses the lease, the job is cancelled and the
replica waits again. A rolling update or ``kubectl delete pod`` releases the lease at once
(SIGTERM cancels the job, then the lease is released), so another replica takes over without
waiting for the lease to expire.

Configuration comes from the pod: in-cluster credentials, ``POD_NAME`` / ``POD_NAMESPACE``
from the downward API, and optionally ``LEASE_NAME``, ``LEASE_KIND`` (``akka.io/v1`` to share
with Akka), ``HEARTBEAT_TIMEOUT`` (whole seconds). Run ``python k8s_leader.py --check`` to
verify RBAC and credentials first (exit status 1 on a problem).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import anyio

from trio_lease import Grant, Lease, LeaseLost, LeaseSettings
from trio_lease.backends.kubernetes import KubernetesBackend, default_owner

log = logging.getLogger("k8s_leader")


def settings_from_env() -> LeaseSettings:
    timeout = int(os.environ.get("HEARTBEAT_TIMEOUT", "15"))
    return LeaseSettings(
        heartbeat_timeout=timeout,
        heartbeat_interval=timeout / 7.5,
        lease_operation_timeout=timeout / 15,
    )


async def do_work(grant: Grant, rounds: int | None = None) -> None:
    """The guarded job: pass the fencing token to everything you write."""
    done = 0
    while rounds is None or done < rounds:
        log.info("working as %s with fencing token %d", grant.owner, grant.fencing_token)
        await anyio.sleep(1)
        done += 1


async def lead(
    backend: KubernetesBackend,
    name: str,
    owner: str,
    settings: LeaseSettings,
    *,
    terms: int | None = None,
    rounds: int | None = None,
    work: Callable[[Grant, int | None], Awaitable[None]] = do_work,
) -> None:
    """Hold ``name`` and work, ``terms`` times (forever by default), re-competing after a loss."""
    lease = Lease(name, owner, backend, settings)
    served = 0
    while terms is None or served < terms:
        try:
            async with lease.held() as grant:
                log.info("became leader of %r (token %d)", name, grant.fencing_token)
                await work(grant, rounds)
        except LeaseLost as exc:
            log.warning("%s; competing again", exc)
        served += 1


async def main() -> int:
    backend_config = {"lease-kind": os.environ.get("LEASE_KIND", "coordination.k8s.io/v1")}
    async with KubernetesBackend.from_config(backend_config) as backend:
        if "--check" in sys.argv:
            report = await backend.check()
            print(report)
            return 0 if report.ok else 1
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:

                async def stop_on_signal() -> None:
                    async for _ in signals:
                        tg.cancel_scope.cancel()  # cancels the job; held() then releases

                tg.start_soon(stop_on_signal)
                name = os.environ.get("LEASE_NAME", "k8s-leader-example")
                await lead(backend, name, default_owner(), settings_from_env())
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(anyio.run(main))
