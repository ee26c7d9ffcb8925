"""Leader election on a real coordination.k8s.io Lease, and two daemons of which only the leader writes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from daemon_support import Daemon, GitRepo, configmap, deployment, kubectl_edit_env, wait_until

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.lease import ApiLeaseStore, LeaderConfig, LeaderElector, lease_name
from gitops_sync.engine import default_inventory_name
from gitops_sync.errors import ConflictError
from tests.conftest import KubeCluster

pytestmark = pytest.mark.cluster

FAST = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"]


def lease(kube: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = kube.get("lease", name, ns)
    return doc


def test_lease_acquire_follow_expire_take_over_and_release_on_the_real_api(kube: KubeCluster, namespace: str) -> None:
    cfg = LeaderConfig(lease_duration=3, renew_deadline=2, retry_period=0.5)
    with Client(kube.kubeconfig) as client:
        store_a = ApiLeaseStore(client, namespace, "election")
        a = LeaderElector(store_a, "replica-a", cfg)
        b = LeaderElector(ApiLeaseStore(client, namespace, "election"), "replica-b", cfg)
        assert a.step() and a.is_leader
        assert not b.step() and b.holder == "replica-a"
        spec = lease(kube, namespace, "election")["spec"]
        assert spec["holderIdentity"] == "replica-a" and spec["leaseDurationSeconds"] == 3
        assert spec["renewTime"].endswith("Z") and "acquireTime" in spec

        for _ in range(4):  # a renews: b never takes over
            time.sleep(0.5)
            assert a.step()
            assert not b.step()

        # a dies (stops renewing): b takes over once the record has not changed for 3 s on b's clock
        t0 = time.monotonic()
        while not b.step():
            assert time.monotonic() - t0 < 6, "b did not take over"
            time.sleep(0.25)
        took = time.monotonic() - t0
        assert 2.5 <= took <= 4.5, took
        spec = lease(kube, namespace, "election")["spec"]
        assert spec["holderIdentity"] == "replica-b" and spec["leaseTransitions"] == 1
        assert not a.can_write(), "a is fenced (renew deadline passed) even before it notices"
        assert not a.step() and not a.is_leader

        # optimistic concurrency: an update carrying a stale resourceVersion is refused by the server
        stale = lease(kube, namespace, "election")
        assert b.step()
        with pytest.raises(ConflictError):
            store_a.update({**stale, "spec": {**stale["spec"], "holderIdentity": "replica-a"}})
        assert lease(kube, namespace, "election")["spec"]["holderIdentity"] == "replica-b"

        assert b.release()
        assert lease(kube, namespace, "election")["spec"].get("holderIdentity", "") == ""
        assert a.step(), "a released Lease is taken at once"


def leader_of(daemons: list[Daemon]) -> Daemon | None:
    leaders = [d for d in daemons if d.proc.poll() is None and d.status()["daemon"]["leader"]]
    assert len(leaders) <= 1, "two leaders at once"
    return leaders[0] if leaders else None


def edit_replicas(kube: KubeCluster, ns: str, to: int) -> None:
    r = subprocess.run(
        [str(kube.bin_dir / "kubectl"), "edit", "deployment/web", "-n", ns],
        env=kubectl_edit_env(kube.env, f"s/replicas: 2$/replicas: {to}/"),
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr


def replicas(kube: KubeCluster, ns: str) -> int:
    return int(kube.get("deployment", "web", ns)["spec"]["replicas"])


def test_two_daemons_only_the_leader_writes_and_the_follower_takes_over(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = GitRepo(tmp_path / "repo", {"web.yaml": deployment("web", 2), "cm.yaml": configmap("c", {"v": "1"})})
    args = ["--repo", str(repo.path), "-n", namespace, "--leader-elect", *FAST]
    one = Daemon([*args, "--leader-elect-identity", "one"], kube.env, tmp_path / "one.log")
    two = Daemon([*args, "--leader-elect-identity", "two"], kube.env, tmp_path / "two.log")
    daemons = [one, two]
    try:
        one.wait_ready()
        two.wait_ready()
        first = leader_of(daemons)
        assert first is not None
        follower = two if first is one else one
        name = lease_name(default_inventory_name(str(repo.path), None))
        assert lease(kube, namespace, name)["spec"]["holderIdentity"] == first.status()["daemon"]["identity"]
        assert follower.status()["daemon"]["readyReason"].startswith("standby")
        assert first.metric("gitops_sync_leader") == 1 and follower.metric("gitops_sync_leader") == 0

        edit_replicas(kube, namespace, 6)
        wait_until("the leader to correct the edit", lambda: replicas(kube, namespace) == 2, 2.0)
        time.sleep(1)
        assert first.status()["daemon"]["requests"]["writes"] >= 2, "the leader applied and corrected"
        assert follower.status()["daemon"]["requests"]["writes"] == 0, "the follower never wrote"
        assert not follower.logged("drift corrected")

        # the leader crashes without releasing: the follower takes over after the lease duration
        first.kill()
        t0 = time.monotonic()
        wait_until("the follower to lead", lambda: follower.status()["daemon"]["leader"], 10.0, 0.1)
        print(f"takeover after a crash: {time.monotonic() - t0:.2f} s (lease duration 4 s)")
        wait_until("the new leader's first sync", lambda: follower.get("/readyz")[1] == b"ok\n", 5.0)
        edit_replicas(kube, namespace, 9)
        wait_until("the new leader to correct the edit", lambda: replicas(kube, namespace) == 2, 2.0)
        # the line is logged once the write has answered: a poll a few ms a look can see the write first
        wait_until("the correction logged", lambda: follower.logged("drift corrected"), 1.0)
        assert follower.logged("drift corrected")

        # SIGTERM releases the Lease: holder emptied, exit 0
        assert follower.stop() == 0
        assert lease(kube, namespace, name)["spec"].get("holderIdentity", "") == ""
        assert follower.logged("stopped")
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.stop()
