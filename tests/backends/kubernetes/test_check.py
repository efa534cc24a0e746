"""backend.check() and ``trio-lease check``: each problem reported with its fix."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx
import pytest
import yaml

from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend
from trio_lease.backends.kubernetes._cli import add_check_command
from trio_lease.testing.kube import KubeEmulator

from ._helpers import emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
SA = "system:serviceaccount:default:app"


class NoReviewsTransport(httpx.AsyncBaseTransport):
    """The emulator, but SelfSubjectAccessReviews answer 404 (a server without them)."""

    def __init__(self, emulator: KubeEmulator) -> None:
        self.inner = emulator.transport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/selfsubjectaccessreviews"):
            return httpx.Response(404, text="404 page not found")
        return await self.inner.handle_async_request(request)


async def test_all_good_reports_ok() -> None:
    """With the CRD and the Role from lease.yml, check reports no problem."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "default")
    async with make_backend(emulator.transport(), token="tok", kind="akka.io/v1") as b:
        report = await b.check()
    assert report.ok, str(report)
    assert "OK" in str(report)


async def test_missing_verbs_are_listed_with_the_grant() -> None:
    """Missing RBAC verbs are named, with the Role/kubectl fix, via SelfSubjectAccessReview."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.grant(SA, ["get"])
    async with make_backend(emulator.transport(), token="tok") as backend:
        report = await backend.check()
    assert not report.ok
    (problem,) = report.problems
    assert "create, update, watch, list" in problem.what
    assert "trio-lease manifests --namespace default" in problem.fix
    assert "--verb=get,create,update,watch,list" in problem.fix


async def test_without_reviews_reads_are_probed() -> None:
    """Without SelfSubjectAccessReviews, get/list/watch are probed by reading and noted."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.grant(SA, ["create", "update"])
    async with make_backend(NoReviewsTransport(emulator), token="tok") as backend:
        report = await backend.check()
    (problem,) = report.problems
    assert "get, list, watch" in problem.what
    assert any("could not be checked" in note for note in report.notes)


async def test_missing_crd_is_reported_with_the_shipped_manifests() -> None:
    """A missing akka.io CRD is reported with the command that applies the shipped CRD
    (`trio-lease manifests ... | kubectl apply -f -`)."""
    async with make_backend(KubeEmulator().transport(), kind="akka.io/v1") as backend:
        report = await backend.check()
    assert [p.fix for p in report.problems] == [
        "trio-lease manifests --lease-kind akka.io/v1 | kubectl apply -f - (needs cluster-admin "
        "once; the manifests ship in the package)"
    ]


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


def _role(verbs: list[str]) -> str:
    """A Role on coordination Leases with ``verbs``, bound to the app service account."""
    return (
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n"
        "metadata: {name: lease-user, namespace: default}\n"
        f"rules:\n- apiGroups: [coordination.k8s.io]\n  resources: [leases]\n  verbs: {verbs}\n"
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n"
        "metadata: {name: lease-user, namespace: default}\n"
        "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: lease-user}\n"
        "subjects: [{kind: ServiceAccount, name: app, namespace: default}]\n"
    )


async def test_role_lacking_verbs_is_reported_with_the_rule_that_grants_them() -> None:
    """Each verb a Role lacks is named, with a Role rule (YAML) that grants exactly those."""
    # The emulator answers SelfSubjectAccessReviews as
    # pkg/registry/authorization/selfsubjectaccessreview/rest.go does, from its RBAC objects.
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.apply(_role(["get", "list"]))
    async with make_backend(emulator.transport(), token="tok") as backend:
        report = await backend.check()
    (problem,) = report.problems
    assert problem.what == (
        "missing permissions: create, update, watch on leases.coordination.k8s.io in "
        "namespace 'default'"
    )
    rule = yaml.safe_load(problem.rule)["rules"]
    assert rule == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                     "verbs": ["create", "update", "watch"]}]
    assert "the Role rule that grants them:" in str(report)
    assert '      - apiGroups: ["coordination.k8s.io"]' in str(report)
    assert not any("could not be checked" in note for note in report.notes)
    role = yaml.safe_load(_role(["get", "list"]).split("---")[0])
    role["rules"] += rule  # add the suggested rule to the Role: the check then passes
    emulator.apply([role])
    async with make_backend(emulator.transport(), token="tok") as backend:
        assert (await backend.check()).ok


async def test_full_role_is_ok_for_both_lease_kinds() -> None:
    """A Role with every verb the backend needs passes, for Leases and akka.io leases."""
    emulator = emulator_with_crd(require_auth=True)
    emulator.add_service_account_token("tok", "default", "app")
    emulator.apply(_role(["get", "create", "update", "watch", "list"]))
    async with make_backend(emulator.transport(), token="tok") as backend:
        report = await backend.check()
    assert report.ok, str(report)
    assert not report.notes
    async with make_backend(emulator.transport(), token="tok", kind="akka.io/v1") as backend:
        akka = await backend.check()
    (problem,) = akka.problems
    assert "get, create, update, watch, list on leases.akka.io" in problem.what
    assert yaml.safe_load(problem.rule)["rules"][0]["apiGroups"] == ["akka.io"]
