"""/healthz, /livez and /readyz over a real socket, with kubectl get --raw.

Follows staging/src/k8s.io/apiserver/pkg/server/healthz/healthz.go (``handleRootHealth``:
``ok``, or with ``?verbose`` a line per check and ``<name> check passed``; ``exclude``; one
check per sub-path) and plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go
(``system:public-info-viewer``: anyone may read them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import anyio_backend as anyio_backend
from ._helpers import needs_kubectl, run_kubectl, served

pytestmark = pytest.mark.anyio

HOOKS = [
    "[+]poststarthook/start-apiextensions-informers ok",
    "[+]poststarthook/start-apiextensions-controllers ok",
    "[+]poststarthook/crd-informer-synced ok",
    "[+]poststarthook/rbac/bootstrap-roles ok",
]


async def test_health_endpoints_answer_ok_and_verbose() -> None:
    """ok; ?verbose lists the checks; exclude marks one and warns of unknown ones; a sub-path
    runs one check; anonymous requests are answered even where a token is required."""
    emulator = KubeEmulator(require_auth=True)
    async with served(emulator) as (_, http):
        plain = {name: await http.get(f"/{name}") for name in ("healthz", "livez", "readyz")}
        verbose = await http.get("/readyz?verbose&exclude=etcd&exclude=nope&exclude=log")
        one = await http.get("/livez/etcd")
        unknown = await http.get("/readyz/nope")
        bad_token = await http.get("/readyz", headers={"Authorization": "Bearer wrong"})
    for response in plain.values():
        assert (response.status_code, response.text) == (200, "ok")
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        assert response.headers["x-content-type-options"] == "nosniff"
    assert verbose.text.splitlines() == [
        "[+]ping ok", "[+]log excluded: ok", "[+]etcd excluded: ok", "[+]etcd-readiness ok",
        "[+]informer-sync ok", *HOOKS, "[+]shutdown ok",
        'warn: some health checks cannot be excluded: no matches for "nope"',
        "readyz check passed",
    ]
    assert (one.status_code, one.text) == (200, "ok")
    assert (unknown.status_code, unknown.text) == (404, "404 page not found\n")
    assert bad_token.status_code == 401


@needs_kubectl
async def test_kubectl_get_raw_livez_verbose(tmp_path: Path) -> None:
    """kubectl get --raw '/livez?verbose' prints the checks."""
    emulator = KubeEmulator()
    emulator.add_token("admin-token", "admin", ("system:masters",))
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        livez = await run_kubectl(config, "get", "--raw", "/livez?verbose")
    assert livez.stdout.splitlines() == [
        "[+]ping ok", "[+]log ok", "[+]etcd ok", *HOOKS, "livez check passed",
    ], livez.stderr
