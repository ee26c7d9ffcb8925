"""A fleet replica that cannot do its part says so: a shard no replica holds is named in the GitSyncs' status,
`gitops-sync get` and /status; a replica that cannot write its Leases is not ready (real API server)."""

from __future__ import annotations

import json
from pathlib import Path

from gitops_sync.daemon.fleet.gitsync import shard_of
from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_fleet import condition, crd, fleet_args, gitsync, gs_cli

__all__ = ["crd"]  # the module fixture, used by name

ELECT = ["--leader-elect", "--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"]


def test_a_shard_no_replica_holds_is_named_instead_of_first_sync_in_progress(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    names = [f"s{i}" for i in range(8)]
    shards = {n: shard_of(namespace, n, 4) for n in names}
    repo = GitRepo(tmp_path / "r", {"cm.yaml": configmap("cm", {"v": "1"})})
    kube.kubectl("apply", "-f", "-", input="---\n".join(gitsync(n, namespace, repo.path, path=".") for n in names))
    args = fleet_args(namespace, tmp_path, "--leader-elect-namespace", namespace, *ELECT)
    with Daemon([*args, "--shards", "4", "--max-shards", "2"], kube.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        held = wait_until(
            "two shards held", lambda: len([s for s in d.status()["fleet"]["shards"] if s["held"]]) == 2, 30
        )
        assert held < 30
        doc = d.status()["fleet"]["shards"]
        unheld = sorted(s["shard"] for s in doc if not s["held"])
        # The shards thread looks at the free shards one after the other (and writes the statuses of each one's
        # GitSyncs before it looks at the next): every unheld shard is named vacant shortly, not at once.
        wait_until(
            "every unheld shard named vacant",
            lambda: [s["shard"] for s in d.status()["fleet"]["shards"] if s.get("vacant")] == unheld,
            30,
        )
        orphans = [n for n in names if shards[n] in unheld]
        assert orphans, shards  # 8 names over 4 shards: some land on the two nobody holds

        def named(n: str) -> bool:
            ready = condition(kube, namespace, n, "Ready")
            return ready.get("reason") == "ShardUnheld" and f"no replica holds shard {shards[n]}" in ready["message"]

        wait_until("the unheld shards named", lambda: all(named(n) for n in orphans), 30)
        assert all(condition(kube, namespace, n, "Stalled")["status"] == "True" for n in orphans)
        rows = {r["name"]: r for r in json.loads(gs_cli(kube, "get", "-n", namespace, "-o", "json").stdout)}
        for n in orphans:
            assert f"no replica holds shard {shards[n]}" in rows[n]["message"], rows[n]
        # A second replica takes the free shards: its GitSyncs become Ready (the vacancy note is overwritten).
        with Daemon([*args, "--shards", "4", "--max-shards", "2"], kube.env, tmp_path / "fleet2.log") as d2:
            d2.wait_ready(60)
            for n in orphans:
                kube.kubectl("wait", "--for=condition=Ready", f"gitsync/{n}", "-n", namespace, "--timeout=60s")
            assert not [s for s in d.status()["fleet"]["shards"] if s.get("vacant")]


def test_a_replica_that_cannot_write_its_leases_is_not_ready(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    missing = f"{namespace}-absent"[:63]  # a Lease namespace that does not exist: every create is a 404
    args = fleet_args(namespace, tmp_path, "--leader-elect-namespace", missing, *ELECT)
    with Daemon(args, kube.env, tmp_path / "fleet.log") as d:

        def unready() -> bytes:
            try:
                code, body = d.get("/readyz")
            except OSError:  # not listening yet
                return b""
            return body if code == 503 and b"cannot write Lease" in body else b""

        wait_until("/readyz 503 naming the Lease", unready, 30)
        assert f"{missing}/gitops-sync-shard-0".encode() in unready(), unready()
        assert d.status()["fleet"]["shards"][0]["error"]
