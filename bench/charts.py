"""Case 7: a chart source's no-op re-sync vs the same manifests from plain Git (issue 24: within 1.2x).

A chart whose one template renders N ConfigMaps (a `range`) is packaged with `helm package` and published with
`helm repo index` to the HTTPS chart repository `cluster.py registry-up` starts on loopback (basic auth, its own
CA: the credentials file gives user, password file and CA). Two Git repositories on disk: one commit holds
`apps/helm-chart.yaml` naming the chart, the other the same objects as a plain manifest (`helm template` of the
same chart). Each is synced once (cold, not timed) into a namespace of its own, then `sync` of the same commit
again (`--revision main`: a commit, so the render cache serves it), the two interleaved and taking turns going
first, `repeats` times: medians, their ratio, the server writes (audit log; 0 expected), and every request the chart
repository saw during the chart's re-syncs (its access log: `index.yaml` only, never the archive).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cases import GITOPS_SYNC, Measure, Runner, _gitops_summary_check
from bench.env import LAUNCHER, BenchCluster, log
from bench.report import DASH, TIMES, Row, _failed, _max_writes, _s, _writes
from bench.workload import create_namespace, delete_namespaces

CHART, PLAIN = "chart", "plain"
TARGET = 1.2
TEMPLATE = """{{- range $i := until (int .Values.count) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: chart-cm-{{ $i }}
  labels: {app: bench-chart}
data:
  index: "{{ $i }}"
  payload: {{ $.Values.payload | quote }}
{{- end }}
"""


@dataclass
class ChartResult:
    objects: int
    runs: dict[str, list[Measure]] = field(default_factory=dict)  # {chart|plain: [Measure]}
    served: list[str] = field(default_factory=list)  # chart repository paths asked during the chart's re-syncs
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "runs": {k: [m.to_dict() for m in ms] for k, ms in self.runs.items()},
            "served": self.served,
            "notes": self.notes,
        }


def chart_case(
    cluster: BenchCluster, gs: list[str], workdir: Path, runner: Runner, n: int, repeats: int
) -> ChartResult:
    """Case 7 with its own registries (started and stopped here)."""
    state = workdir / "registries"
    res = ChartResult(n)
    try:
        r = subprocess.run(
            [sys.executable, str(LAUNCHER), "--dir", str(state), "registry-up", "--auto-ports"],
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            res.notes.append(f"cluster.py registry-up failed (exit {r.returncode})")
            return res
        _measure(cluster, gs, workdir, runner, json.loads(r.stdout), state / "logs" / "chart-repo.log", res, repeats)
    finally:
        subprocess.run(
            [sys.executable, str(LAUNCHER), "--dir", str(state), "registry-down"],
            stdout=subprocess.DEVNULL,
            check=False,
        )
    return res


def _measure(
    cluster: BenchCluster,
    gs: list[str],
    workdir: Path,
    runner: Runner,
    info: dict[str, Any],
    access_log: Path,
    res: ChartResult,
    repeats: int,
) -> None:
    n = res.objects
    helm = _helm(cluster, workdir)
    url = _publish(helm, workdir, info, n)
    creds = workdir / "chart-credentials.json"
    entry = {"url": url, "username": info["username"], "passwordFile": info["password_file"], "caFile": info["ca_file"]}
    creds.write_text(json.dumps({"repositories": [entry]}))
    spec = {"repo": url, "chartName": "benchchart", "chartVersion": "^1.0", "releaseName": "bench"}
    repos = {
        CHART: _git_repo(workdir / "repo-chart", {"apps/helm-chart.yaml": json.dumps({"helmChart": spec}) + "\n"}),
        PLAIN: _git_repo(workdir / "repo-plain", {"apps/objects.yaml": _template(helm, workdir)}),
    }
    env = {**cluster.env, "GITOPS_SYNC_CHART_CREDENTIALS": str(creds)}
    tag = uuid.uuid4().hex[:5]
    ns = {k: f"bench-chart-{k}-{tag}" for k in repos}
    for name in ns.values():
        create_namespace(runner.client, name)
    try:
        for k, repo in repos.items():  # cold: pulls and renders the chart once, applies N objects (not timed)
            argv = _argv(gs, repo, ns[k], workdir / f"cache-{k}")
            cold = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
            if cold.returncode != 0:
                res.notes.append(f"cold sync of the {k} source failed (exit {cold.returncode}): {cold.stderr[-300:]}")
                return
        for r in range(repeats):
            for k in (CHART, PLAIN) if r % 2 == 0 else (PLAIN, CHART):
                mark = access_log.stat().st_size
                m = _timed(runner, gs, repos[k], ns[k], workdir / f"cache-{k}", env, n)
                res.runs.setdefault(k, []).append(m)
                if k == CHART:
                    res.served += _asked(access_log, mark)
                log(f"  chart case #{r + 1} no-op {k:6s} {m.seconds:7.2f} s, server writes {m.server_writes}")
    finally:
        delete_namespaces(cluster, list(ns.values()))


def _timed(
    runner: Runner, gs: list[str], repo: Path, namespace: str, cache: Path, env: dict[str, str], n: int
) -> Measure:
    argv = _argv(gs, repo, namespace, cache)
    return runner.timed(GITOPS_SYNC, argv, namespace, lambda r: _gitops_summary_check(r, {"unchanged": n}, (0,)), env)


def _argv(gs: list[str], repo: Path, namespace: str, cache: Path) -> list[str]:
    where = ["--repo", str(repo), "--revision", "main", "-n", namespace, "--name", "bench", "--cache-dir", str(cache)]
    return [*gs, "sync", *where, "-o", "json"]


def _helm(cluster: BenchCluster, workdir: Path) -> list[str]:
    """helm (the cluster's, else PATH's) with private homes: nothing of the user's helm config is read."""
    home = workdir / "helm-home"
    for d in ("config", "cache", "data"):
        (home / d).mkdir(parents=True, exist_ok=True)
    binary = cluster.bin_dir / "helm"
    return [str(binary) if binary.exists() else (shutil.which("helm") or "helm")]


def _run_helm(helm: list[str], workdir: Path, *args: str) -> str:
    home = workdir / "helm-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env.update(
        HELM_CONFIG_HOME=str(home / "config"), HELM_CACHE_HOME=str(home / "cache"), HELM_DATA_HOME=str(home / "data")
    )
    return subprocess.run([*helm, *args], env=env, capture_output=True, text=True, check=True, timeout=300).stdout


def _publish(helm: list[str], workdir: Path, info: dict[str, Any], n: int) -> str:
    """The chart packaged at 1.0.0 into the chart repository's `bench/` directory, indexed; its URL."""
    src = workdir / "src" / "benchchart"
    (src / "templates").mkdir(parents=True, exist_ok=True)
    (src / "Chart.yaml").write_text("apiVersion: v2\nname: benchchart\nversion: 1.0.0\n")
    (src / "values.yaml").write_text(f"count: {n}\npayload: {'x' * 200}\n")
    (src / "templates" / "configmaps.yaml").write_text(TEMPLATE)
    where = Path(info["chart_dir"]) / "bench"
    where.mkdir(parents=True, exist_ok=True)
    _run_helm(helm, workdir, "package", str(src), "--destination", str(where))
    url = f"{info['chart_repo']}/bench"
    _run_helm(helm, workdir, "repo", "index", str(where), "--url", url)
    return url


def _template(helm: list[str], workdir: Path) -> str:
    """The chart's objects as helm renders them: the plain source holds exactly these."""
    return _run_helm(helm, workdir, "template", "bench", str(workdir / "src" / "benchchart"))


def _git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    git = ["git", "-C", str(path), "-c", "user.name=bench", "-c", "user.email=bench@bench.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], check=True)
    return path


def _asked(access_log: Path, since: int) -> list[str]:
    with access_log.open("rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return re.findall(r'"[A-Z]+ (\S+) HTTP/[\d.]+" \d+', text)


def chart_rows(chart: dict[str, Any] | None) -> list[Row]:
    """Case 7's row: the chart source's median no-op re-sync against the plain one's (the kubectl column)."""
    if not chart:
        return []
    title, n = "7. chart source no-op re-sync", f"{int(chart['objects']):,}"
    runs = {k: [Measure(**m) for m in ms] for k, ms in (chart.get("runs") or {}).items()}
    ours, plain = runs.get(CHART, []), runs.get(PLAIN, [])
    if not ours or not plain:
        return [Row(title, n, "no figures", DASH, DASH, DASH, "ERROR", "; ".join(chart.get("notes") or []))]
    a, b = statistics.median(m.seconds for m in ours), statistics.median(m.seconds for m in plain)
    served = sorted(set(chart.get("served") or []))
    index_only = bool(served) and all(p.endswith("/index.yaml") for p in served)
    failure = _failed(ours + plain) or ("" if index_only else f"the chart repository served {served}")
    passed = a / b <= TARGET and _max_writes(ours) == 0
    result = "ERROR" if failure else ("PASS" if passed else "MISS")
    note = failure or f"median of {len(ours)}; chart repository asked only for {', '.join(served)}"
    return [
        Row(
            title,
            n,
            f"{_s(a)}, {_writes(ours)}",
            f"plain Git {_s(b)}",
            f"{a / b:.2f}{TIMES}",
            f"≤ {TARGET}{TIMES} of plain Git, 0 writes, index.yaml only",
            result,
            note,
        )
    ]


__all__ = ["ChartResult", "chart_case", "chart_rows"]
