"""`trio-lease check` as a process against the emulator served on loopback with TLS."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASE_YML

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time: the command is another process on a real socket."""
    backend: str = request.param
    return backend


def _check(kubeconfig: Path, *extra: str) -> tuple[int, str]:
    code = "import sys; from trio_lease._cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "check", "--kubeconfig", str(kubeconfig), *extra],
        capture_output=True, text=True, timeout=60, check=False,
    )
    return done.returncode, done.stdout + done.stderr


async def test_check_command_reports_missing_verbs_then_passes(tmp_path: Path) -> None:
    """Missing verbs exit 1 with the Role rule in --json; with lease.yml's Role it exits 0."""
    # The emulator answers SelfSubjectAccessReviews as
    # pkg/registry/authorization/selfsubjectaccessreview/rest.go does.
    emulator = KubeEmulator(require_auth=True)
    emulator.apply(LEASE_YML.read_text())
    emulator.add_service_account_token("app-secret-token", "default", "app")
    emulator.grant("system:serviceaccount:default:app", ["get", "watch"])
    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "config", token="app-secret-token")
        code, out = await anyio.to_thread.run_sync(_check, kubeconfig, "--json")
        assert code == 1, out
        report = json.loads(out)
        (problem,) = report["problems"]
        assert problem["what"].startswith("missing permissions: create, update, list on ")
        assert problem["rule"].endswith('verbs: ["create", "update", "list"]\n')
        code, text = await anyio.to_thread.run_sync(_check, kubeconfig)
        assert code == 1
        assert "the Role rule that grants them:" in text
        emulator.grant("system:serviceaccount:default:app", ["create", "update", "list"])
        code, text = await anyio.to_thread.run_sync(_check, kubeconfig)
    assert code == 0, text
    assert "OK: reachable, credentials accepted" in text
    assert "app-secret-token" not in out + text


def test_check_with_a_config_file_not_utf8_is_a_one_line_error(tmp_path: Path) -> None:
    """`check --config` on a file that is not UTF-8 exits 78 naming the file and the line,
    quoting none of its bytes (it printed a UnicodeDecodeError traceback)."""
    bad = tmp_path / "leases.toml"
    bad.write_bytes(b'[k]\nlease-class = "kubernetes"\ntoken = "s\xe9cret"\n')
    code = "import sys; from trio_lease._cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "check", "--config", str(bad), "--section", "k"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 78, done.stderr
    assert f"{bad} is not UTF-8 text (line 3)" in done.stderr
    assert "Traceback" not in done.stderr and "cret" not in done.stderr
