"""The API server stopped for 10 s and started again: the watches come back and the daemon converges.

This test stops a kube-apiserver, so it runs on a private cluster of its own (the shared one serves
other sessions); the launcher restarts the server with its original flags (daemon_support).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_support import (
    Daemon,
    GitRepo,
    configmap,
    deployment,
    kubectl_edit_env,
    restart_apiserver,
    start_private_cluster,
    stop_private_cluster,
    wait_until,
)

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def private_cluster() -> Iterator[tuple[Path, dict[str, str]]]:
    state = Path(tempfile.mkdtemp(prefix="gitops-sync-restart-"))
    state.rmdir()
    try:
        yield state, start_private_cluster(state)
    finally:
        stop_private_cluster(state)
        shutil.rmtree(state, ignore_errors=True)


def kubectl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, check=False, timeout=60)


def test_api_server_down_for_10s_then_back_the_daemon_converges(
    private_cluster: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    state, env = private_cluster
    ns = "restart"
    assert kubectl(env, "create", "namespace", ns).returncode == 0
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 2), "cm.yaml": configmap("c", {"v": "1"})})
    with Daemon(["--repo", str(repo.path), "-n", ns, "--interval", "3600"], env, tmp_path / "daemon.log") as d:
        d.wait_ready()

        def cm_value() -> str:
            r = kubectl(env, "get", "configmap", "c", "-n", ns, "-o", "jsonpath={.data.v}")
            return r.stdout if r.returncode == 0 else ""

        assert cm_value() == "1"
        restarter = threading.Thread(target=restart_apiserver, args=(state, 10.0))
        t_down = time.monotonic()
        restarter.start()
        time.sleep(2)
        sha = repo.commit({"cm.yaml": configmap("c", {"v": "2"})}, "committed while the API server is down")
        restarter.join(120)
        assert not restarter.is_alive()
        t_up = time.monotonic()
        print(f"API server was down for {t_up - t_down:.1f} s")
        assert d.get("/healthz")[0] == 200, "the daemon survived"

        took = wait_until("the commit made during the outage to be applied", lambda: cm_value() == "2", 30)
        print(f"converged {took:.2f} s after the API server answered again")
        wait_until("/status on the new revision", lambda: d.status()["daemon"]["appliedRevision"] == sha, 10)
        # Every watch comes back, each after its own backoff (capped at 8 s, +20 % jitter), so wait for
        # the slowest rather than expecting them all at the moment the first object converged.
        wait_until(
            "every watch synced again", lambda: all(w["state"] == "synced" for w in d.status()["daemon"]["watches"]), 15
        )
        watches = d.status()["daemon"]["watches"]
        assert sum(w["restarts"] for w in watches) >= 2, watches
        assert d.metric("gitops_sync_watch_restarts_total", resource="ConfigMap", reason="error") >= 1

        # the watches are live again: an edit is corrected at once
        r = subprocess.run(
            ["kubectl", "edit", "deployment/web", "-n", ns],
            env=kubectl_edit_env(env, "s/replicas: 2$/replicas: 4/"),
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        wait_until(
            "the edit corrected after the restart",
            lambda: (
                json.loads(kubectl(env, "get", "deployment", "web", "-n", ns, "-o", "json").stdout)["spec"]["replicas"]
                == 2
            ),
            2.0,
        )

        # and it settles: no write loop, nothing applied again and again
        writes = d.status()["daemon"]["requests"]["writes"]
        time.sleep(3)
        assert d.status()["daemon"]["requests"]["writes"] == writes
        assert d.stop() == 0
