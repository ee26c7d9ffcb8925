"""`make demo` (scripts/demo.sh), the README's first command: end to end on a running cluster, and its stop
with the real cause when the local control plane does not start.

The end-to-end run reuses the session's cluster through KUBECONFIG, as the script allows, so it costs the
demo's own commands only (a fresh cluster on taken default ports is tests/reliability/test_demo_ports.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import FIXED_NAMES, KubeCluster

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo.sh"
# The demo's steps, in order (its `==>` lines).
STEPS = (
    "what Git declares",
    "sync it",
    "nothing changed, nothing written",
    "out of band",
    "the drift report",
    "Git wins",
)


def run_demo(env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(DEMO)], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )


def steps_run(stdout: str) -> list[str]:
    return [s for s in STEPS if f"==> {s}" in stdout]


@pytest.mark.cluster
@FIXED_NAMES
def test_the_demo_runs_end_to_end(kube: KubeCluster) -> None:
    """Every step runs and checks itself: render | head (a reader that stops early), sync --wait, a no-op
    sync | head, the drift (diff exit 1), Git wins (diff exit 0)."""
    # The demo's objects live in its own namespace `demo`: start from none (a previous run's, or nothing).
    kube.kubectl("delete", "namespace", "demo", "--ignore-not-found", "--wait=true", "--timeout=120s")
    try:
        done = run_demo(kube.env, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert steps_run(done.stdout) == list(STEPS)
        assert "exit code: 1" in done.stdout and "exit code: 0 (in sync)" in done.stdout
        assert "unexpectedly" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        replicas = kube.kubectl("-n", "demo", "get", "deployment/minha-api", "-o", "jsonpath={.spec.replicas}")
        assert replicas.stdout != "10"  # Git won over `kubectl scale --replicas=10`
    finally:
        kube.kubectl("delete", "namespace", "demo", "--wait=false", "--ignore-not-found", check=False)


def test_the_demo_stops_with_the_cause_when_the_cluster_does_not_start(tmp_path: Path) -> None:
    """No KUBECONFIG, and the API server's port (asked for explicitly) is taken: `cluster.py up` fails,
    and the demo stops right there with its reason. It used to `eval` the empty output and carry on, to
    a render, a sync against no cluster and a last error (`helm not found`) that was not the cause."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env["LOCAL_CLUSTER_DIR"] = str(tmp_path / "state")
        env["LOCAL_CLUSTER_APISERVER_PORT"] = str(port)
        done = run_demo(env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert steps_run(done.stdout) == []
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: component kube-apiserver: port 127.0.0.1:{port} (kube-apiserver) is already in use; stop what "
        f"listens there, choose another port with --kube-apiserver-port or LOCAL_CLUSTER_APISERVER_PORT, or let "
        "it pick free ones: --auto-ports or LOCAL_CLUSTER_AUTO_PORTS=1",
        "error: the local control plane did not start (the line above says why); the demo stops here",
    ], done.stderr
    assert not (tmp_path / "state").exists()  # nothing started, nothing to clean up
