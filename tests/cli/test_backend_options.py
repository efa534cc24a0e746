"""Choosing the backend from its options, SQLite paths, and one line for every bad value."""

from __future__ import annotations

import pytest
import yaml

from trio_lease.testing.kube import KubeEmulator

from .conftest import FAST, Cli


def test_an_explicit_sqlite_path_in_a_missing_folder_is_refused(cli: Cli) -> None:
    """--sqlite-path (or TRIO_LEASE_SQLITE_PATH) whose folder does not exist exits 78 naming
    the path, and creates nothing: a typo must not make a second, empty database."""
    typo = cli.tmp / "no-such-dir" / "leases.sqlite3"
    _, child = cli.child("never")
    flag = cli.run("run", "job", "--sqlite-path", str(typo), *FAST, "--", *child)
    assert flag.returncode == 78
    assert flag.stderr == (
        f"trio-lease: --sqlite-path: the folder of {str(typo)!r} does not exist "
        f"({str(typo.parent)!r}); create it, or fix the path\n"
    )
    env = cli.env | {"TRIO_LEASE_SQLITE_PATH": str(typo)}
    variable = cli.run("status", env=env)
    assert variable.returncode == 78
    assert variable.stderr.startswith("trio-lease: TRIO_LEASE_SQLITE_PATH: the folder of")
    assert not typo.parent.exists()


def test_the_default_sqlite_location_is_created(cli: Cli) -> None:
    """Without a path the per-user default is used, its folders created."""
    env = {k: v for k, v in cli.env.items() if k != "TRIO_LEASE_SQLITE_PATH"}
    _, child = cli.child("once", sleep=0)
    assert cli.run("run", "job", *FAST, "--", *child, env=env).returncode == 0
    assert list((cli.tmp / "state").rglob("*.sqlite3"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--kubeconfig", "kc", "--endpoints", "http://127.0.0.1:1"],
            "--endpoints, --kubeconfig name different backends (etcd and kubernetes)",
        ),
        (
            ["--backend", "sqlite", "--namespace", "jobs"],
            "--namespace: not an option of the sqlite backend (--backend=sqlite)",
        ),
        (
            ["--sqlite-path", "x.sqlite3", "--endpoints", "http://127.0.0.1:1"],
            "--sqlite-path and --endpoints name different backends",
        ),
        (
            ["--config", "leases.toml", "--section", "s", "--namespace", "jobs"],
            "--namespace: with --config the section configures the backend",
        ),
    ],
    ids=["two-backends", "not-its-option", "sqlite-and-etcd", "with-config"],
)
def test_options_of_another_backend_are_refused(
    cli: Cli, args: list[str], message: str
) -> None:
    """Options that name two backends, or not the one --backend names: one line, exit 78."""
    (cli.tmp / "leases.toml").write_text('[s]\nlease-class = "memory"\n')
    result = cli.run("status", "job", *args)
    assert result.returncode == 78
    assert result.stderr.startswith(f"trio-lease: {message}")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["run", "job", "--timeout", "10 sec", "--", "true"],
        ["run", "job", "--anyio-backend", "curio", "--", "true"],
        ["handover", "job", "--timeout", "soon"],
        ["manifests", "--lease-kind", "v1"],
        ["manifests", "--namespace", "Team_A"],
    ],
    ids=["timeout", "choice", "handover-timeout", "lease-kind", "namespace"],
)
def test_every_bad_option_value_is_one_line_and_exit_78(cli: Cli, args: list[str]) -> None:
    """A value an option refuses exits 78 with one line naming the option, no usage text."""
    result = cli.run(*args)
    assert result.returncode == 78
    [line] = result.stderr.splitlines()
    flag = next(arg for arg in reversed(args[: args.index("--")] if "--" in args else args)
                if arg.startswith("--"))
    assert line.startswith(f"trio-lease: {flag}: ")


def test_a_missing_option_value_stays_a_usage_error(cli: Cli) -> None:
    """An option without its value is a usage error (2), with the usage text."""
    result = cli.run("status", "--timeout")
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_settings_errors_list_one_failed_rule_per_line(cli: Cli) -> None:
    """Timings that break several rules: exit 78, one rule per line after a heading."""
    result = cli.run(
        "status", "--heartbeat-timeout", "1s", "--heartbeat-interval", "2s",
        "--lease-operation-timeout", "3s",
    )
    assert result.returncode == 78
    heading, *rules = result.stderr.splitlines()
    assert heading == "trio-lease: invalid lease settings:"
    assert [rule.split(" must")[0] for rule in rules[:2]] == [
        "  - heartbeat_interval",
        "  - lease_operation_timeout",
    ]
    assert rules[2].startswith("  - the safety inequality")


def test_owner_help_names_its_variables(cli: Cli) -> None:
    """run's and handover's --owner help names TRIO_LEASE_OWNER and POD_NAME."""
    for command in ("run", "handover"):
        text = " ".join(cli.run(command, "--help").stdout.split())
        assert "TRIO_LEASE_OWNER, else POD_NAME, else the hostname" in text


def _documents(text: str) -> dict[str, dict[str, object]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


def test_manifests_for_the_built_in_lease_have_no_crd(cli: Cli) -> None:
    """manifests --namespace --service-account: a Role for coordination.k8s.io leases only
    and its RoleBinding, in that namespace for that account; no CRD, no Events rule."""
    result = cli.run("manifests", "--namespace", "jobs", "--service-account", "worker")
    assert result.returncode == 0, result.stderr
    docs = _documents(result.stdout)
    assert set(docs) == {"Role", "RoleBinding"}
    assert docs["Role"]["metadata"] == {"name": "trio-lease", "namespace": "jobs"}
    assert docs["Role"]["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update", "watch", "list"],
        }
    ]
    assert docs["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "worker", "namespace": "jobs"}
    ]


def test_manifests_for_akka_add_the_crd_and_events_add_their_rule(cli: Cli) -> None:
    """--lease-kind akka.io/v1 adds the CRD and the akka.io rule only; --events the Events
    rule; the Kubernetes API emulator accepts the result."""
    result = cli.run("manifests", "--lease-kind", "akka.io/v1", "--events", "--namespace", "jobs")
    assert result.returncode == 0, result.stderr
    docs = _documents(result.stdout)
    assert set(docs) == {"CustomResourceDefinition", "Role", "RoleBinding"}
    groups = [rule["apiGroups"] for rule in docs["Role"]["rules"]]  # type: ignore[attr-defined]
    assert groups == [["akka.io"], ["events.k8s.io"]]
    emulator = KubeEmulator(namespaces=["jobs"])
    emulator.apply(result.stdout)  # a manifest the API server accepts (CRD, Role, binding)


def test_a_command_line_option_wins_over_another_backends_variable(cli: Cli) -> None:
    """--sqlite-path on the command line selects SQLite although TRIO_LEASE_ENDPOINTS is set
    (the variable alone would select etcd)."""
    env = cli.env | {"TRIO_LEASE_ENDPOINTS": "http://127.0.0.1:1"}
    db = cli.tmp / "chosen.sqlite3"
    _, child = cli.child("once", sleep=0)
    result = cli.run("run", "job", "--sqlite-path", str(db), *FAST, "--", *child, env=env)
    assert result.returncode == 0, result.stderr
    assert db.exists()
    refused = cli.run("status", "job", env=env)
    assert refused.returncode == 69
    assert "connection refused by 127.0.0.1:1" in refused.stderr
