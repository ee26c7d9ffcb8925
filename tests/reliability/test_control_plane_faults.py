"""The control plane fails under a running `sync` or daemon: API server killed or stopped, etcd restarted,
watch connections cut by a proxy, the daemon itself SIGKILLed mid-pass. Nothing may be lost (uids of
objects still in Git survive, no delete the API server audited except a prune Git asked for) and the
next run converges. One private cluster serves the whole module (each test its own namespace); the
rows go to RELIABILITY.md through the `reliability` recorder.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.daemon_support import Daemon, GitRepo, deployment, wait_until
from tests.reliability.faults import PrivateCluster
from tests.reliability.proxy import CuttingProxy
from tests.reliability.workload import (
    PART_OF,
    audit_deletes,
    audit_writes,
    cm_version,
    configmap_files,
    count_configmaps,
    drift_configmap,
    finish,
    inventory,
    kubectl,
    live_objects,
    no_traceback,
    run_sync,
    service,
    service_account,
    size,
    start_sync,
)

if TYPE_CHECKING:
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

API = "kube-apiserver"


def _namespace(cluster: PrivateCluster, name: str) -> str:
    kubectl(cluster.env, "create", "namespace", name)
    return name


def _audit(cluster: PrivateCluster) -> Path:
    return cluster.state_dir / "logs" / "audit.log"


def _daemon(cluster: PrivateCluster, repo: GitRepo, ns: str, log: Path, *extra: str) -> Daemon:
    return Daemon(
        ["--repo", str(repo.path), "-n", ns, "--name", "fault-inv", "--interval", "3600", *extra], cluster.env, log
    )


def _replicas(env: dict[str, str], ns: str, name: str = "web") -> int:
    r = kubectl(env, "get", "deployment", name, "-n", ns, "-o", "jsonpath={.spec.replicas}", check=False)
    return int(r.stdout) if r.returncode == 0 and r.stdout.strip() else -1


def _metric_sum(d: Daemon, name: str) -> float:
    """Sum of every sample of one metric family (all label values)."""
    _, body = d.get("/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _uids_kept(
    before: dict[tuple[str, str], object], after: dict[tuple[str, str], object], keys: set[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Keys whose object is missing or was replaced (another uid): both mean something was lost."""
    return [k for k in sorted(keys) if k not in after or after[k].uid != before[k].uid]  # type: ignore[attr-defined]


def _outage_shown(status: dict[str, Any]) -> str:
    """What /status says about an unreachable API server: a pass or source error, or a failed watch."""
    daemon = status["daemon"]
    failed_watches = [f"watch {w['resource']}: {w['error']}" for w in daemon["watches"] if w["state"] == "error"]
    return next(iter([*status["errors"], *failed_watches, daemon.get("lastPass", {}).get("error", "")]), "")


# -- 1. the API server dies in the middle of `sync --prune` ------------------------------------------


def test_api_server_killed_mid_sync_prune(
    private_cluster: PrivateCluster, reliability: Recorder, tmp_path: Path
) -> None:
    """SIGKILL, not SIGTERM: a SIGTERMed server drains for up to 15 s and keeps serving the connections it
    has, so the sync may well finish first; a kill lands exactly where the test puts it."""
    env, ns, audit = private_cluster.env, _namespace(private_cluster, "sync-outage"), _audit(private_cluster)
    total, leaving = 260, 20
    repo = GitRepo(tmp_path / "repo", configmap_files(total, "v1"))
    first = run_sync(env, str(repo.path), ns, "--prune")
    assert first.code == 0, first.stderr[-2000:]
    assert first.summary["create"] == total
    before = live_objects(env, ns)
    assert len(before) == total + 1  # and the inventory parent

    # Every object changes and 20 leave Git: the sync has 240 writes to make, then 20 prunes.
    change = configmap_files(total - leaving, "v2")
    change.update({f"cm/cm-{i:03d}.json": None for i in range(total - leaving, total)})
    repo.commit(change, "v2: 240 changed, 20 removed")
    offset = size(audit)
    started = time.monotonic()
    proc = start_sync(env, str(repo.path), ns, "--prune", "--concurrency", "2")
    wait_until("the sync to have applied some objects", lambda: audit_writes(audit, ns, offset) >= 30, 120, 0.005)
    private_cluster.kill(API)
    killed_at = time.monotonic() - started
    applied_when_killed = audit_writes(audit, ns, offset)
    failed = finish(proc, started, timeout=600)
    private_cluster.start(API)

    assert failed.code == 2, (failed.code, failed.stderr[-2000:])
    assert no_traceback(failed.stderr, json.dumps(failed.report)), failed.stderr[-3000:]
    after = live_objects(env, ns)
    assert set(after) == set(before), "objects appeared or disappeared while the API server was away"
    assert not _uids_kept(before, after, set(before)), "an object was deleted (its uid changed)"
    assert audit_deletes(audit, ns, offset) == [], "a delete reached the API server during the failed sync"
    at_v2 = sum(1 for o in after.values() if o.version == "v2")
    assert 0 < at_v2 < total - leaving, f"the kill did not land mid-sync ({at_v2} of {total - leaving} applied)"
    report_errors = [str(e) for e in failed.report.get("errors", [])]

    offset = size(audit)
    second = run_sync(env, str(repo.path), ns, "--prune")
    assert second.code == 0, second.stderr[-2000:]
    assert second.summary["prune"] == leaving
    converged = live_objects(env, ns)
    wanted = {("ConfigMap", f"cm-{i:03d}") for i in range(total - leaving)}
    assert set(converged) == wanted | {("ConfigMap", "fault-inv")}
    assert all(converged[k].version == "v2" for k in wanted)
    assert not _uids_kept(before, converged, wanted)
    assert sorted(audit_deletes(audit, ns, offset)) == [f"configmaps/cm-{i:03d}" for i in range(total - leaving, total)]
    third = run_sync(env, str(repo.path), ns, "--prune")
    assert third.code == 0 and third.writes == 0, (third.code, third.writes)
    assert third.summary["unchanged"] == total - leaving

    reliability.record(
        area="API server",
        fault=f"kube-apiserver SIGKILLed during `sync --prune` of {total} ConfigMaps ({total - leaving} changed, "
        f"{leaving} left Git), after {applied_when_killed} writes; started again afterwards",
        outcome=f"exit 2 in {failed.seconds:.1f} s, no traceback"
        + "".join(f"; report: {e[:100]!r}" for e in report_errors[:2])
        + f"; next `sync --prune` exit 0, pruned {leaving}; third sync 0 writes",
        checked=f"all {total} objects kept their uid through the failed sync (the {leaving} prune candidates too), "
        "0 deletes audited until the converging sync, which deleted exactly the 20 that left Git",
        figures=f"killed {killed_at:.1f} s in, {at_v2}/{total - leaving} applied; failed sync {failed.seconds:.1f} s; "
        f"converging sync {second.seconds:.1f} s; no-op sync {third.seconds:.1f} s, {third.writes} writes",
    )


# -- 2. the API server stops under the daemon while a commit removes one object -----------------------


def test_api_server_stopped_under_daemon_with_prune(
    private_cluster: PrivateCluster, reliability: Recorder, tmp_path: Path
) -> None:
    env, ns, audit = private_cluster.env, _namespace(private_cluster, "daemon-outage"), _audit(private_cluster)
    files: dict[str, str | None] = {
        **configmap_files(40, "v1"),
        "web.json": deployment("web", 2),
        "svc.json": service("web"),
    }
    repo = GitRepo(tmp_path / "repo", files)
    with _daemon(private_cluster, repo, ns, tmp_path / "daemon.log", "--prune") as d:
        d.wait_ready(60)
        before = live_objects(env, ns)
        offset = size(audit)
        private_cluster.stop(API)
        down = time.monotonic()
        sha = repo.commit(
            {"cm/cm-000.json": None, **configmap_files(10, "v2", start=1), "web.json": deployment("web", 3)},
            "remove cm-000, change 11 objects",
        )
        # The daemon sees the commit (file events) while the API server is away, and reports it.
        wait_until("the daemon to report the outage", lambda: _outage_shown(d.status()), 30, 0.2)
        shown = _outage_shown(d.status())
        assert d.get("/healthz")[0] == 200
        time.sleep(max(0.0, 8 - (time.monotonic() - down)))
        private_cluster.start(API)
        up, up_wall = time.monotonic(), time.time()

        def converged() -> bool:
            return count_configmaps(env, ns) == 39 and count_configmaps(env, ns, "v2") == 10 and _replicas(env, ns) == 3

        took = wait_until("the daemon to converge after the API server came back", converged, 120, 0.2)
        wait_until("/status on the new revision", lambda: d.status()["daemon"]["appliedRevision"] == sha, 30, 0.2)
        after = live_objects(env, ns)
        assert set(before) - set(after) == {("ConfigMap", "cm-000")}
        assert not _uids_kept(before, after, set(before) - {("ConfigMap", "cm-000")})
        assert audit_deletes(audit, ns, offset) == ["configmaps/cm-000"]
        pruned = d.logged("pruned")
        assert len(pruned) == 1 and "cm-000" in pruned[0]["object"], pruned
        when = datetime.datetime.fromisoformat(pruned[0]["timestamp"]).timestamp()
        assert when >= up_wall - 0.5, "pruned before the API server was back"
        assert d.stop() == 0
    assert no_traceback((tmp_path / "daemon.log").read_text())

    reliability.record(
        area="API server",
        fault="kube-apiserver stopped (SIGTERM) for 8 s under `run --prune`; meanwhile a commit removes 1 of 42 "
        "objects and changes 11",
        outcome="daemon stays healthy, /status reports the outage; after the restart it applies the commit "
        "and only then prunes the removed object",
        checked="the only delete audited is the object that left Git, logged as pruned after the API server "
        "was back; the other 41 objects kept their uid; no traceback in the daemon's log",
        figures=f"converged {took:.1f} s after /readyz answered (down {up - down:.1f} s); "
        f"/status showed: {shown[:80]!r}",
    )


# -- 3. watch connections cut mid-stream by a proxy ---------------------------------------------------


def test_watch_connections_cut_by_proxy(private_cluster: PrivateCluster, reliability: Recorder, tmp_path: Path) -> None:
    env, ns = private_cluster.env, _namespace(private_cluster, "watch-cut")
    text = private_cluster.kubeconfig.read_text()
    m = re.search(r"server: https://127\.0\.0\.1:(\d+)", text)
    assert m, "the private kubeconfig names no loopback server"
    cuts, corrections = 4, []
    # One Deployment and one ConfigMap per cut: the same field taken three times is a fight the daemon
    # yields (--fight-threshold), and this test is about connections, not fights.
    webs = {f"web-{i}.json": deployment(f"web-{i}", 2) for i in range(cuts)}
    repo = GitRepo(tmp_path / "repo", {**configmap_files(10, "v1"), **webs})
    with CuttingProxy(("127.0.0.1", int(m.group(1))), lifetime=300) as proxy:
        proxied = tmp_path / "proxied.kubeconfig"
        proxied.write_text(text.replace(m.group(0), f"server: https://{proxy.address}"))
        with _daemon(private_cluster, repo, ns, tmp_path / "daemon.log", "--kubeconfig", str(proxied)) as d:
            d.wait_ready(60)
            restarts_before = _metric_sum(d, "gitops_sync_watch_restarts_total")
            relists_before = len(d.logged("watch failed; relisting after a backoff"))
            for i in range(cuts):
                time.sleep(3)
                assert proxy.cut_all() >= 2, "no live connections to cut (the watches should be open)"
                # Drift at once, while the watches are down or relisting: only a relist can show it.
                web, cm = f"web-{i}", f"cm-00{i}"
                kubectl(env, "scale", f"deployment/{web}", "--replicas=5", "-n", ns)
                drift_configmap(env, ns, cm)
                took = wait_until(
                    f"drift corrected after cut {i + 1}",
                    lambda web=web, cm=cm: _replicas(env, ns, web) == 2 and cm_version(env, ns, cm) == "v1",
                    60,
                    0.1,
                )
                corrections.append(took)
            wait_until(
                "every watch synced again",
                lambda: all(w["state"] == "synced" for w in d.status()["daemon"]["watches"]),
                30,
                0.2,
            )
            restarts = _metric_sum(d, "gitops_sync_watch_restarts_total") - restarts_before
            relists = len(d.logged("watch failed; relisting after a backoff")) - relists_before
            assert restarts >= cuts, f"only {restarts} watch restarts counted for {cuts} cuts"
            assert relists >= cuts, f"only {relists} relists logged for {cuts} cuts"
            assert d.ready()
            writes = d.status()["daemon"]["requests"]["writes"]
            time.sleep(2)
            assert d.status()["daemon"]["requests"]["writes"] == writes, "still writing after convergence"
            assert d.stop() == 0
        accepted, cut = proxy.accepted, proxy.cut
    assert no_traceback((tmp_path / "daemon.log").read_text())

    reliability.record(
        area="API server",
        fault=f"every connection of the daemon to the API server reset by a TCP proxy, {cuts} times 3 s apart, "
        "with `kubectl scale` and `kubectl edit` drift right after each cut",
        outcome="each cut: the watches fail, relist and resync; every drift corrected; the watch-restart "
        "metric counts the restarts; no write after convergence",
        checked="every drift corrected to Git; the daemon stays ready; no traceback in its log",
        figures=f"drift corrected {min(corrections):.2f} to {max(corrections):.2f} s after the edit; "
        f"{cut} connections cut of {accepted} accepted; +{restarts:.0f} watch restarts, {relists} relists",
    )


# -- 4. etcd restarted under the daemon ----------------------------------------------------------------


def test_etcd_restarted_under_daemon(private_cluster: PrivateCluster, reliability: Recorder, tmp_path: Path) -> None:
    env, ns = private_cluster.env, _namespace(private_cluster, "etcd-restart")
    repo = GitRepo(tmp_path / "repo", {**configmap_files(20, "v1"), "web.json": deployment("web", 2)})
    with _daemon(private_cluster, repo, ns, tmp_path / "daemon.log") as d:
        d.wait_ready(60)
        before = live_objects(env, ns)
        private_cluster.stop("etcd")
        t_down = time.monotonic()
        repo.commit(configmap_files(1, "v2", start=5), "committed while etcd is down")
        time.sleep(5)
        private_cluster.start("etcd")
        back = time.monotonic()
        assert d.get("/healthz")[0] == 200
        commit_took = wait_until(
            "the commit made during the outage applied", lambda: cm_version(env, ns, "cm-005") == "v2", 120, 0.2
        )
        t0 = time.monotonic()
        kubectl(env, "scale", "deployment/web", "--replicas=7", "-n", ns)
        drift_configmap(env, ns, "cm-010")
        wait_until(
            "drift after the restart corrected",
            lambda: _replicas(env, ns) == 2 and cm_version(env, ns, "cm-010") == "v1",
            60,
            0.05,
        )
        drift_took = time.monotonic() - t0
        after = live_objects(env, ns)
        assert set(after) == set(before)
        assert not _uids_kept(before, after, set(before))
        assert d.stop() == 0
    assert no_traceback((tmp_path / "daemon.log").read_text())

    reliability.record(
        area="etcd",
        fault="etcd stopped under `run`, 5 s wait, started again (a commit made while it was down)",
        outcome="the daemon stays healthy, applies the commit after the restart, and corrects drift made "
        "afterwards (`kubectl scale`, `kubectl edit`)",
        checked=f"all {len(before)} objects kept their uid; every drift corrected; no traceback in the log",
        figures=f"etcd down {back - t_down:.1f} s; commit applied {commit_took:.2f} s after /readyz; "
        f"drift corrected {drift_took:.2f} s after kubectl",
    )


# -- 5. the daemon SIGKILLed mid-pass -----------------------------------------------------------------


def test_daemon_killed_mid_pass(private_cluster: PrivateCluster, reliability: Recorder, tmp_path: Path) -> None:
    env, ns, audit = private_cluster.env, _namespace(private_cluster, "daemon-kill"), _audit(private_cluster)
    repo = GitRepo(
        tmp_path / "repo", {**configmap_files(20, "v1"), "web.json": deployment("web", 2), "svc.json": service("web")}
    )
    with _daemon(private_cluster, repo, ns, tmp_path / "first.log", "--prune") as d:
        d.wait_ready(60)
        before = live_objects(env, ns)
        offset = size(audit)
        # One commit: 230 new ConfigMaps, 5 ServiceAccounts (a kind the inventory did not record yet),
        # the 20 existing ConfigMaps changed.
        repo.commit(
            {**configmap_files(250, "v2"), **{f"sa/sa-{i}.json": service_account(f"sa-{i}") for i in range(5)}},
            "250 ConfigMaps and a new kind",
        )
        wait_until("the pass to be under way", lambda: audit_writes(audit, ns, offset) >= 40, 60, 0.005)
        d.kill()
    created_when_killed = count_configmaps(env, ns)
    assert created_when_killed < 250, "the kill did not land mid-pass"

    with _daemon(private_cluster, repo, ns, tmp_path / "second.log", "--prune") as d2:
        ready = d2.wait_ready(120)
        took = wait_until("every object in Git present", lambda: count_configmaps(env, ns, "v2") == 250, 60, 0.2)
        after = live_objects(env, ns)
        wanted = (
            {("ConfigMap", f"cm-{i:03d}") for i in range(250)}
            | {("ServiceAccount", f"sa-{i}") for i in range(5)}
            | {("Deployment", "web"), ("Service", "web")}
        )
        assert wanted <= set(after), sorted(wanted - set(after))[:5]
        set_id, kinds = inventory(env, ns)
        unlabelled = [k for k in wanted if after[k].labels.get(PART_OF) != set_id]
        assert not unlabelled, f"members without the ApplySet label: {unlabelled[:5]}"
        assert {"ConfigMap", "Deployment.apps", "Service", "ServiceAccount"} <= kinds, kinds
        assert not _uids_kept(before, after, set(before)), "an object that was there before the kill was replaced"
        assert audit_deletes(audit, ns, offset) == []
        assert d2.stop() == 0
    assert no_traceback((tmp_path / "second.log").read_text())

    reliability.record(
        area="daemon",
        fault=f"daemon SIGKILLed mid-pass (a commit of 230 new ConfigMaps, 20 changed, a new kind; "
        f"{created_when_killed - 20} of the 230 created at the kill) and started again",
        outcome="the new daemon gets ready and completes the pass",
        checked=f"all {len(wanted)} objects in Git present and labelled as ApplySet members; the parent records "
        "every group-kind; no uid changed, 0 deletes",
        figures=f"ready {ready:.1f} s after start; all present {took:.1f} s later",
    )
