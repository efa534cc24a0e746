"""Every lease kind at once behind hostile fakes: Kubernetes (coordination.k8s.io/v1 and
akka.io/v1) and etcd, for the core-level tests that drive them side by side."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from trio_lease import LeaseSettings
from trio_lease.backends.kubernetes._models import AKKA, COORDINATION

from ._checks import Tally
from ._drive import Target
from ._etcd import EtcdFake
from ._kube import KubeFake
from ._serve import serving
from ._settings import AKKA_SETTINGS, SETTINGS


def strict_fakes(rng: random.Random, tally: Tally, hostility: float) -> tuple[KubeFake, EtcdFake]:
    """A Kubernetes and an etcd fake answering within T that check fencing and tell no
    plausible lie (the store's truth is checked at every grant) and send no huge reply."""
    bound = SETTINGS.lease_operation_timeout
    kube = KubeFake(rng, tally, hostility=hostility, bound=bound)
    etcd = EtcdFake(rng, tally, hostility=hostility, bound=bound)
    for fake in (kube, etcd):
        fake.plausible = False
        fake.check_fencing = True
        fake.excluded = {"huge"}
    return kube, etcd


@asynccontextmanager
async def every_kind(
    kube: KubeFake, etcd: EtcdFake, path: str, tally: Tally
) -> AsyncIterator[list[tuple[Target, LeaseSettings]]]:
    """``kube`` and ``etcd`` served over ``path``: a target per lease kind (coordination, akka,
    etcd), each with the settings its kind takes."""
    async with (
        serving(kube, path, tally) as (kube_url, kube_transport),
        serving(etcd, path, tally) as (etcd_url, etcd_transport),
    ):
        yield [
            (Target(kube, COORDINATION, kube_url, kube_transport), SETTINGS),
            (Target(kube, AKKA, kube_url, kube_transport), AKKA_SETTINGS),
            (Target(etcd, None, etcd_url, etcd_transport), SETTINGS),
        ]
