"""Case 6: scale. The CLI and the daemon at 20,000 objects (`--scale-objects`), to show what grows faster
than linearly.

6a-c. The CLI: cold sync, no-op re-sync and drift report, gitops-sync and kubectl side by side, exactly as
      cases 1-3 (bench/cases.py `Runner.run_repeat`, audit-log write counts and the floor included), but one
      run per size: at 20,000 objects kubectl's drift report alone takes minutes.
6d-f. The daemon (bench/daemon.py): started on an empty namespace with `--resync`, it applies every object
      (start → ready, and its first full pass as it logs it), corrects out-of-band changes (change →
      `drift corrected`), runs a steady-state full pass (the resync; its logged seconds) and serves /status;
      its peak RSS (VmHWM) is read at the end. Then a `--detect-only` daemon on the namespace the first one
      left in sync times change → `drift detected` (drift → reported, as case 4a).

Several sizes (`--scale-objects 1000,5000,20000`) give the per-object figures side by side
(`per_object`), which is what tells linear from not. The results go to bench/report.py (`scale_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import daemon as daemon_cases
from bench.cases import Measure, Runner
from bench.env import BenchCluster, log
from bench.workload import generate
from gitops_sync.cluster.client import Client

RESYNC = 30.0  # seconds between the daemon's full passes in 6e: one steady-state pass after the drifts
QUICK_RESYNC = 3.0  # --quick (150 objects): the pass is short, and so is CI's wait for it


@dataclass
class ScaleResult:
    objects: int
    cli: dict[str, dict[str, Measure]] = field(default_factory=dict)  # {case: {tool: Measure}}
    daemon: daemon_cases.RssResult | None = None
    detection: daemon_cases.DaemonResults | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "cli": {c: {t: m.to_dict() for t, m in tools.items()} for c, tools in self.cli.items()},
            "daemon": self.daemon.to_dict() if self.daemon else None,
            "detection": self.detection.to_dict() if self.detection else None,
            "per_object": per_object(self),
        }


def per_object(res: ScaleResult) -> dict[str, float | None]:
    """Milliseconds (and kB of peak RSS) per object: equal across sizes when a cost grows linearly."""
    n = res.objects
    out: dict[str, float | None] = {}
    for case, tools in res.cli.items():
        for tool, m in tools.items():
            out[f"{case} {tool} ms"] = m.seconds / n * 1000 if m.ok else None
    d = res.daemon
    if d is not None:
        out["daemon ready ms"] = d.ready_seconds / n * 1000 if d.ready_seconds else None
        out["daemon first pass ms"] = d.pass_seconds[0] / n * 1000 if d.pass_seconds else None
        out["daemon re-pass ms"] = d.pass_seconds[-1] / n * 1000 if len(d.pass_seconds) > 1 else None
        out["daemon peak kB"] = d.peak_bytes / n / 1000 if d.peak_bytes else None
    return out


def scale_case(
    cluster: BenchCluster,
    gitops_sync: list[str],
    workdir: Path,
    runner: Runner,
    n: int,
    changes: int,
    *,
    daemon: bool = True,
    resync: float = RESYNC,
) -> ScaleResult:
    res = ScaleResult(objects=n)
    directory = generate(workdir / f"scale-{n}", n)
    log(f"case 6: the CLI at N={n} (one run)")
    res.cli = runner.run_repeat(directory, n, 0)
    if not daemon:
        return res
    detection = daemon_cases.DaemonResults(objects=n)
    base = ["--repo", str(directory), "--name", daemon_cases.DAEMON_INVENTORY]

    def detect(c: Client, namespace: str) -> None:
        log(f"case 6: --detect-only daemon on the {n} objects; {changes} out-of-band changes")
        argv = [*base, "-n", namespace]
        daemon_cases.detection(cluster, gitops_sync, workdir, c, argv, namespace, n, changes, detection)

    log(f"case 6: the daemon at N={n}")
    res.daemon = daemon_cases.rss_case(
        cluster, gitops_sync, workdir, n, changes=changes, resync=resync, directory=directory, then=detect
    )
    res.detection = detection
    return res
