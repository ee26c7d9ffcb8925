"""bench/fleet_report.py: ratios and PASS/MISS of the fleet-vs-Flux table, and the per-size sections of
BENCHMARKS-fleet.md (a re-run of one size replaces that section and keeps the others and the analysis)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench import fleet_report
from bench.fleet_flux import seconds
from bench.report import DASH, TIMES


def tool(ready: float, pss: float, rpm: float, drift_p95: float, missed: int = 0) -> dict[str, Any]:
    lat = {"n": 5, "missed": missed, "p50": drift_p95 / 2, "p95": drift_p95}
    return {
        "ready_s": ready,
        "peak_rss": pss,
        "hwm_sum": pss,
        "ready_cpu_s": 1.0,
        "cpu_s": 2.0,
        "ready_requests": {"reads": 10, "writes": 20},
        "idle": {"rpm": rpm, "writes_pm": 0, "git_pm": 100, "cpu_pm": 0.5},
        "drift": lat,
        "commit": lat,
    }


def results(run: dict[str, Any]) -> dict[str, str]:
    return {r[0]: r[5] for r in fleet_report.rows(run)}


def test_ratios_against_issue_28_targets() -> None:
    run = {
        "sources": 1000,
        "objects": 4,
        "gitops-sync": tool(ready=40, pss=120e6, rpm=30, drift_p95=0.5),
        "flux": tool(ready=100, pss=100e6, rpm=60, drift_p95=60),
    }
    got = results(run)
    assert got["sources created → all Ready"] == "PASS"  # 0.4x <= 0.5x
    assert got["peak memory: PSS of every process incl. children"] == "MISS"  # 1.2x > 1.0x
    assert got["API requests per minute, idle"] == "PASS"
    assert got["drift → corrected (Flux at 1m)"] == "PASS"  # 0.5 / 60 <= 0.1
    run["gitops-sync"]["ready_s"] = 60
    assert results(run)["sources created → all Ready"] == "MISS"  # 0.6x


def test_a_drift_never_corrected_is_a_miss_not_a_number() -> None:
    g = tool(ready=1, pss=1, rpm=1, drift_p95=math.inf, missed=1)
    run = {"sources": 5, "objects": 2, "gitops-sync": g, "flux": tool(ready=1, pss=1, rpm=1, drift_p95=60)}
    row = next(r for r in fleet_report.rows(run) if r[0].startswith("drift"))
    assert row[5] == "MISS" and "timed out" in row[1] and "1 of 5 missed" in row[1]


def test_a_flux_p95_that_timed_out_is_said_not_shown_as_a_ratio_of_zero() -> None:
    f = tool(ready=1, pss=1, rpm=1, drift_p95=math.inf, missed=6)
    run = {"sources": 5, "objects": 2, "gitops-sync": tool(ready=1, pss=1, rpm=1, drift_p95=0.2), "flux": f}
    rows = {r[0]: r for r in fleet_report.rows(run)}
    drift, commit = rows["drift → corrected (Flux at 1m)"], rows["new commit → applied (Flux at 1m; gitops-sync at 1m)"]
    for row in (drift, commit):
        assert row[3] == f"→ 0{TIMES} (Flux's p95 timed out)" and "6 of 5 missed" in row[2]
    assert drift[5] == "PASS"


def test_a_size_rerun_replaces_its_section_and_keeps_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS-fleet.md"
    small = {"sources": 5, "objects": 2, "gitops-sync": tool(1, 1, 1, 1), "flux": tool(2, 2, 2, 60)}
    big = {"sources": 1000, "objects": 4, "gitops-sync": tool(3, 3, 3, 1), "flux": tool(9, 9, 9, 60)}
    doc: dict[str, Any] = {"date": "d1", "machine": {}, "runs": [small, big]}
    fleet_report.write(out, doc)
    text = out.read_text().replace("\n\n<!-- /keep -->", "\nhand-written analysis\n<!-- /keep -->")
    out.write_text(text)
    rerun = {"sources": 5, "objects": 2, "gitops-sync": tool(7, 1, 1, 1), "flux": tool(2, 2, 2, 60)}
    fleet_report.write(out, {"date": "d2", "machine": {}, "runs": [rerun]})
    text = out.read_text()
    assert "hand-written analysis" in text
    assert f"1,000 sources {TIMES} 4 ConfigMaps" in text and "run d1" in text  # the other size, kept
    assert f"5 sources {TIMES} 2 ConfigMaps (10 objects), run d2" in text and "| 7.00 s |" in text
    assert text.index("<!-- size 5x2 -->") < text.index("<!-- size 1000x4 -->")


def test_go_durations() -> None:
    assert seconds("1m") == 60 and seconds("10s") == 10 and seconds("1m30s") == 90 and seconds("500ms") == 0.5


def test_the_load_at_all_ready_is_shown_per_tool() -> None:
    """The machine is shared: each tool's all-Ready time is read beside the load it ran under."""
    g, f = tool(ready=40, pss=1, rpm=1, drift_p95=1), tool(ready=100, pss=1, rpm=1, drift_p95=1)
    g["ready_load"], f["ready_load"] = (3.14, 2.0, 1.0), None
    row = {r[0]: r for r in fleet_report.rows({"sources": 10, "objects": 1, "gitops-sync": g, "flux": f})}
    assert row["load average (1 min) when all Ready"][1:3] == ("3.1", DASH)


def test_the_release_is_read_from_version_output_without_the_commit() -> None:
    from bench.env import cli_version

    assert cli_version("gitops-sync, version 0.1.0 (commit 8529b7f5bc7d-dirty)\n") == "0.1.0"
    assert cli_version("") == "?"
