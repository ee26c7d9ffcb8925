"""GitSyncs that target another cluster (`spec.kubeConfig.secretRef`), on two real control planes.

`kube` runs the fleet controller and holds the GitSyncs and the kubeconfig Secrets; `second_kube` is the
target. One controller: a GitSync of the second cluster converges there (not on the first), the same
repository synced to both keeps two inventories apart, a tenant cannot use someone else's kubeconfig Secret,
a kubeconfig with an exec plugin is refused, and the second cluster frozen (SIGSTOP) marks only its GitSync
ClusterUnreachable while drift on the first is still corrected; it recovers by itself after SIGCONT.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_fleet import cm_data, condition, crd, fleet_args, gitsync, tenant_account, wait_ready
from tests.reliability.faults import PrivateCluster

__all__ = ["crd"]

CLUSTER_ID = "gitops-sync.io/cluster-id"


def _secret(name: str, namespace: str, kubeconfig: bytes) -> str:
    data = {"value": base64.b64encode(kubeconfig).decode()}
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "data": data}
    return json.dumps(doc) + "\n"


def _exec_kubeconfig(admin: Path) -> bytes:
    """The admin kubeconfig with its user swapped for an exec plugin (which must never run)."""
    doc: dict[str, Any] = yaml.safe_load(admin.read_text())
    for u in doc["users"]:
        u["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/touch"}}
    return yaml.safe_dump(doc).encode()


def _ready(kube: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    return condition(kube, ns, name, "Ready")


def _drift_corrected(kube: KubeCluster, ns: str, name: str) -> float:
    """Seconds from a hand edit of ConfigMap `name` on `kube` until the fleet put Git's value back (one edit
    per object: edits repeated by one manager are a fight the controller yields to)."""
    kube.kubectl("patch", "configmap", name, "-n", ns, "--type=merge", "-p", json.dumps({"data": {"v": "hand"}}))
    started = time.monotonic()
    wait_until("drift corrected", lambda: cm_data(kube, ns, name) == {"v": "1"}, 60, interval=0.05)
    return time.monotonic() - started


def test_gitsyncs_of_two_clusters_converge_apart_and_a_frozen_one_blocks_only_its_own(
    kube: KubeCluster, second_kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    second_kube.kubectl("create", "namespace", ns)
    tenant_account(kube, ns)  # ConfigMaps of ns only: not Secrets
    second_bytes = second_kube.kubeconfig.read_bytes()
    repo = GitRepo(tmp_path / "app", {f"{n}.yaml": configmap(n, {"v": "1"}) for n in ("app", "before", "during")})
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(
            [
                _secret("second", ns, second_bytes),
                _secret("exec", ns, _exec_kubeconfig(second_kube.kubeconfig)),
                gitsync(
                    "remote", ns, repo.path, prune=True, interval="2s", kubeConfig={"secretRef": {"name": "second"}}
                ),
                gitsync("local", ns, repo.path, prune=True, interval="2s"),
                gitsync(
                    "thief", ns, repo.path, serviceAccountName="tenant", kubeConfig={"secretRef": {"name": "second"}}
                ),
                gitsync("runner", ns, repo.path, kubeConfig={"secretRef": {"name": "exec"}}),
            ]
        ),
    )
    with Daemon(fleet_args(ns, tmp_path), kube.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        wait_ready(kube, ns, "local")
        wait_ready(kube, ns, "remote")
        uid1 = kube.get("namespace", "kube-system")["metadata"]["uid"]
        uid2 = second_kube.get("namespace", "kube-system")["metadata"]["uid"]
        # Each cluster holds its own object and only the inventory of the GitSync that targets it.
        wait_until("app on the second cluster", lambda: cm_data(second_kube, ns, "app") == {"v": "1"}, 30)
        assert cm_data(kube, ns, "app") == {"v": "1"}
        parents2 = {
            c["metadata"]["name"]: c for c in second_kube.list("configmaps", ns) if "gitsync-" in c["metadata"]["name"]
        }
        parents1 = {
            c["metadata"]["name"]: c for c in kube.list("configmaps", ns) if "gitsync-" in c["metadata"]["name"]
        }
        assert [n for n in parents2 if "remote" in n] and not [n for n in parents2 if "local" in n], list(parents2)
        assert [n for n in parents1 if "local" in n] and not [n for n in parents1 if "remote" in n], list(parents1)
        assert {p["metadata"]["annotations"].get(CLUSTER_ID) for p in parents2.values()} == {uid2}
        # The controller's own cluster's parents record it, or (as before issue 26) nothing; never the second.
        assert {p["metadata"]["annotations"].get(CLUSTER_ID) for p in parents1.values()} <= {uid1, None}
        status = kube.get("gitsync", "remote", ns)["status"]
        assert uid2 in status["cluster"] and "cluster" not in kube.get("gitsync", "local", ns)["status"]
        # A tenant may not read the Secret: refused, naming the Secret, never its content.
        wait_until("thief refused", lambda: _ready(kube, ns, "thief").get("reason") == "KubeConfigForbidden", 30)
        msg = _ready(kube, ns, "thief")["message"]
        assert f"Secret {ns}/second" in msg and f"system:serviceaccount:{ns}:tenant" in msg, msg
        user = yaml.safe_load(second_bytes)["users"][0]["user"]
        secret_values = [str(v)[:40] for v in user.values() if isinstance(v, str) and len(v) > 20]
        # An exec plugin in the kubeconfig: refused, naming the key; the command never ran.
        wait_until("runner refused", lambda: _ready(kube, ns, "runner").get("reason") == "KubeConfigRefused", 30)
        assert "user.exec" in _ready(kube, ns, "runner")["message"]
        doc = json.dumps(d.status())
        assert uid2 in doc and '"clusters"' in doc
        for place in (doc, json.dumps(kube.get("gitsync", "thief", ns)), (tmp_path / "fleet.log").read_text()):
            for v in secret_values:
                assert v not in place
        assert d.metric("gitops_sync_gitsync_cluster_reachable", source=f"{ns}/remote", cluster=status["cluster"]) == 1

        before = [_drift_corrected(kube, ns, "before")]
        assert second_kube.state_dir is not None
        frozen = PrivateCluster(second_kube.state_dir, second_kube.env)
        frozen.freeze("kube-apiserver")
        try:
            t0 = time.monotonic()
            wait_until(
                "remote ClusterUnreachable",
                lambda: _ready(kube, ns, "remote").get("reason") == "ClusterUnreachable",
                60,
                interval=0.2,
            )
            unreachable_after = time.monotonic() - t0
            assert status["cluster"].split("#")[0] in _ready(kube, ns, "remote")["message"]
            during = [_drift_corrected(kube, ns, "during")]
            assert _ready(kube, ns, "local")["status"] == "True"
        finally:
            frozen.thaw("kube-apiserver")
        t1 = time.monotonic()
        wait_until("remote recovered", lambda: _ready(kube, ns, "remote").get("status") == "True", 90, interval=0.2)
        recovered_after = time.monotonic() - t1
        print(
            f"drift corrected before {[round(x, 2) for x in before]} s, with the second cluster frozen "
            f"{[round(x, 2) for x in during]} s; ClusterUnreachable after {unreachable_after:.1f} s; "
            f"Ready again {recovered_after:.1f} s after SIGCONT"
        )
        assert max(during) < max(before) * 2 + 2.0, (before, during)
        # Second cluster unchanged by the first's drift corrections: apart.
        assert cm_data(second_kube, ns, "app") == {"v": "1"}
    second_kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
