"""deploy/chart: `helm lint` clean, the same objects as the kustomize variants of deploy/kubernetes (normalised:
what differs is listed in EXPECTED_DIFFERENCES and said in docs/install.md), values refused by the schema, and
the chart installed into the local cluster by gitops-sync itself (`helm template` output, `gitops-sync sync`)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync import __version__
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart"
KUSTOMIZE = ROOT / "deploy" / "kubernetes"

# The chart's own labels (Helm's conventions) and its per-release selector label: the manifests have neither.
# With one release per namespace and the release named gitops-sync they select the same pods.
HELM_ONLY_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by",
                    "helm.sh/chart")  # fmt: skip
# The CRD is a template (upgraded by `helm upgrade`, unlike a chart's crds/ directory) kept on uninstall.
KEEP = {"helm.sh/resource-policy": "keep"}

# kustomize variant: the chart's values that render it. namespace.create: the manifests make the Namespace;
# tls.generate=false: the manifests expect the Secret gitops-sync-tls to exist (the chart makes one by default).
SAME = ["--set", "namespace.create=true", "--set", "tls.generate=false"]
VARIANTS = {
    "namespaced": SAME,
    "cluster-wide": [*SAME, "--set", "rbac.scope=cluster-wide"],
    "fleet": [*SAME, "--set", "mode=fleet"],
}


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _strip(node: Any) -> Any:
    """Drop the Helm-only labels wherever labels or selectors are, and the CRD's keep annotation."""
    if isinstance(node, dict):
        out = {k: _strip(v) for k, v in node.items() if k not in HELM_ONLY_LABELS}
        if out.get("annotations") == KEEP:
            del out["annotations"]
        return out
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): _strip(d) for d in docs}


def _template(kube: KubeCluster, *args: str, release: str = "gitops-sync", namespace: str = "gitops-sync") -> str:
    return kube.helm("template", release, str(CHART), "--namespace", namespace, *args).stdout


def test_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__


@pytest.mark.parametrize("values", [[], *VARIANTS.values(), ["--set", "serviceMonitor.enabled=true"]])
def test_helm_lint_is_clean(kube: KubeCluster, values: list[str]) -> None:
    r = kube.helm("lint", "--strict", str(CHART), *values, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[WARNING]" not in r.stdout and "[ERROR]" not in r.stdout, r.stdout


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_helm_template_renders_the_objects_of_the_kustomize_variant(kube: KubeCluster, variant: str) -> None:
    chart = _by_key(_docs(_template(kube, *VARIANTS[variant])))
    manifests = _by_key(_docs(kube.kubectl("kustomize", str(KUSTOMIZE / variant)).stdout))
    assert sorted(chart) == sorted(manifests)
    for key, obj in manifests.items():
        assert chart[key] == obj, f"{key} differs:\nchart: {json.dumps(chart[key])}\nkustomize: {json.dumps(obj)}"


def test_without_namespace_create_the_chart_leaves_the_namespace_to_helm(kube: KubeCluster) -> None:
    kinds = [d["kind"] for d in _docs(_template(kube))]
    assert "Namespace" not in kinds and "Deployment" in kinds


def test_release_names_prefix_every_name_and_namespaced_rbac_reaches_listed_namespaces(kube: KubeCluster) -> None:
    docs = _docs(_template(kube, "--set", "rbac.namespaces={apps,web}", release="blue", namespace="ops"))
    names = {d["metadata"]["name"] for d in docs}
    assert all(n.startswith("blue-gitops-sync") for n in names), names
    applies = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"].endswith("-apply")]
    bindings = {d["metadata"]["namespace"] for d in applies}
    assert bindings == {"ops", "apps", "web"}
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "blue"


def test_service_monitor_is_optional_and_binds_its_scraper(kube: KubeCluster) -> None:
    args = ["--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.readerServiceAccount.name=prometheus",
            "--set", "serviceMonitor.readerServiceAccount.namespace=monitoring"]  # fmt: skip
    docs = _docs(_template(kube, *args))
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"].endswith("reader"))
    assert binding["roleRef"]["name"] == "gitops-sync-metrics-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]


def test_image_digest_wins_over_the_tag(kube: KubeCluster) -> None:
    digest = "sha256:" + "ab" * 32
    image = ["--set", "image.repository=registry.test/gitops-sync", "--set", f"image.digest={digest}"]
    docs = _docs(_template(kube, *image))
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == f"registry.test/gitops-sync@{digest}"


@pytest.mark.parametrize(
    "bad",
    [["--set", "mode=multi"], ["--set", "rbac.scope=everything"], ["--set", "replicas=0"],
     ["--set", "image.digest=latest"], ["--set", "source.repository="], ["--set", "unknownKey.x=1"]],
)  # fmt: skip
def test_values_schema_refuses(kube: KubeCluster, bad: list[str]) -> None:
    r = kube.helm("template", "x", str(CHART), *bad, check=False)
    assert r.returncode != 0
    assert "schema" in r.stderr.lower() or "required" in r.stderr.lower(), r.stderr


def _sync(kube: KubeCluster, repo: Path, namespace: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", "sync", "--repo", str(repo), "-n", namespace,
         "--kubeconfig", str(kube.kubeconfig), "-o", "json", *extra],
        capture_output=True, text=True, env=kube.env, timeout=180, check=False,
    )  # fmt: skip


def test_gitops_sync_installs_the_chart_it_ships(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """Dogfooding: `helm template` output in a directory, applied (and pruned) by `gitops-sync sync`."""
    release = f"t{uuid.uuid4().hex[:6]}"
    repo = tmp_path / "repo"
    repo.mkdir()
    rendered = _template(kube, "--set", "rbac.scope=cluster-wide", "--set", "mode=fleet", "--set", "crds.install=false",
                         release=release, namespace=namespace)  # fmt: skip
    (repo / "gitops-sync.yaml").write_text(rendered)
    docs = _docs(rendered)
    try:
        r = _sync(kube, repo, namespace)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        for d in docs:
            found = kube.find(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
            assert found is not None, f"{d['kind']}/{d['metadata']['name']} not created"
            assert found["metadata"]["labels"]["app.kubernetes.io/instance"] == release
        dep = kube.get("Deployment", f"{release}-gitops-sync", namespace)
        assert dep["spec"]["replicas"] == 3
        assert "--shards=4" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
        # A second pass finds nothing to do: the chart's output is stable under server-side apply.
        again = _sync(kube, repo, namespace)
        assert again.returncode == 0, again.stderr[-2000:]
        report = json.loads(again.stdout)
        summary = report["summary"]
        assert (summary["create"], summary["update"], summary["unchanged"]) == (0, 0, len(docs)), summary
    finally:
        # Uninstall the same way: an empty source with --prune removes every object, cluster-scoped ones too.
        (repo / "gitops-sync.yaml").write_text("")
        r = _sync(kube, repo, namespace, "--prune", "--allow-empty")
    assert r.returncode == 0, r.stderr[-2000:]
    for d in docs:
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            assert kube.find(d["kind"], d["metadata"]["name"]) is None, d["metadata"]["name"]


def test_tls_is_on_by_default_with_a_certificate_for_the_service(kube: KubeCluster, tmp_path: Path) -> None:
    docs = _docs(_template(kube, release="blue", namespace="ops"))
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert secret["metadata"]["name"] == "blue-gitops-sync-tls" and secret["type"] == "kubernetes.io/tls"
    (tmp_path / "tls.crt").write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), "-verify_hostname", "blue-gitops-sync.ops.svc",
         str(tmp_path / "tls.crt")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    dep = next(d for d in docs if d["kind"] == "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--tls-cert-file=/etc/gitops-sync/tls/tls.crt" in container["args"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "blue-gitops-sync-tls"


def test_tls_from_cert_manager_or_off(kube: KubeCluster) -> None:
    docs = _docs(
        _template(
            kube, "--set", "tls.certManager.issuerRef.name=ca", "--set", "tls.certManager.issuerRef.kind=ClusterIssuer"
        )
    )
    cert = next(d for d in docs if d["kind"] == "Certificate")
    assert cert["spec"]["secretName"] == "gitops-sync-tls" and "gitops-sync.gitops-sync.svc" in cert["spec"]["dnsNames"]
    assert not [d for d in docs if d["kind"] == "Secret"]
    plain = _docs(_template(kube, "--set", "tls.enabled=false"))
    container = next(d for d in plain if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in container["args"] if a.startswith("--tls")]
    assert "scheme" not in container["readinessProbe"]["httpGet"]
