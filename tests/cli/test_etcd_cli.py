"""The commands against a real etcd through the etcd options (etcdctl's names): every command
reaches it, status lists the prefix, credentials come from a file or the environment, and a
member that cannot be reached is named."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.backends.etcd.test_security import tls_files, tls_server  # noqa: F401 (fixtures)
from tests.conftest import require_etcd
from tests.etcd_server import EtcdCluster, etcd_cluster

from ._stores import closed_port
from .conftest import FAST, ONE_SHOT, Cli, wait_for_event

PASSWORD = "etcd-pw-9c41e"


@pytest.fixture
def etcd(cli: Cli, etcd_server: EtcdCluster) -> list[str]:
    """--endpoints of the session's etcd and a --prefix no other test uses."""
    prefix = f"cli-{secrets.token_hex(4)}/"
    return ["--endpoints", ",".join(etcd_server.endpoints), "--prefix", prefix]


@pytest.fixture(scope="module")
def auth_etcd() -> Iterator[EtcdCluster]:
    """An etcd member with authentication on: user `leaser` may read and write `leases/`."""
    from tests.backends.etcd.test_security import PASSWORD as LEASER_PASSWORD
    from tests.backends.etcd.test_security import enable_auth

    require_etcd()
    assert LEASER_PASSWORD != PASSWORD
    with etcd_cluster(size=1) as cluster:
        enable_auth(cluster.endpoints[0])
        yield cluster


def test_every_command_reaches_etcd_through_its_options(cli: Cli, etcd: list[str]) -> None:
    """run, status, handover and release take --endpoints and --prefix, which select etcd;
    status with no names lists every lease under the prefix."""
    log, child = cli.child("holder")
    holder = cli.start("run", "job", *etcd, *FAST, "--", *child)
    identity = wait_for_event(log, "start", holder)["owner"]
    _, once = cli.child("other", sleep=0)
    assert cli.run("run", "other", *etcd, *FAST, "--", *once).returncode == 0
    rows = {row["name"]: row for row in cli.status(*etcd)}
    assert set(rows) == {"job", "other"}
    assert (rows["job"]["holder"], rows["job"]["fencing_token"]) == (identity, 1)
    assert rows["other"]["holder"] is None and rows["job"]["foreign"] is False

    released = cli.run("release", "job", "--force", *etcd)
    assert released.returncode == 0, released.stderr
    assert holder.wait() == 125
    log2, child2 = cli.child("second")
    second = cli.start("run", "job", *etcd, *FAST, "--", *child2)
    assert wait_for_event(log2, "start", second)["token"] == 2
    handover = cli.run("handover", "job", "--timeout", "20", *etcd, *ONE_SHOT)
    assert handover.returncode == 0, handover.stderr
    assert second.wait() == 0
    assert not cli.db.exists()


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_etcd_options_come_from_the_environment(
    loop: str, cli: Cli, etcd_server: EtcdCluster
) -> None:
    """TRIO_LEASE_ENDPOINTS (with TRIO_LEASE_PREFIX) alone selects etcd, on either loop."""
    env = cli.env | {
        "TRIO_LEASE_ANYIO_BACKEND": loop,
        "TRIO_LEASE_ENDPOINTS": etcd_server.endpoints[0],
        "TRIO_LEASE_PREFIX": f"env-{secrets.token_hex(4)}/",
    }
    log, child = cli.child("once", sleep=0)
    assert cli.run("run", "env-job", *FAST, "--", *child, env=env).returncode == 0
    assert wait_for_event(log, "start")["token"] == 1
    assert [row["name"] for row in cli.status(env=env)] == ["env-job"]
    assert not cli.db.exists()


def test_the_password_comes_from_a_file_or_the_environment(
    cli: Cli, auth_etcd: EtcdCluster
) -> None:
    """--user with --password-file, or with TRIO_LEASE_PASSWORD, authenticates; a wrong
    password exits 78 without showing it; the password is never a flag."""
    from tests.backends.etcd.test_security import PASSWORD as RIGHT

    endpoint = ["--endpoints", auth_etcd.endpoints[0], "--prefix", "leases/"]
    password_file = cli.tmp / "password"
    password_file.write_text(RIGHT + "\n")
    _, child = cli.child("once", sleep=0)
    by_file = [*endpoint, "--user", "leaser", "--password-file", str(password_file)]
    assert cli.run("run", "job", *by_file, *FAST, "--", *child).returncode == 0
    env = cli.env | {"TRIO_LEASE_PASSWORD": RIGHT}
    assert cli.status("job", *endpoint, "--user", "leaser", env=env)[0]["fencing_token"] == 1

    wrong = cli.run("status", "job", *endpoint, "--user", "leaser",
                    env=cli.env | {"TRIO_LEASE_PASSWORD": PASSWORD})
    assert wrong.returncode == 78
    assert PASSWORD not in wrong.stderr and RIGHT not in wrong.stderr
    assert "--password" not in cli.run("status", "--help").stdout.replace("--password-file", "")


def test_a_refused_endpoint_names_its_host_and_port(cli: Cli) -> None:
    """An endpoint nothing listens on: exit 69 naming 127.0.0.1:PORT, refused, nothing sent."""
    port = closed_port()
    result = cli.run("status", "job", "--endpoints", f"http://127.0.0.1:{port}")
    assert result.returncode == 69
    assert f"connection refused by 127.0.0.1:{port}; nothing was sent" in result.stderr


def test_a_password_in_user_is_refused_without_showing_it(cli: Cli) -> None:
    """etcdctl's --user NAME:PASSWORD puts the password on the command line: refused (exit 78)
    naming --user or TRIO_LEASE_USER, the password not shown."""
    result = cli.run("status", "--endpoints", "http://127.0.0.1:1", "--user", f"root:{PASSWORD}")
    assert result.returncode == 78
    assert result.stderr.startswith("trio-lease: --user: give the user name only")
    env = cli.env | {"TRIO_LEASE_USER": f"root:{PASSWORD}", "TRIO_LEASE_ENDPOINTS": "http://x"}
    from_env = cli.run("status", env=env)
    assert from_env.returncode == 78
    assert from_env.stderr.startswith("trio-lease: TRIO_LEASE_USER: give the user name only")
    assert PASSWORD not in result.stderr + from_env.stderr


def test_tls_options_reach_a_member_that_requires_client_certificates(
    cli: Cli, tls_server: EtcdCluster, tls_files: dict[str, Path]  # noqa: F811
) -> None:
    """--cacert, --cert and --key reach a TLS member requiring client certificates; without
    --cacert the member's certificate does not verify: exit 78 saying what failed."""
    endpoint = ["--endpoints", tls_server.endpoints[0], "--prefix", f"tls-{secrets.token_hex(4)}/"]
    client = str(tls_files["client"])
    tls = ["--cacert", str(tls_files["ca"]), "--cert", client, "--key", client]
    _, child = cli.child("once", sleep=0)
    assert cli.run("run", "job", *endpoint, *tls, *FAST, "--", *child).returncode == 0
    assert cli.status("job", *endpoint, *tls)[0]["fencing_token"] == 1
    untrusted = cli.run("status", "job", *endpoint, "--cert", client, "--key", client)
    assert untrusted.returncode == 78
    assert "the server's TLS certificate could not be verified" in untrusted.stderr
    assert "(self-signed certificate in certificate chain)" in untrusted.stderr or (
        "unable to get local issuer certificate" in untrusted.stderr
    )


def test_a_certificate_that_does_not_verify_names_the_cacert_option(
    cli: Cli, tls_server: EtcdCluster, tls_files: dict[str, Path]  # noqa: F811
) -> None:
    """A --cacert that did not sign the member's certificate: exit 78 naming --cacert, the
    option typed, not the TOML key ca-file alone."""
    other_ca = cli.tmp / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    client = str(tls_files["client"])
    result = cli.run(
        "status", "job", "--endpoints", tls_server.endpoints[0], "--cacert", str(other_ca),
        "--cert", client, "--key", client,
    )
    assert result.returncode == 78, result.stderr
    assert "check --cacert" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_endpoint_whose_host_does_not_resolve_is_named(cli: Cli) -> None:
    """An endpoint host name that does not resolve: exit 69 naming the host."""
    result = cli.run("status", "job", "--endpoints", "http://no-such-host.invalid:2379")
    assert result.returncode == 69
    assert "cannot resolve the host name 'no-such-host.invalid'" in result.stderr
