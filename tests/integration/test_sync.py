"""`gitops-sync sync` and `diff` end to end against the real local control plane.

Each test runs the real CLI in a subprocess, as CI and users do, and reads the cluster back with `kube.get`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import git
import pytest

from tests.conftest import CRDS, KubeCluster

pytestmark = pytest.mark.cluster


def gs(kube: KubeCluster, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args],
        env=kube.env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def report(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert r.stdout.strip(), f"no report on stdout (rc={r.returncode}):\n{r.stderr}"
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def by_name(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['name']}": o for o in rep["objects"]}


def get(kube: KubeCluster, ref: str, namespace: str) -> dict[str, Any]:
    """The live object `kind/name`, managedFields included (kubectl hides them by default)."""
    return kube.get(ref, namespace=namespace)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def deployment(name: str, replicas: int = 2, image: str = "registry.example/app:1.0") -> str:
    return f"""
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: {name}
      labels: {{app: {name}}}
    spec:
      replicas: {replicas}
      selector: {{matchLabels: {{app: {name}}}}}
      template:
        metadata: {{labels: {{app: {name}}}}}
        spec:
          containers:
          - name: api
            image: {image}
            ports: [{{containerPort: 8080}}]
    """


CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {LOG_LEVEL: info}
"""

SECRET = """
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: s3cr3t-value-never-shown}
"""


def sync_args(repo: Path, ns: str, *extra: str) -> list[str]:
    return ["sync", "--repo", str(repo), "-n", ns, "--name", f"t-{ns}", "-o", "json", *extra]


def diff_args(repo: Path, ns: str, *extra: str) -> list[str]:
    return ["diff", "--repo", str(repo), "-n", ns, "--name", f"t-{ns}", "-o", "json", *extra]


def test_sync_creates_then_second_run_writes_nothing(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"app.yaml": deployment("web"), "cm.yaml": CONFIGMAP, "s.yaml": SECRET})
    first = gs(kube, *sync_args(repo, namespace))
    assert first.returncode == 0, first.stderr
    rep = report(first)
    assert rep["summary"]["create"] == 3, rep
    live = get(kube, "deploy/web", namespace)
    assert live["spec"]["replicas"] == 2
    managers = {m["manager"]: m["operation"] for m in live["metadata"]["managedFields"]}
    assert managers.get("gitops-sync") == "Apply"
    assert live["metadata"]["labels"]["applyset.kubernetes.io/part-of"].startswith("applyset-")

    ours_before = [m for m in live["metadata"]["managedFields"] if m["manager"] == "gitops-sync"]
    second = gs(kube, *sync_args(repo, namespace), "--log-level", "info", "--log-format", "json")
    assert second.returncode == 0, second.stderr
    rep2 = report(second)
    assert rep2["summary"]["unchanged"] == 3 and rep2["summary"]["update"] == 0, rep2
    stats = [json.loads(line) for line in second.stderr.splitlines() if '"requests"' in line]
    assert stats and stats[-1]["writes"] == 0 and stats[-1]["dry_runs"] == 0, second.stderr
    live2 = get(kube, "deploy/web", namespace)
    # Not the resourceVersion: the deployment controller writes .status as the rollout goes on. Our write would
    # move the generation or our managedFields entry (its time, its fields); neither did.
    assert live2["metadata"]["generation"] == live["metadata"]["generation"]
    assert [m for m in live2["metadata"]["managedFields"] if m["manager"] == "gitops-sync"] == ours_before


def test_diff_reports_kubectl_scale_and_edit_drift_with_owner(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = write(tmp_path / "repo", {"app.yaml": deployment("web", 3), "cm.yaml": CONFIGMAP})
    assert gs(kube, *sync_args(repo, namespace)).returncode == 0
    r = gs(kube, *diff_args(repo, namespace))
    assert r.returncode == 0, r.stdout + r.stderr

    kube.kubectl("scale", "deploy/web", "-n", namespace, "--replicas=10")
    kube.kubectl("patch", "configmap/settings", "-n", namespace, "-p", '{"data":{"LOG_LEVEL":"debug"}}')
    r = gs(kube, *diff_args(repo, namespace))
    assert r.returncode == 1, r.stdout + r.stderr
    objs = by_name(report(r))
    web = objs["Deployment/web"]
    assert web["action"] == "conflict"
    (c,) = web["conflicts"]
    assert c == {
        "path": ".spec.replicas",
        "desired": 3,
        "live": 10,
        "manager": "kubectl",
        "operation": "Update",
        "subresource": "scale",
        "actor": "kubectl scale",
        "reason": "live-changed",  # the scale subresource records no time: no `since`
        "source": "app.yaml:8:13",
    }
    cm = objs["ConfigMap/settings"]
    drift = {d["path"]: d for d in cm["drift"] + cm["conflicts"]}
    assert drift[".data.LOG_LEVEL"]["desired"] == "info"
    assert drift[".data.LOG_LEVEL"]["live"] == "debug"
    assert drift[".data.LOG_LEVEL"]["manager"] == "kubectl-patch"
    assert drift[".data.LOG_LEVEL"]["actor"] == "kubectl patch"
    # diff changed nothing
    live = get(kube, "deploy/web", namespace)
    assert live["spec"]["replicas"] == 10


def test_helm_versus_kubectl_scale_scenario(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """The source documents' fight: Helm installs 3 replicas, kubectl scales to 10, Git says 3."""
    chart = write(
        tmp_path / "chart",
        {
            "Chart.yaml": "apiVersion: v2\nname: minha-api\nversion: 0.1.0\n",
            "templates/deploy.yaml": deployment("minha-api", 3, "registry.example/minha-api:1.4.2"),
        },
    )
    kube.helm("install", "minha-api", str(chart), "-n", namespace)
    kube.kubectl("scale", "deploy/minha-api", "-n", namespace, "--replicas=10")
    repo = write(tmp_path / "repo", {"deploy.yaml": deployment("minha-api", 3, "registry.example/minha-api:1.4.2")})

    r = gs(kube, *diff_args(repo, namespace))
    assert r.returncode == 1, r.stderr
    obj = by_name(report(r))["Deployment/minha-api"]
    assert {
        "path": ".spec.replicas",
        "desired": 3,
        "live": 10,
        "manager": "kubectl",
        "operation": "Update",
        "subresource": "scale",
        "actor": "kubectl scale",
        "reason": "live-changed",
        "source": "deploy.yaml:8:13",
    } in obj["conflicts"]
    helm = [o for o in obj["coOwners"] if o["manager"] == "helm"]
    assert helm and '.spec.template.spec.containers[name="api"].image' in helm[0]["fields"], obj["coOwners"]

    r = gs(kube, *sync_args(repo, namespace))
    assert r.returncode == 1, r.stderr  # conflict left unresolved
    obj = by_name(report(r))["Deployment/minha-api"]
    assert "left to their owner" in obj["message"]
    assert get(kube, "deploy/minha-api", namespace)["spec"]["replicas"] == 10

    r = gs(kube, *sync_args(repo, namespace, "--on-conflict", "force"))
    assert r.returncode == 0, r.stdout + r.stderr
    live = get(kube, "deploy/minha-api", namespace)
    assert live["spec"]["replicas"] == 3
    r = gs(kube, *diff_args(repo, namespace))
    assert r.returncode == 0, r.stdout + r.stderr


def test_prune_deletes_only_what_left_git_and_releases_adopted(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    kube.kubectl("create", "configmap", "preexisting", "-n", namespace, "--from-literal=a=b")
    kube.kubectl("create", "configmap", "bystander", "-n", namespace, "--from-literal=a=b")
    repo = write(
        tmp_path / "repo",
        {
            "cm.yaml": CONFIGMAP,
            "pre.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: preexisting}\ndata: {a: b}\n",
            "web.yaml": deployment("web"),
        },
    )
    assert gs(kube, *sync_args(repo, namespace)).returncode == 0
    (repo / "web.yaml").unlink()
    (repo / "pre.yaml").unlink()

    r = gs(kube, *sync_args(repo, namespace, "--prune", "--dry-run"))
    assert r.returncode == 0, r.stderr
    prunes = {o["name"]: o for o in report(r)["objects"] if o["action"] == "prune"}
    assert set(prunes) == {"web", "preexisting"}
    kube.get("deploy/web", namespace=namespace)  # dry run deleted nothing

    r = gs(kube, *sync_args(repo, namespace, "--prune"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert kube.find("deploy/web", namespace=namespace) is None
    pre = get(kube, "configmap/preexisting", namespace)
    assert "applyset.kubernetes.io/part-of" not in pre["metadata"].get("labels", {})
    kube.get("configmap/bystander", namespace=namespace)
    kube.get("configmap/settings", namespace=namespace)

    # an empty source never prunes everything by accident
    (repo / "cm.yaml").unlink()
    r = gs(kube, *sync_args(repo, namespace, "--prune"))
    assert r.returncode == 2 and "--allow-empty" in r.stdout + r.stderr
    kube.get("configmap/settings", namespace=namespace)
    r = gs(kube, *sync_args(repo, namespace, "--prune", "--allow-empty"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert kube.find("configmap/settings", namespace=namespace) is None


def test_secret_values_never_printed(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"s.yaml": SECRET})
    assert gs(kube, *sync_args(repo, namespace)).returncode == 0
    kube.kubectl("patch", "secret/creds", "-n", namespace, "-p", '{"stringData":{"password":"other-live-value"}}')
    for fmt in ("json", "table", "markdown"):
        r = gs(
            kube,
            "diff",
            "--repo",
            str(repo),
            "-n",
            namespace,
            "--name",
            f"t-{namespace}",
            "-o",
            fmt,
            "--log-level",
            "debug",
        )
        assert r.returncode == 1, r.stderr
        out = r.stdout + r.stderr
        for secret in ("s3cr3t-value-never-shown", "other-live-value", "czNjcjN0", "b3RoZXItbGl2ZS12YWx1ZQ"):
            assert secret not in out, (fmt, out)
        assert "***" in r.stdout
    r = gs(kube, "render", "--repo", str(repo))
    assert r.returncode == 0 and "s3cr3t" not in r.stdout and "***" in r.stdout


@CRDS
@pytest.mark.parametrize("count", [1, 5])
def test_crd_and_custom_resource_in_one_source(kube: KubeCluster, namespace: str, tmp_path: Path, count: int) -> None:
    """5 custom resources: read with one LIST of a collection not served yet (404 page not found), which
    failed the whole diff and sync (exit 2, nothing applied) before a LIST's 404 read as "none exist"."""
    group = f"{namespace}.example.com"
    widgets = "".join(
        f"---\napiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: w{i}}}\nspec: {{size: 3}}\n"
        for i in range(1, count + 1)
    )
    repo = write(
        tmp_path / "repo",
        {
            "crd.yaml": f"""
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {{name: widgets.{group}}}
        spec:
          group: {group}
          scope: Namespaced
          names: {{plural: widgets, singular: widget, kind: Widget}}
          versions:
          - name: v1
            served: true
            storage: true
            schema:
              openAPIV3Schema:
                type: object
                properties:
                  spec: {{type: object, properties: {{size: {{type: integer}}}}}}
        """,
            "w.yaml": widgets,
        },
    )
    names = [f"Widget/w{i}" for i in range(1, count + 1)]
    try:
        r = gs(kube, *diff_args(repo, namespace))
        assert r.returncode == 1, r.stdout + r.stderr
        assert [by_name(report(r))[n]["action"] for n in names] == ["create"] * count
        r = gs(kube, *sync_args(repo, namespace))
        assert r.returncode == 0, r.stdout + r.stderr
        assert [by_name(report(r))[n]["action"] for n in names] == ["create"] * count
        live = get(kube, f"widgets.{group}/w{count}", namespace)
        assert live["spec"]["size"] == 3
        r = gs(kube, *diff_args(repo, namespace))  # served now: the LIST reads them all
        assert r.returncode == 0, r.stdout + r.stderr
        assert [by_name(report(r))[n]["action"] for n in names] == ["unchanged"] * count
    finally:
        kube.kubectl("delete", "crd", f"widgets.{group}", "--wait=false", check=False)


def test_wait_reports_unready_objects_and_exits_2(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    pvc = """
    apiVersion: v1
    kind: PersistentVolumeClaim
    metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: does-not-exist
      resources: {requests: {storage: 1Gi}}
    """
    repo = write(tmp_path / "repo", {"web.yaml": deployment("web"), "pvc.yaml": pvc})
    r = gs(kube, *sync_args(repo, namespace, "--wait", "--timeout", "8"))
    assert r.returncode == 2, r.stdout + r.stderr
    rep = report(r)
    assert any("PersistentVolumeClaim" in e and "data" in e for e in rep["errors"]), rep["errors"]
    assert not any("Deployment" in e for e in rep["errors"]), rep["errors"]


def test_bad_input_exits_2_and_changes_nothing(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"good.yaml": CONFIGMAP, "bad.yaml": "apiVersion: v1\nkind: ConfigMap\n  x: [\n"})
    r = gs(kube, *sync_args(repo, namespace))
    assert r.returncode == 2 and "bad.yaml" in r.stderr, r.stderr
    assert kube.find("configmap/settings", namespace=namespace) is None

    (repo / "bad.yaml").write_text("apiVersion: v1\nkind: ConfigMap\ndata: {a: b}\n")
    r = gs(kube, *sync_args(repo, namespace))
    assert r.returncode == 2 and "bad.yaml" in r.stderr and "name" in r.stderr, r.stderr

    (repo / "bad.yaml").write_text("apiVersion: nope.example.com/v1\nkind: Gadget\nmetadata: {name: g}\n")
    r = gs(kube, *sync_args(repo, namespace))
    assert r.returncode == 2 and "Gadget" in r.stderr and "bad.yaml" in r.stderr, r.stderr
    assert kube.find("configmap/settings", namespace=namespace) is None


def test_unreachable_api_server_and_unknown_revision(kube: KubeCluster, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"cm.yaml": CONFIGMAP})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        textwrap.dedent("""
        apiVersion: v1
        kind: Config
        clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
        users: [{name: u, user: {token: t}}]
        contexts: [{name: x, context: {cluster: c, user: u}}]
        current-context: x
    """)
    )
    r = gs(kube, "diff", "--repo", str(repo), "--kubeconfig", str(kubeconfig))
    assert r.returncode == 2 and "127.0.0.1:1" in r.stderr, r.stderr

    g = git.Repo.init(tmp_path / "gitrepo")
    write(tmp_path / "gitrepo", {"cm.yaml": CONFIGMAP})
    g.index.add(["cm.yaml"])
    g.index.commit("init")
    r = gs(kube, "diff", "--repo", str(tmp_path / "gitrepo"), "--revision", "no-such-branch")
    assert r.returncode == 2 and "no-such-branch" in r.stderr, r.stderr


def test_revision_sha_in_every_output(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    g = git.Repo.init(tmp_path / "gitrepo")
    write(tmp_path / "gitrepo", {"cm.yaml": CONFIGMAP})
    g.index.add(["cm.yaml"])
    sha = g.index.commit("init").hexsha
    r = gs(kube, "sync", "--repo", str(tmp_path / "gitrepo"), "--revision", sha[:8], "-n", namespace, "-o", "json")
    assert r.returncode == 0, r.stderr
    assert report(r)["revision"] == sha
    r = gs(kube, "diff", "--repo", str(tmp_path / "gitrepo"), "-n", namespace, "-o", "markdown")
    assert r.returncode == 0 and sha[:12] in r.stdout, r.stdout


def test_takes_over_from_client_side_kubectl_apply(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """Objects first applied with `kubectl apply` (client-side): a field later removed from Git must go."""
    old = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {LOG_LEVEL: info, OLD_FLAG: 'on'}\n"
    kube.kubectl("apply", "-n", namespace, "-f", "-", input=old)
    repo = write(tmp_path / "repo", {"cm.yaml": CONFIGMAP})
    r = gs(kube, *sync_args(repo, namespace))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "client-side" in by_name(report(r))["ConfigMap/settings"]["message"]
    live = get(kube, "configmap/settings", namespace)
    assert live["data"] == {"LOG_LEVEL": "info"}
    assert "kubectl-client-side-apply" not in {m["manager"] for m in live["metadata"]["managedFields"]}
    r = gs(kube, *diff_args(repo, namespace))
    assert r.returncode == 0, r.stdout


def test_examples_repo_kustomize_and_helm_sync_and_become_ready(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """The shipped example (plain YAML, a kustomize overlay, a Helm chart) into this test's namespace."""
    import re
    import shutil

    repo = tmp_path / "examples"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples-repo", repo)
    for f in repo.rglob("*.yaml"):
        f.write_text(re.sub(r"\b(namespace|name): demo\b", rf"\1: {namespace}", f.read_text()))
    r = gs(kube, *sync_args(repo, namespace, "--wait", "--timeout", "90"))
    assert r.returncode == 0, r.stdout + r.stderr
    objs = by_name(report(r))
    assert {"Deployment/minha-api", "Deployment/greeter", "Deployment/web", "Secret/minha-api-db"} <= set(objs)
    assert all(o["health"] == "Current" for o in objs.values()), objs
    ready = get(kube, "deploy/minha-api", namespace)["status"]
    assert ready.get("readyReplicas") == 3, ready
    r = gs(kube, *diff_args(repo, namespace))
    assert r.returncode == 0, r.stdout


def test_conflict_policies_report_and_skip(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"app.yaml": deployment("web", 3)})
    assert gs(kube, *sync_args(repo, namespace)).returncode == 0
    kube.kubectl("scale", "deploy/web", "-n", namespace, "--replicas=5")
    write(repo, {"app.yaml": deployment("web", 3, image="registry.example/app:2.0")})

    r = gs(kube, *sync_args(repo, namespace, "--on-conflict", "skip"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "skipped" in by_name(report(r))["Deployment/web"]["message"]
    live = get(kube, "deploy/web", namespace)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/app:1.0"

    r = gs(kube, *sync_args(repo, namespace))  # report: everything but the contested field
    assert r.returncode == 1, r.stdout + r.stderr
    web = by_name(report(r))["Deployment/web"]
    assert [c["path"] for c in web["conflicts"]] == [".spec.replicas"]
    assert '.spec.template.spec.containers[name="api"].image' in [d["path"] for d in web["drift"]]
    live = get(kube, "deploy/web", namespace)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/app:2.0"
    assert live["spec"]["replicas"] == 5


def test_namespace_declared_in_git_holds_the_inventory(kube: KubeCluster, tmp_path: Path) -> None:
    """`-n team-x` where Git itself creates team-x: the namespace is created before the inventory parent."""
    import uuid

    ns = f"t-inv-{uuid.uuid4().hex[:6]}"
    repo = write(
        tmp_path / "repo",
        {"ns.yaml": f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n", "cm.yaml": CONFIGMAP},
    )
    try:
        r = gs(kube, "sync", "--repo", str(repo), "-n", ns, "-o", "json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert {o["name"]: o["action"] for o in report(r)["objects"]} == {ns: "create", "settings": "create"}
        inv = report(r)["inventory"]
        assert inv["namespace"] == ns and inv["name"].startswith("gitops-sync-") and "repo" in inv["name"]
        kube.get(f"configmap/{inv['name']}", namespace=ns)
        r = gs(
            kube,
            "sync",
            "--repo",
            str(repo),
            "-n",
            "no-such-namespace-here",
            "--inventory-namespace",
            "no-such-namespace-here",
            "-o",
            "json",
        )
        assert r.returncode == 2 and "--inventory-namespace" in r.stderr, r.stderr
    finally:
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_sync_as_a_namespaced_service_account(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """Least privilege (the deploy/kubernetes namespaced RBAC): applied inside, a clear error outside."""
    import uuid

    from tests.integration.daemon_support import as_list, relocate, rendered, sa_kubeconfig

    docs = relocate(rendered(kube, "namespaced"), namespace, f"-{namespace}")
    rbac = [d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole")]
    kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(rbac))
    other = f"t-other-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", other)
    try:
        repo = write(
            tmp_path / "repo",
            {
                "in.yaml": CONFIGMAP,
                "out.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: outside, namespace: {other}}}\n",
            },
        )
        kubeconfig = sa_kubeconfig(kube, namespace, tmp_path / "sa.kubeconfig")
        r = gs(kube, *sync_args(repo, namespace, "--kubeconfig", str(kubeconfig)))
        assert r.returncode == 2, r.stdout + r.stderr
        objs = by_name(report(r))
        assert objs["ConfigMap/settings"]["action"] == "create"
        assert objs["ConfigMap/outside"]["action"] == "error"
        assert "forbidden" in objs["ConfigMap/outside"]["message"].lower()
        assert "Traceback" not in r.stderr
        kube.get("configmap/settings", namespace=namespace)
    finally:
        kube.kubectl("delete", "namespace", other, "--wait=false", check=False)


DOWNWARD_API = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: exporter}
spec:
  selector: {matchLabels: {app: exporter}}
  template:
    metadata: {labels: {app: exporter}}
    spec:
      containers:
      - name: proxy
        image: registry.example/proxy:1
        env:
        - name: IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
"""


def test_a_conflict_left_by_a_partial_apply_is_still_reported_by_the_next_diff(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """kube-prometheus's node-exporter after `kubectl apply --server-side --field-manager=kubectl-rw`: the
    server defaults `fieldRef.apiVersion` inside an atomic struct, so our identical manifest conflicts with
    kubectl-rw's. The first sync applies all but that field (exit 1); the next diff called the object
    `unchanged` (the partial apply recorded Git's whole intent hash, and the fast path took the defaulted
    struct as holding), though a server dry-run still refused it."""
    repo = write(tmp_path / "repo", {"exporter.yaml": DOWNWARD_API})
    kube.kubectl(
        "apply", "--server-side", "--field-manager=kubectl-rw", "-n", namespace, "-f", str(repo / "exporter.yaml")
    )
    first = gs(kube, *sync_args(repo, namespace))
    assert first.returncode == 1, first.stdout + first.stderr
    entry = by_name(report(first))["Deployment/exporter"]
    fields = [c["path"] for c in entry["conflicts"]]
    assert fields == ['.spec.template.spec.containers[name="proxy"].env[name="IP"].valueFrom.fieldRef'], entry
    refused = kube.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=gitops-sync",
        "-n",
        namespace,
        "-f",
        str(repo / "exporter.yaml"),
        check=False,
    )
    assert refused.returncode != 0 and "conflict" in refused.stderr.lower(), refused.stderr
    for command in (diff_args, sync_args):  # neither may call it unchanged while the conflict stands
        again = gs(kube, *command(repo, namespace))
        assert again.returncode == 1, again.stdout + again.stderr
        entry = by_name(report(again))["Deployment/exporter"]
        assert entry["action"] == "conflict" and [c["path"] for c in entry["conflicts"]] == fields, entry
    forced = gs(kube, *sync_args(repo, namespace, "--on-conflict", "force"))
    assert forced.returncode == 0, forced.stdout + forced.stderr
    after = gs(kube, *diff_args(repo, namespace))
    assert after.returncode == 0 and by_name(report(after))["Deployment/exporter"]["action"] == "unchanged"
