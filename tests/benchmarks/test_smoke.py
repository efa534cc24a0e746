"""The benchmark programs run end to end (smoke size) and write well-formed results."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _finite_or_nan(value: Any) -> bool:
    return isinstance(value, (int, float)) and (math.isfinite(value) or math.isnan(value))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run ``python -m tools.benchmarks --smoke`` once and load what it wrote."""
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, "-m", "tools.benchmarks", "--smoke", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=360, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document: dict[str, Any] = json.loads((out / "smoke.json").read_text())
    document["_markdown"] = (out / "smoke.md").read_text()
    return document


def test_smoke_run_records_machine_and_parameters(smoke: dict[str, Any]) -> None:
    """The results name the machine, versions, load and the plan they ran."""
    machine = smoke["machine"]
    assert machine["mode"] == "smoke"
    assert machine["cores"] >= 1
    assert len(machine["loadavg_start"]) == 3 and len(machine["loadavg_end"]) == 3
    assert {"trio_lease", "httpx", "kubernetes_asyncio"} <= set(machine["versions"])
    assert smoke["plan"]["steady"]["L"] > 0


def test_smoke_run_has_every_benchmark_for_both_libraries(smoke: dict[str, Any]) -> None:
    """Steady, capacity, pool, handover, cold, loss and failover each have both libraries."""
    results = smoke["results"]
    assert {"steady", "capacity", "pool", "handover", "cold", "loss", "failover"} <= set(results)
    for key in ("steady", "handover", "cold", "loss", "failover"):
        assert {"ours", "theirs"} <= set(results[key]), key


def test_smoke_steady_figures_are_well_formed(smoke: dict[str, Any]) -> None:
    """Each steady run reports held leases, renewals, CPU per renewal (for trio_lease's rows,
    with the garbage collector's part of it) and request counts."""
    for lib, step in smoke["results"]["steady"].items():
        assert step["held"] == step["params"]["n"], lib
        assert step["renewals"] > 0, lib
        assert _finite_or_nan(step["client_cpu_us_per_renewal"]), lib
        if lib not in ("ours-sqlite", "ours-etcd"):  # only the emulator counts requests
            assert step["requests_per_renewal"] >= 1.0, lib
        if lib.startswith("ours"):  # trio_lease's rows say what the collector took of it
            assert 0.0 <= step["client_gc_us_per_renewal"] <= step["client_cpu_us_per_renewal"]
            assert len(step["gc_collections"]) == 3, lib


def test_smoke_latencies_are_summaries(smoke: dict[str, Any]) -> None:
    """Every latency has n, p50, p90, p99, max and mean, with n matching the raw samples."""
    fields = {"handover": "handover_ms", "cold": "cold_ms", "loss": "inject_to_cancel_ms",
              "failover": "excess_over_L_ms"}
    for key, field in fields.items():
        for lib, result in smoke["results"][key].items():
            summary = result[field]
            assert set(summary) == {"n", "p50", "p90", "p99", "max", "mean"}, (key, lib)
            assert summary["n"] > 0, (key, lib)
            assert all(_finite_or_nan(v) for v in summary.values()), (key, lib)


def test_smoke_markdown_has_the_headline_table(smoke: dict[str, Any]) -> None:
    """The Markdown report starts with the ratio table against kubernetes_asyncio."""
    markdown = smoke["_markdown"]
    header = "| metric | trio_lease | kubernetes_asyncio | ratio (> 1: trio_lease better) |"
    assert header in markdown
    assert "requests per renewal" in markdown


def test_smoke_run_measures_etcd_or_says_why_not(smoke: dict[str, Any]) -> None:
    """With an etcd binary the etcd rows are there; without one the run records the reason."""
    from tests.etcd_server import etcd_binary

    if etcd_binary() is None:
        assert "etcd binary not found" in smoke["etcd_skipped"]
        return
    results = smoke["results"]
    assert results["steady"]["ours-etcd"]["renewals"] > 0
    assert {"handover", "cold"} <= {key for key in results if "etcd" in results[key]}


def test_smoke_takeover_runs_all_three_libraries(smoke: dict[str, Any]) -> None:
    """Takeover → cancelled is measured for trio_lease, kubernetes_asyncio and the official
    client's elector, each with a summary of the samples."""
    takeover = smoke["results"]["takeover"]
    assert set(takeover) == {"ours", "theirs", "official"}
    for lib, result in takeover.items():
        summary = result["inject_to_cancel_ms"]
        assert summary["n"] == result["params"]["n"], lib
        assert all(_finite_or_nan(v) for v in summary.values()), lib


def test_smoke_waiters_report_open_watch_streams(smoke: dict[str, Any]) -> None:
    """The waiting-contenders run counts the server's open watch streams while all wait and
    none acquires (the holder's record lasts an hour)."""
    assert set(smoke["results"]["waiters"]) == {"ours", "ours-poll-L"}
    for waiters in smoke["results"]["waiters"].values():
        assert waiters["waiting"] == waiters["params"]["n"]
        assert waiters["acquired"] == 0
        streams = waiters["open_watches"]
        assert set(streams) == {"all", "named", "selected"}
        assert 1 <= streams["all"] <= waiters["waiting"]
        assert waiters["requests_per_s"] >= 0


def test_smoke_replicas_compare_requests_per_hour_at_one_failover_bound(
    smoke: dict[str, Any],
) -> None:
    """Every library's three-replica run has requests per hour by method, and all were run at
    the same worst-case crash failover."""
    replicas = smoke["results"]["replicas"]
    assert set(replicas) == {"ours", "ours-poll-L", "theirs", "official"}
    assert len({r["failover_bound_s"] for r in replicas.values()}) == 1
    for lib, result in replicas.items():
        assert result["requests_per_hour"] > 0, lib
        assert result["by_method_per_hour"].get("PUT", 0) > 0, lib  # the holder renewed


def test_smoke_renewal_cpu_comes_with_a_profile(smoke: dict[str, Any]) -> None:
    """The CPU-per-renewal run has a second, profiled run whose samples are shares by module."""
    cpu = smoke["results"]["renewal_cpu"]
    assert cpu["ours"]["renewals"] > 0
    profile = cpu["ours-profiled"]["raw"]["profile"]
    assert profile["busy_samples"] + profile["idle_samples"] > 0, profile.get("stderr")
    assert all(0 <= share <= 100 for _, share in profile["self_pct_by_module"])
    assert "requests per hour" in smoke["_markdown"]


def _tool_lines(module: str, *args: str) -> dict[str, float]:
    """Run ``python -m module *args`` (a layer or floor tool); its medians by kind."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    medians: dict[str, float] = {}
    for line in done.stdout.splitlines():
        kind, _, rest = line.partition(": median ")
        if rest:
            medians[kind] = float(rest.split(" µs", 1)[0])
    return medians


def test_layers_tool_prints_a_positive_median_for_every_layer() -> None:
    """``tools.benchmarks._layers`` runs each layer against the emulator, smoke size."""
    from tools.benchmarks._layers import LAYERS

    medians = _tool_lines(
        "tools.benchmarks._layers", "--rounds", "1", "--concurrency", "2", "--count", "10"
    )
    assert set(medians) == set(LAYERS)
    assert all(value > 0 for value in medians.values()), medians


def test_floor_tool_prints_a_positive_median_for_every_rhythm() -> None:
    """``tools.benchmarks._floor`` runs each rhythm (timers only included), smoke size."""
    from tools.benchmarks._floor import RHYTHMS

    medians = _tool_lines(
        "tools.benchmarks._floor", "--rounds", "1", "--leases", "20", "--interval", "0.2",
        "--window", "1",
    )
    assert set(medians) == set(RHYTHMS)
    assert all(value > 0 for value in medians.values()), medians


def test_smoke_run_measures_uvloop_or_says_why_not(smoke: dict[str, Any]) -> None:
    """With uvloop installed the steady step also runs on its event loop, every lease held and
    renewed; without it the run records the reason."""
    import importlib.util

    if importlib.util.find_spec("uvloop") is None:
        assert "uvloop is not installed" in smoke["uvloop_skipped"]
        return
    step = smoke["results"]["steady"]["ours-uvloop"]
    assert step["params"]["uvloop"] is True
    assert step["held"] == step["params"]["n"] and step["renewals"] > 0
    assert "trio_lease (asyncio on uvloop)" in smoke["_markdown"]
