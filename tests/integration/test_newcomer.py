"""What a newcomer trips over, against the real local control plane.

diff agrees with sync on a client-side-apply takeover; a piped table is never cut; report cells are plain
text (a `[/]` value syncs and prints); our bookkeeping is never drift or a conflict; a Secret conflict says
the values differ; --wait logs each object as it becomes ready; --log-level debug shows requests and
decisions; the daemon tells a new commit from drift in --detect-only.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from daemon_support import Daemon, GitRepo, configmap, wait_until
from test_sync import gs

from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster

LONG_IMAGE = "registry.example/minha-aplicacao-com-um-nome-bem-comprido/servico-de-pagamentos:v1.2.3-build.4567"
LONG_CONTAINER = "api-container-with-a-rather-long-descriptive-name"


def common(repo: Path, ns: str) -> list[str]:
    return ["--repo", str(repo), "-n", ns, "--name", f"t-{ns}"]


def doc(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert r.stdout.strip(), f"no report (rc={r.returncode}):\n{r.stderr}"
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def obj(report: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(o for o in report["objects"] if o["kind"] == kind and o["name"] == name)
    return found


def live(kube: KubeCluster, ns: str, ref: str) -> dict[str, Any]:
    return kube.get(ref, namespace=ns)


def write(root: Path, name: str, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(textwrap.dedent(text))
    return root


def deployment(name: str, image: str, container: str = "api", extra_label: str = "") -> str:
    labels = f"{{app: {name}{', ' + extra_label if extra_label else ''}}}"
    return f"""
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: {name}
      labels: {labels}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: {name}}}}}
      template:
        metadata: {{labels: {{app: {name}}}}}
        spec:
          containers:
          - name: {container}
            image: {image}
            ports: [{{containerPort: 8080}}]
    """


def test_diff_shows_the_deletion_a_client_side_apply_takeover_makes(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """kubectl apply (client-side) set a and b; Git declares a: diff lists .data.b removed, sync removes it."""
    before = tmp_path / "before"
    write(before, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: '1', b: '2'}\n")
    write(before, "web.yaml", deployment("web", "registry.example/web:1", extra_label="tier: front"))
    kube.kubectl("apply", "-n", namespace, "-f", str(before))  # client-side apply
    managers = {m["manager"] for m in live(kube, namespace, "configmap/cfg")["metadata"]["managedFields"]}
    assert "kubectl-client-side-apply" in managers

    repo = tmp_path / "repo"
    write(repo, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: '1'}\n")
    write(repo, "web.yaml", deployment("web", "registry.example/web:1"))  # label tier dropped, rest equal

    d = gs(kube, "diff", *common(repo, namespace), "-o", "json")
    assert d.returncode == 1, d.stderr
    cm = obj(doc(d), "ConfigMap", "cfg")
    assert [(c["path"], c["desired"], c["live"]) for c in cm["drift"]] == [(".data.b", None, "2")]
    assert cm["conflicts"] == [] and "would take over the fields of kubectl apply" in cm["message"]
    web = obj(doc(d), "Deployment", "web")
    assert [(c["path"], c["live"]) for c in web["drift"]] == [(".metadata.labels.tier", "front")], web

    s = gs(kube, "sync", *common(repo, namespace), "-o", "json")
    assert s.returncode == 0, s.stderr
    assert live(kube, namespace, "configmap/cfg")["data"] == {"a": "1"}  # what diff promised
    assert "tier" not in live(kube, namespace, "deployment/web")["metadata"]["labels"]
    assert live(kube, namespace, "deployment/web")["spec"]["template"]["spec"]["containers"][0]["ports"]

    again = gs(kube, "diff", *common(repo, namespace), "-o", "json")
    assert again.returncode == 0, again.stdout
    assert {o["action"] for o in doc(again)["objects"]} == {"unchanged"}


def test_a_piped_table_prints_long_paths_and_images_in_full(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", "web.yaml", deployment("web", LONG_IMAGE, LONG_CONTAINER))
    assert gs(kube, "sync", *common(repo, namespace)).returncode == 0
    drifted = LONG_IMAGE.replace("v1.2.3", "v9.9.9")
    kube.kubectl("set", "image", "deployment/web", f"{LONG_CONTAINER}={drifted}", "-n", namespace)

    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "gitops_sync", "diff", *common(repo, namespace)])
    r = subprocess.run(f"{cmd} | cat", shell=True, env=kube.env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr  # the pipe's status: cat's
    path = f'.spec.template.spec.containers[name="{LONG_CONTAINER}"].image'
    assert path in r.stdout, r.stdout
    assert LONG_IMAGE in r.stdout and drifted in r.stdout, r.stdout
    assert "…" not in r.stdout and "\x1b[" not in r.stdout  # nothing cut, no colour codes in a log


def test_a_value_with_rich_markup_syncs_and_prints_literally(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """Before: `[/]` raised MarkupError after the sync had applied (exit 1, no report)."""
    repo = write(
        tmp_path / "repo", "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata: {x: plain}\n"
    )
    write(repo, "web.yaml", deployment("web", "registry.example/web:1"))
    assert gs(kube, "sync", *common(repo, namespace)).returncode == 0
    value = "[/] and [bold]not bold[/bold] :smile:"
    write(repo, "cm.yaml", f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: m}}\ndata: {{x: '{value}'}}\n")
    write(repo, "web.yaml", deployment("web", "registry.example/web:2"))

    r = gs(kube, "sync", *common(repo, namespace))
    assert r.returncode == 0, r.stdout + r.stderr
    assert value in r.stdout and "Traceback" not in r.stderr
    assert '.spec.template.spec.containers[name="api"].image' in r.stdout
    assert live(kube, namespace, "configmap/m")["data"]["x"] == value

    md = gs(kube, "diff", *common(repo, namespace), "-o", "markdown", "-v")
    assert md.returncode == 0, md.stderr


def test_bookkeeping_is_never_drift_nor_a_conflict_after_another_field_manager(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    kube.kubectl("create", "configmap", "pre", "-n", namespace, "--from-literal=k=v")  # no labels, no annotations
    repo = write(
        tmp_path / "repo", "pre.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pre}\ndata: {k: v}\n"
    )
    d = gs(kube, "diff", *common(repo, namespace), "-o", "json")
    pre = obj(doc(d), "ConfigMap", "pre")
    assert pre["drift"] == [] and pre["action"] == "update", pre  # before: .metadata.annotations and .labels
    assert "record gitops-sync ownership" in pre["message"]

    assert gs(kube, "sync", *common(repo, namespace), "--field-manager", "ci-bot").returncode == 0
    write(repo, "pre.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pre}\ndata: {k: v2}\n")
    d = gs(kube, "diff", *common(repo, namespace), "-o", "json")
    pre = obj(doc(d), "ConfigMap", "pre")
    # ci-bot (and kubectl create) own k: real conflicts; ci-bot owns the intent hash too: our bookkeeping, not one
    assert {(c["path"], c["manager"]) for c in pre["conflicts"]} == {
        (".data.k", "ci-bot"),
        (".data.k", "kubectl-create"),
    }
    assert not any(".metadata" in c["path"] for c in pre["drift"] + pre["conflicts"])

    s = gs(kube, "sync", *common(repo, namespace), "-o", "json", "--on-conflict", "force")
    assert s.returncode == 0, s.stdout + s.stderr
    annotations = live(kube, namespace, "configmap/pre")["metadata"]["annotations"]
    assert annotations["gitops-sync.io/intent-hash"] and annotations["gitops-sync.io/adopted"] == "true"  # written
    clean = gs(kube, "diff", *common(repo, namespace), "-o", "json")
    assert clean.returncode == 0, clean.stdout


def test_a_secret_conflict_says_the_values_differ(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(
        tmp_path / "repo", "s.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData: {pw: old-pw}\n"
    )
    assert gs(kube, "sync", *common(repo, namespace)).returncode == 0
    kube.kubectl("patch", "secret/creds", "-n", namespace, "-p", '{"stringData":{"pw":"patched-pw"}}')
    d = gs(kube, "diff", *common(repo, namespace), "-o", "json")
    (c,) = obj(doc(d), "Secret", "creds")["conflicts"]
    assert (c["path"], c["desired"], c["live"], c["manager"]) == (
        ".data.pw",
        "***",
        "*** (values differ)",
        "kubectl-patch",
    )
    table = gs(kube, "diff", *common(repo, namespace))
    assert "values differ" in table.stdout
    for out in (d.stdout, table.stdout, d.stderr, table.stderr):
        assert "old-pw" not in out and "patched-pw" not in out


def test_wait_logs_each_object_as_it_becomes_ready_and_takes_a_duration(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = write(tmp_path / "repo", "web.yaml", deployment("web", "registry.example/web:1"))
    write(repo, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n")
    r = gs(
        kube,
        "sync",
        *common(repo, namespace),
        "--wait",
        "--timeout",
        "2m",
        "--log-level",
        "info",
        "--log-format",
        "json",
        "-o",
        "json",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    ready = [json.loads(line) for line in r.stderr.splitlines() if '"ready"' in line]
    assert sorted(e["object"] for e in ready) == [f"ConfigMap/{namespace}/c", f"Deployment.apps/{namespace}/web"]


def test_debug_logs_requests_and_decisions(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n")
    r = gs(kube, "diff", *common(repo, namespace), "--log-level", "debug", "--log-format", "json")
    assert r.returncode == 1, r.stderr
    lines = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    requests = [e for e in lines if e.get("event") == "request"]
    assert requests and all({"method", "path", "status", "seconds"} <= e.keys() for e in requests)
    assert any(e["method"] == "PATCH" and (e["query"] or {}).get("dryRun") == "All" for e in requests)
    decided = [e for e in lines if e.get("event") == "decided"]
    assert [(e["object"], e["action"]) for e in decided] == [(f"ConfigMap/{namespace}/c", "create")]
    info = gs(kube, "diff", *common(repo, namespace), "--log-level", "info", "--log-format", "json")
    assert '"request"' not in info.stderr and '"decided"' not in info.stderr


def test_detect_only_logs_a_new_commit_as_a_revision_change_and_no_empty_drift(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"cm.yaml": configmap("settings", {"color": "blue"})})
    assert gs(kube, "sync", "--repo", str(repo.path), "-n", namespace).returncode == 0
    d = Daemon(["--repo", str(repo.path), "-n", namespace, "--detect-only"], kube.env, tmp_path / "daemon.log")
    with d:
        d.wait_ready()
        label = "applyset.kubernetes.io/part-of"
        kube.kubectl("label", "configmap/settings", "-n", namespace, f"{label}-")  # only our bookkeeping
        wait_until("the label change seen", lambda: d.logged("ownership record would be restored (detect-only)"), 10.0)
        assert d.logged("drift detected") == [], d.log_tail()  # before: drift detected fields=[]

        sha = repo.commit({"cm.yaml": configmap("settings", {"color": "green"})})
        wait_until("the new revision logged", lambda: d.logged("new revision not applied (detect-only)"), 10.0)
        (line,) = d.logged("new revision not applied (detect-only)")
        assert line["revision"] == sha and [f["path"] for f in line["fields"]] == [".data.color"]
        assert d.logged("drift detected") == [], d.log_tail()  # before: a new commit was "drift detected"

        kube.kubectl("patch", "configmap/settings", "-n", namespace, "-p", '{"data":{"color":"red"}}')
        wait_until("real drift still reported", lambda: d.logged("drift detected"), 10.0)
        assert d.logged("drift detected")[0]["fields"][0]["manager"] == "kubectl-patch"
        assert d.stop() == 0
