"""`gitops-sync sync --prune` while the API server hangs (SIGSTOP) or is stopped, on a private cluster.

Before the circuit breaker, every request waited out its own 30 s timeout, 8 at a time: ~19 minutes for
300 objects. Now the first timeout (or refused connection) triggers one /readyz probe, everything queued
after it fails at once as "not attempted", nothing is pruned, and the next sync converges.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.cluster.client import Client
from tests.integration.daemon_support import GitRepo, wait_until
from tests.reliability.conftest import Recorder
from tests.reliability.faults import PrivateCluster

pytestmark = pytest.mark.cluster
N = 300
OLD = 20  # members that leave Git in the faulted pass: prune candidates that must survive it


def _cms(prefix: str, count: int, value: str) -> str:
    return "".join(
        "---\n"
        + json.dumps(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{prefix}-{i:03d}"}, "data": {"v": value}}
        )
        + "\n"
        for i in range(count)
    )


def _gs(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _live(client: Client, namespace: str) -> dict[str, str]:
    doc = client.get(f"/api/v1/namespaces/{namespace}/configmaps")
    return {
        i["metadata"]["name"]: (i.get("data") or {}).get("v", "")
        for i in doc["items"]
        if i["metadata"]["name"].startswith(("cm-", "old-"))
    }


def _faulted_sync(
    cluster: PrivateCluster, tmp_path: Path, namespace: str, fault: str
) -> tuple[subprocess.CompletedProcess[str], float, dict[str, Any], dict[str, str], dict[str, str]]:
    """Sync N+OLD objects, change all N and drop OLD in Git, inject `fault` once the first update lands."""
    env = cluster.env
    cluster_cmd = ["kubectl", "create", "namespace", namespace]
    subprocess.run(cluster_cmd, env=env, check=True, capture_output=True)
    repo = GitRepo(tmp_path / "repo", {"cms.yaml": _cms("cm", N, "1"), "old.yaml": _cms("old", OLD, "1")})
    args = ["--repo", str(repo.path), "-n", namespace, "--prune", "-o", "json"]
    first = _gs(env, "sync", *args)
    assert first.returncode == 0, first.stderr
    repo.commit({"cms.yaml": _cms("cm", N, "2"), "old.yaml": None})

    with Client(cluster.kubeconfig, timeout=10) as watcher:
        before = _live(watcher, namespace)
        assert len(before) == N + OLD
        rv = watcher.get(f"/api/v1/namespaces/{namespace}/configmaps")["metadata"]["resourceVersion"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitops_sync", "sync", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        query = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "false"}
        for line in watcher.stream_lines(f"/api/v1/namespaces/{namespace}/configmaps", query=query, timeout=120):
            event = json.loads(line)
            obj = event.get("object") or {}
            if event.get("type") == "MODIFIED" and (obj.get("data") or {}).get("v") == "2":
                break  # the first object of the new revision is applied: fault now, mid-pass
    t0 = time.monotonic()
    if fault == "freeze":
        cluster.freeze("kube-apiserver")
    else:
        cluster.kill("kube-apiserver")  # SIGKILL: connections refused at once (SIGTERM drains for ~15 s)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        took = time.monotonic() - t0
        if fault == "freeze":
            cluster.thaw("kube-apiserver")
        else:
            cluster.start("kube-apiserver")
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    wait_until("the API server to answer again", lambda: _ready(cluster), 90, 0.5)
    with Client(cluster.kubeconfig, timeout=10) as c:
        after = _live(c, namespace)
    assert r.stdout.strip(), r.stderr
    return r, took, json.loads(r.stdout), before, after


def _ready(cluster: PrivateCluster) -> bool:
    with Client(cluster.kubeconfig, timeout=2, probe_timeout=2) as c:
        return c.probe() is None


def _outcomes(report: dict[str, Any]) -> tuple[int, int, int]:
    done = sum(1 for o in report["objects"] if o["action"] in ("update", "create", "unchanged"))
    not_attempted = sum(1 for o in report["objects"] if o["message"].startswith("not attempted:"))
    unknown = sum(1 for o in report["objects"] if o["message"].startswith("outcome unknown:"))
    other = [o["message"] for o in report["objects"] if o["action"] == "error"][: N - done - not_attempted - unknown]
    assert done + not_attempted + unknown == N, (done, not_attempted, unknown, other[:5])  # nothing else
    return done, not_attempted, unknown


def _converges(cluster: PrivateCluster, namespace: str, tmp_path: Path) -> float:
    t0 = time.monotonic()
    r = _gs(cluster.env, "sync", "--repo", str(tmp_path / "repo"), "-n", namespace, "--prune", "-o", "json")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    with Client(cluster.kubeconfig, timeout=10) as c:
        live = _live(c, namespace)
    assert live == {f"cm-{i:03d}": "2" for i in range(N)}, sorted(set(live) ^ {f"cm-{i:03d}" for i in range(N)})
    return took


def test_a_frozen_api_server_stops_sync_early_and_prunes_nothing(
    private_cluster: PrivateCluster, tmp_path: Path, reliability: Recorder
) -> None:
    r, took, report, before, after = _faulted_sync(private_cluster, tmp_path, "frozen", "freeze")
    assert r.returncode == 2, r.stderr[-3000:]
    assert took < 90, took  # was ceil(320/8) x 30 s = 20 min
    assert set(after) == set(before), "something was deleted"  # the 20 prune candidates survive
    done, not_attempted, unknown = _outcomes(report)
    assert done >= 1 and not_attempted >= 100, (done, not_attempted, unknown)
    assert any("prune skipped" in e for e in report["errors"]), report["errors"]
    assert any(e.startswith(f"stopped early: {not_attempted} of {N}") for e in report["errors"]), report["errors"]
    assert "Traceback" not in r.stderr
    again = _converges(private_cluster, "frozen", tmp_path)
    reliability.record(
        area="API server",
        fault=f"kube-apiserver frozen (SIGSTOP) during `sync --prune` of {N} objects ({OLD} prune candidates)",
        outcome="one request timeout (30 s) + one /readyz probe (3 s), then every queued request fails at once; "
        "exit 2; the report lists done / not attempted / outcome unknown",
        checked=f"nothing pruned ({len(after)} objects before and after); after SIGCONT the next sync exits 0 "
        "and converges",
        figures=f"exit 2 after {took:.1f} s (was ~20 min); {done} done, {not_attempted} not attempted, "
        f"{unknown} unknown; next sync {again:.1f} s",
    )


def test_a_killed_api_server_stops_sync_at_once_and_prunes_nothing(
    private_cluster: PrivateCluster, tmp_path: Path, reliability: Recorder
) -> None:
    r, took, report, before, after = _faulted_sync(private_cluster, tmp_path, "stopped", "stop")
    assert r.returncode == 2, r.stderr[-3000:]
    assert took < 15, took
    assert set(after) == set(before), "something was deleted"
    done, not_attempted, unknown = _outcomes(report)
    assert done >= 1 and not_attempted >= 1, (done, not_attempted, unknown)
    assert any(e.startswith(f"stopped early: {not_attempted} of {N}") for e in report["errors"]), report["errors"]
    again = _converges(private_cluster, "stopped", tmp_path)
    reliability.record(
        area="API server",
        fault=f"kube-apiserver killed (SIGKILL: connection refused) during `sync --prune` of {N} objects",
        outcome="the refused connection trips the breaker; queued requests fail at once; exit 2 with the report",
        checked=f"nothing pruned ({len(after)} objects before and after); the next sync exits 0 and converges",
        figures=f"exit 2 {took:.1f} s after the kill; {done} done, {not_attempted} not attempted, "
        f"{unknown} unknown; next sync {again:.1f} s",
    )


def test_the_deadline_bounds_a_diff_against_a_frozen_api_server(
    private_cluster: PrivateCluster, tmp_path: Path, reliability: Recorder
) -> None:
    repo = GitRepo(tmp_path / "repo", {"cms.yaml": _cms("cm", 5, "1")})
    args = ["diff", "--repo", str(repo.path), "-n", "default", "--deadline", "8", "--request-timeout", "120"]
    private_cluster.freeze("kube-apiserver")
    try:
        t0 = time.monotonic()
        r = _gs(private_cluster.env, *args, timeout=120)
        took = time.monotonic() - t0
    finally:
        private_cluster.thaw("kube-apiserver")
    assert r.returncode == 2, r.stderr
    assert "deadline of 8s" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert took < 20, took  # not the 120 s request timeout
    wait_until("the API server to answer again", lambda: _ready(private_cluster), 90, 0.5)
    reliability.record(
        area="API server",
        fault="kube-apiserver frozen (SIGSTOP) for the whole of `diff --deadline 8 --request-timeout 120`",
        outcome="the request in flight is cut at the deadline; exit 2, 'no answer to GET before the deadline of 8s'",
        checked="diff writes nothing; no traceback",
        figures=f"exit 2 after {took:.1f} s (deadline 8 s, Python start-up included)",
    )
