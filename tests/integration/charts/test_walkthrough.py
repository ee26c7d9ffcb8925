"""docs/charts.md's walkthrough, run as written (bash -euo pipefail): registries up, a chart packaged and
indexed, the operator's credentials file, a repository declaring the chart, `gitops-sync render`. A line that
fails fails the test; so does a document without the block."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from chart_registries import REPO, Registries

MARKER = "<!-- charts-walkthrough -->"


def walkthrough() -> str:
    text = (REPO / "docs" / "charts.md").read_text()
    match = re.search(re.escape(MARKER) + r"\n```sh\n(.*?)\n```\n", text, re.S)
    assert match, f"docs/charts.md has no ```sh block after {MARKER}"
    return match.group(1)


def test_the_charts_walkthrough_runs_as_written(registries: Registries, tmp_path: Path) -> None:
    """(`registries` only lends its helm binary: the walkthrough starts and stops registries of its own.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_", "GITOPS_SYNC_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(registries.bin_dir), env["PATH"]])
    env |= {f"HELM_{d}_HOME": str(tmp_path / d.lower()) for d in ("CONFIG", "CACHE", "DATA")}
    script = ["bash", "-euo", "pipefail", "-c", walkthrough()]
    r = subprocess.run(script, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    chart_line = r"^# chart: hello 1\.2\.0 from https://127\.0\.0\.1:\d+ \(sha256:[0-9a-f]{64}\)$"
    assert re.search(chart_line, r.stdout, re.M), r.stdout
    assert "greeting: hello from Git" in r.stdout
    assert "chart repository not allowed" in r.stdout  # the edited helm-chart.yaml names a repository nobody allowed
    assert "registries ready" in r.stderr and "removed" in r.stderr  # started, and stopped by the trap
