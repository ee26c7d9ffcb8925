"""Helm hooks as phases around the apply, on the real local control plane (its kube-controller-manager runs
Jobs, kwok completes their Pods; a Job whose Pod can never be scheduled fails at its activeDeadlineSeconds).

A chart in Git with hooks of every kind a pass runs; `sync --prune` of successive commits: install, a no-op
re-sync, an upgrade, and an upgrade whose pre-upgrade hook fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.integration.daemon_support import GitRepo

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

CHART = "apiVersion: v2\nname: hooked\nversion: 0.1.0\n"


def _job(name: str, event: str, weight: int, policy: str = "", fail: str = "false") -> str:
    """A hook Job (named by generateName when `name` ends in `-`); `fail` (a template expression): its Pod
    asks for a node that does not exist and the Job fails after 2 s (activeDeadlineSeconds), as a failing
    migration would."""
    policy_line = f'    "helm.sh/hook-delete-policy": {policy}\n' if policy else ""
    return (
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n"
        f"  {'generateName' if name.endswith('-') else 'name'}: {name}\n  annotations:\n"
        f'    "helm.sh/hook": {event}\n    "helm.sh/hook-weight": "{weight}"\n{policy_line}'
        "spec:\n  backoffLimit: 0\n"
        f"  {{{{- if {fail} }}}}\n  activeDeadlineSeconds: 2\n  {{{{- end }}}}\n"
        "  template:\n    spec:\n      restartPolicy: Never\n"
        f"      {{{{- if {fail} }}}}\n"
        '      nodeSelector: {gitops-sync.io/no-such-node: "true"}\n'
        "      {{- end }}\n"
        "      containers: [{name: run, image: registry.invalid/migrate:1}]\n"
    )


def _files(version: str, *, extra: bool = True, fail: bool = False) -> dict[str, str | None]:
    t = "apps/hooked/templates"
    return {
        "apps/hooked/Chart.yaml": CHART,
        "apps/hooked/values.yaml": f"version: {json.dumps(version)}\nfailUpgrade: {json.dumps(fail)}\n",
        f"{t}/app.yaml": (
            'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {version: "{{ .Values.version }}"}\n'
        ),
        f"{t}/extra.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {a: b}\n"
        if extra
        else None,
        f"{t}/marker.yaml": (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pre-install-marker\n  annotations:\n"
            '    "helm.sh/hook": pre-install\n    "helm.sh/hook-weight": "-10"\ndata: {a: b}\n'
        ),
        f"{t}/pre-install.yaml": _job("pre-install-job", "pre-install", -5),
        f"{t}/post-install.yaml": _job("post-install-job", "post-install", 0, "hook-failed"),
        f"{t}/post-install-gen.yaml": _job("post-install-gen-", "post-install", 5, "hook-succeeded"),
        f"{t}/pre-upgrade.yaml": _job("pre-upgrade-job", "pre-upgrade", 1, "hook-succeeded", ".Values.failUpgrade"),
        f"{t}/test.yaml": _job("chart-test", "test", 0),
    }


def _sync(
    kube: KubeCluster, repo: GitRepo, namespace: str, tmp_path: Path, *more: str, prune: bool = True
) -> tuple[int, dict[str, Any]]:
    cmd = [sys.executable, "-m", "gitops_sync", "sync", "--repo", str(repo.path), "-n", namespace]
    cmd += ["--prune"] if prune else []
    cmd += ["--cache-dir", str(tmp_path / "cache"), "--name", f"t-{namespace}", "-o", "json", *more]
    r = subprocess.run(cmd, env=kube.env, capture_output=True, text=True, timeout=240, check=False)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def _ran(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(h["event"], h["object"].split("/")[-1], h["ok"]) for h in doc["hooks"]]


def _exists(kube: KubeCluster, kind: str, name: str, namespace: str) -> bool:
    return kube.find(kind, name, namespace) is not None


def test_hooks_install_then_upgrade_weights_delete_policies_and_a_failing_pre_upgrade(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {k: v for k, v in _files("1").items() if v is not None})
    # Install: pre-install hooks by weight (the ConfigMap at -10, the Job at -5), then the objects, then
    # post-install; no upgrade hook, never the test hook.
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 0, doc["errors"]
    assert _ran(doc)[:3] == [
        ("pre-install", "pre-install-marker", "true"),
        ("pre-install", "pre-install-job", "true"),
        ("post-install", "post-install-job", "true"),
    ]
    # A generateName hook: created (a new name each run), waited for, deleted once it succeeded.
    event, generated, ok = _ran(doc)[3]
    assert event == "post-install" and generated.startswith("post-install-gen-") and ok == "true", doc["hooks"]
    assert generated != "post-install-gen-" and not _exists(kube, "job", generated, namespace)
    assert kube.get("configmap", "app", namespace)["data"] == {"version": "1"}
    objects = {o["kind"] + "/" + o["name"] for o in doc["objects"]}
    assert objects == {"ConfigMap/app", "ConfigMap/extra"}  # hooks are no objects of the source
    assert not _exists(kube, "job", "chart-test", namespace) and not _exists(kube, "job", "pre-upgrade-job", namespace)
    # before-hook-creation (the default) keeps a hook until it runs again; hook-failed keeps a succeeded one
    assert _exists(kube, "job", "pre-install-job", namespace) and _exists(kube, "job", "post-install-job", namespace)
    member = kube.kubectl(
        "get", "jobs,configmaps", "-n", namespace, "-l", "applyset.kubernetes.io/part-of", "-o", "name"
    )
    assert sorted(member.stdout.split()) == ["configmap/app", "configmap/extra"]  # hooks are never members

    # The same commit again: released already, no hook runs; hooks are not drift either.
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 0 and _ran(doc) == [], doc

    # An upgrade: the pre-upgrade hook runs, and is deleted once it succeeded (hook-succeeded).
    repo.commit(_files("2"), "v2")
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 0, doc["errors"]
    assert [(e, n) for e, n, _ in _ran(doc)] == [("pre-upgrade", "pre-upgrade-job")]
    assert "deleted (hook-delete-policy)" in doc["hooks"][0]["result"]
    assert kube.get("configmap", "app", namespace)["data"] == {"version": "2"}
    assert not _exists(kube, "job", "pre-upgrade-job", namespace)

    # A failing pre-upgrade hook stops the upgrade: nothing applied, nothing pruned (extra left Git).
    repo.commit(_files("3", extra=False, fail=True), "v3, migration fails")
    code, doc = _sync(kube, repo, namespace, tmp_path)
    assert code == 2, doc
    assert _ran(doc) == [("pre-upgrade", "pre-upgrade-job", "false")]
    assert any("hook pre-upgrade" in e and "pre-upgrade-job" in e and "failed" in e for e in doc["errors"]), doc
    assert kube.get("configmap", "app", namespace)["data"] == {"version": "2"}
    assert _exists(kube, "configmap", "extra", namespace)
    assert _exists(kube, "job", "pre-upgrade-job", namespace)  # hook-succeeded only: a failed one is kept to read


def test_the_daemon_runs_install_hooks_once_and_upgrade_hooks_per_new_commit(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """`run --repo`: its periodic re-syncs of the applied commit run no hook and see no drift in hooks; a new
    commit runs pre-upgrade once."""
    from tests.integration.daemon_support import Daemon, wait_until

    repo = GitRepo(tmp_path / "repo", {k: v for k, v in _files("1").items() if v is not None})
    args = ["--repo", str(repo.path), "-n", namespace, "--interval", "0.5", "--prune"]
    args += ["--cache-dir", str(tmp_path / "cache")]
    with Daemon(args, kube.env, tmp_path / "daemon.log") as d:
        d.wait_ready(90)

        def ran() -> list[tuple[str, str]]:
            return [(h["hook_event"], h["object"].split("/")[-1]) for h in d.logged("hook ran")]

        wait_until("install hooks", lambda: len(ran()) >= 4, 60)
        wait_until(
            "app applied", lambda: (kube.find("configmap", "app", namespace) or {}).get("data") == {"version": "1"}, 30
        )
        loaded = len(d.logged("render cache: served")) + len(d.logged("source loaded"))
        wait_until(
            "re-syncs", lambda: len(d.logged("render cache: served")) + len(d.logged("source loaded")) >= loaded + 3, 30
        )
        assert ran()[:3] == [
            ("pre-install", "pre-install-marker"),
            ("pre-install", "pre-install-job"),
            ("post-install", "post-install-job"),
        ]
        assert len(ran()) == 4 and ran()[3][1].startswith("post-install-gen-")
        last = d.status()["daemon"]["lastHooks"]  # /status: what the last pass that ran hooks ran
        assert last["revision"] == repo.repo.head.commit.hexsha
        assert [h["object"].split("/")[-1] for h in last["hooks"]][:3] == [n for _, n in ran()[:3]]
        assert d.entry("Job", "pre-install-job") is None  # not an object of the source: not in /status
        repo.commit(_files("2"), "v2")
        wait_until(
            "upgraded", lambda: (kube.find("configmap", "app", namespace) or {}).get("data") == {"version": "2"}, 60
        )
        wait_until("pre-upgrade ran", lambda: ("pre-upgrade", "pre-upgrade-job") in ran(), 30)
        assert ran()[4:] == [("pre-upgrade", "pre-upgrade-job")]
        wait_until("/status names the upgrade", lambda: len(d.status()["daemon"]["lastHooks"]["hooks"]) == 1, 10)
        assert d.status()["daemon"]["lastHooks"]["hooks"][0]["event"] == "pre-upgrade"
