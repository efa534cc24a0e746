"""Bad inputs from the environment, options and files: exit 78 (or 2 for argparse's usage
errors) with one line naming where the value came from, never a traceback or a secret.

Real `trio-lease` processes, except where the parser alone decides (the handover timeout).
"""

from __future__ import annotations

import pytest

from trio_lease._cli._main import build_parser

from .conftest import Cli, Result

EXIT_CONFIG = 78
NOBODY = "~no_such_user_trio_lease_test/leases.sqlite3"
PASSWORD = "S3CRET-PASSWORD"


def _refused(result: Result, code: int = EXIT_CONFIG) -> str:
    """The one line a refused command printed (it exited ``code`` without a traceback)."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == code, result.stderr
    return result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("TRIO_LEASE_ANYIO_BACKEND", "foo", "TRIO_LEASE_ANYIO_BACKEND='foo': use asyncio or trio"),
        ("TRIO_LEASE_TIMEOUT", "0", "TRIO_LEASE_TIMEOUT='0': durations must be positive"),
        ("TRIO_LEASE_TIMEOUT", "soon", "TRIO_LEASE_TIMEOUT='soon': cannot read"),
        ("TRIO_LEASE_HEALTH_PORT", "70000", "TRIO_LEASE_HEALTH_PORT='70000': a port is"),
        ("TRIO_LEASE_METRICS_PORT", "-1", "TRIO_LEASE_METRICS_PORT='-1': a port is"),
    ],
    ids=["anyio-backend", "timeout-zero", "timeout-text", "health-port", "metrics-port"],
)
def test_a_bad_environment_value_names_the_variable(
    cli: Cli, variable: str, value: str, named: str
) -> None:
    """A bad TRIO_LEASE_* value exits 78 naming the variable (argparse checks neither type nor
    choices on a default taken from the environment)."""
    result = cli.run("run", "job", "--", "true", env=cli.env | {variable: value})
    assert named in _refused(result)
    assert not cli.db.exists()


def test_handover_takes_its_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`handover` reads TRIO_LEASE_TIMEOUT like `run` (it waited forever, ignoring it)."""
    monkeypatch.setenv("TRIO_LEASE_TIMEOUT", "2m")
    assert build_parser().parse_args(["handover", "job"]).timeout == 120.0
    assert build_parser().parse_args(["run", "job"]).timeout == 120.0
    assert build_parser().parse_args(["handover", "job", "--timeout", "3"]).timeout == 3.0


@pytest.mark.parametrize("source", ["option", "environment"])
def test_an_sqlite_path_with_an_unknown_user_names_its_source(cli: Cli, source: str) -> None:
    """`~nobody/...` as the SQLite path exits 78 naming --sqlite-path or the variable."""
    if source == "option":
        result = cli.run("status", "job", "--sqlite-path", NOBODY)
        named = "--sqlite-path: cannot expand '~no_such_user_trio_lease_test'"
    else:
        result = cli.run("status", "job", env=cli.env | {"TRIO_LEASE_SQLITE_PATH": NOBODY})
        named = "TRIO_LEASE_SQLITE_PATH: cannot expand '~no_such_user_trio_lease_test'"
    assert named in _refused(result)


def test_a_backend_name_from_the_environment_is_named_as_such(cli: Cli) -> None:
    """An unknown TRIO_LEASE_BACKEND is reported under the variable's name, not --backend's."""
    result = cli.run("status", "job", env=cli.env | {"TRIO_LEASE_BACKEND": "nope"})
    assert "TRIO_LEASE_BACKEND: unknown lease-class 'nope'" in _refused(result)


def test_a_heartbeat_timeout_no_store_can_keep_is_refused_naming_it(cli: Cli) -> None:
    """`--heartbeat-timeout 1e12` exits 78 naming the setting, before anything is written."""
    result = cli.run("run", "job", "--no-wait", "--heartbeat-timeout", "1e12", "--", "true")
    assert "heartbeat_timeout must be at most 2147483647 s" in _refused(result)
    assert not cli.db.exists()


def _kube_section(cli: Cli, **keys: str) -> list[str]:
    """``--config FILE --section k`` for a kubernetes section with ``keys``."""
    lines = ['lease-class = "kubernetes"', 'heartbeat-timeout = "3s"', 'request-timeout = "1s"']
    lines += [f'{key.replace("_", "-")} = "{value}"' for key, value in keys.items()]
    config = cli.tmp / "kube.toml"
    config.write_text("[k]\n" + "\n".join(lines) + "\n")
    return ["--config", str(config), "--section", "k"]


@pytest.mark.parametrize("command", ["status", "check"])
@pytest.mark.parametrize("server", ["https://127.0.0.1:abc", "https://127.0.0.1:99999"])
def test_a_malformed_server_url_exits_78_at_once(cli: Cli, command: str, server: str) -> None:
    """A bad port in `server` is a configuration error, not a traceback or a backend failure."""
    args = [command, *(["job"] if command == "status" else [])]
    result = cli.run(*args, *_kube_section(cli, server=server, token="t0k3n-value"))
    assert "the server URL" in _refused(result)


def test_check_never_shows_the_servers_password(cli: Cli) -> None:
    """`check` on a server URL with user info prints the server without it."""
    server = f"https://admin:{PASSWORD}@127.0.0.1:1"
    result = cli.run("check", *_kube_section(cli, server=server, token="t0k3n-value"))
    assert "https://127.0.0.1:1" in result.stdout
    assert PASSWORD not in result.stdout + result.stderr


def test_an_exec_env_name_with_equals_exits_78_naming_the_field(cli: Cli) -> None:
    """A kubeconfig exec env name with '=' is a configuration error naming exec.env."""
    kubeconfig = cli.tmp / "kc.yaml"
    kubeconfig.write_text(
        'apiVersion: v1\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\n'
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
        "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1,"
        ' command: /bin/true, env: [{name: "A=B", value: "v"}]}}}]\n'
    )
    result = cli.run("status", "job", *_kube_section(cli, kubeconfig=str(kubeconfig)))
    assert "exec.env[0].name" in _refused(result)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--port", "99999"], "trio-lease: --port: a port is a number from 0 to 65535"),
        (["--port", "-5"], "trio-lease: --port: a port is a number from 0 to 65535"),
        (["--namespace", "Team_A"], "trio-lease: --namespace: 'Team_A' is not a valid namespace"),
        (["--crd-establish-delay", "-1"], "trio-lease: --crd-establish-delay: must be seconds"),
    ],
    ids=["port-too-big", "port-negative", "namespace", "crd-delay"],
)
def test_emulate_refuses_bad_arguments_as_configuration_errors(
    cli: Cli, args: list[str], named: str
) -> None:
    """`emulate` checks its arguments before starting anything: one line naming the option,
    exit 78, as every bad option value of every command."""
    assert _refused(cli.run("emulate", *args)).startswith(named)


def test_emulate_with_a_kubeconfig_it_cannot_write_exits_78(cli: Cli) -> None:
    """A kubeconfig in a missing folder is one line naming --kubeconfig and exit 78."""
    missing = cli.tmp / "missing-dir" / "kc"
    stderr = _refused(cli.run("emulate", "--kubeconfig", str(missing)))
    assert f"cannot write the kubeconfig {str(missing)!r} (--kubeconfig)" in stderr
