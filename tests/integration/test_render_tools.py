"""Rendering with the real `kubectl kustomize` and `helm template` (binaries from deploy/local-cluster).

No API server is needed, but the binaries are: the fixture fails, never skips, when they are missing,
so a green run always means the tools were exercised.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.errors import RenderError
from gitops_sync.render import RenderOptions, render
from gitops_sync.resource import DesiredObject

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
# The launcher's binary cache: LOCAL_CLUSTER_CACHE when set (as cluster.py reads it), else under the repository.
BUILT = Path(os.environ.get("LOCAL_CLUSTER_CACHE") or REPO / ".cache" / "local-cluster") / "bin"
EXAMPLES = REPO / "examples-repo"


@dataclass(frozen=True)
class Tools:
    kubectl: str
    helm: str

    def options(self, **kwargs: Any) -> RenderOptions:
        return RenderOptions(kubectl=self.kubectl, helm=self.helm, **kwargs)


def _find(name: str) -> str | None:
    built = BUILT / name
    if built.is_file():
        return str(built)
    return shutil.which(name)


@pytest.fixture(scope="module")
def tools() -> Tools:
    found = {name: _find(name) for name in ("kubectl", "helm")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not found in {BUILT} nor on PATH: "
            "build them with `python3 deploy/local-cluster/cluster.py build`"
        )
    return Tools(kubectl=str(found["kubectl"]), helm=str(found["helm"]))


def by_key(objs: list[DesiredObject]) -> dict[str, DesiredObject]:
    return {str(o.key): o for o in objs}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


# --- examples-repo -----------------------------------------------------------------------------------


def test_examples_repo_renders_each_object_once(tools: Tools) -> None:
    objs = render(EXAMPLES, tools.options())
    origins = {str(o.key): o.origin for o in objs}
    hashed = next(k for k in origins if k.startswith("ConfigMap/demo/greeter-config-"))
    assert origins == {
        "Namespace/demo": "namespace.yaml#1",
        "Deployment.apps/demo/minha-api": "minha-api/deployment.yaml#1",
        "Service/demo/minha-api": "minha-api/service.yaml#1",
        "ConfigMap/demo/minha-api-config": "minha-api/configmap.yaml#1",
        "Secret/demo/minha-api-db": "minha-api/secret.yaml#1",
        "Deployment.apps/demo/greeter": "greeter (kustomize)",
        "Service/demo/greeter": "greeter (kustomize)",
        hashed: "greeter (kustomize)",
        "Deployment.apps/demo/web": "charts/web (helm)",
        "Service/demo/web": "charts/web (helm)",
    }
    assert len(objs) == len(origins)


def test_examples_repo_minha_api_is_the_deployment_of_the_scenario(tools: Tools) -> None:
    deploy = by_key(render(EXAMPLES, tools.options()))["Deployment.apps/demo/minha-api"].manifest
    assert deploy["spec"]["replicas"] == 3
    assert deploy["metadata"]["labels"] == {"app": "minha-api"}
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "api"
    assert container["image"] == "registry.example/minha-api:1.4.2"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert set(container["resources"]) == {"requests", "limits"}


def test_examples_repo_overlay_and_chart_values_apply(tools: Tools) -> None:
    objs = by_key(render(EXAMPLES, tools.options()))
    greeter = objs["Deployment.apps/demo/greeter"].manifest
    assert greeter["spec"]["replicas"] == 2
    [container] = greeter["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/greeter:0.2.0"
    config = container["envFrom"][0]["configMapRef"]["name"]
    assert f"ConfigMap/demo/{config}" in objs  # the generated name and the reference agree
    assert objs[f"ConfigMap/demo/{config}"].manifest["data"] == {"GREETING": "hello from the demo overlay"}
    assert objs["Deployment.apps/demo/web"].manifest["spec"]["replicas"] == 2


def test_examples_repo_is_namespaced_to_demo_whatever_the_default(tools: Tools) -> None:
    for obj in render(EXAMPLES, tools.options(namespace="elsewhere")):
        if obj.kind != "Namespace":
            assert obj.manifest["metadata"]["namespace"] == "demo", obj.origin


def test_walk_matches_the_tools_own_output(tools: Tools) -> None:
    """What we render for a kustomization is exactly what `kubectl kustomize` prints."""
    expected = list(
        yaml.safe_load_all(
            subprocess.run(
                [tools.kubectl, "kustomize", str(EXAMPLES / "greeter")], capture_output=True, text=True, check=True
            ).stdout
        )
    )
    got = [o.manifest for o in render(EXAMPLES, tools.options()) if o.origin == "greeter (kustomize)"]
    assert got == expected


# --- helm options ------------------------------------------------------------------------------------


def test_helm_values_files_and_release_name(tools: Tools, tmp_path: Path) -> None:
    values = write(tmp_path, {"prod.yaml": "replicaCount: 5\nimage: {tag: '9.9.9'}\n"}) / "prod.yaml"
    objs = by_key(render(EXAMPLES / "charts", tools.options(helm_values=(values,), helm_release="shop")))
    deploy = objs["Deployment.apps/demo/shop"].manifest
    assert deploy["spec"]["replicas"] == 5
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/web:9.9.9"
    assert objs["Deployment.apps/demo/shop"].origin == "web (helm)"


def test_helm_relative_values_are_read_from_the_repo_root(tools: Tools, tmp_path: Path) -> None:
    repo = write(tmp_path, {"env/prod-values/web.yaml": "replicaCount: 7\n"})  # values outside the walked tree
    shutil.copytree(EXAMPLES / "charts", repo / "deploy" / "charts")
    opts = tools.options(helm_values=(Path("env/prod-values/web.yaml"),), repo_root=repo)
    objs = by_key(render(repo / "deploy", opts))
    assert objs["Deployment.apps/demo/web"].manifest["spec"]["replicas"] == 7


CHART = {
    "Chart.yaml": "apiVersion: v2\nname: tiny\nversion: 0.1.0\n",
    "crds/widgets.yaml": """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
""",
    "templates/widget.yaml": """\
apiVersion: example.com/v1
kind: Widget
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
""",
    "templates/tests/test-pod.yaml": """\
apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test
  annotations: {"helm.sh/hook": test}
spec:
  containers: [{name: t, image: busybox}]
""",
}


def test_helm_includes_crds_skips_test_hooks_and_uses_the_namespace(tools: Tools, tmp_path: Path) -> None:
    repo = write(tmp_path, {f"tiny/{name}": text for name, text in CHART.items()})
    objs = render(repo, tools.options(namespace="team-a"))
    assert sorted(str(o.key) for o in objs) == [
        "CustomResourceDefinition.apiextensions.k8s.io/widgets.example.com",
        "Widget.example.com/team-a/tiny",
    ]


# --- failures ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "message", "cause"),
    [
        (
            {"apps/broken/kustomization.yaml": "resources:\n  - missing.yaml\n"},
            r"^apps/broken \(kustomize\): `.*kubectl kustomize` failed",
            "missing.yaml",
        ),
        (
            {"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n", "c/templates/x.yaml": "{{ .Values.a.b }}\n"},
            r"^c \(helm\): `.*helm template` failed",
            "nil pointer",
        ),
    ],
)
def test_tool_failure_names_the_directory_and_the_cause(
    tools: Tools, tmp_path: Path, files: dict[str, str], message: str, cause: str
) -> None:
    with pytest.raises(RenderError, match=message) as err:
        render(write(tmp_path, files), tools.options())
    assert cause in str(err.value)


def test_invalid_object_from_a_tool_is_named(tools: Tools, tmp_path: Path) -> None:
    repo = write(
        tmp_path,
        {"k/kustomization.yaml": "resources: [cm.yaml]\n", "k/cm.yaml": "apiVersion: v1\nkind: ConfigMap\n"},
    )
    with pytest.raises(RenderError, match=r"k \(kustomize\)"):
        render(repo, tools.options())
