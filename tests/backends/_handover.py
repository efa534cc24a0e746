"""Cooperative handover played out between two leases, for each store's handover tests."""

from __future__ import annotations

import anyio

from trio_lease import Lease


async def hand_over(holder: Lease, requester: Lease) -> tuple[list[str], float]:
    """``holder`` ("a") takes the lease; ``requester`` ("b") asks for it and then holds it.

    Returns what happened, in order ("a:<token>" when a held it, "a:asked" when a's grant said
    b asked, "b:<token>" when b held it), and the time from b's request to b's grant."""
    order: list[str] = []
    held = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def hold() -> None:
            async with holder.held() as grant:
                order.append(f"a:{grant.fencing_token}")
                held.set()
                await grant.handover_requested.wait()
                assert grant.handover_to == requester.identity
                order.append("a:asked")

        tg.start_soon(hold)
        await held.wait()
        start = anyio.current_time()
        assert await requester.request_handover()
        async with requester.held() as grant:
            order.append(f"b:{grant.fencing_token}")
        handed_over_in = anyio.current_time() - start
    return order, handed_over_in
