"""Terminating objects on the real API server (issue 20, item 7): `sync --wait` and the daemon.

A finalizer nobody removes (`example.com/hold`) until the test does keeps an object Terminating, so
every interleaving below is certain: the test releases it only after it has seen the tool wait for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_sync import by_name, gs, report, write

pytestmark = pytest.mark.cluster

HOLD = "example.com/hold"
LOG_INFO = ("--log-level", "info", "--log-format", "json")


def cm(name: str, namespace: str | None = None) -> str:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": name}}) + "\n"


def hold(kube: KubeCluster, ref: str, namespace: str) -> None:
    """A finalizer another controller put there (out of band): nothing removes it but `release`."""
    kube.kubectl("patch", ref, "-n", namespace, "--type=merge", "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))


def release(kube: KubeCluster, ref: str, namespace: str) -> None:
    kube.kubectl("patch", ref, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)


def live(kube: KubeCluster, ref: str, namespace: str = "") -> dict[str, Any] | None:
    return kube.find(ref, namespace=namespace or None)


def requests(r: subprocess.CompletedProcess[str], method: str) -> list[str]:
    """The paths of every `method` request the CLI sent (its `--log-level debug` request lines, in order)."""
    out = []
    for line in r.stderr.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("event") == "request" and doc.get("method") == method:
            out.append(str(doc.get("path")))
    return out


def test_sync_wait_waits_for_a_held_prune_and_names_it_when_the_timeout_passes(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = write(tmp_path / "repo", {"held.yaml": cm("held"), "keep.yaml": cm("keep")})
    args = ["--repo", str(repo), "-n", namespace, "--name", f"wait-{namespace}"[:57], "-o", "json"]
    try:
        assert gs(kube, "sync", *args).returncode == 0
        hold(kube, "configmap/held", namespace)
        (repo / "held.yaml").unlink()
        r = gs(kube, "sync", *args, "--prune", "--wait", "--timeout", "2s")
        assert r.returncode == 2, r.stdout + r.stderr
        doc = report(r)
        assert by_name(doc)["ConfigMap/held"]["action"] == "terminating"
        assert any(e.startswith("not deleted after") and f"finalizer {HOLD}" in e for e in doc["errors"]), doc["errors"]

        # Released while the next sync waits for it (seen in its log): done, exit 0.
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitops_sync", "sync", *args, "--prune", "--wait", "--timeout", "60s", *LOG_INFO],
            env=kube.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        for line in proc.stderr:
            if '"waiting until deleted"' in line:
                break
        else:
            pytest.fail(f"sync never waited for the held ConfigMap (exit {proc.wait()})")
        release(kube, "configmap/held", namespace)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        entry = by_name(json.loads(out))["ConfigMap/held"]
        assert entry["action"] == "prune" and entry["message"].startswith("deleted (left Git; gone after waiting")
        assert live(kube, "configmap/held", namespace) is None
    finally:
        release(kube, "configmap/held", namespace)


def _entry(d: Daemon, name: str) -> dict[str, Any] | None:
    return d.entry("ConfigMap", name)


def _deletes(d: Daemon, path: str) -> int:
    return sum(1 for x in d.logged("request") if x.get("method") == "DELETE" and x.get("path") == path)


def test_the_daemon_reports_held_deletions_on_status_and_page_and_never_deletes_again(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(
        tmp_path / "repo",
        {f"{n}.yaml": configmap(n, {"v": n}) for n in ("held", "wanted", "keep")},
    )
    held_path = f"/api/v1/namespaces/{namespace}/configmaps/held"
    args = ["--repo", str(repo.path), "-n", namespace, "--prune", "--interval", "3600", "--log-level", "debug"]
    try:
        with Daemon(args, kube.env, tmp_path / "daemon.log") as d:
            d.wait_ready()
            hold(kube, "configmap/held", namespace)
            hold(kube, "configmap/wanted", namespace)
            repo.commit({"held.yaml": None}, "held leaves Git")
            wait_until(
                "held to be reported terminating",
                lambda: (_entry(d, "held") or {}).get("action") == "terminating",
                timeout=30,
            )
            entry = _entry(d, "held")
            assert entry is not None and entry["state"] == "terminating"
            assert entry["message"].startswith(f"deletion pending: finalizer {HOLD}"), entry
            inventory = d.status()["inventory"]["name"]
            code, page = d.get(f"/sources/{inventory}?state=terminating")
            assert code == 200 and b'badge st-terminating">terminating<' in page
            assert f"deletion pending: finalizer {HOLD}".encode() in page

            # Full passes look again (1 s, 2 s, ...): the member is still held, no DELETE is sent again.
            passes = len([x for x in d.logged("pass") if x.get("kind") == "full"])
            wait_until(
                "two more full passes",
                lambda: len([x for x in d.logged("pass") if x.get("kind") == "full"]) >= passes + 2,
                timeout=30,
            )
            assert _deletes(d, held_path) == 1
            assert len([x for x in d.logged("deletion pending") if x.get("object", "").endswith("/held")]) == 1

            # An object Git wants, deleted by someone else while held: terminating, counted as such.
            kube.kubectl("delete", "configmap", "wanted", "-n", namespace, "--wait=false")
            old_uid = live(kube, "configmap/wanted", namespace)["metadata"]["uid"]  # type: ignore[index]
            wait_until(
                "wanted to be reported terminating",
                lambda: (_entry(d, "wanted") or {}).get("state") == "terminating",
                timeout=30,
            )
            assert (_entry(d, "wanted") or {})["terminating"]["inGit"] is True
            assert d.metric("gitops_sync_objects", state="terminating") == 1, "a pruned one is not desired"

            released = time.monotonic()
            release(kube, "configmap/held", namespace)
            release(kube, "configmap/wanted", namespace)
            recreated = wait_until(
                "wanted to be re-created",
                lambda: (
                    (live(kube, "configmap/wanted", namespace) or {}).get("metadata", {}).get("uid")
                    not in (None, old_uid)
                ),
                timeout=30,
            )
            wait_until("held to leave /status", lambda: _entry(d, "held") is None, timeout=90)
            cleared = time.monotonic() - released
            assert _deletes(d, held_path) == 1
            print(f"figures: /status cleared {cleared:.2f} s, wanted re-created {recreated:.2f} s after release")
    finally:
        release(kube, "configmap/held", namespace)
        release(kube, "configmap/wanted", namespace)
