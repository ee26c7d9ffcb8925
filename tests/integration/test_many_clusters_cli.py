"""`sync`/`diff` against several contexts in one run, and the cluster the inventory records, on two real
control planes (`kube`, `second_kube`).

One kubeconfig holds both clusters' contexts (`one`, `two`); a third context points at a closed port. Each
pass runs through its own connection; the report is grouped by cluster and the exit code is the worst. The
inventory parent records its cluster's kube-system UID; a parent that records another cluster (copied there
as a backup tool restores it) is never pruned from.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.conventions import CLUSTER_ID
from tests.conftest import SECOND_CLUSTER, KubeCluster
from tests.integration.clusters_support import merged_kubeconfig

pytestmark = [pytest.mark.cluster, SECOND_CLUSTER]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def setup(kube: KubeCluster, second_kube: KubeCluster, tmp_path: Path) -> Iterator[tuple[Path, str, Path]]:
    """(kubeconfig of both, a namespace made on both clusters, the repository directory)."""
    with socket.socket() as s:  # a port nothing listens on: connections refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(merged_kubeconfig(kube, second_kube, port)))
    ns = f"t-many-{uuid.uuid4().hex[:6]}"
    for k in (kube, second_kube):
        k.kubectl("create", "namespace", ns)
    repo = tmp_path / "repo"
    repo.mkdir()
    write_cms(repo, "a", "b")
    try:
        yield config, ns, repo
    finally:
        for k in (kube, second_kube):
            k.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


def write_cms(repo: Path, *names: str, value: str = "1") -> None:
    for f in repo.glob("*.yaml"):
        f.unlink()
    for n in names:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}, "data": {"v": value}}
        (repo / f"{n}.yaml").write_text(yaml.safe_dump(body))


def gs(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(config), "PYTHONPATH": str(REPO), "HOME": str(config.parent)}
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )


def clusters(r: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert r.stdout.strip(), f"no report (rc={r.returncode}):\n{r.stderr}"
    doc = json.loads(r.stdout)
    assert doc["exitCode"] == r.returncode
    return {c["context"]: c for c in doc["clusters"]}


def parent_of(kube: KubeCluster, ns: str) -> dict[str, Any]:
    (parent,) = [cm for cm in kube.list("configmaps", ns) if cm["metadata"]["name"].startswith("gitops-sync-")]
    return parent


def test_sync_and_diff_two_clusters_in_one_run_grouped_and_worst_exit_code(
    kube: KubeCluster, second_kube: KubeCluster, setup: tuple[Path, str, Path]
) -> None:
    config, ns, repo = setup
    r = gs(config, "sync", "--repo", str(repo), "-n", ns, "--context", "one", "--context", "two", "-o", "json")
    assert r.returncode == 0, r.stderr
    by = clusters(r)
    assert list(by) == ["one", "two"]
    for ctx, k in (("one", kube), ("two", second_kube)):
        assert by[ctx]["exitCode"] == 0
        assert {o["name"]: o["action"] for o in by[ctx]["report"]["objects"]} == {"a": "create", "b": "create"}
        uid = k.get("namespace", "kube-system")["metadata"]["uid"]
        assert by[ctx]["clusterId"] == uid
        assert parent_of(k, ns)["metadata"]["annotations"][CLUSTER_ID] == uid  # each parent: its own cluster
        assert k.get("configmap", "a", ns)["data"] == {"v": "1"}
    assert by["one"]["clusterId"] != by["two"]["clusterId"]

    # drift on the second cluster only: diff says 1 there, 0 on the first, exits 1 (the worst)
    second_kube.kubectl("-n", ns, "patch", "configmap", "a", "--type=merge", "-p", '{"data":{"v":"drifted"}}')
    r = gs(config, "diff", "--repo", str(repo), "-n", ns, "--context", "one", "--context", "two", "-o", "json")
    by = clusters(r)
    assert r.returncode == 1, r.stderr
    assert (by["one"]["exitCode"], by["two"]["exitCode"]) == (0, 1)
    # the table: one group per cluster, each headed by its context, server and exit code
    r = gs(config, "diff", "--repo", str(repo), "-n", ns, "--context", "one", "--context", "two")
    assert r.returncode == 1
    heads = [line for line in r.stdout.splitlines() if line.startswith("== cluster ")]
    assert len(heads) == 2 and heads[0].startswith("== cluster one at https://127.0.0.1:")
    assert heads[1].startswith("== cluster two at ") and heads[1].endswith(": exit 1 ==")
    assert "exit 1 (the worst of: one 0, two 1)" in r.stdout


def test_an_unreachable_cluster_does_not_stop_the_others(
    kube: KubeCluster, second_kube: KubeCluster, setup: tuple[Path, str, Path]
) -> None:
    config, ns, repo = setup
    started = time.monotonic()
    r = gs(
        config,
        "sync",
        "--repo",
        str(repo),
        "-n",
        ns,
        "--context",
        "down",
        "--context",
        "two",
        "-o",
        "json",
        "--request-timeout",
        "5s",
    )
    took = time.monotonic() - started
    assert r.returncode == 2, r.stderr
    by = clusters(r)
    assert by["two"]["exitCode"] == 0 and second_kube.get("configmap", "b", ns)["data"] == {"v": "1"}
    assert by["down"]["exitCode"] == 2 and by["down"]["report"]["errors"]
    assert "unreachable" in json.dumps(by["down"]["report"]["errors"])
    assert kube.find("configmap", "a", ns) is None  # `down` is the first cluster's credentials elsewhere
    assert took < 60, took
    assert "error: context down: " in r.stderr

    # a context the kubeconfig does not have: that group's error, the other cluster's pass as ever
    r = gs(config, "diff", "--repo", str(repo), "-n", ns, "--context", "nope", "--context", "two", "-o", "json")
    by = clusters(r)
    assert r.returncode == 2 and by["two"]["exitCode"] == 0 and by["nope"]["exitCode"] == 2
    assert "nope" in json.dumps(by["nope"]["report"]["errors"])


def test_a_parent_recording_another_cluster_refuses_to_prune_and_an_old_parent_records_this_one(
    kube: KubeCluster, second_kube: KubeCluster, setup: tuple[Path, str, Path]
) -> None:
    config, ns, repo = setup
    one_uid = kube.get("namespace", "kube-system")["metadata"]["uid"]
    two_uid = second_kube.get("namespace", "kube-system")["metadata"]["uid"]
    assert gs(config, "sync", "--repo", str(repo), "-n", ns, "--context", "two").returncode == 0
    name = parent_of(second_kube, ns)["metadata"]["name"]

    # An old parent (written before the cluster was recorded): used as it is, the cluster recorded by the next write
    second_kube.kubectl("-n", ns, "annotate", "configmap", name, f"{CLUSTER_ID}-")
    r = gs(config, "sync", "--repo", str(repo), "-n", ns, "--context", "two", "--prune")
    assert r.returncode == 0, r.stderr
    assert parent_of(second_kube, ns)["metadata"]["annotations"][CLUSTER_ID] == two_uid

    # The parent as a backup tool restores it from the first cluster: it records that one
    second_kube.kubectl("-n", ns, "annotate", "--overwrite", "configmap", name, f"{CLUSTER_ID}={one_uid}")
    write_cms(repo, "a")  # b left Git
    r = gs(config, "sync", "--repo", str(repo), "-n", ns, "--context", "two", "--prune", "-o", "json")
    assert r.returncode == 2, r.stderr
    errors = json.dumps(json.loads(r.stdout)["errors"])
    assert f"records cluster {one_uid}" in errors and f"reaches cluster {two_uid}" in errors
    assert second_kube.find("configmap", "b", ns) is not None, "nothing pruned"
    assert parent_of(second_kube, ns)["metadata"]["annotations"][CLUSTER_ID] == one_uid, "the record is kept"
    r = gs(config, "diff", "--repo", str(repo), "-n", ns, "--context", "two", "--prune")
    assert r.returncode == 2 and "prune refused" in r.stdout

    # A person says this cluster is where its members live: the next pass records it and prunes
    second_kube.kubectl("-n", ns, "annotate", "configmap", name, f"{CLUSTER_ID}-")
    r = gs(config, "sync", "--repo", str(repo), "-n", ns, "--context", "two", "--prune")
    assert r.returncode == 0, r.stderr
    assert second_kube.find("configmap", "b", ns) is None
    assert parent_of(second_kube, ns)["metadata"]["annotations"][CLUSTER_ID] == two_uid
