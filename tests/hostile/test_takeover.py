"""No takeover of a live lease before L, whatever the replies say.

Each lease starts held by another owner who never renews (so its version never changes). The
fake answers half the requests with hostile replies (no plausible lies: a well-formed "free" at
the true version cannot be told from the truth) and refuses, and records, every write that
would take the lease over before L has passed since the first reply that showed its version.
Contenders use ``try_held()`` in a loop, one ``held(timeout=...)``, and ``acquire()`` in a
loop, for 1.6 L; after L a takeover is legitimate, and its grant must be in the store.
"""

from __future__ import annotations

import random

import anyio
import pytest

from ._checks import Tally
from ._drive import takeover_contender
from ._every_kind import every_kind, strict_fakes
from ._serve import settle

pytestmark = pytest.mark.anyio


async def test_no_takeover_before_L_under_hostile_replies(tally: Tally, rng: random.Random) -> None:
    """A contender never writes a grant over a live record before L since it first saw it."""
    kube, etcd = strict_fakes(rng, tally, hostility=0.5)
    async with (
        every_kind(kube, etcd, "socket", tally) as targets,
        anyio.create_task_group() as tg,
    ):
        for index, (target, settings) in enumerate(targets):
            L = settings.heartbeat_timeout
            for mode in ("try_held", "held", "acquire"):
                name = f"live-{index}-{mode.replace('_', '')}"
                target.seed(name, "other_live0123456789", 5, int(L))
                target.protect(name, L)
                stream = random.Random(f"{tally.seed}/{name}")
                tg.start_soon(takeover_contender, target, tally, stream, name, settings,
                              mode, 1.6 * L)
    protected = [*kube.protected.values(), *etcd.protected.values()]
    unseen = [p.version for p in protected if p.first_sent is None]
    settle(kube, tally)
    settle(etcd, tally)
    print(f"\ntakeover:\n{tally.report()}")
    tally.assert_clean("no takeover before L")
    assert not unseen, f"no reply ever showed versions {unseen} (seed {tally.seed})"
