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

6g. Cold apply, the CLI against the daemon, in `--scale-pairs` alternating pairs on fresh namespaces: the CLI's
      cold sync, then a daemon's start → ready, each after the control plane settled. At 20,000 objects the API
      server's own CPU for the same 20,000 creates ranged from 47 to 70 CPU s from one run to the next on this
      2-core machine, which moved one run's ratio anywhere from 0.95x to 1.5x: the ratio of the medians of pairs
      run back to back is the figure the target is judged on (6a and 6e are not such a pair: they run 13 minutes
      apart, with the other tools' runs and the deletion of their 60,000 objects in between).

Several sizes (`--scale-objects 1000,5000,20000`) give the per-object figures side by side
(`per_object`), which is what tells linear from not. The results go to bench/report.py (`scale_rows`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import daemon as daemon_cases
from bench.cases import GITOPS_SYNC, Measure, Runner
from bench.env import BenchCluster, log
from bench.workload import client, create_namespace, delete_namespaces, generate
from gitops_sync.cluster.client import Client

RESYNC = 30.0  # seconds between the daemon's full passes in 6e: one steady-state pass after the drifts
QUICK_RESYNC = 3.0  # --quick (150 objects): the pass is short, and so is CI's wait for it


@dataclass
class ScaleResult:
    objects: int
    cli: dict[str, dict[str, Measure]] = field(default_factory=dict)  # {case: {tool: Measure}}
    daemon: daemon_cases.RssResult | None = None
    detection: daemon_cases.DaemonResults | None = None
    pairs: list[tuple[float | None, float | None]] = field(default_factory=list)  # 6g: (CLI s, daemon s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "cli": {c: {t: m.to_dict() for t, m in tools.items()} for c, tools in self.cli.items()},
            "daemon": self.daemon.to_dict() if self.daemon else None,
            "detection": self.detection.to_dict() if self.detection else None,
            "cold_pairs": [{"cli_seconds": c, "daemon_seconds": d} for c, d in self.pairs],
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
    pairs: int = 0,
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
    for k in range(pairs):
        log(f"case 6g: cold apply pair {k + 1}/{pairs} at N={n}: the CLI, then the daemon")
        res.pairs.append(cold_pair(cluster, gitops_sync, workdir, runner, directory, n))
    return res


def cold_pair(
    cluster: BenchCluster, gitops_sync: list[str], workdir: Path, runner: Runner, directory: Path, n: int
) -> tuple[float | None, float | None]:
    """One 6g pair: seconds of the CLI's cold sync and of a daemon's start → ready, each on a fresh namespace
    created and deleted around it (None: that run failed; its log says why)."""
    tag = uuid.uuid4().hex[:5]
    c = client(cluster)
    try:
        ns = f"bench-pair-cli-{n}-{tag}"
        create_namespace(c, ns)
        try:
            m = runner.cold(GITOPS_SYNC, directory, ns, n)
        finally:
            delete_namespaces(cluster, [ns], timeout=900)
        ns = f"bench-pair-run-{n}-{tag}"
        create_namespace(c, ns)
        try:
            ready = daemon_cases.cold_start(cluster, gitops_sync, workdir, directory, ns)
        finally:
            delete_namespaces(cluster, [ns], timeout=900)
    finally:
        c.close()
    log(f"  N={n} pair: CLI {m.seconds:.1f} s{'' if m.ok else ' (failed)'}, daemon {ready or 0:.1f} s")
    return (m.seconds if m.ok else None), ready
