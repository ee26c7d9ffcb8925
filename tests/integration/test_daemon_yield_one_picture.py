"""A pass reads the cluster once: the yield check and the plan see the same live objects.

The HPA controller scales a Deployment just after it is created. When its watch event landed between the
daemon's yield check (which read the cache first) and its plan (which read it again), the plan saw the
scale and corrected it while the check had not seen it and had not yielded: one fight with the
autoscaler (tests/integration/test_daemon_yield.py caught it under load). Here that interleaving is made
certain: the first read of the Deployment in a pass answers its picture from before the scale, every later
read the scaled object. In-process daemon (its passes are driven directly) on the shared control plane.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.conventions import ConflictPolicy
from gitops_sync.daemon.process.controller import DaemonOptions
from gitops_sync.daemon.reconcile.reporter import SOURCE
from gitops_sync.daemon.single.controller import Daemon as InProcessDaemon
from gitops_sync.engine import PassOptions, SourceOptions
from gitops_sync.resource import ObjectKey
from tests.conftest import KubeCluster
from tests.integration.daemon_support import GitRepo, deployment, wait_until
from tests.integration.test_daemon import replicas
from tests.integration.test_daemon_yield import hpa
from tests.integration.test_sync import gs

pytestmark = pytest.mark.cluster


def _before_the_scale(scaled: dict[str, Any]) -> dict[str, Any]:
    """The Deployment as the cache held it a moment earlier: Git's replicas, no scale entry."""
    old = copy.deepcopy(scaled)
    old["spec"]["replicas"] = 1
    fields = old["metadata"].get("managedFields") or []
    old["metadata"]["managedFields"] = [f for f in fields if f.get("subresource") != "scale"]
    return old


def test_an_hpa_scale_between_two_reads_is_neither_corrected_nor_missed(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 1), "hpa.yaml": hpa("web", "web", 2, 4)})
    assert gs(kube, "sync", "--repo", str(repo.path), "-n", namespace).returncode == 0
    wait_until("the HPA to scale", lambda: replicas(kube, namespace, "web") == 2, 60.0, interval=0.2)
    generation = int(kube.get("deployment", "web", namespace)["metadata"]["generation"])

    opts = DaemonOptions(
        source=SourceOptions(repo=str(repo.path)),
        pass_opts=PassOptions(namespace=namespace, policy=ConflictPolicy.FORCE),  # `run`'s default
        kubeconfig=kube.kubeconfig,
        http_addr="127.0.0.1:0",
        debounce=0.05,
    )
    daemon = InProcessDaemon(opts)
    key = ObjectKey("apps", "Deployment", namespace, "web")
    real_get = daemon.cache.get
    reads: list[int] = []

    def interleaved(k: ObjectKey) -> tuple[bool, Any]:
        known, obj = real_get(k)
        if k != key or obj is None:
            return known, obj
        reads.append(1)
        return known, (_before_the_scale(obj) if len(reads) == 1 else obj)  # the scale lands after read 1

    daemon.cache.get = interleaved  # type: ignore[method-assign]
    try:
        for _ in range(3):  # a poll of Git: the second read after the quiet period acts on the render
            daemon.source.handle({SOURCE})
            daemon.queue.forget(SOURCE)
            time.sleep(0.1)
        assert daemon.source.current is not None, "the source loaded and a pass ran"
        assert reads, "the pass read the Deployment from the cache"
        doc = daemon.source.changeset_doc(daemon.cluster_condition)
        yields = daemon.source.yields.all()
    finally:
        daemon.cache.stop()
        daemon.queue.shutdown()
    after = kube.get("deployment", "web", namespace)
    assert after["spec"]["replicas"] == 2, "the HPA's scale was corrected back to Git's 1"
    assert int(after["metadata"]["generation"]) == generation, "the pass wrote the Deployment's spec"
    web = [o for o in doc["objects"] if o["kind"] == "Deployment"]
    assert web and web[0]["action"] != "update", web
    assert [y.path for y in yields] in ([], [".spec.replicas"]), yields
