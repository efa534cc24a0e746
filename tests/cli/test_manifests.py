"""`trio-lease manifests`: lease.yml for installed users, one copy in the package."""

from __future__ import annotations

from pathlib import Path

from trio_lease._cli._manifests import lease_yml

from .conftest import Cli

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ROOT / "trio_lease" / "manifests" / "lease.yml"


def test_manifests_prints_lease_yml_byte_for_byte(cli: Cli) -> None:
    """`trio-lease manifests` writes exactly the packaged lease.yml to stdout and exits 0."""
    running = cli.start("manifests")
    assert running.wait() == 0, running.stderr()
    assert running.out.read_bytes() == PACKAGED.read_bytes()
    assert running.stderr() == ""


def test_manifests_is_listed_in_help(cli: Cli) -> None:
    """`trio-lease --help` lists the manifests command."""
    result = cli.run("--help")
    assert result.returncode == 0
    assert "manifests" in result.stdout


def test_root_lease_yml_is_a_link_to_the_packaged_file() -> None:
    """The repository's lease.yml is a relative link to the one packaged copy."""
    link = ROOT / "lease.yml"
    assert link.is_symlink()
    assert not Path(link.readlink()).is_absolute()
    assert link.resolve() == PACKAGED


def test_packaged_lease_yml_holds_the_crd_and_the_rbac() -> None:
    """The packaged lease.yml defines the akka.io CRD, a Role and a RoleBinding."""
    text = lease_yml().decode()
    for kind in ("CustomResourceDefinition", "Role", "RoleBinding"):
        assert f"\nkind: {kind}\n" in text
    assert "name: leases.akka.io" in text
