"""Endpoint URLs are checked where they enter: scheme, host and a port from 1 to 65535.

``EtcdBackend(["http://127.0.0.1:99999"])`` was accepted, and ``held()`` without a timeout then
retried forever (each connect raised ``OverflowError``); ``http://127.0.0.1:abc`` said "no
valid host". Kubernetes ``server`` URLs go through the same function (``trio_lease._endpoints``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_lease import LeaseConfigError
from trio_lease._endpoints import checked_url, url_problem
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.kubernetes import KubernetesBackend

BAD = {
    "http://127.0.0.1:99999": "has port '99999', which is not a number from 1 to 65535",
    "http://127.0.0.1:65536": "has port '65536', which is not a number from 1 to 65535",
    "http://127.0.0.1:0": "has port '0', which is not a number from 1 to 65535",
    "http://127.0.0.1:-5": "has port '-5', which is not a number from 1 to 65535",
    "http://127.0.0.1:abc": "has port 'abc', which is not a number from 1 to 65535",
    "ftp://127.0.0.1:2379": "must be an http:// or https:// URL",
    "127.0.0.1:2379": "must be an http:// or https:// URL",
    "http://:2379": "names no usable host",
}
GOOD = ["http://127.0.0.1:2379", "https://[::1]:2379", "http://localhost", "https://h:1"]


@pytest.mark.parametrize(("url", "said"), BAD.items(), ids=list(BAD))
def test_an_etcd_endpoint_with_a_bad_port_scheme_or_host_is_refused(url: str, said: str) -> None:
    """EtcdBackend([url]) raises LeaseConfigError naming `endpoints`, the URL and the rule."""
    with pytest.raises(LeaseConfigError) as caught:
        EtcdBackend([url])
    message = str(caught.value)
    assert message.startswith("etcd `endpoints`: ") and repr(url) in message and said in message
    assert "http://HOST:PORT" in message


@pytest.mark.parametrize("url", GOOD)
def test_a_good_endpoint_is_accepted(url: str) -> None:
    """Ports 1 to 65535, IPv6 brackets and no port at all are accepted."""
    assert EtcdBackend([url]).endpoints == (url,)
    assert url_problem(url) is None


def test_an_endpoint_never_shows_its_user_info() -> None:
    """A password in an endpoint's user info is not in the message."""
    with pytest.raises(LeaseConfigError) as caught:
        EtcdBackend(["http://user:s3cret@127.0.0.1:99999"])
    assert "s3cret" not in str(caught.value) and "***@127.0.0.1:99999" in str(caught.value)


@pytest.mark.parametrize(("url", "said"), BAD.items(), ids=list(BAD))
def test_a_kubernetes_server_goes_through_the_same_check(url: str, said: str) -> None:
    """A Kubernetes `server` with the same faults is refused with the same rule, naming it."""
    with pytest.raises(LeaseConfigError, match="server") as caught:
        KubernetesBackend.from_config({"server": url, "token": "t", "namespace": "default"})
    assert said.replace("an http:// or https://", "an https:// or http://") in str(caught.value)
    with pytest.raises(LeaseConfigError, match="--server"):
        checked_url(url, "--server", "the command line")


@pytest.mark.parametrize("url", ["https://127.0.0.1:99999", "https://127.0.0.1:-5"])
def test_a_kubeconfig_server_with_a_bad_port_is_refused(tmp_path: Path, url: str) -> None:
    """A kubeconfig cluster's `server` with a port out of range is refused when loaded."""
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters:\n- name: k\n  cluster:\n    server: {url}\n"
        "users:\n- name: u\n  user:\n    token: t\n"
        "contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
    )
    with pytest.raises(LeaseConfigError) as caught:
        KubernetesBackend.from_config({"kubeconfig": str(kubeconfig)})
    message = str(caught.value)
    assert "server" in message and "not a number from 1 to 65535" in message
    assert str(kubeconfig) in message
