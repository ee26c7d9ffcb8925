"""`gitops-sync get | reconcile | suspend | resume` against the fleet controller on the real API server: a
suspended GitSync keeps its status, a request blocked by dependsOn is answered at once, stamps are RFC 3339,
`resume` waits for its pass, and the kubeconfig context's namespace is the default (CLI and Leases)."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime
from pathlib import Path

import yaml

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_fleet import cm_data, condition, crd, fleet_args, gitsync, gs_cli, gs_status

__all__ = ["crd"]  # the module fixture, used by name


def _with_context_namespace(kube: KubeCluster, namespace: str, path: Path) -> Path:
    """A copy of the admin kubeconfig whose current context names `namespace` (as `kubens` would set it)."""
    doc = yaml.safe_load(kube.kubeconfig.read_text())
    current = doc["current-context"]
    for ctx in doc["contexts"]:
        if ctx["name"] == current:
            ctx["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(doc))
    return path


def test_suspend_keeps_the_status_and_blocked_or_resumed_requests_are_answered(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    base = GitRepo(tmp_path / "base", {"cm.yaml": configmap("base", {"v": "1"})})
    dep = GitRepo(tmp_path / "dep", {"cm.yaml": configmap("dep", {"v": "1"})})
    blocked = GitRepo(tmp_path / "blocked", {"cm.yaml": configmap("blocked", {"v": "1"})})
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(
            [
                gitsync("base", namespace, base.path),
                gitsync("dep", namespace, dep.path, dependsOn=[{"name": "base"}]),
                gitsync("blocked", namespace, blocked.path, dependsOn=[{"name": "never-created"}]),
            ]
        ),
    )
    kubeconfig = _with_context_namespace(kube, namespace, tmp_path / "kubeconfig")  # the CLI's: no -n given
    # The controller's context names a namespace of its own, as the shipped one (gitops-sync) would.
    home = f"{namespace}-ctl"[:63]
    kube.kubectl("create", "namespace", home)
    env = {**kube.env, "KUBECONFIG": str(_with_context_namespace(kube, home, tmp_path / "controller-kubeconfig"))}
    args = fleet_args(namespace, tmp_path, "--workers", "2", "--leader-elect")
    with Daemon(args, env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        for name in ("base", "dep"):
            kube.kubectl("wait", "--for=condition=Ready", f"gitsync/{name}", "-n", namespace, "--timeout=60s")
        # Out of cluster, the shard Lease lives in the kubeconfig context's namespace (not `default`).
        leases = kube.list("leases", home)
        assert any(lease["metadata"]["name"].startswith("gitops-sync-shard") for lease in leases), leases
        before = gs_status(kube, namespace, "base")

        # get without -n: the context's namespace.
        listed = json.loads(gs_cli_ctx(kube, kubeconfig, "get", "-o", "json").stdout)
        assert {r["name"] for r in listed} == {"base", "dep", "blocked"}, listed

        # A request blocked by dependsOn is answered as soon as the controller sees it, not after --timeout.
        t0 = time.monotonic()
        r = gs_cli_ctx(kube, kubeconfig, "reconcile", "blocked", "--timeout", "60s")
        took = time.monotonic() - t0
        assert r.returncode == 1 and f"waiting for {namespace}/never-created" in r.stdout, r.stdout + r.stderr
        assert took < 20, f"a blocked reconcile took {took:.1f}s"
        stamp = gs_status(kube, namespace, "blocked")["lastHandledReconcileAt"]
        assert stamp.endswith("Z") and datetime.fromisoformat(stamp[:26] + "+00:00"), stamp  # RFC 3339

        # suspend keeps what was there (revision, counts, inventory, Ready) and says Suspended=True.
        assert gs_cli_ctx(kube, kubeconfig, "suspend", "base").returncode == 0
        wait_until(
            "Suspended=True", lambda: condition(kube, namespace, "base", "Suspended").get("status") == "True", 30
        )
        during = gs_status(kube, namespace, "base")
        for key in ("lastAppliedRevision", "counts", "inventory"):
            assert during[key] == before[key], (key, before, during)
        assert condition(kube, namespace, "base", "Ready")["status"] == "True", during
        r = gs_cli_ctx(kube, kubeconfig, "reconcile", "base")
        assert r.returncode == 1 and "is suspended" in r.stderr, r.stdout + r.stderr
        # A dependent of a suspended GitSync that was Ready keeps being reconciled.
        dep.commit({"cm.yaml": configmap("dep", {"v": "2"})})
        r = gs_cli_ctx(kube, kubeconfig, "reconcile", "dep", "--timeout", "60s")
        assert r.returncode == 0 and "Ready=True" in r.stdout, r.stdout + r.stderr
        assert cm_data(kube, namespace, "dep") == {"v": "2"}

        # resume waits for the pass it asked for: the commit made while suspended is live when it returns.
        base.commit({"cm.yaml": configmap("base", {"v": "2"})})
        assert cm_data(kube, namespace, "base") == {"v": "1"}
        r = gs_cli_ctx(kube, kubeconfig, "resume", "base", "--timeout", "60s")
        assert r.returncode == 0 and "reconciled: Ready=True" in r.stdout, r.stdout + r.stderr
        assert cm_data(kube, namespace, "base") == {"v": "2"}
        assert condition(kube, namespace, "base", "Suspended")["status"] == "False"
        assert not d.logged("reconcile failed unexpectedly"), d.log_tail()
    kube.kubectl("delete", "namespace", home, "--wait=false")


def gs_cli_ctx(kube: KubeCluster, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """gs_cli with the context-namespace kubeconfig instead of the admin one (no -n given)."""
    return gs_cli(KubeCluster(kubeconfig, kube.bin_dir, {**kube.env, "KUBECONFIG": str(kubeconfig)}, False), *args)
