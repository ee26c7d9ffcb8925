"""`make demo` (scripts/demo.sh, no KUBECONFIG) on a machine where the local control plane's default ports
are taken: it starts its cluster on free ports and passes. The cluster is a private one (its own state dir),
stopped at the end. The fast end-to-end run on the session's cluster is tests/integration/test_demo.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.daemon_support import _launcher, stop_private_cluster
from tests.integration.test_demo import STEPS, run_demo, steps_run

if TYPE_CHECKING:
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster  # builds on the control plane's binaries; starts a cluster of its own

REPO = Path(__file__).resolve().parents[2]


def hold(port: int) -> socket.socket | None:
    """A listener on 127.0.0.1:port; None when something listens there already (taken either way)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    sock.listen()
    return sock


def test_the_demo_passes_where_the_default_ports_are_taken(reliability: Recorder) -> None:
    defaults = _launcher().PORTS
    taken = {comp: defaults[comp] for comp in ("etcd", "kube-apiserver")}
    held = [sock for port in taken.values() if (sock := hold(port)) is not None]
    sessions = REPO / ".cache" / "local-cluster" / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="demo-", dir=sessions))
    state.rmdir()  # the launcher creates (and `down` removes) its state dir
    # As on a developer's machine: no KUBECONFIG, no port settings, only where the state goes.
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("LOCAL_CLUSTER_")}
    env["LOCAL_CLUSTER_DIR"] = str(state)
    if "LOCAL_CLUSTER_CACHE" in os.environ:
        env["LOCAL_CLUSTER_CACHE"] = os.environ["LOCAL_CLUSTER_CACHE"]
    try:
        started = time.perf_counter()
        done = run_demo(env, timeout=900)
        seconds = time.perf_counter() - started
        ports = json.loads((state / "state.json").read_text())["ports"] if (state / "state.json").is_file() else {}
    finally:
        for sock in held:
            sock.close()
        stop_private_cluster(state)
        shutil.rmtree(state, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert steps_run(done.stdout) == list(STEPS)
    assert "exit code: 1" in done.stdout and "exit code: 0 (in sync)" in done.stdout
    assert ports and not set(ports.values()) & set(taken.values()), ports
    reliability.record(
        area="environment",
        fault=f"`make demo` with no KUBECONFIG while 127.0.0.1:{taken['etcd']} (etcd) and "
        f":{taken['kube-apiserver']} (kube-apiserver), the local control plane's default ports, are taken",
        outcome="the demo starts its cluster on free ports (LOCAL_CLUSTER_AUTO_PORTS=1, its default) and runs "
        "every step: render | head, sync --wait, a no-op sync, the drift (diff exit 1), Git wins (diff exit 0)",
        checked="exit 0; every step ran; none of the taken ports used",
        figures=f"{seconds:.1f} s from no cluster to the last diff; API server on :{ports['kube-apiserver']}",
    )
