"""The recorded tables: results/full.md is render() of results/full.json, re-run parts listed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tools.benchmarks._report import render

RESULTS = Path(__file__).resolve().parents[2] / "tools" / "benchmarks" / "results"


def test_the_recorded_tables_are_rendered_from_the_json_with_each_rerun_named() -> None:
    """full.md is exactly what render() makes of full.json, and every section replaced by a
    later run (if any: a whole run records none) is named with its date, commit and raw
    results (so no table passes for the first run's)."""
    doc = json.loads((RESULTS / "full.json").read_text())
    text = render(doc)
    assert (RESULTS / "full.md").read_text() == text
    assert doc["machine"]["mode"] == "full", "the recorded tables come from a --full run"
    for part in doc.get("composed", []):
        line = next(row for row in text.splitlines() if row.startswith("Re-run: "
                    + ", ".join(part["sections"])))
        assert part["date_utc"] in line and part["raw"] in line
        assert (RESULTS / part["raw"].removeprefix("results/") / "full.json").exists()


def test_the_readme_quotes_the_recorded_run() -> None:
    """Every table row under the README's "Results" is a row of results/full.md or of a run the
    section links under results/ (its full.md), and the README names the whole run's commit and
    date."""
    readme = (RESULTS.parent / "README.md").read_text()
    results = readme[readme.index("\n## Results\n") : readme.index("\n## Design measurements\n")]
    recorded = set((RESULTS / "full.md").read_text().splitlines())
    for linked in re.findall(r"\(results/([\w.-]+)/full\.json\)", results):
        recorded |= set((RESULTS / linked / "full.md").read_text().splitlines())
    rows = [line for line in results.splitlines() if line.startswith("|")]
    assert len(rows) > 40
    assert [row for row in rows if row not in recorded] == []
    doc = json.loads((RESULTS / "full.json").read_text())
    commit = doc["results"]["source"]["head"].split()[0]
    assert f"`{commit}`" in results
    assert doc["machine"]["date_utc"][:10] in results
