"""backend.check() and ``trio-lease check``: each problem reported with its fix."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx
import pytest

from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend
from trio_lease.backends.kubernetes._cli import add_check_command
from trio_lease.testing.kube import KubeEmulator
from trio_lease.testing.kube._rbac import is_allowed

from ._helpers import emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
SA = "system:serviceaccount:default:app"


class ReviewingTransport(httpx.AsyncBaseTransport):
    """The emulator plus SelfSubjectAccessReviews answered from its RBAC objects."""

    def __init__(self, emulator: KubeEmulator) -> None:
        self.emulator = emulator
        self.inner = emulator.transport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/selfsubjectaccessreviews"):
            return await self.inner.handle_async_request(request)
        token = request.headers.get("authorization", "").removeprefix("Bearer ") or None
        user = self.emulator.authenticate(token, 0.0)
        body = json.loads(await request.aread())
        attrs = body["spec"]["resourceAttributes"]
        allowed = is_allowed(user, attrs["verb"], attrs["group"], attrs["resource"],
                             attrs["namespace"], "", self.emulator.rbac_objects)
        return httpx.Response(201, json={**body, "status": {"allowed": allowed}})


async def test_all_good_reports_ok() -> None:
    """With the CRD and the Role from lease.yml, check reports no problem."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "default")
    async with make_backend(ReviewingTransport(emulator), token="tok", kind="akka.io/v1") as b:
        report = await b.check()
    assert report.ok, str(report)
    assert "OK" in str(report)


async def test_missing_verbs_are_listed_with_the_grant() -> None:
    """Missing RBAC verbs are named, with the Role/kubectl fix, via SelfSubjectAccessReview."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.grant(SA, ["get"])
    async with make_backend(ReviewingTransport(emulator), token="tok") as backend:
        report = await backend.check()
    assert not report.ok
    (problem,) = report.problems
    assert "create, update, watch, list" in problem.what
    assert "lease.yml" in problem.fix
    assert "--verb=get,create,update,watch,list" in problem.fix


async def test_without_reviews_reads_are_probed() -> None:
    """Without SelfSubjectAccessReviews, get/list/watch are probed by reading and noted."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.grant(SA, ["create", "update"])
    async with make_backend(emulator.transport(), token="tok") as backend:
        report = await backend.check()
    (problem,) = report.problems
    assert "get, list, watch" in problem.what
    assert any("could not be checked" in note for note in report.notes)


async def test_missing_crd_is_reported_with_lease_yml() -> None:
    """A missing akka.io CRD is reported with 'kubectl apply -f lease.yml'."""
    async with make_backend(KubeEmulator().transport(), kind="akka.io/v1") as backend:
        report = await backend.check()
    assert [p.fix for p in report.problems] == ["kubectl apply -f lease.yml (needs cluster-admin "
                                                "once)"]


async def test_bad_credentials_are_reported() -> None:
    """A rejected token is reported as a credentials problem without the token."""
    emulator = emulator_with_crd(require_auth=True)
    async with make_backend(emulator.transport(), token="bad-secret-token") as backend:
        report = await backend.check()
    (problem,) = report.problems
    assert "401" in problem.what
    assert "bad-secret-token" not in str(report)


async def test_unreachable_server_is_reported() -> None:
    """A server that refuses connections is reported as unreachable with what to check."""
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    config = ClusterConfig(server="https://127.0.0.1:1", credentials=Credentials(token="t"))
    async with KubernetesBackend(config, transport=httpx.MockTransport(refuse)) as backend:
        report = await backend.check()
    (problem,) = report.problems
    assert "cannot reach" in problem.what
    assert "server URL" in problem.fix


def test_cli_check_prints_report_and_exit_code(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`trio-lease check` exits 1 with the problems when the server cannot be reached."""
    parser = argparse.ArgumentParser()
    add_check_command(parser.add_subparsers(dest="command_name"))
    config = tmp_path / "leases.toml"
    config.write_text('[leases.k8s]\nlease-class = "kubernetes"\nserver = "https://127.0.0.1:1"'
                      '\ntoken = "t"\nrequest-timeout = "1s"\n')
    args = parser.parse_args(["check", "--config", str(config), "--section", "leases.k8s",
                              "--json"])
    assert args.func(args) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False
    assert "cannot reach" in out["problems"][0]["what"]


async def test_unreadable_token_file_is_reported_as_configuration(tmp_path: Path) -> None:
    """A missing token file is reported as a configuration problem naming the file."""
    emulator = emulator_with_crd(require_auth=True)
    async with make_backend(emulator.transport(), token_file=tmp_path / "absent") as backend:
        report = await backend.check()
    (problem,) = report.problems
    assert "absent" in problem.what
    assert "cannot reach" not in problem.what
