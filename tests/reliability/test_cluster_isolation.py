"""One cluster hung (SIGSTOP) or down does not slow a connection to another cluster.

Two real control planes (`kube`, `second_kube`), one `ClusterConnection` each. The second's kube-apiserver
is frozen while threads keep asking it (each request waits out its timeout, then its breaker opens); the
first's requests are timed before, during the hang and after the breaker opened: their p95 stays within its
normal time. The same with the second's API server stopped (connections refused); after either, the second
comes back and its breaker closes by itself. And the CLI: `sync --context one --context two` with two frozen
applies one in a single-cluster sync's time.
"""

from __future__ import annotations

import datetime
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from gitops_sync.cluster.connection import ClusterConnection
from gitops_sync.errors import ClusterError
from tests.conftest import REPO, KubeCluster
from tests.integration.clusters_support import merged_kubeconfig
from tests.reliability.conftest import Recorder
from tests.reliability.faults import PrivateCluster

# A healthy cluster's p95 beside a hung one, against its own p95 a moment before: with no other test beside
# it under pytest-xdist (tests/reliability/alone.py), else the other tests' load is what is measured. Its
# group `alone` is also the one worker that starts `second_kube` for this directory.
pytestmark = [pytest.mark.cluster, pytest.mark.alone]
SAMPLES = 40


def _timed(conn: ClusterConnection, n: int = SAMPLES) -> list[float]:
    took = []
    for _ in range(n):
        started = time.monotonic()
        conn.client.get("/api/v1/namespaces/default")
        took.append(time.monotonic() - started)
    return took


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def _hammer(conn: ClusterConnection, stop: threading.Event, outcomes: list[str]) -> list[threading.Thread]:
    """Four threads asking the faulted cluster until `stop`: what each request ended in."""

    def ask() -> None:
        while not stop.is_set():
            try:
                conn.client.get("/api/v1/namespaces/default")
                outcomes.append("answered")
            except ClusterError as exc:
                outcomes.append(type(exc).__name__)
                time.sleep(0.05)

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.parametrize("fault", ["hung (SIGSTOP)", "down (stopped)"])
def test_a_hung_or_down_cluster_does_not_slow_requests_to_another(
    kube: KubeCluster, second_kube: KubeCluster, reliability: Recorder, fault: str
) -> None:
    assert second_kube.state_dir is not None
    other = PrivateCluster(second_kube.state_dir, second_kube.env)
    healthy = ClusterConnection.open(kube.kubeconfig, timeout=10)
    faulted = ClusterConnection.open(second_kube.kubeconfig, timeout=3)
    with healthy, faulted:
        _timed(healthy, 5)  # warm: the pool's connection made
        before = _timed(healthy)
        stop = threading.Event()
        outcomes: list[str] = []
        if fault.startswith("hung"):
            other.freeze("kube-apiserver")
        else:
            other.stop("kube-apiserver")
        try:
            threads = _hammer(faulted, stop, outcomes)
            time.sleep(0.5)  # the faulted connection's requests are in flight (hung) or refused
            during = _timed(healthy)
            # one request timeout (3 s) and one /readyz probe (3 s) later, the faulted breaker is open
            opened_by = time.monotonic() + 15
            while not faulted.breaker.is_down and time.monotonic() < opened_by:
                time.sleep(0.1)
            assert faulted.breaker.is_down, outcomes[:5]
            assert not healthy.breaker.is_down
            also = _timed(healthy)
        finally:
            stop.set()
            if fault.startswith("hung"):
                other.thaw("kube-apiserver")
            else:
                other.start("kube-apiserver")
        for t in threads:
            t.join(10)
        # recovers by itself: the half-open probe closes the breaker once the server answers
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                faulted.client.get("/api/v1/namespaces/default")
                break
            except ClusterError:
                time.sleep(0.5)
        assert not faulted.breaker.is_down
    normal, hurt, later = _p95(before), _p95(during), _p95(also)
    # "within its normal time": the healthy cluster's p95 stays under twice its own p95 before the fault
    # plus 50 ms (this 2-core machine is shared), far under the faulted cluster's 3 s timeout
    assert hurt < 2 * normal + 0.05, (normal, hurt)
    assert later < 2 * normal + 0.05, (normal, later)
    figures = (
        f"p95 before {normal * 1000:.1f} ms, during {hurt * 1000:.1f} ms, after trip {later * 1000:.1f} ms; "
        f"faulted requests: {len(outcomes)} ({outcomes.count('ApiUnavailableError')} failed fast)"
    )
    print(f"{fault}: {figures}")  # with -s: the figures of this run
    reliability.record(
        area="many clusters",
        fault=f"second cluster's kube-apiserver {fault} while a connection to the first one is used",
        outcome="requests to the first cluster answered as before; the second's breaker opened and closed "
        "again by itself once the server was back",
        checked="p95 of the healthy cluster's GETs under 2x its normal p95 + 50 ms; its breaker never opened",
        figures=figures,
    )


def test_sync_of_two_clusters_one_hung_applies_the_other_in_its_normal_time(
    kube: KubeCluster, second_kube: KubeCluster, reliability: Recorder, tmp_path: Path
) -> None:
    """`sync --context one --context two` with two's API server frozen: one's objects land as fast as a sync
    of one alone, two's group is the error (exit 2), and the command costs two's timeout, not more."""
    assert second_kube.state_dir is not None
    other = PrivateCluster(second_kube.state_dir, second_kube.env)
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(merged_kubeconfig(kube, second_kube, 9)))
    ns = f"t-hung-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", ns)
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(config), "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}

    def sync(name: str, *contexts: str) -> tuple[subprocess.CompletedProcess[str], float]:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}}
        (repo / "cm.yaml").write_text(yaml.safe_dump(body))
        flags = [f for c in contexts for f in ("--context", c)]
        started = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "gitops_sync", "sync", "--repo", str(repo), "-n", ns, *flags, "-o", "json",
             "--request-timeout", "5s"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        return r, time.monotonic() - started

    try:
        alone, alone_took = sync("alone", "one")
        assert alone.returncode == 0, alone.stderr
        other.freeze("kube-apiserver")
        try:
            wall_start = time.time()
            both, both_took = sync("both", "one", "two")
        finally:
            other.thaw("kube-apiserver")
        assert both.returncode == 2, both.stderr
        doc = {c["context"]: c for c in json.loads(both.stdout)["clusters"]}
        assert doc["one"]["exitCode"] == 0 and doc["two"]["exitCode"] == 2
        assert "unreachable" in json.dumps(doc["two"]["report"]["errors"])
        created = kube.get("configmap", "both", ns)["metadata"]["creationTimestamp"]
        landed = datetime.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() - wall_start
        # one's object lands within one's own time (creationTimestamp has whole seconds: +1 s), long before
        # two's request timeout (5 s) and probe (3 s) end the command
        assert landed < alone_took + 1.5, (landed, alone_took)
        assert both_took >= 5, both_took
    finally:
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    figures = (
        f"sync of one alone {alone_took:.1f} s; one's object created at most {landed + 1:.1f} s after the start; "
        f"command {both_took:.1f} s (--request-timeout 5s + the 3 s probe)"
    )
    print(f"sync, two hung: {figures}")  # with -s: the figures of this run
    reliability.record(
        area="many clusters",
        fault="`sync --context one --context two` while two's kube-apiserver is frozen (SIGSTOP)",
        outcome="one applied as fast as a sync of one alone (exit 0 in its group); two's group an error "
        "(unreachable, exit 2); the command exit 2 after two's timeout",
        checked="one's ConfigMap created within a single-cluster sync's time (+1.5 s); nothing waited for two",
        figures=figures,
    )
