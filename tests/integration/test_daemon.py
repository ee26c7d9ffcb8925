"""`gitops-sync run` against the real local control plane: drift, commits, webhooks, fights, failures, SIGTERM."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import git
import pytest
from daemon_support import (
    REPO_ROOT,
    Daemon,
    GitRepo,
    configmap,
    deployment,
    kubectl_edit_env,
    sync_once,
    wait_until,
)

from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster

CHART = REPO_ROOT / "tests" / "fixtures" / "charts" / "hello"


def replicas(kube: KubeCluster, ns: str, name: str) -> int:
    return int(kube.get("deployment", name, ns)["spec"]["replicas"])


def events(kube: KubeCluster, ns: str, reason: str) -> list[dict[str, Any]]:
    return kube.list("events", ns, fields=f"reason={reason}")


def edit(kube: KubeCluster, ns: str, what: str, sed: str) -> None:
    """`kubectl edit` with a sed script as the editor: the manager is `kubectl-edit`, as for a person."""
    r = subprocess.run(
        [str(kube.bin_dir / "kubectl"), "edit", what, "-n", ns],
        env=kubectl_edit_env(kube.env, sed),
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert r.returncode == 0 and "edited" in r.stdout, r.stdout + r.stderr


def start(kube: KubeCluster, tmp_path: Path, repo: Path | str, ns: str, *args: str, name: str = "daemon") -> Daemon:
    d = Daemon(["--repo", str(repo), "-n", ns, *args], kube.env, tmp_path / f"{name}.log")
    d.wait_ready()
    return d


def test_self_heal_corrects_a_kubectl_edit_within_2s_and_reports_it(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 2), "cm.yaml": configmap("settings", {"a": "1"})})
    with start(kube, tmp_path, repo.path, namespace) as d:
        assert replicas(kube, namespace, "web") == 2
        rv_before = kube.get("configmap", "settings", namespace)["metadata"]["resourceVersion"]
        writes_before = d.status()["daemon"]["requests"]["writes"]

        edit(kube, namespace, "deployment/web", "s/replicas: 2$/replicas: 7/")
        took = wait_until("replicas corrected back to 2", lambda: replicas(kube, namespace, "web") == 2, 2.0)
        print(f"kubectl edit corrected {took:.3f} s after kubectl returned")
        # the line is logged once the write has answered: a poll a few ms a look can see the write first
        wait_until("the correction logged", lambda: d.logged("drift corrected"), 1.0)
        corrected = d.logged("drift corrected")
        assert corrected, d.log_tail()
        field = corrected[-1]["fields"][0]
        got = (field["path"], field["manager"], field["live"], field["desired"])
        assert got == (".spec.replicas", "kubectl-edit", 7, 2)
        dep = kube.get("deployment", "web", namespace)
        owners = [
            m["manager"] for m in dep["metadata"]["managedFields"] if "f:replicas" in m["fieldsV1"].get("f:spec", {})
        ]
        assert owners == ["gitops-sync"], "force: Git took the field back"

        wait_until("a DriftCorrected Event", lambda: events(kube, namespace, "DriftCorrected"), 2.0)
        ev = events(kube, namespace, "DriftCorrected")[0]
        assert ev["involvedObject"]["name"] == "web" and ev["type"] == "Normal"
        assert ".spec.replicas" in ev["message"] and "kubectl-edit" in ev["message"], ev["message"]
        assert d.metric("gitops_sync_drift_total", outcome="corrected") == 1

        # nothing else was rewritten: the ConfigMap kept its resourceVersion, one write for one correction
        assert kube.get("configmap", "settings", namespace)["metadata"]["resourceVersion"] == rv_before
        wait_until("the status to show everything in sync", lambda: d.status()["summary"]["unchanged"] == 2, 2.0)
        assert d.status()["daemon"]["requests"]["writes"] - writes_before == 1

        # the same edit again after the revert: now it is a fight between kubectl-edit and gitops-sync
        assert d.status()["fights"] == []
        edit(kube, namespace, "deployment/web", "s/replicas: 2$/replicas: 7/")
        wait_until("the second edit corrected", lambda: replicas(kube, namespace, "web") == 2, 2.0)
        # the fight's history shows the correction once the watch has delivered it (a fast poll can read the
        # corrected object before the daemon's own watch event for it arrives)
        wait_until("the fight on /status", lambda: len(((d.status()["fights"] or [{}])[0]).get("values", [])) >= 5, 2.0)
        fight = d.status()["fights"][0]
        assert fight["field"] == ".spec.replicas" and fight["managers"] == ["gitops-sync", "kubectl-edit"]
        assert [v["value"] for v in fight["values"]] == [2, 7, 2, 7, 2]

        # an object deleted out of band is recreated and reported as such
        kube.kubectl("delete", "configmap", "settings", "-n", namespace, "--wait=false")
        wait_until(
            "the ConfigMap recreated",
            lambda: kube.find("configmap", "settings", namespace) is not None,
            2.0,
        )
        wait_until("the deletion reported", lambda: any(e.get("deleted") for e in d.logged("drift corrected")), 2.0)
        assert d.stop() == 0


def test_detect_only_reports_a_kubectl_edit_within_2s_and_leaves_it(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 2)})
    sync_once(kube.env, repo.path, namespace, timeout=60)
    with start(kube, tmp_path, repo.path, namespace, "--detect-only") as d:
        assert d.entry("Deployment", "web")["action"] == "unchanged"  # type: ignore[index]
        edit(kube, namespace, "deployment/web", "s/replicas: 2$/replicas: 5/")
        t0 = time.monotonic()
        rv_after_edit = kube.get("deployment", "web", namespace)["metadata"]["resourceVersion"]

        seen: list[Any] = []

        def reported() -> bool:
            e = d.entry("Deployment", "web")
            seen.append(e)
            return bool(e and e["state"] == "drifted" and e["drift"] + e["conflicts"])

        try:
            wait_until("drift on /status", reported, 2.0)
        except pytest.fail.Exception:
            pytest.fail(f"no drift on /status within 2 s; last entry: {seen[-1:]}\n{d.log_tail()}")
        print(f"detect-only: drift on /status {time.monotonic() - t0:.3f} s after kubectl edit returned")
        entry = d.entry("Deployment", "web")
        assert entry is not None
        change = (entry["drift"] + entry["conflicts"])[0]  # another manager's field: a conflict for a plan
        got = (change["path"], change["live"], change["desired"], change["manager"])
        assert got == (".spec.replicas", 5, 2, "kubectl-edit")
        wait_until("a DriftDetected Event", lambda: events(kube, namespace, "DriftDetected"), 2.0)
        ev = events(kube, namespace, "DriftDetected")[0]
        assert ev["type"] == "Warning" and ".spec.replicas" in ev["message"] and "kubectl-edit" in ev["message"]
        assert d.logged("drift detected")
        assert d.metric("gitops_sync_drift_total", outcome="detected") == 1
        assert d.metric("gitops_sync_objects", state="drifted") == 1

        time.sleep(2)  # and it is left alone
        dep = kube.get("deployment", "web", namespace)
        assert dep["spec"]["replicas"] == 5
        assert dep["metadata"]["resourceVersion"] == rv_after_edit or dep["spec"]["replicas"] == 5
        assert d.status()["daemon"]["requests"]["writes"] == 0, "detect-only never writes"
        assert d.metric("gitops_sync_drift_total", outcome="detected") == 1, "reported once, not on every event"
        assert len(events(kube, namespace, "DriftDetected")) == 1
        assert d.stop() == 0


def test_detect_only_calls_a_new_commit_planned_and_a_kubectl_edit_drifted(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """/status and the objects gauge use the report's words: Git's change is planned, the cluster's is drift."""
    repo = GitRepo(tmp_path / "repo", {"a.yaml": configmap("a", {"v": "1"}), "b.yaml": configmap("b", {"v": "1"})})
    sync_once(kube.env, repo.path, namespace, timeout=60)
    with start(kube, tmp_path, repo.path, namespace, "--detect-only") as d:
        repo.commit({"a.yaml": configmap("a", {"v": "2"})}, "Git changes a")
        kube.kubectl("patch", "configmap", "b", "-n", namespace, "-p", '{"data":{"v":"9"}}')

        def state(name: str) -> str:
            return str((d.entry("ConfigMap", name) or {}).get("state"))

        wait_until("a planned and b drifted on /status", lambda: (state("a"), state("b")) == ("planned", "drifted"), 10)
        a = d.entry("ConfigMap", "a") or {}
        assert [c["reason"] for c in a["drift"]] == ["git-changed"], a
        assert d.metric("gitops_sync_objects", state="planned") == 1
        assert d.metric("gitops_sync_objects", state="drifted") == 1
        assert d.status()["daemon"]["requests"]["writes"] == 0, "detect-only never writes"
        assert d.stop() == 0


def test_a_commit_to_the_watched_local_repository_is_applied_within_2s(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"cm.yaml": configmap("settings", {"color": "blue"})})
    with start(kube, tmp_path, repo.path, namespace, "--interval", "3600") as d:
        timings = []
        for color in ("green", "red", "yellow"):
            t0 = time.monotonic()
            sha = repo.commit({"cm.yaml": configmap("settings", {"color": color})}, color)

            def applied(color: str = color) -> bool:
                return bool(kube.get("configmap", "settings", namespace)["data"]["color"] == color)

            wait_until(f"commit {sha[:8]} applied", applied, 2.0)
            timings.append(time.monotonic() - t0)
        print("commit to applied: " + ", ".join(f"{t:.3f} s" for t in timings))
        wait_until("/status on the new revision", lambda: d.status()["daemon"]["appliedRevision"] == sha, 2.0)
        assert d.metric("gitops_sync_last_applied_revision_info", revision=sha, source=str(repo.path)) == 1
        assert d.stop() == 0


def test_a_broken_commit_keeps_the_last_good_state_and_is_never_a_reason_to_prune(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"a.yaml": configmap("a", {"v": "1"}), "b.yaml": configmap("b", {"v": "1"})})
    with start(kube, tmp_path, repo.path, namespace, "--prune", "--interval", "3600") as d:
        good = d.status()["revision"]
        # a broken manifest that also drops b: nothing may be pruned, nothing applied
        bad = repo.commit({"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a\n", "b.yaml": None}, "broken")

        def source_error() -> bool:
            src = d.status()["daemon"]["source"]
            return bool(src["error"]) and src["errorRevision"] == bad

        wait_until("the render error on /status", source_error, 2.0)
        doc = d.status()
        assert doc["revision"] == good and doc["daemon"]["appliedRevision"] == good
        assert any("a.yaml" in e and bad in e for e in doc["errors"]), doc["errors"]
        assert d.metric("gitops_sync_source_healthy") == 0
        err = d.logged("source failed; keeping the last good state")[-1]
        assert err["revision"] == bad and err["kept_revision"] == good

        # the last good state is still enforced: drift is corrected meanwhile
        kube.kubectl("patch", "configmap", "b", "-n", namespace, "--type=merge", "-p", '{"data":{"v":"x"}}')
        wait_until(
            "b corrected from the last good revision",
            lambda: kube.get("configmap", "b", namespace)["data"]["v"] == "1",
            2.0,
        )
        time.sleep(1)
        assert kube.find("configmap", "b", namespace) is not None, "not pruned"

        # a good commit that removes b: now b is pruned
        fixed = repo.commit({"a.yaml": configmap("a", {"v": "2"})}, "fixed")
        wait_until(
            "b pruned after the fixed commit",
            lambda: kube.find("configmap", "b", namespace) is None,
            3.0,
        )
        # the pass records its revision after its last write (the prune just seen)
        wait_until("the pass that pruned b to end", lambda: d.status()["daemon"]["appliedRevision"] == fixed, 1.0)
        assert d.status()["daemon"]["appliedRevision"] == fixed
        assert d.status()["daemon"]["source"]["error"] == ""
        assert d.stop() == 0


def test_webhook_push_to_a_remote_repository_is_applied_without_waiting_for_the_poll(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    work = GitRepo(tmp_path / "work", {"cm.yaml": configmap("settings", {"v": "1"})})
    bare = git.Repo.init(tmp_path / "remote.git", bare=True, initial_branch="main")
    work.repo.create_remote("origin", str(bare.git_dir)).push("main")
    secret_file = tmp_path / "secret"
    secret_file.write_text("hook-secret\n")
    url = f"file://{tmp_path / 'remote.git'}"
    with start(
        kube,
        tmp_path,
        url,
        namespace,
        "--interval",
        "3600",
        "--webhook-secret-file",
        str(secret_file),
        "--cache-dir",
        str(tmp_path / "cache"),
    ) as d:
        assert kube.get("configmap", "settings", namespace)["data"]["v"] == "1"
        sha = work.commit({"cm.yaml": configmap("settings", {"v": "2"})}, "v2")
        work.repo.remote("origin").push("main")
        body = json.dumps({"ref": "refs/heads/main", "after": sha}).encode()

        code, _ = d.post("/hooks/git", body, {"X-Hub-Signature-256": "sha256=" + "0" * 64, "X-GitHub-Event": "push"})
        assert code == 401
        code, _ = d.post("/hooks/git", body, {})
        assert code == 401
        time.sleep(1)
        assert kube.get("configmap", "settings", namespace)["data"]["v"] == "1", "refused hooks trigger nothing"

        sig = "sha256=" + hmac.new(b"hook-secret", body, hashlib.sha256).hexdigest()
        t0 = time.monotonic()
        code, answer = d.post("/hooks/git", body, {"X-Hub-Signature-256": sig, "X-GitHub-Event": "push"})
        assert code == 202, answer
        wait_until(
            "the pushed commit applied",
            lambda: kube.get("configmap", "settings", namespace)["data"]["v"] == "2",
            5.0,
        )
        print(f"webhook to applied: {time.monotonic() - t0:.3f} s")
        sha3 = work.commit({"cm.yaml": configmap("settings", {"v": "3"})}, "v3")
        work.repo.remote("origin").push("main")
        code, _ = d.post("/hooks/git", b"{}", {"X-Gitlab-Token": "hook-secret", "X-Gitlab-Event": "Push Hook"})
        assert code == 202
        wait_until("GitLab-style hook applied", lambda: d.status()["daemon"]["appliedRevision"] == sha3, 5.0)
        assert d.stop() == 0


def test_remote_repository_is_polled_and_an_unreachable_remote_keeps_the_last_good_state(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    work = GitRepo(tmp_path / "work", {"cm.yaml": configmap("settings", {"v": "1"})})
    remote = tmp_path / "remote.git"
    git.Repo.init(remote, bare=True, initial_branch="main")
    work.repo.create_remote("origin", str(remote)).push("main")
    with start(
        kube, tmp_path, f"file://{remote}", namespace, "--interval", "2", "--cache-dir", str(tmp_path / "cache")
    ) as d:
        good = d.status()["revision"]
        sha = work.commit({"cm.yaml": configmap("settings", {"v": "2"})}, "v2")
        t0 = time.monotonic()
        work.repo.remote("origin").push("main")
        wait_until(
            "the pushed commit applied within one poll interval (2 s ± 10%)",
            lambda: kube.get("configmap", "settings", namespace)["data"]["v"] == "2",
            2.2 + 1.0,
        )
        print(f"push to applied by polling: {time.monotonic() - t0:.2f} s")
        wait_until("the pass that applied it to end", lambda: d.status()["daemon"]["appliedRevision"] == sha, 1.0)
        assert d.status()["daemon"]["appliedRevision"] == sha != good

        remote.rename(tmp_path / "gone.git")  # the Git server is unreachable
        wait_until("the fetch error on /status", lambda: d.status()["daemon"]["source"]["error"], 5.0)
        doc = d.status()
        assert doc["revision"] == sha and "gone" not in doc["daemon"]["source"]["error"]
        assert d.metric("gitops_sync_source_healthy") == 0 and d.get("/healthz")[0] == 200
        kube.kubectl("patch", "configmap", "settings", "-n", namespace, "--type=merge", "-p", '{"data":{"v":"x"}}')
        wait_until(
            "drift still corrected from the last good revision",
            lambda: kube.get("configmap", "settings", namespace)["data"]["v"] == "2",
            2.0,
        )
        (tmp_path / "gone.git").rename(remote)
        wait_until("the source healthy again", lambda: d.status()["daemon"]["source"]["error"] == "", 10.0)
        assert d.metric("gitops_sync_source_healthy") == 1
        assert d.stop() == 0


def test_helm_versus_kubectl_scale_fight_is_reported_with_both_managers(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    kube.helm("install", "hello", str(CHART), "-n", namespace, "--set", "replicas=3")
    rendered = kube.helm("template", "hello", str(CHART), "-n", namespace, "--set", "replicas=3").stdout
    docs = [d for d in rendered.split("\n---") if "kind: Deployment" in d]
    repo = GitRepo(tmp_path / "repo", {"hello.yaml": docs[0]})
    with start(kube, tmp_path, repo.path, namespace, "--detect-only") as d:
        kube.kubectl("scale", "deployment/hello", "--replicas=10", "-n", namespace)
        kube.helm("upgrade", "hello", str(CHART), "-n", namespace, "--set", "replicas=3", "--force-conflicts")
        assert d.status()["fights"] == [], "helm took it back once: not yet a fight"
        kube.kubectl("scale", "deployment/hello", "--replicas=10", "-n", namespace)
        t0 = time.monotonic()
        wait_until("the fight on /status", lambda: d.status()["fights"], 1.0, interval=0.01)
        print(f"fight reported {time.monotonic() - t0:.3f} s after the second kubectl scale returned")

        fight = d.status()["fights"][0]
        assert fight["name"] == "hello" and fight["field"] == ".spec.replicas"
        assert fight["managers"] == ["helm", "kubectl"]
        assert [v["value"] for v in fight["values"]] == [3, 10, 3, 10]
        assert [(v["manager"], v["subresource"]) for v in fight["values"]][:2] == [("helm", ""), ("kubectl", "scale")]
        logged = d.logged("field fight")[-1]
        assert logged["managers"] == ["helm", "kubectl"] and logged["field"] == ".spec.replicas"
        wait_until("a FieldFight Event", lambda: events(kube, namespace, "FieldFight"), 2.0)
        message = events(kube, namespace, "FieldFight")[0]["message"]
        assert "helm" in message and "kubectl" in message and ".spec.replicas" in message
        assert d.metric("gitops_sync_field_fights_total") >= 1
        history = next(h for h in d.status()["history"] if h["name"] == "hello")
        assert [r["manager"] for r in history["fields"][".spec.replicas"]] == ["helm", "kubectl", "helm", "kubectl"]
        assert d.stop() == 0


def test_secret_drift_is_corrected_and_reported_without_its_values(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    secret = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "stringData": {"password": "git-secret-value"},
        }
    )
    repo = GitRepo(tmp_path / "repo", {"secret.yaml": secret})
    with start(kube, tmp_path, repo.path, namespace) as d:
        out_of_band = "b3V0LW9mLWJhbmQtdmFsdWU="  # base64("out-of-band-value")
        kube.kubectl(
            "patch",
            "secret",
            "creds",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            json.dumps({"data": {"password": out_of_band}}),
        )
        wait_until(
            "the Secret corrected",
            lambda: kube.get("secret", "creds", namespace)["data"]["password"] != out_of_band,
            2.0,
        )
        wait_until("a DriftCorrected Event", lambda: events(kube, namespace, "DriftCorrected"), 2.0)
        message = events(kube, namespace, "DriftCorrected")[0]["message"]
        assert ".data.password" in message and "kubectl-patch" in message, message
        everything = message + json.dumps(d.status()) + d.log_path.read_text()
        for value in ("git-secret-value", "Z2l0LXNlY3JldC12YWx1ZQ==", out_of_band, "out-of-band-value"):
            assert value not in everything, f"{value} leaked"
        assert d.stop() == 0


def test_probes_metrics_and_sigterm(kube: KubeCluster, namespace: str, tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo", {"cm.yaml": configmap("settings", {"v": "1"})})
    with start(kube, tmp_path, repo.path, namespace) as d:
        assert d.get("/healthz")[0] == 200 and d.get("/readyz")[0] == 200
        exposition = d.get("/metrics")[1].decode()
        for name in (
            "passes_total",
            "pass_duration_seconds",
            "objects",
            "drift_total",
            "conflicts_total",
            "field_fights_total",
            "watch_restarts_total",
            "queue_depth",
            "last_applied_revision_info",
            "leader",
        ):
            assert f"# HELP gitops_sync_{name} " in exposition, name
        assert d.metric("gitops_sync_passes_total", kind="full", result="success") >= 1
        assert d.metric("gitops_sync_objects", state="synced") == 1
        assert d.metric("gitops_sync_leader") == 1
        doc = d.status()
        for key in ("revision", "source", "dryRun", "summary", "objects", "errors", "history", "fights"):
            assert key in doc
        t0 = time.monotonic()
        assert d.stop() == 0
        print(f"SIGTERM to exit: {time.monotonic() - t0:.3f} s")
        assert d.logged("stopped")
