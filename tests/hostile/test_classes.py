"""One named regression test per class of failure of a server that cannot be trusted.

(1) a live lease taken at once, (2) a grant the server does not show, (3) untyped exceptions,
(4) spinning, (5) an ExceptionGroup instead of our errors, (6) silent waits, (7) secrets in
messages. Each test scripts the one reply of its class in front of a truthful fake (the same
fakes as the generated suite, on the in-process transport and virtual time), except the
dead-port waits, which need a real socket and real time.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from tests.conftest import REAL_LOOPS
from trio_lease import (
    AcquireTimeout,
    BackendAuthError,
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    Lease,
    LeaseBackend,
    LeaseBusy,
    LeaseConfigError,
    LeaseError,
    LeaseProvider,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease._writing import MAX_CONFLICTS
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.kubernetes import (
    ClusterConfig,
    Credentials,
    KubernetesBackend,
    load_kubeconfig,
)
from trio_lease.backends.kubernetes._models import AKKA, COORDINATION, LeaseKind
from trio_lease.testing import KubeEmulator, virtual_time_backends
from trio_lease.testing.kube._status import status_body

from ._checks import Tally
from ._etcd import EtcdFake
from ._json import Bare, deep_text, dumps
from ._kube import LEASE_YML, KubeFake
from ._server import HostileServer, HostileTransport, Reply, Request
from ._settings import SETTINGS as REAL_SETTINGS

pytestmark = pytest.mark.anyio

#: Virtual time: L = 10 s, R = 2 s, T = 1 s.
SETTINGS = LeaseSettings(heartbeat_timeout=10, heartbeat_interval=2, lease_operation_timeout=1)
AKKA_SETTINGS = LeaseSettings(
    heartbeat_timeout=10, heartbeat_interval=2, lease_operation_timeout=1, holder_deadline=4
)
KINDS = {"coordination": COORDINATION, "akka": AKKA}
Rule = Callable[[Request], Reply | None]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Virtual time (this module scripts in-process replies; the dead-port tests override it)."""
    specs = dict(virtual_time_backends())
    name: str = request.param
    return name, specs[name]


class Scripted:
    """A truthful fake with ``rule`` answering first: every request is recorded."""

    def __init__(self, fake: KubeFake | EtcdFake, rule: Rule) -> None:
        self.fake = fake
        self.rule = rule
        self.requests: list[Request] = []
        self.limit = 500
        self.scope: anyio.CancelScope | None = None

    async def __call__(self, request: Request, *, socket: bool) -> Reply:
        self.requests.append(request)
        if len(self.requests) > self.limit and self.scope is not None:
            self.scope.cancel()  # a spinning client never lets virtual time move: stop it
        # In-process replies need not suspend: without this, a client looping over them would
        # never yield to the event loop, and no cancellation could reach it.
        await anyio.lowlevel.checkpoint()
        reply = self.rule(request)
        if reply is not None:
            return reply
        return await self.fake(request, socket=socket)

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method in ("PUT", "POST") and
                not r.path.endswith(("/range", "/authenticate", "/watch"))]


def _kube(rule: Rule, kind: LeaseKind = COORDINATION) -> tuple[KubeFake, Scripted,
                                                               KubernetesBackend]:
    fake = KubeFake(random.Random(1), Tally(0), hostility=0.0, bound=1.0)
    scripted = Scripted(fake, rule)
    backend = fake.backend(kind, url=None, transport=HostileTransport(scripted), token="t")
    return fake, scripted, backend


def _etcd(rule: Rule) -> tuple[EtcdFake, Scripted, EtcdBackend]:
    fake = EtcdFake(random.Random(1), Tally(0), hostility=0.0, bound=1.0)
    scripted = Scripted(fake, rule)
    return fake, scripted, fake.backend(url=None, transport=HostileTransport(scripted))


def _json(status: int, value: Any) -> Reply:
    return Reply(status, dumps(value), [("Content-Type", "application/json")])


def _is_get(request: Request) -> bool:
    return request.method == "GET" and "watch" not in request.query and \
        not request.path.endswith("/leases")


def _with(obj: dict[str, Any] | None, path: tuple[str, ...], value: Any) -> dict[str, Any]:
    assert obj is not None
    changed = copy.deepcopy(obj)
    target = changed
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = value
    return changed


def _settings(kind: LeaseKind) -> LeaseSettings:
    return SETTINGS if kind is COORDINATION else AKKA_SETTINGS


# -- (1) a live lease taken at once ------------------------------------------------------------


@pytest.mark.parametrize("kind_name", ["coordination", "akka"])
async def test_holder_identity_of_the_wrong_type_is_an_unknown_holder_not_free(
    kind_name: str,
) -> None:
    """holderIdentity (owner) ["someone"] on a live lease: LeaseBusy, and nothing written."""
    kind = KINDS[kind_name]
    holder_path = ("spec", "holderIdentity" if kind is COORDINATION else "owner")

    def rule(request: Request) -> Reply | None:
        if _is_get(request):
            return _json(200, _with(fake.emulator.get(kind.api_version, "leases", "job",
                                                      "default"), holder_path, ["someone"]))
        return None

    fake, scripted, backend = _kube(rule, kind)
    fake.seed(kind, "job", "someone", 3, 10)
    async with backend:
        record = await backend.get("job")
        assert record is not None and record.unreadable and not record.is_free
        lease = Lease("job", "me", backend, _settings(kind))
        with pytest.raises(LeaseBusy):
            async with lease.try_held():
                pytest.fail("a live lease was taken")
    assert scripted.writes() == []


@pytest.mark.parametrize("shape", ["status", "leaselist"])
async def test_a_200_carrying_a_status_or_a_leaselist_is_not_a_free_lease(shape: str) -> None:
    """A GET answered 200 with a Status or a LeaseList: a typed error, and nothing written."""
    def rule(request: Request) -> Reply | None:
        if not _is_get(request):
            return None
        if shape == "status":
            return _json(200, status_body(500, "InternalError", "etcdserver: request timed out"))
        obj = fake.emulator.get(COORDINATION.api_version, "leases", "job", "default")
        return _json(200, {"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
                           "metadata": {"resourceVersion": "99"}, "items": [obj]})

    fake, scripted, backend = _kube(rule)
    fake.seed(COORDINATION, "job", "someone", 3, 10)
    async with backend:
        with pytest.raises(BackendProtocolError):
            await backend.get("job")
        lease = Lease("job", "me", backend, SETTINGS)
        with pytest.raises(BackendUnavailable):
            async with lease.try_held():
                pytest.fail("a live lease was taken")
    assert scripted.writes() == []


async def test_etcd_holder_of_the_wrong_type_is_an_unknown_holder_not_free() -> None:
    """An etcd record whose holder is a list: unreadable, LeaseBusy, nothing written."""
    def rule(request: Request) -> Reply | None:
        if request.path.endswith("/kv/range"):
            answer = json.loads(fake_answer(fake))
            kv = answer["kvs"][0]
            value = json.loads(base64.b64decode(kv["value"]))
            value["holder"] = ["someone"]
            kv["value"] = base64.b64encode(json.dumps(value).encode()).decode()
            return _json(200, answer)
        return None

    fake, scripted, backend = _etcd(rule)
    fake.seed("job", "someone", 3, 10.0)
    async with backend:
        record = await backend.get("job")
        assert record is not None and record.unreadable and not record.is_free
        with pytest.raises(LeaseBusy):
            async with Lease("job", "me", backend, SETTINGS).try_held():
                pytest.fail("a live lease was taken")
    assert scripted.writes() == []


def fake_answer(fake: EtcdFake) -> bytes:
    return dumps(fake._range_answer(fake.key("job")))


# -- (2) a grant the server does not show ------------------------------------------------------


def _lie(kind: str, fake: KubeFake) -> Reply:
    if kind == "201-empty":
        return _json(201, {})
    if kind == "200-status-failure":
        return _json(200, status_body(409, "Conflict", "the object has been modified"))
    body = {"apiVersion": COORDINATION.api_version, "kind": "Lease",
            "metadata": {"name": "job", "namespace": "default", "uid": "u-9",
                         "resourceVersion": "777"},
            "spec": {"holderIdentity": "thief_0123456789ab", "leaseDurationSeconds": 10,
                     "leaseTransitions": 1}}
    return _json(201, body)


@pytest.mark.parametrize("lie", ["201-empty", "200-status-failure", "201-other-holder"])
async def test_a_write_answer_that_does_not_show_the_grant_is_not_a_grant(lie: str) -> None:
    """POST/PUT answered 201 {}, 200 Status Failure or 201 another holder's Lease (the store
    unchanged): no grant is yielded, and the store holds no grant of ours."""
    def rule(request: Request) -> Reply | None:
        if request.method in ("POST", "PUT"):
            return _lie(lie, fake)
        return None

    fake, _, backend = _kube(rule)
    if lie == "200-status-failure":
        fake.seed(COORDINATION, "job", "", 3, 10)  # free: the acquire is a PUT
    async with backend:
        lease = Lease("job", "me", backend, SETTINGS)
        with pytest.raises(LeaseError):
            async with lease.try_held():
                pytest.fail("a grant the store does not show was yielded")
        assert not lease.check_lease()
    truth = fake.truth(COORDINATION, "job")
    assert truth is None or truth.holder != lease.identity


async def _no_grant_on_a_txn_success_at(shift: int) -> EtcdFake:
    """try_held() on a free etcd record whose txn is answered ``succeeded`` at the revision it
    compared against plus ``shift`` (the store unchanged) raises a LeaseError, no grant yielded;
    returns the fake."""

    def rule(request: Request) -> Reply | None:
        if request.path.endswith("/kv/txn"):
            compare = (request.json() or {}).get("compare") or [{}]
            revision = int(compare[0].get("mod_revision", "0")) + shift
            return _json(200, {"header": {"revision": str(revision)}, "succeeded": True})
        return None

    fake, _, backend = _etcd(rule)
    fake.seed("job", "", 3, 10.0)
    async with backend:
        lease = Lease("job", "me", backend, SETTINGS)
        with pytest.raises(LeaseError):
            async with lease.try_held():
                pytest.fail("a grant the store does not show was yielded")
    return fake


async def test_an_etcd_txn_answered_success_with_the_old_revision_is_not_a_grant() -> None:
    """A txn answered ``succeeded`` at the revision it compared against (not applied): no grant."""
    fake = await _no_grant_on_a_txn_success_at(shift=0)
    truth = fake.truth("job")
    assert truth is not None and truth.holder == ""


# -- (3) untyped exceptions --------------------------------------------------------------------


_TOKEN = ("metadata", "annotations", "trio-lease.io/fencing-token")
_BAD_BODIES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "metadata-list": lambda obj: {**obj, "metadata": [obj["metadata"]]},
    "spec-string": lambda obj: {**obj, "spec": "holderIdentity=me"},
    "annotations-list": lambda obj: _with(obj, ("metadata", "annotations"), ["a", "b"]),
    "coordination:duration-400-digits": lambda obj: _with(
        obj, ("spec", "leaseDurationSeconds"), Bare("9" * 400)),
    "coordination:duration-NaN": lambda obj: _with(
        obj, ("spec", "leaseDurationSeconds"), Bare("NaN")),
    "coordination:transitions-1e999": lambda obj: _with(
        obj, ("spec", "leaseTransitions"), Bare("1e999")),
    "akka:token-400-digits": lambda obj: _with(obj, _TOKEN, Bare("9" * 400)),
    "akka:token-NaN": lambda obj: _with(obj, _TOKEN, Bare("NaN")),
    "akka:owner-object": lambda obj: _with(obj, ("spec", "owner"), {"name": "someone"}),
}


@pytest.mark.parametrize(
    ("kind_name", "body"),
    [(kind, body) for kind in ("coordination", "akka")
     for body in [*_BAD_BODIES, "deep-5000"] if body.split(":")[0] in (kind, body)],
)
async def test_malformed_fields_give_typed_errors_or_unreadable_records(
    kind_name: str, body: str
) -> None:
    """metadata/spec/annotations not objects, 5000 levels, a 400-digit or NaN duration or
    token: get() raises BackendProtocolError or returns an unreadable record, never untyped."""
    kind = KINDS[kind_name]

    def rule(request: Request) -> Reply | None:
        if not _is_get(request):
            return None
        if body == "deep-5000":
            return Reply(200, deep_text(5000).encode(), [("Content-Type", "application/json")])
        obj = fake.emulator.get(kind.api_version, "leases", "job", "default")
        assert obj is not None
        return _json(200, _BAD_BODIES[body](obj))

    fake, _, backend = _kube(rule, kind)
    fake.seed(kind, "job", "someone", 3, 10)
    async with backend:
        try:
            record = await backend.get("job")
        except BackendProtocolError:
            return
        assert record is not None and record.unreadable and not record.is_free


async def test_a_watch_list_with_items_5_neither_crashes_nor_spins() -> None:
    """The watch's LIST answered ``"items": 5``: no untyped error, requests paced, no record."""
    def rule(request: Request) -> Reply | None:
        if request.method == "GET" and request.path.endswith("/leases") and \
                "watch" not in request.query:
            return _json(200, {"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
                               "metadata": {"resourceVersion": "5"}, "items": 5})
        return None

    fake, scripted, backend = _kube(rule)
    fake.seed(COORDINATION, "job", "someone", 3, 10)
    items: list[object] = []
    with anyio.CancelScope() as scope:
        scripted.scope = scope
        with anyio.move_on_after(10):
            async with backend, backend.watch("job") as stream:
                async for item in stream:
                    items.append(item)
    assert len(scripted.requests) <= 40, f"{len(scripted.requests)} requests in 10 s"
    assert all(isinstance(item, LeaseRecord) or item is None for item in items)


# -- (4) spinning ------------------------------------------------------------------------------


def _bookmark_stream() -> Reply:
    async def lines() -> Any:
        yield b'{"type":"BOOKMARK","object":{"kind":"Lease","apiVersion":' \
              b'"coordination.k8s.io/v1","metadata":{"resourceVersion":"9"}}}\n'

    return Reply(200, b"", [("Content-Type", "application/json")], mode="stream",
                 chunks=lines())


async def _watch_for_ten_seconds(scripted: Scripted, backend: LeaseBackend) -> None:
    """Watch lease job of ``backend`` for 10 s; the fake can end it early through
    ``scripted.scope``."""
    with anyio.CancelScope() as scope:
        scripted.scope = scope
        with anyio.move_on_after(10):
            async with backend, backend.watch("job") as stream:
                async for _ in stream:
                    pass


async def test_kubernetes_watch_streams_ending_after_one_bookmark_do_not_spin() -> None:
    """Every watch stream ends after one BOOKMARK: re-watching is paced (not a loop)."""
    def rule(request: Request) -> Reply | None:
        if request.query.get("watch") in ("1", "true"):
            return _bookmark_stream()
        return None

    fake, scripted, _ = _kube(rule)
    fake.seed(COORDINATION, "job", "someone", 3, 10)
    backend = fake.backend(COORDINATION, url=None, transport=HostileTransport(scripted),
                           token="t", watch_poll_interval=1.0)
    await _watch_for_ten_seconds(scripted, backend)
    watches = [r for r in scripted.requests if r.query.get("watch") in ("1", "true")]
    # Paced by watch_poll_interval (1 s) after a stream that delivered nothing: <= 2 per second.
    assert len(watches) <= 22, f"{len(watches)} watch requests in 10 s"


async def test_etcd_watch_streams_ending_after_one_progress_notification_do_not_spin() -> None:
    """Every etcd watch ends after one progress notification: reconnects are paced."""
    def rule(request: Request) -> Reply | None:
        if request.path.endswith("/watch"):
            async def lines() -> Any:
                yield b'{"result":{"header":{"revision":"5"}}}\n'

            return Reply(200, b"", [("Content-Type", "application/json")], mode="stream",
                         chunks=lines())
        return None

    fake, scripted, backend = _etcd(rule)
    fake.seed("job", "someone", 3, 10.0)
    await _watch_for_ten_seconds(scripted, backend)
    watches = [r for r in scripted.requests if r.path.endswith("/watch")]
    # The watch backs off (from 50 ms, doubling to 2 s) between streams that brought nothing.
    assert len(watches) <= 20, f"{len(watches)} watch requests in 10 s"


async def test_etcd_txn_answered_succeeded_as_a_string_is_not_a_conflict_loop() -> None:
    """txn answered {"succeeded": "true"} while reads show the lease free: try_held ends with
    BackendProtocolError after one write, and held() waits between attempts."""
    def rule(request: Request) -> Reply | None:
        if request.path.endswith("/kv/txn"):
            return _json(200, {"header": {"revision": "2000"}, "succeeded": "true"})
        return None

    fake, scripted, backend = _etcd(rule)
    fake.seed("job", "", 3, 10.0)
    with anyio.CancelScope() as scope:
        scripted.scope = scope
        async with backend:
            lease = Lease("job", "me", backend, SETTINGS)
            with pytest.raises(BackendUnavailable) as info:
                async with lease.try_held():
                    pytest.fail("granted")
            assert not isinstance(info.value, ConflictError)
            txns = [r for r in scripted.requests if r.path.endswith("/kv/txn")]
            assert len(txns) == 1, f"{len(txns)} txns for one try_held"
            scripted.requests.clear()
            with pytest.raises(AcquireTimeout):
                async with lease.held(timeout=5):
                    pytest.fail("granted")
    # Attempts >= 0.2 s apart (the waiting loop's back-off), each a read, a txn and a re-read.
    assert len(scripted.requests) <= 3 * (5 / 0.2 + 1), f"{len(scripted.requests)} in 5 s"


@pytest.mark.parametrize("backend_name", ["kubernetes", "etcd"])
async def test_a_store_where_every_write_conflicts_is_not_hammered(backend_name: str) -> None:
    """Every write conflicts while reads show the lease free: try_held gives up after
    MAX_CONFLICTS paced rounds with BackendUnavailable; held() backs off between attempts."""
    def rule(request: Request) -> Reply | None:
        if request.path.endswith("/kv/txn"):  # etcd: compare failed (no "succeeded")
            return _json(200, {"header": {"revision": "2000"}})
        if request.method in ("POST", "PUT") and request.path.startswith("/apis/"):
            return _json(409, status_body(409, "Conflict", "the object has been modified",
                                          {"name": "job", "kind": "leases"}))
        return None

    backend: KubernetesBackend | EtcdBackend
    if backend_name == "kubernetes":
        kube, scripted, backend = _kube(rule)
        kube.seed(COORDINATION, "job", "", 3, 10)
    else:
        etcd, scripted, backend = _etcd(rule)
        etcd.seed("job", "", 3, 10.0)
    with anyio.CancelScope() as scope:
        scripted.scope = scope
        async with backend:
            lease = Lease("job", "me", backend, SETTINGS)
            with pytest.raises(BackendUnavailable):
                async with lease.try_held():
                    pytest.fail("granted")
            assert len(scripted.writes()) <= MAX_CONFLICTS
            scripted.requests.clear()
            with pytest.raises(AcquireTimeout):
                async with lease.held(timeout=5):
                    pytest.fail("granted")
    # Per attempt at most MAX_CONFLICTS rounds of (read, write); attempts >= 0.2 s apart.
    bound = (2 * MAX_CONFLICTS + 2) * (5 / 0.2 + 1)
    assert len(scripted.requests) <= bound, f"{len(scripted.requests)} requests in 5 s"


# -- (5) ExceptionGroup instead of our errors --------------------------------------------------


async def test_held_without_rbac_raises_a_bare_auth_error_at_once() -> None:
    """held(timeout=...) with a token lacking create/update: a bare BackendAuthError, at once."""
    emulator = KubeEmulator(require_auth=True)
    emulator.apply(LEASE_YML.read_text())
    emulator.add_service_account_token("tok", "default", "app")
    emulator.grant("system:serviceaccount:default:app", ["get"])
    config = ClusterConfig(server="https://kube.test", credentials=Credentials(token="tok"))
    start = anyio.current_time()
    async with KubernetesBackend(config, transport=emulator.transport()) as backend:
        lease = Lease("job", "me", backend, SETTINGS)
        with pytest.raises(BackendAuthError):  # pytest.raises does not unwrap groups
            async with lease.held(timeout=30):
                pytest.fail("granted")
    assert anyio.current_time() - start < 5


def _memory_config() -> dict[str, Any]:
    return {"leases": {"main": {"lease-class": "memory"}}}


@pytest.mark.parametrize("host", ["lease", "provider"])
async def test_a_body_error_leaves_the_host_scope_bare(host: str) -> None:
    """``async with lease.host():`` / ``async with LeaseProvider(...)`` whose body raises ValueError
    (after acquire(), with the heartbeat running) raises that ValueError, not a group."""
    _, _, backend = _kube(lambda request: None)
    with pytest.raises(ValueError, match="the body's own") as info:
        if host == "lease":
            async with backend, Lease("job", "me", backend, SETTINGS).host() as lease:
                assert await lease.acquire()
                raise ValueError("the body's own error")
        else:
            async with LeaseProvider(_memory_config()) as provider:
                lease = provider.get_lease("job", "leases.main", "me")
                assert await lease.acquire()
                raise ValueError("the body's own error")
    assert type(info.value) is ValueError


# -- (6) silent waits --------------------------------------------------------------------------


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: connecting is refused


@pytest.mark.parametrize("anyio_backend", REAL_LOOPS)
@pytest.mark.parametrize("backend_name", ["kubernetes", "etcd"])
async def test_waiting_on_a_dead_port_says_why(
    backend_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """held(timeout=) against a dead port: AcquireTimeout with last_error set and named in the
    message, and a WARNING logged while waiting (real time, a real refused connection)."""
    url = f"http://127.0.0.1:{_dead_port()}"
    backend: KubernetesBackend | EtcdBackend
    if backend_name == "kubernetes":
        backend = KubernetesBackend(ClusterConfig(server=url, credentials=Credentials(token="t")))
    else:
        backend = EtcdBackend([url], connect_timeout=0.5, request_timeout=0.5)
    settings = REAL_SETTINGS
    caplog.set_level(logging.WARNING, logger="trio_lease")
    async with backend:
        with pytest.raises(AcquireTimeout) as info:
            async with Lease("job", "me", backend, settings).held(timeout=1.5):
                pytest.fail("granted")
    error = info.value
    assert isinstance(error.last_error, BackendError)
    assert str(error.last_error) in str(error)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "job" in r.message]
    assert warnings, "nothing logged at WARNING while the backend failed"


@pytest.mark.parametrize("problem", ["401", "403", "missing-namespace"])
async def test_errors_retrying_cannot_fix_end_held_at_once(problem: str) -> None:
    """401, 403 and a missing namespace end held(timeout=30) at once with the typed error."""
    emulator = KubeEmulator(require_auth=problem != "missing-namespace")
    emulator.add_service_account_token("tok", "default", "app")
    if problem == "403":
        emulator.grant("system:serviceaccount:default:app", ["list", "watch"])
    token = {"401": "wrong", "403": "tok"}.get(problem)  # no token: an admin, on this emulator
    namespace = "nope" if problem == "missing-namespace" else "default"
    config = ClusterConfig(server="https://kube.test", namespace=namespace,
                           credentials=Credentials(token=token))
    expected: type[LeaseError] = (
        LeaseConfigError if problem == "missing-namespace" else BackendAuthError
    )
    start = anyio.current_time()
    async with KubernetesBackend(config, transport=emulator.transport()) as backend:
        with pytest.raises(expected):
            async with Lease("job", "me", backend, SETTINGS).held(timeout=30):
                pytest.fail("granted")
    assert anyio.current_time() - start < 5


# -- (7) secrets -------------------------------------------------------------------------------


def test_a_kubeconfig_yaml_error_on_the_token_line_does_not_quote_the_token(
    tmp_path: Path,
) -> None:
    """A kubeconfig that is not YAML on the token's own line: the message omits the token."""
    secret = "s3cr3t-t0ken-ABCDEF"
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n"
        f"    token: {secret}: {secret}\n"
    )
    with pytest.raises(LeaseConfigError) as info:
        load_kubeconfig([path])
    assert secret not in str(info.value)
    assert "s3cr3t" not in repr(info.value)


# -- found by the generated suite (the same classes, pinned one reply at a time) ---------------


@pytest.mark.parametrize("anyio_backend", REAL_LOOPS)
async def test_a_response_nobody_asked_for_is_never_read_as_the_next_answer() -> None:
    """A GET answered twice on a kept-open connection: the next request on the lean HTTP path
    (the PUT) must not take the unasked copy as its answer (class 2: a write's answer the server
    never gave). Real socket: the lean client is the production path."""
    fake = KubeFake(random.Random(1), Tally(0), hostility=0.0, bound=1.0)
    fake.seed(COORDINATION, "job", "", 3, 10)
    first = True

    async def handler(request: Request, *, socket: bool) -> Reply:
        nonlocal first
        reply = await fake(request, socket=socket)
        if request.method == "GET" and first:
            first = False
            reply.mode = "stale"
            reply.unasked = b"repeat"  # the same Lease again: a valid-looking answer
        return reply

    async with HostileServer(handler) as server:
        backend = fake.backend(COORDINATION, url=server.url, transport=None, token="t")
        async with backend:
            record = await backend.get("job")
            assert record is not None
            written = LeaseRecord("job", "me", 10.0, record.fencing_token + 1)
            try:
                with anyio.fail_after(5):
                    stored = await backend.update(written, record.version)
            except BackendError:
                return  # refused, or the unasked bytes were seen for what they are: fine
    truth = fake.truth(COORDINATION, "job")
    assert truth is not None and truth.holder == "me"
    assert stored.version == truth.version, (
        f"update returned version {stored.version}, the store holds {truth.version}: the PUT "
        "was answered with the unasked copy of the GET's response"
    )


async def test_an_advisory_field_out_of_float_range_never_escapes_untyped() -> None:
    """A Lease read with ``spec.strategy: 1e999`` (JSON reads it as infinity), then updated from
    that object: a typed error or a correct write, never ValueError from the JSON encoder."""
    def rule(request: Request) -> Reply | None:
        if _is_get(request):
            obj = fake.emulator.get(COORDINATION.api_version, "leases", "job", "default")
            return _json(200, _with(obj, ("spec", "strategy"), Bare("1e999")))
        return None

    fake, _, backend = _kube(rule)
    truth = fake.seed(COORDINATION, "job", "", 3, 10)
    async with backend:
        try:
            stored = await backend.update(LeaseRecord("job", "me", 10.0, 4), truth.version)
        except LeaseError:
            return  # refused: fine (any other exception fails this test)
    after = fake.truth(COORDINATION, "job")
    assert after is not None and (after.holder, after.version) == ("me", stored.version)


async def test_an_etcd_txn_success_below_the_compared_revision_is_not_a_grant() -> None:
    """A txn answered ``succeeded`` at a revision lower than the mod_revision it compared (no
    etcd can do that; the store unchanged): no grant is yielded."""
    await _no_grant_on_a_txn_success_at(shift=-1)
