"""The fleet-vs-Flux benchmark (bench/fleet_flux.py) works end to end at its smallest size: 5 sources x 2
ConfigMaps, both tools, every figure produced (a functional check: timing targets live in the benchmark's
output, BENCHMARKS-fleet.md, never in tests).

Needs Flux's controllers, built from their Go modules by `cluster.py build --with flux` (a cold build takes
well over 10 minutes on 2 cores). The session fixture runs that build (a no-op when current) when the
binaries are there or when CI has started the build in the background (LOCAL_CLUSTER_FLUX_BUILD=1: the
fixture then waits for it on its lock); otherwise it skips, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import flux
from tests.conftest import REPO

pytestmark = pytest.mark.cluster

CACHE = Path(os.environ.get("LOCAL_CLUSTER_CACHE") or REPO / ".cache" / "local-cluster")


@pytest.fixture(scope="session")
def flux_bin() -> Path:
    """The bin dir with source-controller and kustomize-controller (built or waited for; else skip)."""
    if not flux.built(CACHE / "bin") and os.environ.get("LOCAL_CLUSTER_FLUX_BUILD") != "1":
        reason = (
            f"Flux's controllers are not built in {CACHE / 'bin'} and no background build was started "
            "(LOCAL_CLUSTER_FLUX_BUILD=1): run `python3 deploy/local-cluster/cluster.py build --with flux` "
            "(a cold build takes 15-30 min on 2 cores)"
        )
        print(f"\nskipping the fleet-vs-Flux benchmark test: {reason}", file=sys.stderr)
        pytest.skip(reason)
    return flux.build(CACHE)


@pytest.mark.timeout(3600)  # the fixture may wait for a background build (~30 min cold)
def test_fleet_vs_flux_smallest_case_produces_every_figure(flux_bin: Path, tmp_path: Path) -> None:
    out_json, out_md = tmp_path / "fleet.json", tmp_path / "fleet.md"
    argv = ["--sizes", "5x2", "--interval", "15s", "--idle", "15", "--drifts", "3", "--commits", "2"]
    r = subprocess.run(
        [sys.executable, "-m", "bench.fleet_flux", *argv, "--output", str(out_md), "--json", str(out_json)],
        env=dict(os.environ, LOCAL_CLUSTER_CACHE=str(CACHE)),
        capture_output=True,
        text=True,
        timeout=1440,
        check=False,
        cwd=REPO,
    )
    assert r.returncode == 0 and out_json.is_file(), f"exit {r.returncode}:\n{r.stderr[-4000:]}"
    (run,) = json.loads(out_json.read_text())["runs"]
    assert (run["sources"], run["objects"]) == (5, 2)
    for tool in ("gitops-sync", "flux"):
        fig = run[tool]
        assert fig["ready_s"] > 0, tool
        assert fig["peak_rss"] > 10_000_000, tool  # a real process was sampled
        assert fig["cpu_s"] > 0, tool
        assert fig["ready_requests"]["writes"] > 0, f"{tool}: no writes in the audit log under its user agent"
        for case in ("drift", "commit"):
            assert fig[case]["n"] >= 2 and fig[case]["missed"] == 0, f"{tool} {case}: {fig[case]}"
    for case in ("drift_short", "commit_short"):
        assert run["flux"][case]["missed"] == 0, f"flux {case}: {run['flux'][case]}"
    text = out_md.read_text()
    assert "<!-- size 5x2 -->" in text and "| drift → corrected" in text
    assert ("PASS" in text) or ("MISS" in text)
