"""Real sockets and processes: TLS options on the HTTPS emulator and exec credential plugins."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme

from tests.conftest import REAL_LOOPS
from trio_lease import BackendAuthError, LeaseConfigError, LeaseRecord
from trio_lease.backends.kubernetes import (
    ClusterConfig,
    Credentials,
    ExecConfig,
    KubernetesBackend,
    load_kubeconfig,
)
from trio_lease.backends.kubernetes._auth import ssl_context
from trio_lease.backends.kubernetes._exec import ExecTokenSource
from trio_lease.testing.kube import KubeEmulator

pytestmark = pytest.mark.anyio

PLUGIN = """
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
count_file = sys.argv[1]
n = int(open(count_file).read()) + 1 if os.path.exists(count_file) else 1
open(count_file, "w").write(str(n))
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": f"exec-token-{n}", "expirationTimestamp": sys.argv[2]}}))
"""


def exec_plugin(tmp_path: Path, expires: str) -> tuple[ExecConfig, Path]:
    """An exec plugin (:data:`PLUGIN`) whose tokens expire at ``expires``, and the file that
    counts its runs."""
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    count = tmp_path / "count"
    return ExecConfig(command=sys.executable, args=(str(script), str(count), expires)), count


@contextlib.asynccontextmanager
async def exec_authenticated(
    config: ExecConfig,
) -> AsyncIterator[tuple[KubeEmulator, KubernetesBackend]]:
    """An emulator that takes the plugin's first token (exec-token-1), and a backend whose
    credentials come from the plugin ``config``."""
    emulator = KubeEmulator(require_auth=True)
    emulator.add_token("exec-token-1", "u", groups=("system:masters",))
    async with emulator.serve(tls=False) as server:
        cluster = ClusterConfig(server=server.url, credentials=Credentials(exec=config))
        async with KubernetesBackend(cluster) as backend:
            yield emulator, backend


@pytest.fixture(params=REAL_LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Real time (real sockets) on asyncio, asyncio on uvloop, and trio."""
    backend: str | tuple[str, dict[str, Any]] = request.param
    return backend


async def test_https_with_ca_data_and_tls_server_name(tmp_path: Path) -> None:
    """kubeconfig CA data works; tls-server-name is the name verified; a wrong one fails."""
    emulator = KubeEmulator()
    async with emulator.serve() as server:
        document = server.kubeconfig()
        document["clusters"][0]["cluster"]["tls-server-name"] = "localhost"
        path = tmp_path / "config"
        path.write_text(json.dumps(document))  # JSON is YAML
        async with KubernetesBackend(load_kubeconfig([path])) as backend:
            await backend.create(LeaseRecord("tls", holder="me", lease_duration=15))
        document["clusters"][0]["cluster"]["tls-server-name"] = "wrong.example"
        path.write_text(json.dumps(document))
        async with KubernetesBackend(load_kubeconfig([path])) as backend:
            with pytest.raises(LeaseConfigError, match="TLS certificate"):
                await backend.get("tls")


async def test_https_with_an_unknown_ca_fails_with_a_tls_hint() -> None:
    """A server whose CA we do not trust gives LeaseConfigError naming TLS verification."""
    emulator = KubeEmulator()
    async with emulator.serve() as server:
        other_ca = trustme.CA().cert_pem.bytes()
        config = ClusterConfig(server=server.url, ca_data=other_ca)
        async with KubernetesBackend(config) as backend:
            with pytest.raises(LeaseConfigError, match="TLS certificate"):
                await backend.get("x")


async def test_exec_plugin_token_is_cached_until_expiry_and_rerun_on_401(tmp_path: Path) -> None:
    """The exec plugin runs once, is cached, and runs again after a 401."""
    config, count = exec_plugin(tmp_path, "2099-01-01T00:00:00Z")
    async with exec_authenticated(config) as (emulator, backend):
        await backend.get("x")
        await backend.get("x")
        assert count.read_text() == "1"
        emulator.add_token("exec-token-2", "u", groups=("system:masters",))
        emulator.expire_token("exec-token-1")
        await backend.get("x")
        assert count.read_text() == "2"


async def test_exec_plugin_expired_token_is_refreshed_before_use(tmp_path: Path) -> None:
    """A token whose expirationTimestamp has passed is not reused: the plugin runs again."""
    config, _ = exec_plugin(tmp_path, "2000-01-01T00:00:00Z")
    source = ExecTokenSource(config)
    assert await source.token() == "exec-token-1"
    assert await source.token() == "exec-token-2"
    assert "exec-token" not in repr(source)


async def test_exec_plugin_failures_are_reported(tmp_path: Path) -> None:
    """A missing plugin names its install hint; a failing one is an auth error."""
    missing = ExecTokenSource(ExecConfig(command=str(tmp_path / "nope"), install_hint="brew it"))
    with pytest.raises(LeaseConfigError, match="brew it"):
        await missing.token()
    failing = ExecTokenSource(ExecConfig(command=sys.executable, args=("-c", "exit(3)")))
    with pytest.raises(BackendAuthError, match="status 3"):
        await failing.token()


def test_client_certificate_data_loads_without_leaving_files(tmp_path: Path) -> None:
    """Client cert/key data are loaded through a private temp dir that is removed at once."""
    ca = trustme.CA()
    cert = ca.issue_cert("client")
    config = ClusterConfig(
        server="https://127.0.0.1:1",
        ca_data=ca.cert_pem.bytes(),
        credentials=Credentials(client_cert_data=cert.cert_chain_pems[0].bytes(),
                                client_key_data=cert.private_key_pem.bytes()),
    )
    context = ssl_context(config)
    assert context.verify_mode.name == "CERT_REQUIRED"
    bad = ClusterConfig(server="https://127.0.0.1:1", credentials=Credentials(
        client_cert_data=b"junk", client_key_data=base64.b64encode(b"junk")))
    with pytest.raises(LeaseConfigError, match="client certificate"):
        ssl_context(bad)
    _ = anyio  # real-time module; the sync test needs no loop


async def test_exec_plugin_gets_cluster_info_when_asked(tmp_path: Path) -> None:
    """provideClusterInfo passes the server and CA in KUBERNETES_EXEC_INFO; Always is refused."""
    dump = tmp_path / "info.json"
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, sys\n"
        f"open({str(dump)!r}, 'w').write(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': 'tok'}}))\n"
    )
    exec_config = ExecConfig(command=sys.executable, args=(str(script),),
                             provide_cluster_info=True)
    cluster = ClusterConfig(server="https://127.0.0.1:6443", ca_data=b"PEM")
    assert await ExecTokenSource(exec_config, cluster).token() == "tok"
    info = json.loads(dump.read_text())
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(info["spec"]["cluster"]["certificate-authority-data"]) == b"PEM"
    always = ExecConfig(command=sys.executable, interactive_mode="Always")
    with pytest.raises(LeaseConfigError, match="interactiveMode"):
        await ExecTokenSource(always).token()


async def test_insecure_skip_tls_verify_connects_without_a_ca() -> None:
    """insecure-skip-tls-verify talks to a server whose CA is unknown (explicitly unsafe)."""
    emulator = KubeEmulator()
    async with emulator.serve() as server:
        config = ClusterConfig(server=server.url, insecure_skip_tls_verify=True)
        async with KubernetesBackend(config) as backend:
            assert await backend.get("x") is None


async def test_ipv6_loopback_server(tmp_path: Path) -> None:
    """A bracketed IPv6 server URL works (the in-cluster form for IPv6 service hosts)."""
    emulator = KubeEmulator()
    async with AsyncExitStack() as stack:
        try:
            server = await stack.enter_async_context(emulator.serve(host="::1"))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        assert server.url.startswith("https://[::1]:")
        config = ClusterConfig(server=server.url, ca_data=server.ca_pem)
        async with KubernetesBackend(config) as backend:
            assert await backend.get("x") is None


async def test_rotated_ca_file_is_reread_after_a_verification_failure(tmp_path: Path) -> None:
    """When TLS verification fails, the CA file is read again (rotation) and the call retried."""
    emulator = KubeEmulator()
    async with emulator.serve() as server:
        ca_file = tmp_path / "ca.crt"
        ca_file.write_bytes(trustme.CA().cert_pem.bytes())  # the old, now wrong, CA
        config = ClusterConfig(server=server.url, ca_file=ca_file)
        async with KubernetesBackend(config) as backend:
            with pytest.raises(LeaseConfigError, match="TLS certificate"):
                await backend.get("x")
            ca_file.write_bytes(server.ca_pem)  # the kubelet rotated ca.crt
            assert await backend.get("x") is None


async def test_both_request_paths_send_the_same_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unary requests take the lean HTTP/1.1 path; what the server sees equals httpx's."""
    from trio_lease.backends.kubernetes import _client

    compared = ("impersonate-user", "accept", "user-agent", "content-type")
    seen: dict[bool, list[tuple[object, ...]]] = {}
    for lean in (True, False):
        monkeypatch.setattr(_client, "LEAN", lean)
        emulator = KubeEmulator()
        emulator.add_token("t0ken", "bob", groups=("system:masters",))
        emulator.grant("alice", ["get", "create", "update"])  # the requests run as alice
        async with emulator.serve() as server:
            config = ClusterConfig(
                server=server.url,
                ca_data=server.ca_pem,
                credentials=Credentials(token="t0ken", impersonate_user="alice"),
            )
            async with KubernetesBackend(config) as backend:
                made = await backend.create(LeaseRecord("same", holder="me", lease_duration=15))
                got = await backend.get("same")
                assert got is not None and got.version == made.version
                await backend.update(dataclasses.replace(made, holder="you"), made.version)
                final = await backend.get("same")
                assert final is not None and final.holder == "you"
                assert backend._api.client_lease is not None
                entry = backend._api.client_lease._entry
                assert (entry.lean is not None) is lean
                if entry.lean is not None:
                    assert entry.lean.connections_opened == 1  # kept alive across all three
        seen[lean] = [
            (
                r.method,
                r.path,
                sorted(r.query.items()),
                [r.headers.get(name) for name in compared],
                r.status,  # 2xx: the token was accepted
            )
            for r in emulator.requests
        ]
    assert seen[True] == seen[False]
    assert [(request[0], request[-1]) for request in seen[True]] == [
        ("POST", 201), ("GET", 200), ("PUT", 200), ("GET", 200)
    ]


async def test_a_watch_on_the_lean_path_reads_the_token_again_after_a_401(tmp_path: Path) -> None:
    """A watch stream on the lean client sends the same credentials as a unary request and,
    refused with a 401, runs the exec plugin again and reopens once (as httpx's auth flow did).
    """
    from trio_lease._lean_http import LeanStream
    from trio_lease.backends.kubernetes._watch import _Lines

    config, count = exec_plugin(tmp_path, "2099-01-01T00:00:00Z")
    async with exec_authenticated(config) as (emulator, backend):
        await backend.create(LeaseRecord("x", holder="me", lease_duration=15))
        emulator.add_token("exec-token-2", "u", groups=("system:masters",))
        emulator.expire_token("exec-token-1")
        api = backend._api
        ctx = api.ctx("watch", "x")
        params = {"watch": "1", "fieldSelector": "metadata.name=x", "timeoutSeconds": "30"}
        with anyio.fail_after(10):
            async with api.stream(api.collection_path(), params, ctx) as response:
                assert isinstance(response, LeanStream)
                assert response.status_code == 200
                async with contextlib.aclosing(_Lines(response, ctx)) as lines:
                    async for line in lines:
                        event = json.loads(line)
                        break
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "x")
    assert count.read_text() == "2"
    watches = [r.status for r in emulator.requests if r.query.get("watch") == "1"]
    assert watches == [401, 200]


async def test_a_lean_watch_stream_ends_at_its_read_timeout_with_a_typed_error() -> None:
    """The read timeout bounds a lean stream's whole life: a server that keeps it open and
    silent (or endless) gets BackendUnavailable, and the connection is closed (the server
    finds it closed at its next events)."""
    import httpx

    from trio_lease import BackendUnavailable

    emulator = KubeEmulator()
    async with emulator.serve(tls=False) as server:
        cluster = ClusterConfig(server=server.url, credentials=Credentials())
        async with KubernetesBackend(cluster) as backend:
            api = backend._api
            ctx = api.ctx("watch")
            params = {"watch": "1", "resourceVersion": "0", "timeoutSeconds": "60"}
            with anyio.fail_after(10), pytest.raises(BackendUnavailable, match="timed out"):
                async with api.stream(
                    api.collection_path(), params, ctx, limits=httpx.Timeout(5, read=0.3)
                ) as response:
                    assert response.status_code == 200
                    async for _ in response.aiter_bytes():
                        pass
            assert len(emulator.open_watches()) == 1
            for i in range(20):
                await backend.create(LeaseRecord(f"later-{i}", holder="me", lease_duration=15))
                if not emulator.open_watches():
                    break
                await anyio.sleep(0.05)
            assert not emulator.open_watches()
