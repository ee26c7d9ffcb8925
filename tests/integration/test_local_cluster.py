"""The local control plane is a real one: scheduling, controllers, managedFields, Helm and garbage collection."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.integration.daemon_support import deployment

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "tests" / "fixtures" / "charts" / "hello"


def get(kube: KubeCluster, *args: str) -> Any:
    return json.loads(kube.kubectl("get", *args, "-o", "json", "--show-managed-fields").stdout)


def wait_until(what: str, check: Any, timeout: float) -> float:
    """Poll `check` until truthy; returns the seconds it took, fails the test after `timeout`."""
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.25)
    return time.monotonic() - t0


def available(kube: KubeCluster, ns: str, name: str, replicas: int) -> bool:
    d = get(kube, "deployment", name, "-n", ns)
    conds = {c["type"]: c["status"] for c in d.get("status", {}).get("conditions", [])}
    return conds.get("Available") == "True" and d["status"].get("availableReplicas") == replicas


def managers(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(m["manager"], m["operation"], m.get("subresource", "")) for m in obj["metadata"]["managedFields"]]


def apply_deployment(kube: KubeCluster, ns: str, name: str, replicas: int) -> None:
    kube.kubectl(
        "apply",
        "--server-side",
        "--field-manager=local-cluster-test",
        "-n",
        ns,
        "-f",
        "-",
        input=deployment(name, replicas),
    )


def test_server_side_applied_deployment_becomes_available_on_the_kwok_node(kube: KubeCluster, namespace: str) -> None:
    apply_deployment(kube, namespace, "web", 3)
    took = wait_until(
        "Deployment web Available with 3 replicas", lambda: available(kube, namespace, "web", 3), timeout=60
    )

    d = get(kube, "deployment", "web", "-n", namespace)
    assert ("local-cluster-test", "Apply", "") in managers(d)
    pods = get(kube, "pods", "-n", namespace, "-l", "app=web")["items"]
    assert len(pods) == 3
    fake_nodes = {
        n["metadata"]["name"]
        for n in get(kube, "nodes")["items"]
        if n["metadata"].get("annotations", {}).get("kwok.x-k8s.io/node") == "fake"
    }
    assert fake_nodes, "no kwok node in the cluster"
    for pod in pods:
        assert pod["spec"]["nodeName"] in fake_nodes, "scheduled by kube-scheduler onto the kwok node"
        assert pod["status"]["phase"] == "Running"
        ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert ready.get("Ready") == "True"
        assert pod["status"]["containerStatuses"][0]["ready"] is True
        # the ServiceAccount admission plugin and token controller did their real work
        assert pod["spec"]["serviceAccountName"] == "default"
    print(f"Deployment Available after {took:.1f} s")


def test_kubectl_scale_records_manager_kubectl_with_subresource_scale(kube: KubeCluster, namespace: str) -> None:
    apply_deployment(kube, namespace, "web", 1)
    kube.kubectl("scale", "deployment/web", "--replicas=2", "-n", namespace)

    d = get(kube, "deployment", "web", "-n", namespace)
    assert d["spec"]["replicas"] == 2
    assert ("kubectl", "Update", "scale") in managers(d), managers(d)
    scale_entry = next(m for m in d["metadata"]["managedFields"] if m.get("subresource") == "scale")
    assert scale_entry["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    # and the applier no longer owns .spec.replicas: a conflict would now be reported on re-apply
    applier = next(m for m in d["metadata"]["managedFields"] if m["manager"] == "local-cluster-test")
    assert "f:replicas" not in applier["fieldsV1"].get("f:spec", {})
    wait_until("2 available replicas after scale", lambda: available(kube, namespace, "web", 2), timeout=60)


def test_helm_install_records_manager_helm(kube: KubeCluster, namespace: str) -> None:
    kube.helm("install", "hello", str(CHART), "--namespace", namespace, "--wait", "--timeout", "90s")

    cm = get(kube, "configmap", "hello-config", "-n", namespace)
    assert "helm" in [m[0] for m in managers(cm)], managers(cm)
    assert cm["data"]["greeting"] == "hello"
    server = json.loads(kube.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    # Helm saw the API server's version through discovery
    assert cm["data"]["kubeVersion"] == server
    d = get(kube, "deployment", "hello", "-n", namespace)
    assert "helm" in [m[0] for m in managers(d)]
    assert d["status"].get("availableReplicas") == 1
    releases = json.loads(kube.helm("list", "--namespace", namespace, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in releases] == [("hello", "deployed")]


def test_deleting_a_deployment_garbage_collects_its_replicaset_and_pods(kube: KubeCluster, namespace: str) -> None:
    apply_deployment(kube, namespace, "web", 2)
    wait_until("Deployment web Available", lambda: available(kube, namespace, "web", 2), timeout=60)
    rs = get(kube, "replicasets", "-n", namespace, "-l", "app=web")["items"]
    pods = get(kube, "pods", "-n", namespace, "-l", "app=web")["items"]
    assert len(rs) == 1 and len(pods) == 2
    assert rs[0]["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

    kube.kubectl("delete", "deployment", "web", "-n", namespace, "--wait=false")

    def gone() -> bool:
        left_rs = get(kube, "replicasets", "-n", namespace, "-l", "app=web")["items"]
        left_pods = get(kube, "pods", "-n", namespace, "-l", "app=web")["items"]
        return not left_rs and not left_pods

    took = wait_until("the garbage collector to remove the ReplicaSet and its Pods", gone, timeout=60)
    print(f"ReplicaSet and Pods collected after {took:.1f} s")


def test_versions_rbac_and_metrics_are_real(kube: KubeCluster, namespace: str) -> None:
    v = json.loads(kube.kubectl("version", "-o", "json").stdout)
    go_mod = (REPO / "deploy" / "local-cluster" / "go.mod").read_text()
    m = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", go_mod, re.M)
    assert m, "go.mod requires k8s.io/kubernetes"
    assert v["clientVersion"]["gitVersion"] == m.group(1)
    assert v["serverVersion"]["gitVersion"] == m.group(1)
    # helm: against the cluster it reports the server's version; offline (no ldflags variable exists in
    # Helm v4) it derives v1.<minor>.0 from the client-go module it was built with
    kube_version = re.compile(r'kubeVersion: "(v[^"]+)"')
    served = kube.helm("template", "x", str(CHART), "--dry-run=server").stdout
    assert kube_version.findall(served) == [m.group(1)]
    offline = kube.helm("template", "x", str(CHART)).stdout
    assert kube_version.findall(offline) == [re.sub(r"\.\d+$", ".0", m.group(1))]

    sa = f"system:serviceaccount:{namespace}:default"
    denied = kube.kubectl("auth", "can-i", "list", "secrets", "-n", namespace, f"--as={sa}", check=False)
    assert denied.stdout.strip() == "no", "RBAC must deny a ServiceAccount without bindings"
    allowed = kube.kubectl("auth", "can-i", "list", "secrets", "-n", namespace, check=False)
    assert allowed.stdout.strip() == "yes", "the admin identity is in system:masters"

    metrics = kube.kubectl("get", "--raw=/metrics").stdout
    assert re.search(r'^apiserver_request_total\{.*verb="POST"', metrics, re.M)
