"""What a renewal write builds each time, made cheaply: its body, encoded by pydantic-core
(``_client._encode_json``), must read back, through the decoder every reply goes through, as
the very value that was encoded, for every value a body can hold (an object we read, with the
record written over it); its request context is kept per verb and object."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_lease import LeaseRecord
from trio_lease._wire import load_json
from trio_lease.backends.kubernetes import _api, _auth
from trio_lease.backends.kubernetes._client import _encode_json
from trio_lease.testing.kube import KubeEmulator

from ._helpers import make_backend

_LEASE_BODY: dict[str, Any] = {
    "kind": "Lease",
    "apiVersion": "coordination.k8s.io/v1",
    "metadata": {
        "name": "nightly-report",
        "namespace": "default",
        "uid": "6bff40d4-7368-44c8-a276-7c80b515764b",
        "resourceVersion": "1234",
        "labels": {"app.kubernetes.io/managed-by": "trio-lease"},
        "annotations": {
            "trio-lease.io/key": "nightly/report", "note": "caf\u00e9 \u2028 \U0001f600",
        },
    },
    "spec": {
        "holderIdentity": "worker-1",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-11-30T03:43:52.114833Z",
        "renewTime": "2026-11-30T03:43:52.227116Z",
        "leaseTransitions": 3,
        "strategy": None,
    },
}


def _stdlib(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_lease_body_is_the_bytes_the_standard_library_writes() -> None:
    assert _encode_json(_LEASE_BODY) == _stdlib(_LEASE_BODY)


def test_escapes_and_numbers_read_back_as_the_values_sent() -> None:
    body = {
        "controls": "\x00\x1f\"\\/\t\n",
        "unicode": "\u00e9\u2028\U0001f600",
        "numbers": [0, -1, 2**63, 10**23, -(10**23), 0.1, 1e-07, 1.5e300, -0.0],
        "flags": [True, False, None],
        "nested": {"a": [{"b": []}, {}]},
    }
    data = _encode_json(body)
    assert load_json(data, "the body") == body
    # Equal values; only a float's exponent is written differently (1e-7 against 1e-07).
    assert json.loads(data) == json.loads(_stdlib(body))


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**24) + 1, max_value=10**24 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # no lone surrogates (hypothesis leaves them out): a reply cannot carry one
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), _VALUES, max_size=6))
def test_any_body_a_reply_could_give_reads_back_as_itself(body: dict[str, Any]) -> None:
    assert load_json(_encode_json(body), "the body") == body


def test_a_request_context_is_kept_per_verb_and_object_and_the_kept_ones_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A holder's update context is built once (each renewal asks for it); at the bound the
    kept ones are dropped, so a process that touches many objects keeps no more than that."""
    api = make_backend(KubeEmulator().transport())._api
    update = api.ctx("update", "job")
    assert api.ctx("update", "job") is update
    assert api.ctx("get", "job") is not update
    assert (api.ctx("update", "other").verb, api.ctx("update", "other").name) == (
        "update", "other"
    )
    assert update.target == "leases.coordination.k8s.io 'job' in namespace 'default'"
    monkeypatch.setattr(_api, "_CONTEXTS_KEPT", 3)
    assert len(api._contexts) == 3
    api.ctx("create", "job")  # the fourth: the kept ones are dropped first
    assert len(api._contexts) == 1
    assert api.ctx("update", "job") is not update
    assert api.ctx("update", "job") == update


@pytest.mark.anyio
async def test_renewals_take_the_token_at_hand_without_the_auth_coroutine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once a token has been sent, each request takes it from ``KubeAuth.headers_now`` (no
    coroutine per request): the coroutine runs for the first request only, and every request
    carries the token."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("sekret", "u", groups=("system:masters",))
    calls = 0
    real = _auth.KubeAuth.headers

    async def counted(self: _auth.KubeAuth, *, refresh: bool = False) -> list[tuple[str, str]]:
        nonlocal calls
        calls += 1
        return await real(self, refresh=refresh)

    monkeypatch.setattr(_auth.KubeAuth, "headers", counted)
    async with make_backend(emulator.transport(), token="sekret") as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        for _ in range(5):
            record = await backend.update(record, record.version)
    assert calls == 1
    assert record.holder == "me"  # six requests, each let in by its token


@pytest.mark.anyio
async def test_an_update_is_encoded_before_it_waits_for_a_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A renewal hands its body to the request already encoded: one that waits for a slot
    holds bytes (untracked by the garbage collector), not the dicts of its body; and the
    server stores what it was sent."""
    handed: list[tuple[str, type]] = []
    real = _api.KubeApi.request

    async def spy(self: _api.KubeApi, method: str, path: str, ctx: Any, **kw: Any) -> Any:
        handed.append((method, type(kw.get("body"))))
        return await real(self, method, path, ctx, **kw)

    monkeypatch.setattr(_api.KubeApi, "request", spy)
    emulator = KubeEmulator()
    async with make_backend(emulator.transport()) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        renewed = await backend.update(
            LeaseRecord("job", holder="me", lease_duration=20, fencing_token=record.fencing_token),
            record.version,
        )
        assert (await backend.get("job")) == renewed
    assert ("PUT", bytes) in handed
    assert renewed.lease_duration == 20


def _awaiting(coro: Any) -> list[str]:
    """What ``coro`` awaits, link by link: each coroutine's name, then what the task waits on
    (a future, on asyncio)."""
    chain: list[str] = []
    link = coro
    while link is not None:
        code = getattr(link, "cr_code", None)
        chain.append(code.co_qualname if code is not None else type(link).__name__)
        link = getattr(link, "cr_await", None)
    return chain


@pytest.mark.anyio
async def test_a_renewal_waiting_for_a_slot_holds_one_coroutine_of_the_request(
    anyio_backend_name: str,
) -> None:
    """A renewal (its caller's scope bounds it) waiting for one of the client's slots awaits
    the slot's waiter from the request's own attempts: no coroutine of ``Slots.acquire``, none
    of ``KubeApi.request`` around the attempts, no scope of the request's own (what each of the
    dozens of renewals waiting at a tick of the grid holds is what sets off the garbage
    collector's young collections). Handed the slot, it completes."""
    import anyio

    from trio_lease._loops import current
    from trio_lease._slots import urgent

    emulator = KubeEmulator()
    async with make_backend(emulator.transport()) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        slots = backend._api._lease().slots
        taken = 0
        while slots.try_acquire():
            taken += 1
        renewed: list[LeaseRecord] = []
        with anyio.CancelScope() as scope:
            bound = current().write_bound(scope)
            # The caller's scope bounds the write within the request's own timeout.
            bound.set(anyio.current_time() + backend._api.timeout / 2)
            write = backend.update(record, record.version)

            async def renew() -> None:
                with urgent(anyio.current_time() + 30):
                    renewed.append(await write)

            async with anyio.create_task_group() as tg:
                tg.start_soon(renew)
                await anyio.wait_all_tasks_blocked()
                assert slots.waiting == 1
                chain = _awaiting(write)
                assert chain[:2] == ["KubernetesBackend.update", "KubeApi._attempts"]
                assert not any("acquire" in link or "request" in link for link in chain)
                if anyio_backend_name == "asyncio":
                    assert chain[2:] == ["FutureIter"]  # the waiter's future, awaited bare
                for _ in range(taken):
                    slots.release()
            bound.clear()
    assert renewed[0].version != record.version
