"""deploy/kubernetes: the kustomize variants apply (server-side dry-run), and the daemon run with the
ServiceAccount's own token does its job in its namespace and is refused, clearly and without crashing,
outside it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_support import (
    Daemon,
    GitRepo,
    as_list,
    configmap,
    relocate,
    rendered,
    sa_kubeconfig,
    wait_until,
)

from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("variant", ["namespaced", "cluster-wide"])
def test_kustomize_variant_applies_with_server_side_dry_run(kube: KubeCluster, namespace: str, variant: str) -> None:
    docs = rendered(kube, variant)
    kinds = sorted({d["kind"] for d in docs})
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "Deployment", "Service"} <= set(kinds)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 2
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--leader-elect" in container["args"] and container["args"][0] == "run"
    assert "--http-auth=kubernetes" in container["args"]  # /metrics and /status need a token in a cluster
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "gitops-sync"
    # One wildcard, documented: the cascade guard's read-only `list` of every kind (cluster-wide only).
    guard = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["list"]}
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] in ("Role", "ClusterRole")}
    assert ("gitops-sync-cascade-guard" in roles) == (variant == "cluster-wide")
    if variant == "cluster-wide":
        assert roles.pop("gitops-sync-cascade-guard") == [guard]
    for rule in (r for rules in roles.values() for r in rules):
        assert "*" not in rule["verbs"] and "*" not in rule.get("resources", rule.get("nonResourceURLs")), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule

    # the Namespace as it is, the rest in a namespace that exists (a dry-run persists no Namespace)
    ns_doc = next(d for d in docs if d["kind"] == "Namespace")
    r = kube.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=test", "-f", "-", input=as_list([ns_doc])
    )
    assert "serverside-applied (server dry run)" in r.stdout, r.stdout
    r = kube.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=test",
        "-f",
        "-",
        input=as_list(relocate(docs, namespace, f"-{namespace}")),
    )
    applied = [line for line in r.stdout.splitlines() if "serverside-applied (server dry run)" in line]
    assert len(applied) == len(docs) - 1, r.stdout + r.stderr


@pytest.fixture
def other_namespace(kube: KubeCluster) -> Iterator[str]:
    name = f"t-outside-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        kube.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def test_daemon_with_the_service_account_token_works_in_its_namespace_and_is_refused_outside(
    kube: KubeCluster, namespace: str, other_namespace: str, tmp_path: Path
) -> None:
    suffix = f"-{namespace}"
    docs = relocate(rendered(kube, "namespaced"), namespace, suffix)
    rbac = [d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole")]
    kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(rbac))
    try:
        kubeconfig = sa_kubeconfig(kube, namespace, tmp_path / "sa.kubeconfig")
        sa = f"system:serviceaccount:{namespace}:gitops-sync"
        assert (
            kube.kubectl(
                "auth", "can-i", "patch", "configmaps", "-n", other_namespace, f"--as={sa}", check=False
            ).stdout.strip()
            == "no"
        )
        repo = GitRepo(
            tmp_path / "repo",
            {
                "inside.yaml": configmap("inside", {"v": "1"}),
                "outside.yaml": configmap("outside", {"v": "1"}, namespace=other_namespace),
            },
        )
        env = {**kube.env, "KUBECONFIG": str(kubeconfig)}
        args = ["--repo", str(repo.path), "-n", namespace, "--leader-elect"]
        with Daemon(args, env, tmp_path / "daemon.log") as d:
            d.wait_ready()
            inside = kube.get("configmap", "inside", namespace)
            assert inside["data"] == {"v": "1"}
            assert kube.find("configmap", "outside", other_namespace) is None

            entry = d.entry("ConfigMap", "outside")
            assert entry is not None and entry["action"] == "error", entry
            assert "forbidden" in entry["message"] and other_namespace in entry["message"], entry["message"]
            assert d.entry("ConfigMap", "inside")["action"] in ("create", "unchanged")  # type: ignore[index]
            watches = {w["resource"]: w for w in d.status()["daemon"]["watches"]}
            assert watches[f"ConfigMap in {namespace}"]["state"] == "synced", watches
            assert watches[f"ConfigMap in {other_namespace}"]["state"] == "forbidden", watches
            assert "forbidden" in watches[f"ConfigMap in {other_namespace}"]["error"]
            assert d.logged("no cluster-wide access; watching per namespace")
            assert any(e.get("object", "").endswith(f"{other_namespace}/outside") for e in d.logged("object failed"))
            assert d.metric("gitops_sync_objects", state="error") == 1
            assert d.status()["daemon"]["leader"] and d.get("/healthz")[0] == 200

            # its job inside works: drift is seen through its own per-namespace watch and corrected
            kube.kubectl("patch", "configmap", "inside", "-n", namespace, "--type=merge", "-p", '{"data":{"v":"x"}}')
            wait_until(
                "the drift corrected by the ServiceAccount",
                lambda: kube.get("configmap", "inside", namespace)["data"]["v"] == "1",
                2.0,
            )
            time.sleep(1)
            assert d.proc.poll() is None, "no crash"
            assert d.stop() == 0
    finally:
        for d in rbac:
            if d["kind"] == "ClusterRole":
                kube.kubectl("delete", "clusterrole", d["metadata"]["name"], "--ignore-not-found", check=False)
