"""Helm pre-delete / post-delete hooks on the real local control plane (kube-controller-manager runs the Jobs, kwok
completes their Pods, or fails one carrying local-cluster.gitops-sync.io/fail: "true": deploy/local-cluster/
kwok-stages.yaml, stage pod-failed).

- `sync --prune` of a commit from which a chart left Git: its pre-delete hooks (by weight) before its objects are
  pruned, post-delete after; never when prune is off (the release stays recorded and its hooks run at the first
  prune); a pass after that runs none.
- A failing pre-delete hook: exit 2 naming it, nothing pruned (the chart's objects and anything else that left Git
  stay), and again at the next pass; removing the record from the inventory is the way out.
- A GitSync with prune deleted: its finalizer runs the recorded pre-delete hooks, prunes, runs post-delete; one
  without prune runs none; one whose pre-delete hook fails keeps its finalizer and objects (the hook in its status)
  until the record is removed from its inventory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_chart_hooks import _ran, _sync

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_established, wait_until
from tests.integration.test_fleet import CRD, fleet_args, gitsync, gs_status, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

FAIL = "local-cluster.gitops-sync.io/fail"


def _hook_job(name: str, event: str, weight: int, *, fail: bool = False) -> str:
    pod_meta = f'    metadata: {{annotations: {{"{FAIL}": "true"}}}}\n' if fail else ""
    return (
        f"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  annotations:\n"
        f'    "helm.sh/hook": {event}\n    "helm.sh/hook-weight": "{weight}"\n'
        "spec:\n  backoffLimit: 0\n  template:\n"
        f"{pod_meta}"
        "    spec:\n      restartPolicy: Never\n      containers: [{name: run, image: registry.invalid/cleanup:1}]\n"
    )


def _chart(name: str, *, fail: bool = False) -> dict[str, str]:
    t = f"apps/{name}/templates"
    marker = (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-pre-delete-marker\n  annotations:\n"
        '    "helm.sh/hook": pre-delete\n    "helm.sh/hook-weight": "-1"\n'
        '    "helm.sh/hook-delete-policy": hook-succeeded\ndata: {a: b}\n'
    )
    return {
        f"apps/{name}/Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: 0.1.0\n",
        f"{t}/config.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}-config}}\ndata: {{a: b}}\n",
        f"{t}/marker.yaml": marker,
        f"{t}/pre-delete.yaml": _hook_job(f"{name}-pre-delete", "pre-delete", 1, fail=fail),
        f"{t}/post-delete.yaml": _hook_job(f"{name}-post-delete", "post-delete", 0),
        f"{t}/install.yaml": _hook_job(f"{name}-post-install", "post-install", 0),
    }


def _complete(kube: KubeCluster, name: str, namespace: str) -> bool:
    job = kube.find("job", name, namespace) or {}
    return any(
        c.get("type") == "Complete" and c.get("status") == "True" for c in job.get("status", {}).get("conditions") or []
    )


def _without(files: dict[str, str], chart: str) -> dict[str, str | None]:
    return {k: (None if k.startswith(f"apps/{chart}/") else v) for k, v in files.items()}


def test_a_chart_leaving_git_runs_its_delete_hooks_around_the_prune_only_with_prune(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    files = {**_chart("db"), "apps/keep/cm.yaml": configmap("keep", {"a": "b"})}
    repo = GitRepo(tmp_path / "repo", files)
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 0, doc["errors"]
    assert [e for e, _, _ in _ran(doc)] == ["post-install"]  # installing runs no delete hook

    # The chart leaves Git; without --prune nothing is deleted and no delete hook runs.
    repo.commit(_without(files, "db"), "db leaves")
    code, doc = _sync(kube, repo, namespace, tmp_path, prune=False)
    assert code == 0 and _ran(doc) == [], doc
    assert kube.find("configmap", "db-config", namespace) and kube.find("job", "db-pre-delete", namespace) is None

    # The first pass with prune: pre-delete by weight (the marker at -1, deleted as it succeeded; the Job at 1),
    # then the prune, then post-delete.
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 0, doc["errors"]
    assert _ran(doc) == [
        ("pre-delete", "db-pre-delete-marker", "true"),
        ("pre-delete", "db-pre-delete", "true"),
        ("post-delete", "db-post-delete", "true"),
    ]
    assert "deleted (hook-delete-policy)" in doc["hooks"][0]["result"]
    assert kube.find("configmap", "db-config", namespace) is None and kube.find("configmap", "keep", namespace)
    assert _complete(kube, "db-pre-delete", namespace) and _complete(kube, "db-post-delete", namespace)
    pruned = [o for o in doc["objects"] if o["action"] == "prune"]
    assert [o["name"] for o in pruned] == ["db-config"], doc["objects"]

    # Deleted once: the next pass runs none.
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 0 and _ran(doc) == [], doc


def test_a_failing_pre_delete_hook_keeps_everything_until_it_succeeds_or_its_record_is_removed(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    files = {**_chart("db", fail=True), "apps/other/cm.yaml": configmap("other", {"a": "b"})}
    files["apps/keep/cm.yaml"] = configmap("keep", {"a": "b"})  # an empty render would not prune at all
    repo = GitRepo(tmp_path / "repo", files)
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 0, doc["errors"]
    repo.commit({**_without(files, "db"), "apps/other/cm.yaml": None}, "db and other leave")
    for _ in range(2):  # the same at the next pass: the release's hooks are still recorded
        code, doc = _sync(kube, repo, namespace, tmp_path)
        assert code == 2, doc
        assert _ran(doc) == [("pre-delete", "db-pre-delete-marker", "true"), ("pre-delete", "db-pre-delete", "false")]
        assert any("hook pre-delete" in e and "db-pre-delete" in e and "Job failed" in e for e in doc["errors"]), doc
        assert not [o for o in doc["objects"] if o["action"] == "prune"]
        assert kube.find("configmap", "db-config", namespace) and kube.find("configmap", "other", namespace)
    # The way out (docs/charts.md): remove the record of delete hooks from the inventory; then prune proceeds.
    kube.kubectl("annotate", "configmap", f"t-{namespace}", "-n", namespace, "gitops-sync.io/delete-hooks-")
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 0 and _ran(doc) == [], (doc["errors"], doc["hooks"])
    assert kube.find("configmap", "db-config", namespace) is None and kube.find("configmap", "other", namespace) is None


def test_deleting_a_gitsync_with_prune_runs_its_delete_hooks_and_one_without_prune_none(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(kube.env, "gitsyncs.gitops-sync.io", 60)
    pruning = GitRepo(tmp_path / "pruning", _chart("web"))
    kept = GitRepo(tmp_path / "kept", _chart("api"))
    failing = GitRepo(tmp_path / "failing", _chart("bad", fail=True))
    docs = [gitsync("pruning", namespace, pruning.path, prune=True), gitsync("kept", namespace, kept.path)]
    docs.append(gitsync("failing", namespace, failing.path, prune=True))
    kube.kubectl("apply", "-f", "-", input="---\n".join(docs))
    log = tmp_path / "fleet.log"
    with Daemon(fleet_args(namespace, tmp_path), kube.env, log) as d:
        d.wait_ready(90)
        wait_ready(kube, namespace, "pruning", timeout=120)
        wait_ready(kube, namespace, "kept", timeout=120)
        wait_ready(kube, namespace, "failing", timeout=120)

        def last_hooks() -> list[str]:  # status.lastHooks: what the last pass that ran hooks ran
            hooks = gs_status(kube, namespace, "pruning").get("lastHooks", {}).get("hooks") or []
            return [f"{h['event']} {h['object'].split('/')[-1]} {h['ok']}" for h in hooks]

        wait_until("status.lastHooks", lambda: last_hooks() == ["post-install web-post-install true"], 60)
        assert kube.find("configmap", "web-config", namespace) and kube.find("configmap", "api-config", namespace)
        kube.kubectl("delete", "gitsync", "pruning", "kept", "failing", "-n", namespace, "--wait=false")
        wait_until("both GitSyncs gone", lambda: not kube.find("gitsync", "pruning", namespace), 120)
        wait_until("kept gone", lambda: not kube.find("gitsync", "kept", namespace), 60)
        ran = [(h["hook_event"], h["object"].split("/")[-1]) for h in d.logged("hook ran")]
        assert ("pre-delete", "web-pre-delete") in ran and ("post-delete", "web-post-delete") in ran, ran
        assert ran.index(("pre-delete", "web-pre-delete-marker")) < ran.index(("pre-delete", "web-pre-delete"))
        assert not [n for _, n in ran if n.startswith("api-") and "delete" in n], ran  # no prune: no delete hook
        # In the log's order: pre-delete hooks, then post-delete, then the deletion done.
        lines = [(x.get("event"), x.get("hook_event"), str(x.get("object", ""))) for x in d.log_lines()]
        order = [i for i, (e, h, o) in enumerate(lines) if e == "hook ran" and o.endswith("/web-pre-delete")]
        order += [i for i, (e, h, o) in enumerate(lines) if e == "hook ran" and o.endswith("/web-post-delete")]
        order += [i for i, (e, _, _) in enumerate(lines) if e == "GitSync deleted: its objects were pruned"][:1]
        assert len(order) == 3 and order == sorted(order), lines

        # A failing pre-delete hook keeps the GitSync (its finalizer) and its objects, the hook in its status;
        # removing the record from its inventory lets the retry prune and the GitSync go.
        def last_error() -> str:
            return str((kube.find("gitsync", "failing", namespace) or {}).get("status", {}).get("lastError", ""))

        wait_until("the failing hook reported", lambda: "hook pre-delete" in last_error(), 90)
        assert "bad-pre-delete" in last_error() and kube.find("configmap", "bad-config", namespace)
        assert kube.find("gitsync", "failing", namespace)
        kube.kubectl("annotate", "configmap", "gitsync-failing", "-n", namespace, "gitops-sync.io/delete-hooks-")
        wait_until("failing gone", lambda: not kube.find("gitsync", "failing", namespace), 120)
        assert kube.find("configmap", "bad-config", namespace) is None
    assert kube.find("configmap", "web-config", namespace) is None
    assert _complete(kube, "web-pre-delete", namespace) and _complete(kube, "web-post-delete", namespace)
    assert kube.find("configmap", "api-config", namespace) and kube.find("job", "api-pre-delete", namespace) is None
