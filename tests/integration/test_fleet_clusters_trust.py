"""What a GitSync's kubeConfig Secret must never make the fleet do, on two real control planes.

The controller runs on `second_kube` (which holds the CRD, the GitSyncs and the Secrets, as in
test_fleet_clusters.py); `kube` is the remote target. A tenant naming a kubeconfig Secret its ServiceAccount
may not read is refused (`KubeConfigForbidden`), nothing of its repository applied on either cluster, the
Secret's content in no status, Event, `/status` or log line. Kubeconfigs that would run a command or read
the controller's files (`auth-provider`, `tokenFile`, a `certificate-authority` path) are refused
(`KubeConfigRefused`, naming the key), nothing applied. A kubeconfig Secret rotated to another cluster
that holds a copy of the inventory (a standby restored from a backup) is refused to prune there, like a
foreign parent, and the first cluster's objects are left as they were.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.conventions import PART_OF
from tests.conftest import SECOND_CLUSTER, KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_fleet import cm_data, condition, fleet_args, gitsync, tenant_account, wait_ready
from tests.integration.test_fleet_clusters import _secret, crd_now

pytestmark = [pytest.mark.cluster, SECOND_CLUSTER]
CLUSTER_ID = "gitops-sync.io/cluster-id"


def _variant(admin: Path, *, user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None) -> bytes:
    """The admin kubeconfig with its user, or its cluster's fields, replaced."""
    doc: dict[str, Any] = yaml.safe_load(admin.read_text())
    for u in doc["users"]:
        u["user"] = user if user is not None else u["user"]
    for c in doc["clusters"]:
        c["cluster"] = {**c["cluster"], **(cluster or {})}
        if cluster and "certificate-authority" in cluster:
            c["cluster"].pop("certificate-authority-data", None)
    return yaml.safe_dump(doc).encode()


def _secret_values(admin: Path) -> list[str]:
    user = yaml.safe_load(admin.read_text())["users"][0]["user"]
    values = [str(v)[-40:] for v in user.values() if isinstance(v, str) and len(v) > 20]
    assert values
    return values


def _ready(kube: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    return condition(kube, ns, name, "Ready")


def _parent(kube: KubeCluster, ns: str, gitsync_name: str) -> dict[str, Any]:
    parents = [c for c in kube.list("configmaps", ns) if f"gitsync-{gitsync_name}" in c["metadata"]["name"]]
    assert len(parents) == 1, [c["metadata"]["name"] for c in kube.list("configmaps", ns)]
    return parents[0]


def _restored_copy(doc: dict[str, Any]) -> str:
    """An object as a backup tool restores it elsewhere: its metadata without the server's fields."""
    meta = {k: v for k, v in doc["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": doc.get("data") or {}})


def test_tenants_refused_kubeconfigs_and_a_rotation_to_another_cluster_touch_nothing(
    kube: KubeCluster, second_kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    ns, home, target = namespace, second_kube, kube
    crd_now(home)
    home.kubectl("create", "namespace", ns, check=False)
    tenant_account(home, ns)  # ConfigMaps of ns only: not Secrets
    stolen = GitRepo(tmp_path / "stolen", {"stolen.yaml": configmap("stolen", {"v": "1"})})
    bad = GitRepo(tmp_path / "bad", {"bad.yaml": configmap("bad", {"v": "1"})})
    moving = GitRepo(tmp_path / "moving", {f"{n}.yaml": configmap(n, {"v": "1"}) for n in ("m1", "m2")})
    admin = target.kubeconfig
    token_file = tmp_path / "token"
    token_file.write_text("a token the controller must never read\n")
    refused = {
        "authprov": (_variant(admin, user={"auth-provider": {"name": "oidc", "config": {}}}), "user.auth-provider"),
        "tokenfile": (_variant(admin, user={"tokenFile": str(token_file)}), "user.tokenFile"),
        "cafile": (
            _variant(admin, cluster={"certificate-authority": str(token_file)}),
            "cluster.certificate-authority",
        ),
    }
    docs = [_secret("admin", ns, admin.read_bytes()), _secret("moving", ns, admin.read_bytes())]
    docs.append(gitsync("thief", ns, stolen.path, prune=True, serviceAccountName="tenant", kubeConfig=_ref("admin")))
    docs.append(gitsync("moving", ns, moving.path, prune=True, interval="2s", kubeConfig=_ref("moving")))
    for name, (kubeconfig, _) in refused.items():
        docs += [_secret(name, ns, kubeconfig), gitsync(name, ns, bad.path, prune=True, kubeConfig=_ref(name))]
    home.kubectl("apply", "-f", "-", input="".join(docs))
    secret_values = _secret_values(admin)
    with Daemon(fleet_args(ns, tmp_path), home.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        wait_ready(home, ns, "moving", 90)
        # A tenant may not read the Secret it names: refused, the Secret and the user named, nothing applied.
        wait_until("thief refused", lambda: _ready(home, ns, "thief").get("reason") == "KubeConfigForbidden", 60)
        msg = _ready(home, ns, "thief")["message"]
        assert f"Secret {ns}/admin" in msg and f"system:serviceaccount:{ns}:tenant" in msg, msg
        # Commands and files: refused, naming the key; nothing applied anywhere.
        for name, (_, key) in refused.items():
            wait_until(f"{name} refused", lambda n=name: _ready(home, ns, n).get("reason") == "KubeConfigRefused", 60)
            assert key in _ready(home, ns, name)["message"], _ready(home, ns, name)
        for cluster in (home, target):
            assert cm_data(cluster, ns, "stolen") is None and cm_data(cluster, ns, "bad") is None
        # The Secret's content: in no status, Event, /status document or log line.
        events = home.kubectl("get", "events", "-n", ns, "-o", "json").stdout
        statuses = json.dumps([home.get("gitsync", n, ns) for n in ("thief", *refused)])
        for place in (json.dumps(d.status()), events, statuses, (tmp_path / "fleet.log").read_text()):
            for v in secret_values:
                assert v not in place

        # The kubeconfig Secret rotated to another cluster holding a copy of the inventory (a standby restored
        # from a backup, with a member that left Git since): applies go on there, the prune is refused.
        uid_target = target.get("namespace", "kube-system")["metadata"]["uid"]
        uid_home = home.get("namespace", "kube-system")["metadata"]["uid"]
        parent = _parent(target, ns, "moving")
        assert parent["metadata"]["annotations"][CLUSTER_ID] == uid_target
        before = {n: target.get("configmap", n, ns)["metadata"]["uid"] for n in ("m1", "m2")}
        member_label = target.get("configmap", "m1", ns)["metadata"]["labels"][PART_OF]
        restored = {"metadata": {"name": "restored", "namespace": ns, "labels": {PART_OF: member_label}}}
        home.kubectl("apply", "-f", "-", input=_restored_copy(parent) + "\n" + _restored_copy(restored))
        restored_uid = home.get("configmap", "restored", ns)["metadata"]["uid"]
        home_server = yaml.safe_load(home.kubeconfig.read_text())["clusters"][0]["cluster"]["server"].rstrip("/")
        home.kubectl("apply", "-f", "-", input=_secret("moving", ns, home.kubeconfig.read_bytes()))
        wait_until(
            "moving reconnected to the other cluster",
            lambda: (home.get("gitsync", "moving", ns).get("status") or {}).get("cluster", "").startswith(home_server),
            60,
            interval=0.2,
        )
        wait_until("m1 applied on the other cluster", lambda: cm_data(home, ns, "m1") == {"v": "1"}, 60)
        wait_until(
            "the prune refused",
            lambda: "records cluster" in json.dumps(home.get("gitsync", "moving", ns).get("status") or {}),
            60,
            interval=0.2,
        )
        status = json.dumps(home.get("gitsync", "moving", ns)["status"])
        assert uid_target in status and uid_home in status, status
        assert _ready(home, ns, "moving")["status"] == "False"
        assert home.get("configmap", "restored", ns)["metadata"]["uid"] == restored_uid  # not pruned
        assert _parent(home, ns, "moving")["metadata"]["annotations"][CLUSTER_ID] == uid_target  # never rewritten
        # The first cluster is left as it was: nothing pruned there either.
        assert {n: target.get("configmap", n, ns)["metadata"]["uid"] for n in ("m1", "m2")} == before
    home.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _ref(name: str) -> dict[str, Any]:
    return {"secretRef": {"name": name}}
