"""Every field entry says why it differs and where Git says it, against the real API server."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.integration.test_sync import by_name, deployment, get, gs, report, write

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[1] / "fixtures" / "charts" / "hello"


def fields(rep: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    obj = by_name(rep)[name]
    return {f["path"]: f for f in obj["drift"] + obj["conflicts"]}


def line_of(path: Path, needle: str) -> tuple[int, int]:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return number, line.index(needle) + 1
    raise AssertionError(needle)


def test_reasons_and_git_positions_for_plain_yaml(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    web = deployment("web", 2).replace(
        "image: registry.example/app:1.0", "image: registry.example/app:1.0\n            imagePullPolicy: Always"
    )
    repo = write(tmp_path / "repo", {"apps/web.yaml": web})
    assert gs(kube, "sync", "--repo", str(repo), "-n", namespace).returncode == 0

    # Git changes the image and drops imagePullPolicy (the server defaults it again); kubectl scales
    write(repo, {"apps/web.yaml": deployment("web", 2, image="registry.example/app:2.0")})
    kube.kubectl("scale", "deployment/web", "--replicas=4", "-n", namespace)
    r = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "json")
    assert r.returncode == 1, r.stderr
    got = fields(report(r), "Deployment/web")
    image = got['.spec.template.spec.containers[name="api"].image']
    line, _ = line_of(repo / "apps/web.yaml", "image: registry.example/app:2.0")
    column = (repo / "apps/web.yaml").read_text().splitlines()[line - 1].index("registry.example") + 1
    assert (image["reason"], image["source"]) == ("git-changed", f"apps/web.yaml:{line}:{column}")

    replicas = got[".spec.replicas"]
    assert (replicas["reason"], replicas["manager"], replicas["subresource"]) == ("live-changed", "kubectl", "scale")
    line, column = line_of(repo / "apps/web.yaml", "replicas: 2")
    assert replicas["source"] == f"apps/web.yaml:{line}:{column + len('replicas: ')}"

    policy = got['.spec.template.spec.containers[name="api"].imagePullPolicy']
    assert (policy["reason"], policy["desired"], policy["live"]) == ("server-changed", "IfNotPresent", "Always")

    table = gs(kube, "diff", "--repo", str(repo), "-n", namespace)
    assert "live-changed by kubectl (Update/scale)" in table.stdout and "apps/web.yaml:" in table.stdout, table.stdout
    md = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "markdown")
    assert "| why | where in Git |" in md.stdout and "server-changed" in md.stdout, md.stdout
    # a pull request's reader: Git's image change and the default the server restores are planned; kubectl's
    # scale is the conflict it is (before, every field of the drift list said "drift")
    rows = {
        line.split(" | ")[2]: line.split(" | ")[1]
        for line in md.stdout.splitlines()
        if line.startswith("| `Deployment.apps/")
    }
    assert rows == {
        '`.spec.template.spec.containers[name="api"].image`': "planned",
        '`.spec.template.spec.containers[name="api"].imagePullPolicy`': "planned",
        "`.spec.replicas`": "conflict",
    }, md.stdout
    html = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "html").stdout
    assert "<th>why</th><th>where in Git</th>" in html and 'class="badge st-drifted"' not in html, html
    assert html.count('<tr class="k-planned">') == 2 and html.count('<tr class="k-conflict">') == 1, html


def test_kustomize_origin_and_helm_source_name_the_file(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(
        tmp_path / "repo",
        {
            "kust/kustomization.yaml": "resources: [cm.yaml]\nbuildMetadata: [originAnnotations]\n",
            "kust/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-kustomize}\ndata: {a: '1'}\n",
        },
    )
    shutil.copytree(CHART, repo / "charts" / "hello")
    assert gs(kube, "sync", "--repo", str(repo), "-n", namespace).returncode == 0
    live = get(kube, "configmap/from-kustomize", namespace)
    assert "config.kubernetes.io/origin" not in (live["metadata"].get("annotations") or {}), "stripped before apply"

    kube.kubectl("patch", "configmap", "from-kustomize", "-n", namespace, "--type=merge", "-p", '{"data":{"a":"2"}}')
    kube.kubectl(
        "patch", "configmap", "hello-config", "-n", namespace, "--type=merge", "-p", '{"data":{"greeting":"x"}}'
    )
    rep = report(gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "json"))
    a = fields(rep, "ConfigMap/from-kustomize")[".data.a"]
    assert (a["reason"], a["source"]) == ("live-changed", "kust/cm.yaml")
    greeting = fields(rep, "ConfigMap/hello-config")[".data.greeting"]
    assert (greeting["reason"], greeting["source"]) == ("live-changed", "charts/hello/templates/configmap.yaml")


def test_fields_other_managers_added_are_listed_but_change_no_exit_code(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: '1'}\n"
    repo = write(tmp_path / "repo", {"cm.yaml": cm, "web.yaml": deployment("web", 2)})
    assert gs(kube, "sync", "--repo", str(repo), "-n", namespace).returncode == 0
    kube.kubectl("label", "configmap", "settings", "team=a", "-n", namespace)
    kube.kubectl("patch", "configmap", "settings", "-n", namespace, "--type=merge", "-p", '{"data":{"extra":"x"}}')
    kube.kubectl("set", "env", "deployment/web", "FOO=bar", "-n", namespace)

    r = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "json")
    assert r.returncode == 0, "informational: " + r.stdout
    objs = by_name(report(r))
    got = {(f["path"], f["value"], f["manager"]) for f in objs["ConfigMap/settings"]["foreign"]}
    assert got == {(".metadata.labels.team", "a", "kubectl-label"), (".data.extra", "x", "kubectl-patch")}, got
    env = [f for f in objs["Deployment/web"]["foreign"] if f["manager"] == "kubectl-set"]
    assert [f["path"] for f in env] == ['.spec.template.spec.containers[name="api"].env[name="FOO"].value'], env
    assert all(f["time"] for f in env)
    assert not any("deployment.kubernetes.io/revision" in f["path"] for f in objs["Deployment/web"]["foreign"])

    verbose = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-v")
    assert "added by other managers" in verbose.stdout and ".data.extra" in verbose.stdout, verbose.stdout
    assert "added by other managers" not in gs(kube, "diff", "--repo", str(repo), "-n", namespace).stdout
    md = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "markdown")
    assert md.returncode == 0 and "<details><summary>" in md.stdout and "added by other managers" in md.stdout


def test_git_writing_down_a_default_is_ownership_only(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"web.yaml": deployment("web", 2)})
    assert gs(kube, "sync", "--repo", str(repo), "-n", namespace).returncode == 0
    write(
        repo,
        {
            "web.yaml": deployment("web", 2).replace(
                "  replicas: 2\n", "  replicas: 2\n      revisionHistoryLimit: 10\n"
            )
        },
    )
    r = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    web = by_name(report(r))["Deployment/web"]
    assert web["action"] == "unchanged" and web["drift"] == []
    assert web["message"] == (
        "ownership only: would record gitops-sync ownership of .spec.revisionHistoryLimit "
        "(live value already equals Git)"
    )
    assert "ownership only" in gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-v").stdout
    s = gs(kube, "sync", "--repo", str(repo), "-n", namespace, "-o", "json")
    assert s.returncode == 0 and by_name(report(s))["Deployment/web"]["message"].startswith("ownership only: record")
    owned = [
        m for m in get(kube, "deployment/web", namespace)["metadata"]["managedFields"] if m["manager"] == "gitops-sync"
    ]
    assert "f:revisionHistoryLimit" in owned[0]["fieldsV1"]["f:spec"], "sync recorded the ownership"
    again = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "json")
    assert by_name(report(again))["Deployment/web"]["message"] == "", "a no-op now"
