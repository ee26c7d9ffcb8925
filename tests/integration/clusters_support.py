"""Helpers of the many-cluster tests (`kube` and `second_kube`): one kubeconfig naming both clusters."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import KubeCluster


def merged_kubeconfig(kube: KubeCluster, second: KubeCluster, down_port: int) -> dict[str, Any]:
    """Both admin kubeconfigs under new names (`one`, `two`), and `down` (one's, at a closed port)."""
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for name, cluster in (("one", kube), ("two", second), ("down", kube)):
        doc = yaml.safe_load(cluster.kubeconfig.read_text())
        c, u = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
        if name == "down":
            c = {**c, "server": f"https://127.0.0.1:{down_port}"}
        out["clusters"].append({"name": name, "cluster": c})
        out["users"].append({"name": name, "user": u})
        out["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    out["current-context"] = "one"
    return out
