"""Username/password authentication and TLS with client certificates, against real etcd."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
import trustme

from tests.conftest import require_etcd
from tests.etcd_server import EtcdCluster, etcd_cluster
from trio_lease import BackendAuthError, BackendUnavailable, LeaseConfigError, LeaseRecord
from trio_lease._abc import Watched
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.etcd._codec import b64
from trio_lease.testing import check_backend

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PASSWORD = "pw-for-leaser-7f3a"
PREFIX = "leases/"


def _prefix_end(prefix: str) -> str:
    raw = prefix.encode()
    return b64(raw[:-1] + bytes([raw[-1] + 1]))


def enable_auth(url: str) -> None:
    """Create root, a `leaser` user with readwrite on PREFIX only, and enable auth."""
    steps = [
        ("role/add", {"name": "root"}),
        ("user/add", {"name": "root", "password": "root-pw"}),
        ("user/grant", {"user": "root", "role": "root"}),
        ("role/add", {"name": "leaser"}),
        (
            "role/grant",
            {
                "name": "leaser",
                "perm": {
                    "permType": "READWRITE",
                    "key": b64(PREFIX),
                    "range_end": _prefix_end(PREFIX),
                },
            },
        ),
        ("user/add", {"name": "leaser", "password": PASSWORD}),
        ("user/grant", {"user": "leaser", "role": "leaser"}),
        ("enable", {}),
    ]
    with httpx.Client(timeout=10) as client:
        for path, body in steps:
            response = client.post(f"{url}/v3/auth/{path}", json=body)
            assert response.status_code == 200, (path, response.text)


@pytest.fixture(scope="module")
def auth_server() -> Iterator[EtcdCluster]:
    """An etcd member with authentication on and auth tokens that expire after one second."""
    require_etcd()
    with etcd_cluster(size=1, extra_args=["--auth-token-ttl", "1"]) as cluster:
        enable_auth(cluster.endpoints[0])
        yield cluster


async def test_authenticated_backend_conforms(auth_server: EtcdCluster) -> None:
    """With username/password and readwrite on the prefix, the backend passes check_backend."""
    await check_backend(
        lambda: EtcdBackend(
            auth_server.endpoints, prefix=PREFIX, username="leaser", password=PASSWORD
        )
    )


async def test_expired_auth_token_is_renewed(auth_server: EtcdCluster) -> None:
    """Calls keep working after etcd expires the auth token (re-authenticated once, resent)."""
    async with EtcdBackend(
        auth_server.endpoints, prefix=PREFIX, username="leaser", password=PASSWORD
    ) as backend:
        created = await backend.create(LeaseRecord(name=f"ttl-{anyio.current_time()}", holder="a"))
        await anyio.sleep(2.5)  # longer than --auth-token-ttl 1 (etcd checks it every second)
        read = await backend.get(created.name)
    assert read == created


async def test_the_shared_watch_sends_the_token_and_reads_changes(auth_server: EtcdCluster) -> None:
    """With authentication on, the shared watch (on the lean client's stream) is authorized
    and delivers another client's write."""
    def make() -> EtcdBackend:
        return EtcdBackend(auth_server.endpoints, prefix=PREFIX, username="leaser",
                           password=PASSWORD)

    name = f"feed-{anyio.current_time()}"
    published: list[tuple[str, LeaseRecord | None]] = []
    watched = Watched()
    watched.add(name)
    async with make() as mine, make() as other:
        created = await other.create(LeaseRecord(name=name, holder="a"))
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(mine.watch_feed().run, watched,
                              lambda key, state: published.append((key, state)))
                while len(published) < 1:
                    await anyio.sleep(0.01)
                renewed = await other.update(created, created.version)
                while len(published) < 2:
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
    assert published == [(name, created), (name, renewed)]


async def test_wrong_password_and_missing_credentials_are_auth_errors(
    auth_server: EtcdCluster,
) -> None:
    """A wrong password or no credentials raise BackendAuthError saying what to configure."""
    wrong = "not-the-password-123"
    async with EtcdBackend(
        auth_server.endpoints, prefix=PREFIX, username="leaser", password=wrong
    ) as backend:
        with pytest.raises(BackendAuthError) as info:
            await backend.get("x")
    assert wrong not in str(info.value)
    assert "password" in str(info.value)
    async with EtcdBackend(auth_server.endpoints, prefix=PREFIX) as anonymous:
        with pytest.raises(BackendAuthError, match="username"):
            await anonymous.get("x")


async def test_missing_permission_names_the_prefix_to_grant(auth_server: EtcdCluster) -> None:
    """Writing outside the granted prefix raises BackendAuthError naming the grant to add."""
    async with EtcdBackend(
        auth_server.endpoints, prefix="elsewhere/", username="leaser", password=PASSWORD
    ) as backend:
        with pytest.raises(BackendAuthError) as info:
            await backend.create(LeaseRecord(name="x"))
    assert "elsewhere/" in str(info.value)
    assert "readwrite" in str(info.value)
    assert PASSWORD not in str(info.value)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    files = {name: directory / f"{name}.pem" for name in ("ca", "server", "client")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(files["server"]))
    client = ca.issue_cert("leaser@example.test")
    client.private_key_and_cert_chain_pem.write_to_path(str(files["client"]))
    return files


@pytest.fixture(scope="module")
def tls_server(tls_files: dict[str, Path]) -> Iterator[EtcdCluster]:
    """An etcd member serving clients over TLS and requiring a client certificate."""
    require_etcd()
    verify = ssl.create_default_context(cafile=str(tls_files["ca"]))
    verify.load_cert_chain(str(tls_files["client"]))
    server = str(tls_files["server"])
    args = [
        "--cert-file",
        server,
        "--key-file",
        server,
        "--trusted-ca-file",
        str(tls_files["ca"]),
        "--client-cert-auth",
    ]
    with etcd_cluster(size=1, scheme="https", extra_args=args, verify=verify) as cluster:
        yield cluster


async def test_tls_with_client_certificate_conforms(
    tls_server: EtcdCluster, tls_files: dict[str, Path]
) -> None:
    """Over https with ca-file and a client cert/key, the backend passes check_backend."""
    await check_backend(
        lambda: EtcdBackend.from_config(
            {
                "endpoints": tls_server.endpoints,
                "ca-file": str(tls_files["ca"]),
                "cert-file": str(tls_files["client"]),
                "key-file": str(tls_files["client"]),
            }
        )
    )


async def test_tls_without_client_certificate_is_refused(
    tls_server: EtcdCluster, tls_files: dict[str, Path]
) -> None:
    """Without the client certificate the server refuses the connection: BackendUnavailable."""
    async with EtcdBackend(tls_server.endpoints, ca_file=str(tls_files["ca"])) as backend:
        with pytest.raises(BackendUnavailable):
            await backend.get("x")


async def test_an_untrusted_server_certificate_is_a_configuration_error(
    tls_server: EtcdCluster,
) -> None:
    """Without `ca-file` the member's certificate fails verification: LeaseConfigError, at once."""
    async with EtcdBackend(tls_server.endpoints) as backend:  # the system store lacks the CA
        with pytest.raises(LeaseConfigError, match="ca-file") as info:
            await backend.get("x")
    assert "certificate" in str(info.value)
