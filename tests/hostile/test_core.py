"""The core API against hostile servers: every grant is in the store, every call ends typed.

``try_held()``, ``held(timeout=...)`` and ``acquire()``/``release()`` in
``async with lease.host():`` run against the Kubernetes fake (both lease kinds) and the etcd fake
at once, with R = 0.5 s so that renewals during each 1.25 s body meet hostile replies too. One
lease per kind is in a
"conflict storm": every write answered with a conflict while reads show it free, which a
client must answer with paced retries, not a loop. Plausible lies (an absent
holder or token, which the protocol reads as "free" or "0") are not generated here: the
store's truth is checked at every grant, and such a lie is indistinguishable from the truth.
"""

from __future__ import annotations

import random

import anyio
import pytest

from ._checks import Tally
from ._drive import core_worker
from ._every_kind import every_kind, strict_fakes
from ._serve import settle

pytestmark = pytest.mark.anyio

#: Leases per backend kind, each used for CALLS calls one after the other.
LEASES = 3
CALLS = 3


@pytest.mark.parametrize("path", ["socket", "transport"])
async def test_core_calls_under_hostile_replies(
    path: str, tally: Tally, rng: random.Random
) -> None:
    """Grants the store shows, increasing tokens, typed errors, in time, no spinning."""
    kube, etcd = strict_fakes(rng, tally, hostility=0.3)
    async with every_kind(kube, etcd, path, tally) as targets, anyio.create_task_group() as tg:
        for index, (target, settings) in enumerate(targets):
            for lease in range(LEASES):
                name = f"core-{index}-{lease}"
                if lease == 0:  # every write conflicts while reads show the lease free
                    target.fake.storm.add((target.label, name))
                stream = random.Random(f"{tally.seed}/{path}/{name}")
                tg.start_soon(core_worker, target, tally, stream, name, settings, CALLS)
    settle(kube, tally)
    settle(etcd, tally)
    print(f"\ncore/{path}:\n{tally.report()}")
    tally.assert_clean(f"core API over the {path}")
