"""kubectl against `trio-lease emulate` (TLS on loopback, a kubeconfig): the acceptance steps.

One emulator process serves the module (started as a user starts it, stopped with Ctrl-C); each
step is a test of its own, on objects of its own, so one failing step does not hide the others.
The steps skip, with the reason printed, only where kubectl is not installed (CI installs it).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASE_YML

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not installed (CI installs it)"
)


class Kubectl:
    """Runs kubectl with the emulator's kubeconfig; remembers the output of applying lease.yml."""

    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.applied = ""

    def run(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "--cache-dir",
             str(self.workdir / "kubectl-cache"), *args],
            input=stdin, capture_output=True, text=True, timeout=60, check=False,
        )
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout if ok else done.stdout + done.stderr

    def apply_text(self, text: str, *extra: str) -> str:
        return self.run("apply", *extra, "-f", "-", stdin=text)


def _lease(name: str, holder: str = "", labels: str = "") -> str:
    text = f"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {name}\n"
    if labels:
        text += f"  labels: {{{labels}}}\n"
    text += "spec:\n  leaseDurationSeconds: 15\n"
    if holder:
        text += f"  holderIdentity: {holder}\n"
    return text


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    """`python -m trio_lease.testing.kube emulate` (`trio-lease emulate`), lease.yml applied."""
    workdir = tmp_path_factory.mktemp("kubectl")
    kubeconfig = workdir / "kubeconfig"
    command = [sys.executable, "-m", "trio_lease.testing.kube", "emulate", "--port", "0",
               "--kubeconfig", str(kubeconfig)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    try:
        banner = b""
        while b"Ctrl-C" not in banner:
            line = process.stdout.readline()
            assert line, f"emulate exited: {banner.decode(errors='replace')}"
            banner += line
        assert b"https://127.0.0.1:" in banner
        client = Kubectl(kubeconfig, workdir)
        client.applied = client.run("apply", "-f", str(LEASE_YML))
        yield client
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def test_apply_lease_yml(kubectl: Kubectl) -> None:
    """kubectl apply -f lease.yml creates the CRD, the Role and the RoleBinding."""
    # Follows staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go (201 per object).
    assert "customresourcedefinition.apiextensions.k8s.io/leases.akka.io created" in (
        kubectl.applied
    )
    assert "role.rbac.authorization.k8s.io/trio-lease created" in kubectl.applied
    assert "rolebinding.rbac.authorization.k8s.io/trio-lease created" in kubectl.applied


def test_wait_for_established(kubectl: Kubectl) -> None:
    """kubectl wait --for=condition=Established sees the CRD's condition, then it is served."""
    # Follows staging/src/k8s.io/apiextensions-apiserver/pkg/controller/establish/
    # establishing_controller.go (the Established condition).
    out = kubectl.run("wait", "--for=condition=Established", "crd/leases.akka.io",
                      "--timeout=30s")
    assert "customresourcedefinition.apiextensions.k8s.io/leases.akka.io condition met" in out
    kubectl.apply_text(
        "apiVersion: akka.io/v1\nkind: Lease\nmetadata:\n  name: akka-lock\n"
        "spec:\n  owner: me\n  time: 1700000000000\n"
    )
    listed = kubectl.run("get", "leases.akka.io")
    assert listed.split()[:2] == ["NAME", "AGE"]
    assert "akka-lock" in listed


def test_get_leases_prints_the_holder_column(kubectl: Kubectl) -> None:
    """kubectl get leases prints NAME, HOLDER, AGE from the server's Table."""
    # Follows pkg/printers/internalversion/printers.go (printLease).
    kubectl.apply_text(_lease("held-lock", holder="pod-a") + "---\n" + _lease("free-lock"))
    lines = kubectl.run("get", "leases").splitlines()
    assert lines[0].split() == ["NAME", "HOLDER", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["held-lock"][1] == "pod-a"
    assert len(rows["free-lock"]) == 2  # an empty holder prints as blank, then the age


def test_get_leases_by_label(kubectl: Kubectl) -> None:
    """kubectl get leases -l selects by label on the server (?labelSelector=)."""
    # Follows staging/src/k8s.io/apiserver/pkg/storage/selection_predicate.go.
    kubectl.apply_text(
        _lease("team-a-lock", labels="team: a") + "---\n" + _lease("team-b-lock", labels="team: b")
    )
    assert kubectl.run("get", "leases", "-l", "team=a", "-o", "name").split() == [
        "lease.coordination.k8s.io/team-a-lock"
    ]
    assert kubectl.run("get", "leases", "-l", "team!=a,team", "-o", "name").split() == [
        "lease.coordination.k8s.io/team-b-lock"
    ]


def test_patch_json(kubectl: Kubectl) -> None:
    """kubectl patch --type=json applies an RFC 6902 patch to a Lease."""
    # Follows staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go (jsonPatcher).
    kubectl.apply_text(_lease("patched-lock", holder="pod-a"))
    patch = json.dumps([{"op": "replace", "path": "/spec/holderIdentity", "value": "pod-b"}])
    out = kubectl.run("patch", "lease", "patched-lock", "--type=json", "-p", patch)
    assert "lease.coordination.k8s.io/patched-lock patched" in out
    holder = kubectl.run("get", "lease", "patched-lock", "-o", "jsonpath={.spec.holderIdentity}")
    assert holder == "pod-b"


def test_apply_server_side(kubectl: Kubectl) -> None:
    """kubectl apply --server-side applies as field manager kubectl, then re-applies."""
    # Follows staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go (applyPatcher) and
    # staging/src/k8s.io/apimachinery/pkg/util/managedfields.
    out = kubectl.apply_text(_lease("ssa-lock", holder="pod-a"), "--server-side")
    assert "lease.coordination.k8s.io/ssa-lock serverside-applied" in out
    out = kubectl.apply_text(_lease("ssa-lock", holder="pod-c"), "--server-side")
    assert "lease.coordination.k8s.io/ssa-lock serverside-applied" in out
    shown = kubectl.run("get", "lease", "ssa-lock", "-o", "json", "--show-managed-fields")
    obj = json.loads(shown)
    assert obj["spec"]["holderIdentity"] == "pod-c"
    managers = {(m["manager"], m["operation"]) for m in obj["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers


def test_auth_can_i(kubectl: Kubectl) -> None:
    """kubectl auth can-i asks a SelfSubjectAccessReview and prints yes."""
    # Follows pkg/registry/authorization/selfsubjectaccessreview/rest.go.
    assert kubectl.run("auth", "can-i", "create", "leases").strip() == "yes"
    assert kubectl.run("auth", "can-i", "watch", "leases.akka.io", "-n", "default").strip() == (
        "yes"
    )
    assert kubectl.run("auth", "can-i", "get", "/healthz").strip() == "yes"


def test_auth_whoami(kubectl: Kubectl) -> None:
    """kubectl auth whoami prints the user of the kubeconfig's token from a SelfSubjectReview."""
    # Follows pkg/registry/authentication/selfsubjectreview/rest.go.
    out = kubectl.run("auth", "whoami")
    rows = {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines()[1:]}
    assert out.split()[:2] == ["ATTRIBUTE", "VALUE"]
    assert rows["Username"] == "emulator-admin"
    assert "system:masters" in rows["Groups"]


def test_auth_can_i_no_for_a_restricted_service_account(tmp_path: Path) -> None:
    """kubectl auth can-i prints no and exits 1 where the Role lacks the verb."""
    # Follows pkg/registry/authorization/selfsubjectaccessreview/rest.go and kubectl's
    # staging/src/k8s.io/kubectl/pkg/cmd/auth/cani.go (exit 1 when not allowed).
    emulator = KubeEmulator(require_auth=True)
    emulator.add_service_account_token("app-token", "default", "app")
    emulator.grant("system:serviceaccount:default:app", ["get", "list"])

    async def main() -> list[subprocess.CompletedProcess[str]]:
        async with emulator.serve() as server:
            kubeconfig = server.write_kubeconfig(tmp_path / "config", token="app-token")

            def can_i(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir",
                     str(tmp_path / "kubectl-cache"), "auth", "can-i", *args],
                    capture_output=True, text=True, timeout=60, check=False,
                )

            return [
                await anyio.to_thread.run_sync(can_i, *args)
                for args in (("list", "leases"), ("create", "leases"), ("get", "leases", "-n", "x"))
            ]

    listed, created, elsewhere = anyio.run(main)
    assert (listed.returncode, listed.stdout.strip()) == (0, "yes")
    assert (created.returncode, created.stdout.strip()) == (1, "no")
    assert (elsewhere.returncode, elsewhere.stdout.strip()) == (1, "no")
