"""Markdown tables from a results document (``tools/benchmarks/results/<mode>.json``)."""

from __future__ import annotations

import math
from typing import Any

from ._one_watch import render as render_one_watch

__all__ = ["render"]

Doc = dict[str, Any]
NAMES = {"ours": "trio_lease (asyncio)", "ours-trio": "trio_lease (trio)",
         "ours-uvloop": "trio_lease (asyncio on uvloop)",
         "theirs": "kubernetes_asyncio", "ours-sqlite": "trio_lease SQLite",
         "sqlite": "trio_lease SQLite", "ours-etcd": "trio_lease etcd",
         "etcd": "trio_lease etcd"}


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _ratio(theirs: Any, ours: Any) -> str:
    if not isinstance(theirs, (int, float)) or not isinstance(ours, (int, float)) or ours <= 0:
        return "-"
    if math.isnan(theirs) or math.isnan(ours):
        return "-"
    return f"{theirs / ours:,.1f}x"


def headline(doc: Doc) -> list[tuple[str, Any, Any]]:
    """(metric, trio_lease, kubernetes_asyncio) for every figure measured in both."""
    res = doc["results"]
    rows: list[tuple[str, Any, Any]] = []
    if "steady" in res:
        ours, theirs = res["steady"]["ours"], res["steady"]["theirs"]
        rows.append(("requests per renewal", ours.get("requests_per_renewal"),
                     theirs.get("requests_per_renewal")))
        rows.append((f"client CPU per renewal, {ours['held']} leases (µs)",
                     ours["client_cpu_us_per_renewal"], theirs["client_cpu_us_per_renewal"]))
    if "capacity" in res:
        for n in (500,):
            ours_step, theirs_step = _step(res, "ours", n), _step(res, "theirs", n)
            if ours_step and theirs_step:
                rows.append((f"client CPU per renewal, {n} leases (µs)",
                             ours_step["client_cpu_us_per_renewal"],
                             theirs_step["client_cpu_us_per_renewal"]))
        # Higher is better here, so the pair is swapped to keep "ratio > 1: trio_lease better".
        rows.append(("leases held, 0 losses, < 20 % core (largest step; ratio ours / theirs)",
                     _capacity(res, "theirs"), _capacity(res, "ours")))
        if "capacity_confirm" in res:
            window = doc["plan"].get("capacity_confirm_window", 0)
            rows.append((f"leases held for {window / 60:g} min at that step, 0 losses, < 20 % "
                         "core (ratio ours / theirs)",
                         _confirmed(res, "theirs"), _confirmed(res, "ours")))
        rows.append(("leases held, 0 losses, >= 95 % of renewals, any CPU (ratio ours / theirs)",
                     _capacity(res, "theirs", cpu_limit=False),
                     _capacity(res, "ours", cpu_limit=False)))
    for key, label, field in (
        ("handover", "graceful handover", "handover_ms"),
        ("failover", "crash failover minus L", "excess_over_L_ms"),
        ("loss", "loss (takeover) to body cancelled", "inject_to_cancel_ms"),
        ("cold", "cold acquire", "cold_ms"),
    ):
        if key in res:
            for q in ("p50", "p99"):
                rows.append((f"{label} {q} (ms)", res[key]["ours"][field][q],
                             res[key]["theirs"][field][q]))
    return rows


def _passes(step: Doc, cpu_limit: bool = True) -> bool:
    """0 losses, every lease held, >= 95 % of the nominal renewals, (and < 20 % of a core)."""
    return bool(step["losses"] == 0 and step["renewal_rate_of_nominal"] > 0.95
                and step.get("held") == step["params"]["n"]
                and (not cpu_limit or step["client_cpu_pct_of_core"] < 20))


def _steps(res: Doc, lib: str) -> list[Doc]:
    steps: list[Doc] = [res["steady"][lib]] if lib in res.get("steady", {}) else []
    return steps + list(res.get("capacity", {}).get(lib, []))


def _step(res: Doc, lib: str, n: int) -> Doc | None:
    return next((s for s in _steps(res, lib) if s["params"]["n"] == n), None)


def _capacity(res: Doc, lib: str, cpu_limit: bool = True) -> int | None:
    passed = [s["params"]["n"] for s in _steps(res, lib) if _passes(s, cpu_limit)]
    return max(passed) if passed else None


def _confirmed(res: Doc, lib: str) -> int | None:
    """The knee's lease count if it also passed the long confirmation window, else None."""
    step = res.get("capacity_confirm", {}).get(lib)
    return int(step["params"]["n"]) if step is not None and _passes(step) else None


def render(doc: Doc) -> str:
    """Every table of the document as Markdown."""
    m, res = doc["machine"], doc["results"]
    lines = [
        f"### Results ({m['mode']}, {m['date_utc']})", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}; "
        f"load average at start {m['loadavg_start'][0]:.2f} / end "
        f"{m.get('loadavg_end', [math.nan])[0]:.2f}; run took {m.get('duration_s', 0):.0f} s.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".", "",
    ]
    for part in doc.get("composed", []):  # sections replaced by a later run (see the README)
        lines += [
            f"Re-run: {', '.join(part['sections'])} on {part['date_utc']} (`{part['commit']}`, "
            f"load {part['loadavg_start']:.2f} / {part['loadavg_end']:.2f}, "
            f"{part['duration_s']:.0f} s; raw: `{part['raw']}`).", "",
        ]
    lines += [
        "| metric | trio_lease | kubernetes_asyncio | ratio (> 1: trio_lease better) |",
        "|---|---:|---:|---:|",
    ]
    for label, ours, theirs in headline(doc):
        if "ratio ours / theirs" in label:  # swapped pair (see headline): print in column order
            label = label.replace("; ratio ours / theirs", "").replace(" (ratio ours / theirs)", "")
            lines.append(f"| {label} | {_f(theirs)} | {_f(ours)} | {_ratio(theirs, ours)} |")
            continue
        lines.append(f"| {label} | {_f(ours, 2)} | {_f(theirs, 2)} | {_ratio(theirs, ours)} |")
    if "steady" in res or "capacity" in res:
        lines += ["", "Steady state and capacity (L, R, T, window in `params` of the JSON):", "",
                  "| library | leases | window s | renewals | % of nominal | req/renewal | "
                  "CPU µs/renewal | client % core | emulator % core | losses | passes |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        steps = [(lib, s) for lib, s in res.get("steady", {}).items()]
        for lib, lst in res.get("capacity", {}).items():
            steps += [(lib, s) for s in lst]
        steps += [(lib, s) for lib, s in res.get("capacity_confirm", {}).items()]
        for lib, s in steps:
            lines.append(
                f"| {NAMES[lib]} | {s['held']}/{s['params']['n']} | "
                f"{s['raw']['wall_s']:.0f} | {s['renewals']} | "
                f"{100 * s['renewal_rate_of_nominal']:.0f} | {_f(s.get('requests_per_renewal'), 2)}"
                f" | {_f(s['client_cpu_us_per_renewal'], 0)} | {s['client_cpu_pct_of_core']:.1f}"
                f" | {_f(s.get('emulator_cpu_pct_of_core'), 1)} | {s['losses']} | "
                f"{'yes' if _passes(s) else 'no'} |"
            )
    if "pool" in res:
        lines += ["", "HTTP client options (trio_lease, asyncio):", "",
                  "| pool | leases | renewals | % of nominal | CPU µs/renewal | client % core | "
                  "losses |", "|---|---:|---:|---:|---:|---:|---:|"]
        for label, s in res["pool"].items():
            lines.append(
                f"| {label} | {s['held']}/{s['params']['n']} | {s['renewals']} | "
                f"{100 * s['renewal_rate_of_nominal']:.0f} | "
                f"{_f(s['client_cpu_us_per_renewal'], 0)} | {s['client_cpu_pct_of_core']:.1f} | "
                f"{s['losses']} |"
            )
    lat = [("handover", "handover_ms"), ("cold", "cold_ms"), ("loss", "inject_to_cancel_ms"),
           ("loss", "noticed_to_cancel_ms"), ("failover", "kill_to_start_ms"),
           ("failover", "excess_over_L_ms")]
    if any(k in res for k, _ in lat):
        lines += ["", "Latencies in ms:", "",
                  "| benchmark | library | n | p50 | p90 | p99 | max |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for key, field in lat:
            for lib, r in res.get(key, {}).items():
                if field in r:
                    s = r[field]
                    lines.append(f"| {key} {field.removesuffix('_ms')} | {NAMES[lib]} | {s['n']} "
                                 f"| {_f(s['p50'])} | {_f(s['p90'])} | {_f(s['p99'])} "
                                 f"| {_f(s['max'])} |")
    return "\n".join(lines) + "\n" + render_one_watch(doc)
