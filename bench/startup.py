"""Case 0: start-up, where a Python CLI pays and a Go binary does not, measured side by side.

- 0a `gitops-sync --version` against `kubectl version --client`: the cost of starting at all.
- 0b `gitops-sync diff` of one object (in sync) against `kubectl diff --server-side` of the same object, and
  against the *Python floor*: a stdlib-only script (bench/startup_floor.py) that starts the same
  interpreter, reads the same kubeconfig and sends kubectl's two requests (GET, dry-run apply). What no Python
  tool can go below on this machine; gitops-sync ÷ floor is its own overhead.
- 0c process start → first API request, from the API server's audit log (`requestReceivedTimestamp` of the
  first request by each tool's user agent, minus the time just before the process was started; same clock).

Each command runs `repeats` times, the tools taking turns; medians. Rows go to bench/report.py.
"""

from __future__ import annotations

import statistics
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.env import AuditCounter, BenchCluster, log, settle
from bench.workload import client, create_namespace, delete_namespaces

INVENTORY = "bench-startup"
FLOOR_SCRIPT = Path(__file__).with_name("startup_floor.py")
_OBJECT = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: startup-one\ndata:\n  key: value\n"


@dataclass
class StartupResult:
    """Seconds per run, by measure and tool (gitops-sync, kubectl, floor)."""

    repeats: int
    seconds: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, measure: str, tool: str, value: float) -> None:
        self.seconds.setdefault(measure, {}).setdefault(tool, []).append(value)

    def median(self, measure: str, tool: str) -> float | None:
        values = self.seconds.get(measure, {}).get(tool)
        return statistics.median(values) if values else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def startup_case(
    cluster: BenchCluster, gitops_sync: list[str], python: str, workdir: Path, repeats: int
) -> StartupResult:
    """Run case 0 (see the module docstring) on `cluster`, in a namespace of its own deleted at the end;
    `python` runs the floor (gitops-sync's own)."""
    out = StartupResult(repeats)
    namespace = f"bench-startup-{uuid.uuid4().hex[:5]}"  # a cluster reused by several runs: a new one each time
    try:
        _measure(cluster, gitops_sync, python, workdir, namespace, out)
    finally:
        delete_namespaces(cluster, [namespace])
    return out


def _measure(
    cluster: BenchCluster, gitops_sync: list[str], python: str, workdir: Path, namespace: str, out: StartupResult
) -> None:
    """The measurements of `startup_case`, into `out`."""
    repeats = out.repeats
    directory = workdir / "startup-one"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cm.yaml").write_text(_OBJECT)
    c = client(cluster)
    try:
        create_namespace(c, namespace)
    finally:
        c.close()
    gs_diff = [*gitops_sync, "diff", "--repo", str(directory), "-n", namespace, "--name", INVENTORY, "-o", "json"]
    k_diff = [cluster.kubectl, "diff", "--server-side", "-n", namespace, "-f", str(directory)]
    # Both tools' state first: the object applied by each (co-owned, same values), gitops-sync's inventory.
    cluster.run_kubectl("apply", "--server-side", "-n", namespace, "-f", str(directory))
    sync = subprocess.run(
        [*gitops_sync, "sync", "--repo", str(directory), "-n", namespace, "--name", INVENTORY, "-o", "json"],
        env=cluster.env,
        capture_output=True,
        text=True,
        check=False,
    )
    if sync.returncode != 0:
        out.notes.append(f"set-up sync failed (exit {sync.returncode}): {sync.stderr.strip()[-300:]}")
        return
    audit = AuditCounter(cluster.audit_log) if cluster.audit_log else None
    if audit is None:
        out.notes.append("no audit log: 0c (first request) not measured")
    commands = {
        "version": {"gitops-sync": [*gitops_sync, "--version"], "kubectl": [cluster.kubectl, "version", "--client"]},
        "diff": {
            "gitops-sync": gs_diff,
            "kubectl": k_diff,
            "floor": [python, str(FLOOR_SCRIPT), str(cluster.kubeconfig), namespace, str(directory / "cm.yaml")],
        },
    }
    agents = {"gitops-sync": "gitops-sync/", "kubectl": "kubectl/", "floor": "gitops-sync-startup-floor"}
    for r in range(repeats):
        for measure, tools in commands.items():
            order = list(tools) if r % 2 == 0 else list(reversed(tools))
            for tool in order:
                settle(cluster, max_wait=5.0, window=0.3)
                mark = audit.mark() if audit else None
                wall0, t0 = time.time(), time.perf_counter()
                done = subprocess.run(tools[tool], env=cluster.env, capture_output=True, text=True, check=False)
                took = time.perf_counter() - t0
                if done.returncode != 0:
                    out.notes.append(f"{tool} {measure}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
                    continue
                out.add(measure, tool, took)
                if measure == "diff" and audit is not None and mark is not None:
                    first = audit.first_request(mark, agents[tool])
                    if first is not None:
                        out.add("first_request", tool, first - wall0)
    log(
        "start-up: "
        + ", ".join(
            f"{m} {t} {v:.3f} s"
            for m in ("version", "diff", "first_request")
            for t in ("gitops-sync", "kubectl", "floor")
            if (v := out.median(m, t) or 0.0)
        )
    )


__all__ = ["StartupResult", "startup_case"]
