"""Backend SPI calls against hostile servers: the volume of generated replies goes here.

Each test runs eight workers (each its own backend object, so its own connection pool) making
``get``, ``create``, ``update`` and ``watch`` calls on fresh lease names until the fake has
sent :data:`QUOTA` hostile replies; each call is judged by :mod:`tests.hostile._checks`.
Both paths into the backends are exercised: the real socket on 127.0.0.1 (the production lean
HTTP/1.1 client, and httpx for watches) and the injected httpx transport.
"""

from __future__ import annotations

import random
from functools import partial

import anyio
import pytest

from trio_lease.backends.kubernetes._models import AKKA, COORDINATION

from ._checks import Tally
from ._drive import Target, spi_worker
from ._etcd import EtcdFake
from ._kube import KubeFake
from ._serve import serving, settle

pytestmark = pytest.mark.anyio

#: Hostile replies each test generates (two loops x two paths: four tests per backend).
QUOTA = 320
#: The backends' request bound (request_timeout) in these tests, seconds.
BOUND = 0.5
WORKERS = 8


def _enough(tally: Tally, backend: str) -> bool:
    return tally.hostile_replies(backend) >= QUOTA


def _judge(fake: KubeFake | EtcdFake, tally: Tally, backend: str, path: str) -> None:
    """After a run of ``backend``'s SPI over ``path``: the fake's invariants hold, it sent at
    least QUOTA hostile replies, and every call ended typed or correct."""
    settle(fake, tally)
    count = tally.hostile_replies(backend)
    print(f"\n{backend}/{path}: {count} hostile replies\n{tally.report()}")
    assert count >= QUOTA, f"only {count} hostile replies (seed {tally.seed})"
    tally.assert_clean(f"{backend} SPI over the {path}")


@pytest.mark.parametrize("path", ["socket", "transport"])
async def test_kubernetes_spi_calls_under_hostile_replies(
    path: str, tally: Tally, rng: random.Random
) -> None:
    """Kubernetes SPI calls (both lease kinds) end typed or correct, in time, without spinning."""
    fake = KubeFake(rng, tally, hostility=0.6, bound=BOUND)
    async with serving(fake, path, tally) as (url, transport):
        targets = [Target(fake, COORDINATION, url, transport), Target(fake, AKKA, url, transport)]
        async with anyio.create_task_group() as tg:
            for worker in range(WORKERS):
                tg.start_soon(
                    partial(spi_worker, bound=BOUND, enough=partial(_enough, tally, "kubernetes")),
                    targets[worker % 2], tally, random.Random(f"{tally.seed}/{path}/{worker}"),
                    worker,
                )
    _judge(fake, tally, "kubernetes", path)


@pytest.mark.parametrize("path", ["socket", "transport"])
async def test_etcd_spi_calls_under_hostile_replies(
    path: str, tally: Tally, rng: random.Random
) -> None:
    """etcd SPI calls (some authenticated) end typed or correct, in time, without spinning."""
    fake = EtcdFake(rng, tally, hostility=0.6, bound=BOUND)
    async with serving(fake, path, tally) as (url, transport):
        target = Target(fake, None, url, transport)
        async with anyio.create_task_group() as tg:
            for worker in range(WORKERS):
                tg.start_soon(
                    partial(spi_worker, bound=BOUND, enough=partial(_enough, tally, "etcd"),
                            auth=worker >= WORKERS - 2),
                    target, tally, random.Random(f"{tally.seed}/{path}/{worker}"), worker,
                )
    _judge(fake, tally, "etcd", path)
