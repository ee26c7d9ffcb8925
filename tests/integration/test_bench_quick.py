"""The benchmark suite's quick mode works end to end (a functional check: no timing is asserted here).

Timing targets live in the benchmark output (bench/run.py, BENCHMARKS.md), never in tests: this machine is
shared and noisy. What is asserted is that every case produced figures, that each run did what it should
(bench/report.py marks a run ERROR otherwise), and that the no-op re-sync made zero server-side writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, KubeCluster

# `make test` runs it as a step of its own, alone: -m bench (the integration step deselects it).
pytestmark = [pytest.mark.cluster, pytest.mark.bench]


@pytest.mark.timeout(1200)
def test_bench_quick_produces_every_figure(kube: KubeCluster, tmp_path: Path) -> None:
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    r = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "run.py"),
            "--quick",
            "--kubeconfig",
            str(kube.kubeconfig),
            "--json",
            str(out_json),
            "--output",
            str(out_md),
        ],
        env=kube.env,
        capture_output=True,
        text=True,
        timeout=1140,
        check=False,
        cwd=REPO,
    )
    assert out_json.is_file(), f"no results (exit {r.returncode}):\n{r.stderr[-4000:]}"
    doc = json.loads(out_json.read_text())

    # Cases 1-3: both tools measured at N=100, every run correct (objects applied, drift found).
    for case in ("cold", "noop", "drift"):
        runs = doc["cases"][case]["100"]
        for tool in ("gitops-sync", "kubectl"):
            assert runs[tool], f"{case}: no {tool} run"
            for m in runs[tool]:
                assert m["ok"], f"{case} {tool}: {m['note']}"
                assert m["seconds"] > 0
    for m in doc["cases"]["drift"]["100"]["gitops-sync"] + doc["cases"]["drift"]["100"]["kubectl"]:
        assert m["found"] == 10

    # The no-op re-sync: zero writes seen by the API server (audit log) from gitops-sync, N from kubectl.
    for m in doc["cases"]["noop"]["100"]["gitops-sync"]:
        writes = m["server_writes"] if m["server_writes"] is not None else m["metrics_writes"]
        assert writes == 0, f"no-op re-sync wrote {writes} time(s)"
        if m["client_requests"]:  # counted from the audit log when the cluster keeps one
            assert m["client_requests"]["writes"] == 0
    for m in doc["cases"]["noop"]["100"]["kubectl"]:
        if m["server_writes"] is not None:
            assert m["server_writes"] == 100

    # Cases 4 and 5: figures when the daemon exists, else the explicit "not measured" marker.
    daemon, rss = doc["daemon"], doc["rss"]
    if "not_measured" in daemon:
        assert "daemon not available" in daemon["not_measured"]
    else:
        assert daemon["detection_seconds"] and all(v is not None for v in daemon["detection_seconds"])
        assert daemon["commit_seconds"] and all(v is not None for v in daemon["commit_seconds"])
    if "not_measured" in rss:
        assert "daemon not available" in rss["not_measured"]
    else:
        assert rss["peak_bytes"] and rss["peak_bytes"] > 0

    # Case 6 (scale) at the quick size: the CLI side by side with kubectl, then the daemon's figures.
    [scale] = doc["scale"]
    assert scale["objects"] == 150
    for case in ("cold", "noop", "drift"):
        for tool in ("gitops-sync", "kubectl"):
            assert scale["cli"][case][tool]["ok"], scale["cli"][case][tool]["note"]
    assert scale["cli"]["noop"]["gitops-sync"]["client_requests"].get("writes") == 0
    if "not_measured" not in daemon:
        assert scale["detection"]["detection_seconds"] and None not in scale["detection"]["detection_seconds"]
        assert scale["daemon"]["corrected_seconds"] and None not in scale["daemon"]["corrected_seconds"]
        assert len(scale["daemon"]["pass_seconds"]) >= 2, scale["daemon"]  # the first pass and a resync
        assert scale["daemon"]["peak_bytes"] > 0 and scale["per_object"]["daemon peak kB"] > 0
        [pair] = scale["cold_pairs"]  # 6g: one pair at the quick size, both runs timed
        assert pair["cli_seconds"] > 0 and pair["daemon_seconds"] > 0, pair

    # Case 7 (bench/charts.py): the chart source's and the plain source's no-op re-syncs, index.yaml only.
    chart = doc["chart"]
    assert chart["objects"] == 20 and not chart["notes"], chart
    for source in ("chart", "plain"):
        [m] = chart["runs"][source]
        assert m["ok"] and m["seconds"] > 0, m
    assert chart["served"] and all(p.endswith("/index.yaml") for p in chart["served"]), chart["served"]
    assert [row["case"] for row in doc["rows"] if row["case"].startswith("7")] == ["7. chart source no-op re-sync"]

    # Case 0: each command ran every time, both tools and the Python floor (bench/startup.py).
    seconds = doc["startup"]["seconds"]
    assert len(seconds["version"]["gitops-sync"]) == len(seconds["version"]["kubectl"]) == 3, doc["startup"]
    assert {tool: len(v) for tool, v in seconds["diff"].items()} == {"gitops-sync": 3, "kubectl": 3, "floor": 3}

    rows = doc["rows"]
    # case 0 (0a, 0b and its floor, 0c and its floor or "not measured"), cases 1-3, the cold and no-op
    # floors (bench/floor.py), 4a, 4b, 5, case 6 (bench/scale.py: 3 CLI rows, 2 floors, 3 daemon rows, 6g's pair)
    assert len([row for row in rows if row["case"].startswith("6")]) == 5 + (0 if "not_measured" in daemon else 4)
    assert not [row for row in rows if row["result"] == "ERROR"], rows
    assert [row["case"] for row in rows if row["case"][:2] in ("0a", "0b")] == [
        "0a. start-up: `--version` vs `version --client`",
        "0b. diff of one object",
        "0b. diff of one object ÷ Python floor",
    ]
    assert [row["case"] for row in rows if "floor" in row["case"] and not row["case"].startswith("0")] == [
        "1. cold sync ÷ floor",
        "2. no-op re-sync ÷ floor",
        "6a. scale: cold sync (1 run) ÷ floor",
        "6b. scale: no-op re-sync (1 run) ÷ floor",
    ]
    for case in ("cold", "noop"):
        [floor] = doc["cases"][case]["100"]["floor"]
        assert floor["ok"] and floor["seconds"] > 0, floor
    assert r.returncode == 0, r.stderr[-4000:]
    assert "| 2. no-op re-sync |" in out_md.read_text()
