"""trio_lease.metrics: Prometheus metrics of real leases, in a real registry.

The lease tests run on virtual time (memory store, faults injected by FaultyBackend); the scrape
test serves the registry over a real socket on both loops and parses the text format with
prometheus_client's own parser.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import anyio
import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from trio_lease import Lease, LeaseInfo
from trio_lease.backends.memory import MemoryBackend
from trio_lease.health import HealthServer
from trio_lease.metrics import LOSS_CAUSES, RENEWAL_CAUSES, PrometheusMetrics, cause_category
from trio_lease.testing import FaultyBackend

from ._observed import fail_until_lost, lose, takeover, wait_behind_a_holder
from .conftest import REAL_TIME_SETTINGS, SETTINGS

pytestmark = pytest.mark.anyio


def value(registry: CollectorRegistry, metric: str, **labels: str) -> float:
    """A sample's value; 0 when the series does not exist (yet)."""
    return registry.get_sample_value(metric, labels) or 0.0


def observed(registry: CollectorRegistry) -> tuple[CollectorRegistry, PrometheusMetrics]:
    return registry, PrometheusMetrics(registry)


def test_importing_trio_lease_or_its_health_module_does_not_import_prometheus_client() -> None:
    """prometheus_client is loaded only by trio_lease.metrics (the extra stays optional)."""
    code = (
        "import sys, trio_lease, trio_lease.health, trio_lease._cli._main; "
        "assert 'prometheus_client' not in sys.modules, 'prometheus_client was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_without_prometheus_client_the_import_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Importing trio_lease.metrics without prometheus_client says `pip install
    'trio_lease[prometheus]'`, quoted so that zsh does not expand the brackets."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now fails
    monkeypatch.delitem(sys.modules, "trio_lease.metrics")
    with pytest.raises(ImportError, match=r"pip install 'trio_lease\[prometheus\]'"):
        importlib.import_module("trio_lease.metrics")


CAUSES = [
    ("no renewal was confirmed before the holder's deadline", "deadline"),
    ("no renewal was confirmed before the holder's deadline (last error: timed out)", "deadline"),
    ("the lease record was deleted (seen on the watch)", "deleted"),
    ("taken over by 'b@1'", "taken_over"),
    (
        "the record was rewritten with fencing token 5 (ours was 4) and holder '(none)'",
        "taken_over",
    ),
    ("timed out", "timeout"),
    ("conflict", "conflict"),
    ("the record is unreadable (bad json)", "unreadable"),
    ("the answer to a renewal did not confirm it (version)", "unconfirmed"),
    ("no renewal was confirmed", "unconfirmed"),
    ("BackendUnavailable: injected failure before update", "unavailable"),
    ("BackendAuthError: 403 on leases", "auth"),
    ("OSError: [Errno 111] Connection refused", "error"),
    ("something new", "other"),
    ("", "other"),
]


@pytest.mark.parametrize(("cause", "category"), CAUSES)
def test_cause_texts_map_to_a_bounded_category(cause: str, category: str) -> None:
    """Each cause text the core tells maps to one category of the fixed sets; unknown is other."""
    assert cause_category(cause) == category
    assert category in LOSS_CAUSES + RENEWAL_CAUSES


async def test_held_gauge_is_1_while_held_and_0_after_release() -> None:
    """trio_lease_held{name} is 1 inside held() and 0 after; releases_total{written=true}."""
    registry, metrics = observed(CollectorRegistry())
    lease = Lease("job", "me", MemoryBackend(), SETTINGS, observers=[metrics])
    async with lease.held():
        assert value(registry, "trio_lease_held", name="job") == 1
        await anyio.sleep(SETTINGS.heartbeat_interval * 3 + 0.1)
    assert value(registry, "trio_lease_held", name="job") == 0
    assert value(registry, "trio_lease_releases_total", name="job", written="true") == 1
    assert value(registry, "trio_lease_acquisitions_total", name="job") == 1
    assert value(registry, "trio_lease_renewal_latency_seconds_count", name="job") == 3


async def test_held_gauge_stays_1_while_another_owner_of_the_process_still_holds() -> None:
    """Two holds of one name in the process (two stores): the gauge drops to 0 only when the
    last one ends."""
    registry, metrics = observed(CollectorRegistry())
    first = Lease("job", "a", MemoryBackend(), SETTINGS, observers=[metrics])
    second = Lease("job", "b", MemoryBackend(), SETTINGS, observers=[metrics])
    async with second.held():
        async with first.held():
            assert value(registry, "trio_lease_held", name="job") == 1
        assert value(registry, "trio_lease_held", name="job") == 1
    assert value(registry, "trio_lease_held", name="job") == 0
    assert value(registry, "trio_lease_acquisitions_total", name="job") == 2


async def test_handover_wait_is_observed_in_the_histogram() -> None:
    """A contender that waited ~3.9 s for the holder's release lands in the (2.5, 5] bucket."""
    registry, metrics = observed(CollectorRegistry())

    def no_holder_yet() -> None:
        # Waiting: the series exists, at 0 (so "no leader" queries see it).
        assert registry.get_sample_value("trio_lease_held", {"name": "job"}) == 0

    await wait_behind_a_holder(metrics, meanwhile=no_holder_yet)
    bucket = "trio_lease_handover_wait_seconds_bucket"
    assert value(registry, bucket, name="job", le="2.5") == 0
    assert value(registry, bucket, name="job", le="5.0") == 1
    assert value(registry, "trio_lease_handover_wait_seconds_sum", name="job") == pytest.approx(
        3.9, abs=0.1
    )


async def test_a_takeover_counts_a_loss_taken_over_and_drops_the_gauge() -> None:
    """A foreign takeover: losses_total{cause="taken_over"} 1, held 0, no release counted."""
    registry, metrics = observed(CollectorRegistry())
    await lose(Lease("job", "me", MemoryBackend(), SETTINGS, observers=[metrics]), takeover)
    assert value(registry, "trio_lease_losses_total", name="job", cause="taken_over") == 1
    assert value(registry, "trio_lease_held", name="job") == 0
    assert value(registry, "trio_lease_releases_total", name="job", written="true") == 0


async def test_a_deleted_record_counts_a_loss_deleted() -> None:
    """The record deleted under the holder: losses_total{cause="deleted"}."""
    registry, metrics = observed(CollectorRegistry())
    lease = Lease("job", "me", MemoryBackend(), SETTINGS, observers=[metrics])
    await lose(lease, lambda store: store.delete("job"))
    assert value(registry, "trio_lease_losses_total", name="job", cause="deleted") == 1


async def test_a_failing_store_counts_renewal_failures_then_a_deadline_loss() -> None:
    """Every request failing: renewal_failures_total{cause="unavailable"} rises, then one loss
    with cause="deadline"; no free text ever becomes a label value."""
    registry, metrics = observed(CollectorRegistry())
    await fail_until_lost(metrics)
    failures = value(registry, "trio_lease_renewal_failures_total", name="job", cause="unavailable")
    assert failures >= 2
    assert value(registry, "trio_lease_losses_total", name="job", cause="deadline") == 1
    causes = {
        sample.labels["cause"]
        for family in registry.collect()
        for sample in family.samples
        if "cause" in sample.labels
    }
    assert causes <= set(LOSS_CAUSES + RENEWAL_CAUSES)


async def test_hung_renewals_count_as_timeouts() -> None:
    """A store that stops answering: renewal failures with cause="timeout"."""
    registry, metrics = observed(CollectorRegistry())
    backend = await fail_until_lost(metrics, FaultyBackend.pause)
    backend.resume()
    assert value(registry, "trio_lease_renewal_failures_total", name="job", cause="timeout") >= 1


def test_a_custom_namespace_prefixes_every_metric() -> None:
    """namespace="app" names the metrics app_held, app_losses_total, ..."""
    registry = CollectorRegistry()
    PrometheusMetrics(registry, namespace="app")
    names = {family.name for family in registry.collect()}
    assert {"app_held", "app_losses", "app_renewal_latency_seconds"} <= names


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])  # real time: real sockets
async def test_a_scrape_over_http_parses_and_shows_the_held_lease() -> None:
    """GET /metrics of a served registry parses with prometheus_client's parser and shows
    trio_lease_held 1 while held, 0 after."""
    registry, metrics = observed(CollectorRegistry())
    lease = Lease("job", "me", MemoryBackend(), REAL_TIME_SETTINGS, observers=[metrics])

    async def scrape(client: httpx.AsyncClient, port: int) -> dict[str, float]:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"] == CONTENT_TYPE_LATEST
        return {
            f"{sample.name}{sorted(sample.labels.items())}": sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }

    held = "trio_lease_held[('name', 'job')]"
    async with HealthServer(metrics=registry) as server, httpx.AsyncClient() as client:
        async with lease.held():
            assert (await scrape(client, server.port))[held] == 1
        after = await scrape(client, server.port)
        assert after[held] == 0
        assert after["trio_lease_acquisitions_total[('name', 'job')]"] == 1
        health = await client.get(f"http://127.0.0.1:{server.port}/healthz")
        assert health.status_code == 404  # metrics only: no health observer given


def test_key_failures_are_counted_per_key_lease() -> None:
    """key_failed (a run_partitioned key's fn raised) counts trio_lease_key_failures_total for
    the key's lease name."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    info = LeaseInfo("jobs.k1", "a", "a_1")
    for failures in (1, 2):
        metrics.key_failed(info, key="k1", error=RuntimeError("x"), failures=failures, retry_in=1.0)
    value = registry.get_sample_value("trio_lease_key_failures_total", {"name": "jobs.k1"})
    assert value == 2
