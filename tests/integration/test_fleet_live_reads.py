"""The fleet's live reads in a crowded namespace, on the real API server and watch cache.

Many sources sharing a namespace: a source's objects the watch cache calls absent (new in Git, or created by
someone else a moment ago) are read again from the API with one GET each, never a LIST of everyone's
objects (reconcile/live.py, apply/live.py: O(N^2) over a cold start of N sources); what it reads that way
still tells an object that existed before us (adopted, so a prune releases it) from one it creates (so a
prune deletes it), and drift is still corrected from the cache.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_fleet import cm_data, crd, fleet_args, gitsync, gs_cli, wait_ready

__all__ = ["crd"]  # the module fixture, shared

NOISE = 80  # ConfigMaps nobody declares: > 16 per target of a 4-object source (apply/live.py: uses_list)


def cms(prefix: str, n: int, value: str) -> str:
    return "---\n".join(configmap(f"{prefix}{i}", {"v": value}) for i in range(n))


def lists_of(d: Daemon, namespace: str) -> list[dict[str, Any]]:
    """The daemon's LISTs of the namespace's ConfigMaps without a label selector (its debug request log)."""
    out = []
    for line in d.log_lines():
        if line.get("event") != "request" or line.get("path") != f"/api/v1/namespaces/{namespace}/configmaps":
            continue
        query = line.get("query") or {}
        if isinstance(query, str):  # the console renderer's repr, should the format change
            query = {"labelSelector": None} if "'labelSelector': None" in query else {"labelSelector": "?"}
        if not query.get("labelSelector"):
            out.append(line)
    return out


def test_a_crowded_namespace_is_read_by_gets_and_drift_adoption_and_prune_stay_right(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    kube.kubectl(
        "apply", "-f", "-", input="".join(configmap(f"noise-{i}", {"n": str(i)}, namespace) for i in range(NOISE))
    )
    kube.kubectl("create", "configmap", "a-before", "-n", namespace, "--from-literal=v=theirs")
    before_uid = kube.get("configmap", "a-before", namespace)["metadata"]["uid"]
    a = GitRepo(tmp_path / "a", {"cms.yaml": cms("a", 3, "1") + "---\n" + configmap("a-before", {"v": "git"})})
    b = GitRepo(tmp_path / "b", {"cms.yaml": cms("b", 4, "1")})
    spec = {"prune": True}
    kube.kubectl(
        "apply", "-f", "-", input=gitsync("a", namespace, a.path, **spec) + gitsync("b", namespace, b.path, **spec)
    )
    args = fleet_args(namespace, tmp_path, "--workers", "2", "--log-level", "debug")
    with Daemon(args, kube.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        wait_ready(kube, namespace, "a")
        wait_ready(kube, namespace, "b")
        assert {n: cm_data(kube, namespace, n) for n in ("a0", "a-before", "b3")} == {
            "a0": {"v": "1"},
            "a-before": {"v": "git"},
            "b3": {"v": "1"},
        }
        gets = [
            line["path"]
            for line in d.log_lines()
            if line.get("event") == "request"
            and line.get("method") == "GET"
            and "/configmaps/" in str(line.get("path"))
        ]
        assert f"/api/v1/namespaces/{namespace}/configmaps/a0" in gets, "absent in the cache: read again, by a GET"
        assert lists_of(d, namespace) == [], "the crowded namespace was listed whole"
        adopted = kube.get("configmap", "a-before", namespace)["metadata"]
        assert adopted["uid"] == before_uid and "gitops-sync.io/adopted" in (adopted.get("annotations") or {}), adopted
        # Drift is corrected from the watch cache.
        kube.kubectl(
            "patch", "configmap", "b2", "-n", namespace, "--type=merge", "-p", json.dumps({"data": {"v": "x"}})
        )
        wait_until("drift corrected", lambda: cm_data(kube, namespace, "b2") == {"v": "1"}, 30)
        # Prune: what a created is deleted, what it adopted released, nobody else's touched.
        a.commit({"cms.yaml": configmap("a0", {"v": "1"})})
        r = gs_cli(kube, "reconcile", "a", "-n", namespace, "--timeout", "60s")
        assert r.returncode == 0, r.stdout + r.stderr
        wait_until(
            "a1, a2 pruned",
            lambda: cm_data(kube, namespace, "a1") is None and cm_data(kube, namespace, "a2") is None,
            30,
        )
        kept = kube.get("configmap", "a-before", namespace)["metadata"]
        assert kept["uid"] == before_uid, "the object that existed before us was deleted"
        assert "applyset.kubernetes.io/part-of" not in (kept.get("labels") or {}), kept
        assert cm_data(kube, namespace, "a0") == {"v": "1"}
        assert all(cm_data(kube, namespace, f"b{i}") == {"v": "1"} for i in range(4))
        left = {
            c["metadata"]["name"]
            for c in kube.list("configmap", namespace)
            if c["metadata"]["name"].startswith("noise-")
        }
        assert len(left) == NOISE
        assert lists_of(d, namespace) == []
