"""Ignore rules (flag and .gitops-sync.yaml) and per-object policy annotations, through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import KubeCluster
from tests.integration.test_sync import by_name, deployment, get, gs, report, write

pytestmark = pytest.mark.cluster


def test_ignore_rule_leaves_a_scaled_replicas_to_its_owner_in_diff_sync_and_verbose_output(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = write(tmp_path / "repo", {"web.yaml": deployment("web", 2)})
    assert gs(kube, "sync", "--repo", str(repo), "-n", namespace).returncode == 0
    kube.kubectl("scale", "deployment/web", "--replicas=5", "-n", namespace)

    plain = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "json")
    assert plain.returncode == 1, "without a rule the scale is a conflict"

    rule = ["--ignore", "apps/Deployment:*:.spec.replicas"]
    r = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-o", "json", *rule)
    assert r.returncode == 0, r.stdout + r.stderr
    web = by_name(report(r))["Deployment/web"]
    assert web["action"] == "unchanged" and web["drift"] == [] and web["conflicts"] == []
    assert [(i["path"], i["desired"], i["live"], i["manager"], i["mode"], i["rule"]) for i in web["ignored"]] == [
        (".spec.replicas", 2, 5, "kubectl", "if-owned-by-others", "--ignore")
    ]
    table = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "-v", *rule)
    assert table.returncode == 0 and "ignored" in table.stdout and ".spec.replicas" in table.stdout, table.stdout
    assert "ignored" not in gs(kube, "diff", "--repo", str(repo), "-n", namespace, *rule).stdout

    # the same rule from the repository's file; sync leaves replicas to kubectl and applies the rest
    write(
        repo,
        {
            ".gitops-sync.yaml": """
        ignore:
          - target: {group: apps, kind: Deployment, name: "w*"}
            jsonPointers: [/spec/replicas]
        """,
            "web.yaml": deployment("web", 2, image="registry.example/app:2.0"),
        },
    )
    s = gs(kube, "sync", "--repo", str(repo), "-n", namespace, "-o", "json")
    assert s.returncode == 0, s.stdout + s.stderr
    assert by_name(report(s))["Deployment/web"]["ignored"][0]["rule"] == ".gitops-sync.yaml"
    live = get(kube, "deployment/web", namespace)
    assert live["spec"]["replicas"] == 5
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/app:2.0"
    owners = [
        m["manager"]
        for m in live["metadata"]["managedFields"]
        if "f:replicas" in (m.get("fieldsV1") or {}).get("f:spec", {})
    ]
    assert owners == ["kubectl"], owners


def test_always_keeps_the_live_value_of_a_field_only_we_own(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    cm = """
    apiVersion: v1
    kind: ConfigMap
    metadata: {{name: settings}}
    data: {{mode: "{mode}", other: "1"}}
    """
    repo = write(tmp_path / "repo", {"cm.yaml": cm.format(mode="a")})
    assert gs(kube, "sync", "--repo", str(repo), "-n", namespace).returncode == 0
    write(repo, {"cm.yaml": cm.format(mode="b")})
    rule = ["--ignore", "ConfigMap:settings:.data.mode:always"]
    r = gs(kube, "sync", "--repo", str(repo), "-n", namespace, "-o", "json", *rule)
    assert r.returncode == 0, r.stdout + r.stderr
    assert get(kube, "configmap/settings", namespace)["data"] == {"mode": "a", "other": "1"}
    ignored = by_name(report(r))["ConfigMap/settings"]["ignored"]
    assert [(i["path"], i["desired"], i["live"], i["mode"]) for i in ignored] == [(".data.mode", "b", "a", "always")]


def test_bad_rules_are_exit_2_naming_the_file_or_flag(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(
        tmp_path / "repo",
        {"web.yaml": deployment("web", 2), ".gitops-sync.yaml": "ignore:\n  - paths: [spec.replicas]\n"},
    )
    r = gs(kube, "diff", "--repo", str(repo), "-n", namespace)
    assert r.returncode == 2 and ".gitops-sync.yaml" in r.stderr and "ignore[0]" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    (repo / ".gitops-sync.yaml").write_text("ignore:\n  - paths: [.spec.replicas]\n    mode: sometimes\n")
    r = gs(kube, "diff", "--repo", str(repo), "-n", namespace)
    assert r.returncode == 2 and ".gitops-sync.yaml" in r.stderr and "mode" in r.stderr, r.stderr
    (repo / ".gitops-sync.yaml").unlink()
    r = gs(kube, "diff", "--repo", str(repo), "-n", namespace, "--ignore", "Deployment:web")
    assert r.returncode == 2 and "--ignore" in r.stderr, r.stderr


def test_per_object_annotations_prune_disabled_create_only_and_on_conflict(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    secret = """
    apiVersion: v1
    kind: Secret
    metadata:
      name: filled-later
      annotations: {{gitops-sync.io/apply: create-only}}
    stringData: {{token: "{token}"}}
    """
    keep = """
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: keep
      annotations: {gitops-sync.io/prune: disabled}
    data: {a: "1"}
    """
    scaled = deployment("scaled", 2).replace(
        "      name: scaled\n", "      name: scaled\n      annotations: {gitops-sync.io/on-conflict: skip}\n", 1
    )
    repo = write(
        tmp_path / "repo",
        {
            "s.yaml": secret.format(token="placeholder"),
            "keep.yaml": keep,
            "web.yaml": deployment("web", 2),
            "scaled.yaml": scaled,
        },
    )
    assert gs(kube, "sync", "--repo", str(repo), "-n", namespace, "--prune").returncode == 0

    # an operator fills the Secret; Git's placeholder must never come back
    kube.kubectl(
        "patch", "secret", "filled-later", "-n", namespace, "--type=merge", "-p", '{"stringData": {"token": "real"}}'
    )
    write(repo, {"s.yaml": secret.format(token="placeholder-2")})
    kube.kubectl("scale", "deployment/scaled", "--replicas=4", "-n", namespace)
    kube.kubectl("scale", "deployment/web", "--replicas=4", "-n", namespace)
    (repo / "keep.yaml").unlink()

    r = gs(kube, "sync", "--repo", str(repo), "-n", namespace, "--prune", "--on-conflict", "force", "-o", "json")
    objs = by_name(report(r))
    assert r.returncode == 1, "the skipped object is a conflict left unresolved"
    assert objs["Secret/filled-later"]["action"] == "unchanged"
    assert "create-only" in objs["Secret/filled-later"]["message"]
    assert get(kube, "secret/filled-later", namespace)["data"]["token"] == "cmVhbA=="  # "real"
    assert objs["ConfigMap/keep"]["action"] == "unchanged" and "prune: disabled" in objs["ConfigMap/keep"]["message"]
    assert get(kube, "configmap/keep", namespace)["data"] == {"a": "1"}
    assert objs["Deployment/scaled"]["action"] == "conflict" and "skipped" in objs["Deployment/scaled"]["message"]
    assert get(kube, "deployment/scaled", namespace)["spec"]["replicas"] == 4, "on-conflict: skip on the object"
    assert get(kube, "deployment/web", namespace)["spec"]["replicas"] == 2, "--on-conflict force for the rest"

    bad = write(tmp_path / "bad", {"cm.yaml": keep.replace("disabled", "never")})
    r = gs(kube, "diff", "--repo", str(bad), "-n", namespace)
    assert r.returncode == 2 and "cm.yaml" in r.stderr and "gitops-sync.io/prune" in r.stderr, r.stderr
