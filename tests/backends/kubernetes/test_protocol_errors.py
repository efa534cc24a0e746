"""Error paths on the emulator: RBAC, missing CRD, 401 and token rotation, 429, 5xx, resets."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from pathlib import Path

import anyio
import httpx
import pytest

from trio_lease import (
    BackendAuthError,
    BackendUnavailable,
    ConflictError,
    Lease,
    LeaseConfigError,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease.testing.kube import KubeEmulator

from ._helpers import CountingTransport, emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
SA = "system:serviceaccount:default:app"


async def test_forbidden_names_the_missing_verb_and_how_to_grant_it() -> None:
    """A 403 on update is a BackendAuthError naming update, leases, the group, ns and lease.yml."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.grant(SA, ["get", "create"])
    async with make_backend(emulator.transport(), token="tok") as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        with pytest.raises(BackendAuthError) as info:
            await backend.update(record, record.version)
    text = str(info.value)
    for part in ("'update'", "'leases'", "'coordination.k8s.io'", "'default'", "lease.yml"):
        assert part in text
    assert "tok" not in text.replace("token", "")


async def test_missing_crd_says_to_apply_the_shipped_manifests() -> None:
    """Without the CRD, akka.io/v1 operations raise LeaseConfigError naming the command that
    applies the shipped CRD (``trio-lease manifests ... | kubectl apply -f -``)."""
    emulator = KubeEmulator()
    async with make_backend(emulator.transport(), kind="akka.io/v1") as backend:
        with pytest.raises(
            LeaseConfigError,
            match=r"trio-lease manifests --lease-kind akka\.io/v1 \| kubectl apply -f -",
        ):
            await backend.get("job")
        with pytest.raises(LeaseConfigError, match=r"trio-lease manifests"):
            await backend.create(LeaseRecord("job", holder="me"))


async def test_missing_namespace_on_create_is_a_config_error() -> None:
    """Creating in a namespace that does not exist names the namespace."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport(), namespace="nope") as backend:
        with pytest.raises(LeaseConfigError, match="'nope'"):
            await backend.create(LeaseRecord("job", holder="me", lease_duration=15))


async def test_bad_token_is_an_auth_error() -> None:
    """An unknown token gives BackendAuthError (401 after one refresh)."""
    emulator = emulator_with_crd(require_auth=True)
    async with make_backend(emulator.transport(), token="wrong-secret") as backend:
        with pytest.raises(BackendAuthError, match="credentials") as info:
            await backend.get("job")
    assert "wrong-secret" not in str(info.value)


async def test_token_rotation_mid_hold_never_fails_a_renewal(tmp_path: Path) -> None:
    """The token expires while the file is rewritten: every renewal still succeeds."""
    emulator = emulator_with_crd(require_auth=True)
    token_file = tmp_path / "token"
    emulator.add_service_account_token("t0", "default", "app")
    emulator.grant(SA, ["get", "create", "update"])
    token_file.write_text("t0")
    async with make_backend(emulator.transport(), token_file=token_file) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        for i in range(1, 6):
            await anyio.sleep(20)
            emulator.add_service_account_token(f"t{i}", "default", "app")
            token_file.write_text(f"t{i}")
            emulator.expire_token(f"t{i - 1}")  # expires before our cache refreshes
            record = await backend.update(record, record.version)
        assert record.holder == "me"


async def test_429_is_retried_after_retry_after_within_the_budget() -> None:
    """A plain-text 429 is retried after Retry-After when that fits in the request bound."""
    emulator = emulator_with_crd()
    emulator.faults.fail(429, verbs={"get"}, times=2, retry_after=1)
    transport = CountingTransport(emulator.transport())
    async with make_backend(transport, request_timeout=5) as backend:
        start = anyio.current_time()
        assert await backend.get("job") is None
        assert anyio.current_time() - start >= 2
    assert transport.methods() == ["GET", "GET", "GET"]


async def test_429_past_the_budget_is_unavailable() -> None:
    """A Retry-After beyond the request bound is BackendUnavailable, not a long sleep."""
    emulator = emulator_with_crd()
    emulator.faults.fail(429, verbs={"get"}, retry_after=10, status_shaped=True)
    async with make_backend(emulator.transport(), request_timeout=5) as backend:
        start = anyio.current_time()
        with pytest.raises(BackendUnavailable):
            await backend.get("job")
        assert anyio.current_time() - start < 5


class TimedTransport(CountingTransport):
    """Also records the (virtual) time of every request."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        super().__init__(inner)
        self.times: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.times.append(anyio.current_time())
        return await super().handle_async_request(request)


@pytest.mark.parametrize("status_shaped", [False, True])
async def test_429_retry_after_zero_backs_off_and_stops_after_ten_retries(
    status_shaped: bool,
) -> None:
    """429 with Retry-After: 0: waits doubling from 0.05 s (to 1 s), 10 retries, then the error."""
    emulator = emulator_with_crd()
    emulator.faults.fail(429, verbs={"get"}, retry_after=0, status_shaped=status_shaped)
    transport = TimedTransport(emulator.transport())
    async with make_backend(transport, request_timeout=60) as backend:
        with pytest.raises(BackendUnavailable, match="429"):
            await backend.get("job")
    gaps = [later - earlier for earlier, later in itertools.pairwise(transport.times)]
    assert len(transport.times) == 1 + 10  # client-go's maxRetries (rest/request.go)
    assert gaps == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1, 1, 1, 1, 1])


async def test_429_retries_stop_at_the_request_bound_too() -> None:
    """Within a 5 s bound the growing waits leave room for 8 retries, not 10."""
    emulator = emulator_with_crd()
    emulator.faults.fail(429, verbs={"get"}, retry_after=0)
    transport = TimedTransport(emulator.transport())
    async with make_backend(transport, request_timeout=5) as backend:
        with pytest.raises(BackendUnavailable):
            await backend.get("job")
        assert transport.times[-1] - transport.times[0] < 5
    assert len(transport.times) == 1 + 8  # retries at 0.05, 0.15, … 3.55, 4.55 s; 5.55 > 5


@pytest.mark.parametrize("status", [500, 503, 504])
async def test_unknown_outcome_then_reread_before_the_next_write(status: int) -> None:
    """A 5xx after commit is BackendUnavailable; the next update GETs before it PUTs."""
    emulator = emulator_with_crd()
    transport = CountingTransport(emulator.transport())
    async with make_backend(transport) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        emulator.faults.fail(status, verbs={"update"}, times=1, after_commit=True)
        with pytest.raises(BackendUnavailable, match="unknown"):
            await backend.update(dataclasses.replace(record, fencing_token=1), record.version)
        transport.requests.clear()
        with pytest.raises(ConflictError):  # the write did land: our version is stale
            await backend.update(record, record.version)
        assert transport.methods() == ["GET"]


async def test_dropped_reply_is_unavailable() -> None:
    """A reset after the write committed is BackendUnavailable (outcome unknown)."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport()) as backend:
        record = await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
        emulator.faults.drop_reply(verbs={"update"}, times=1)
        with pytest.raises(BackendUnavailable, match="unknown"):
            await backend.update(record, record.version)


async def test_hung_request_is_bounded_by_the_request_timeout() -> None:
    """A paused server makes the request fail after the request timeout, not hang."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport(), request_timeout=2) as backend:
        emulator.faults.partition()
        start = anyio.current_time()
        with pytest.raises(BackendUnavailable, match="timed out"):
            await backend.get("job")
        assert anyio.current_time() - start == pytest.approx(2, abs=0.01)
        emulator.faults.heal()


async def test_caller_deadline_shortens_the_server_timeout() -> None:
    """Inside a cancel scope with 2.5 s left, the request asks the server for timeout=2s."""
    transport = CountingTransport(emulator_with_crd().transport())
    async with make_backend(transport, request_timeout=5) as backend:
        with anyio.move_on_after(2.5):
            await backend.get("job")
    assert transport.requests[0][2]["timeout"] == "2s"


async def test_token_rotation_mid_hold_never_loses_the_lease(tmp_path: Path) -> None:
    """held() for 5 minutes while the token expires and the file is rewritten every 20 s."""
    emulator = emulator_with_crd(require_auth=True)
    token_file = tmp_path / "token"
    emulator.add_service_account_token("t0", "default", "app")
    emulator.grant(SA, ["get", "create", "update", "watch", "list"])
    token_file.write_text("t0\n")
    settings = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5,
                             lease_operation_timeout=0.5)
    async with make_backend(emulator.transport(), token_file=token_file) as backend:
        lease = Lease("job", "me", backend, settings)
        async with lease.held() as grant:
            for i in range(1, 16):
                await anyio.sleep(20)
                assert lease.check_lease()
                emulator.add_service_account_token(f"t{i}", "default", "app")
                token_file.write_text(f"t{i}\n")
                emulator.expire_token(f"t{i - 1}")
            await anyio.sleep(20)
            assert grant.remaining() > 0
        lease_object = emulator.get_lease("job")
        assert lease_object is not None
        assert lease_object["spec"]["holderIdentity"] == ""  # released normally at the end


async def test_tokens_never_reach_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    """With every logger at DEBUG, a 401, a retry and normal requests log no token."""
    caplog.set_level(logging.DEBUG)
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_token("good-secret-token", "u", groups=("system:masters",))
    async with make_backend(emulator.transport(), token="good-secret-token") as backend:
        await backend.create(LeaseRecord("job", holder="me", lease_duration=15))
    async with make_backend(emulator.transport(), token="bad-secret-token") as backend:
        with pytest.raises(BackendAuthError):
            await backend.get("job")
    assert caplog.records  # something was logged (httpx logs each request)
    assert "secret-token" not in caplog.text
