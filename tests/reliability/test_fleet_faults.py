"""The fleet controller (`run` without --repo) under faults: API server stopped mid-reconcile, one source's
Git broken or unreachable, a GitSync suspended while its pass runs, a shard replica frozen and thawed, the
GitSync watch cut and the API server restarted. Nothing is lost (no delete the API server audited but a
prune Git asked for, by one replica only), every other source keeps converging, and the status says so.
One private cluster for the module (faults on the API server must never touch the shared one).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.daemon_support import Daemon, GitRepo, wait_established, wait_until
from tests.reliability.faults import PrivateCluster
from tests.reliability.proxy import CuttingProxy
from tests.reliability.workload import audit_deletes, audit_events, audit_requests, configmap, kubectl, size

if TYPE_CHECKING:
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD = REPO_ROOT / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"
API = "kube-apiserver"


@pytest.fixture(scope="module")
def cluster(private_cluster: PrivateCluster) -> Iterator[PrivateCluster]:
    """The private cluster with the GitSync CRD installed."""
    env = private_cluster.env
    kubectl(env, "apply", "--server-side", "-f", str(CRD))
    wait_established(env, "gitsyncs.gitops-sync.io")
    yield private_cluster


def _ns(cluster: PrivateCluster, name: str) -> str:
    kubectl(cluster.env, "create", "namespace", name)
    return name


def _audit(cluster: PrivateCluster) -> Path:
    return cluster.state_dir / "logs" / "audit.log"


def _gitsync(name: str, ns: str, repo: str, **spec: Any) -> str:
    doc = {
        "apiVersion": "gitops-sync.io/v1alpha1",
        "kind": "GitSync",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"repository": repo, "interval": "1s", "prune": True, **spec},
    }
    return json.dumps(doc) + "\n"


def _apply(env: dict[str, str], *docs: str, check: bool = True) -> bool:
    p = subprocess.run(
        ["kubectl", "apply", "-f", "-"], input="---\n".join(docs), env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0 or not check, p.stderr
    return p.returncode == 0


def _files(prefix: str, n: int, version: str) -> dict[str, str]:
    return {f"{prefix}-{i}.json": configmap(f"{prefix}-{i}", version) for i in range(n)}


def _uids(env: dict[str, str], ns: str) -> dict[str, str]:
    r = kubectl(env, "get", "configmaps", "-n", ns, "-l", "suite=fault", "-o", "json", "--request-timeout=5s")
    return {i["metadata"]["name"]: i["metadata"]["uid"] for i in json.loads(r.stdout)["items"]}


def _versions(env: dict[str, str], ns: str) -> dict[str, str]:
    r = kubectl(
        env, "get", "configmaps", "-n", ns, "-l", "suite=fault", "-o", "json", "--request-timeout=5s", check=False
    )
    if r.returncode != 0:
        return {}
    return {i["metadata"]["name"]: (i.get("data") or {}).get("version", "") for i in json.loads(r.stdout)["items"]}


def _status(env: dict[str, str], ns: str, name: str) -> dict[str, Any]:
    r = kubectl(env, "get", "gitsync", name, "-n", ns, "-o", "json", "--request-timeout=5s", check=False)
    if r.returncode != 0:
        return {}
    status: dict[str, Any] = json.loads(r.stdout).get("status") or {}
    return status


def _ready(env: dict[str, str], ns: str, name: str) -> dict[str, Any]:
    return next((c for c in _status(env, ns, name).get("conditions") or [] if c["type"] == "Ready"), {})


def _all_ready(env: dict[str, str], ns: str, names: list[str], revisions: dict[str, str] | None = None) -> bool:
    for n in names:
        st = _status(env, ns, n)
        ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
        if ready.get("status") != "True":
            return False
        if revisions and st.get("lastAppliedRevision") != revisions[n]:
            return False
    return True


def _rows(d: Daemon) -> dict[str, dict[str, Any]]:
    return {row["name"].split("/", 1)[1]: row for row in d.status()["fleet"]["sources"]}


def _fleet(cluster: PrivateCluster, ns: str, log: Path, *extra: str, kubeconfig: Path | None = None) -> Daemon:
    # Every test keeps its repositories and logs in its tmp_path: the local paths its GitSyncs may name.
    args = ["--watch-namespace", ns, "--workers", "2", "--allow-local-repository", str(log.parent), *extra]
    if kubeconfig is not None:
        args += ["--kubeconfig", str(kubeconfig)]
    return Daemon(args, cluster.env, log)


# -- 1. the API server stops while several GitSyncs reconcile ---------------------------------------------


def test_fleet_api_server_stopped_mid_reconcile(cluster: PrivateCluster, reliability: Recorder, tmp_path: Path) -> None:
    env, ns, audit = cluster.env, _ns(cluster, "fleet-down"), _audit(cluster)
    names = ["a", "b", "c"]
    n = 40
    repos = {s: GitRepo(tmp_path / s, _files(s, n, "v1")) for s in names}
    _apply(env, *(_gitsync(s, ns, str(repos[s].path)) for s in names))
    with _fleet(cluster, ns, tmp_path / "fleet.log", "--concurrency", "1") as d:
        d.wait_ready(60)
        wait_until("every GitSync Ready", lambda: _all_ready(env, ns, names), 120, 0.3)
        before = _uids(env, ns)
        assert len(before) == 3 * n
        offset = size(audit)
        # Every source gets a new version of all its objects; `c` also drops c-39: passes start ...
        sha = {s: repos[s].commit(_files(s, n, "v2")) for s in names}
        sha["c"] = repos["c"].commit({f"c-{n - 1}.json": None})
        wait_until(
            "the passes to be writing",
            lambda: len(audit_requests(audit, ns, offset, ("patch", "create", "update"))) >= 10,
            60,
            0.02,
        )
        # ... and the API server stops under them.
        t0 = time.monotonic()
        cluster.stop(API)
        try:
            # Meanwhile Git moves: `a` drops a-2 (a prune Git asks for) and changes a-0 again.
            sha["a"] = repos["a"].commit({"a-0.json": configmap("a-0", "v3"), "a-2.json": None})
            # While the API server is away, /status must not say "Ready" from before the outage.
            stale = wait_until(
                "every source's row to stop saying Ready",
                lambda: all(r["ready"] != "True" for r in _rows(d).values()),
                30,
                0.2,
            )
            rows = _rows(d)
            assert all(r["reason"] == "ClusterUnreachable" for r in rows.values()), rows
            assert all("API server" in r["message"] for r in rows.values()), rows
            assert d.get("/healthz")[0] == 200
            time.sleep(3)  # polls happen (interval 1s) and find the new commits: still nothing may break
        finally:
            cluster.start(API)
        down_for = time.monotonic() - t0
        took = wait_until("every GitSync Ready on its new revision", lambda: _all_ready(env, ns, names, sha), 120, 0.3)
        versions = _versions(env, ns)
        gone = {"a-2", f"c-{n - 1}"}
        want = {k: "v2" for k in before if k not in gone} | {"a-0": "v3"}
        assert versions == want, {k: v for k, v in versions.items() if want.get(k) != v}
        after = _uids(env, ns)
        kept = {k: v for k, v in before.items() if k not in gone}
        assert {k: after.get(k) for k in kept} == kept, "an object still in Git was deleted or replaced"
        deletes = audit_deletes(audit, ns, offset)
        assert sorted(deletes) == sorted(f"configmaps/{k}" for k in gone), deletes
        rows = _rows(d)
        assert all(r["ready"] == "True" for r in rows.values()), rows
        assert d.stop() == 0
    reliability.record(
        area="fleet",
        fault=f"kube-apiserver stopped for {down_for:.0f} s while a fleet controller's passes update 3 GitSyncs x "
        f"{n} ConfigMaps (prune, one dropping an object); meanwhile another commit drops one more",
        outcome="/status rows say Ready=Unknown, reason ClusterUnreachable (not the Ready from before); after the "
        "start every GitSync converged and its status says Ready on the new revision",
        checked="the only deletes audited are the 2 objects that left Git; every other object kept its uid and "
        "reached its version in Git",
        figures=f"rows stopped saying Ready {stale:.1f} s after the stop began; all converged {took:.1f} s after "
        "the API server's /readyz",
    )


# -- 2. one source's Git is broken or unreachable --------------------------------------------------------


def _black_hole() -> socket.socket:
    """A port that accepts TCP connections (the kernel does) and never answers: a hung Git server."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def test_fleet_one_broken_source_blocks_nothing(cluster: PrivateCluster, reliability: Recorder, tmp_path: Path) -> None:
    env, ns, audit = cluster.env, _ns(cluster, "fleet-bad"), _audit(cluster)
    good = ["good1", "good2"]
    repos = {n: GitRepo(tmp_path / n, _files(n, 2, "v1")) for n in [*good, "broken", "gone"]}
    hole = _black_hole()
    hung = f"http://127.0.0.1:{hole.getsockname()[1]}/hung.git"
    try:
        _apply(env, *(_gitsync(n, ns, str(repos[n].path)) for n in repos))
        with _fleet(cluster, ns, tmp_path / "fleet.log") as d:
            d.wait_ready(60)
            wait_until("every GitSync Ready", lambda: _all_ready(env, ns, list(repos)), 90, 0.3)
            before = _uids(env, ns)
            offset = size(audit)
            # Faults: broken YAML in one, the remote of another gone, two new sources on a hung server.
            repos["broken"].commit({"broken-1.json": None, "bad.yaml": "kind: ConfigMap\nmetadata: {name: [x\n"})
            (tmp_path / "gone").rename(tmp_path / "gone-moved")
            _apply(env, _gitsync("hung1", ns, hung), _gitsync("hung2", ns, hung))  # as many as --workers
            time.sleep(2)  # let the faults bite (polls every second) before the good ones move
            sha = {n: repos[n].commit({f"{n}-0.json": configmap(f"{n}-0", "v2")}) for n in good}
            took = wait_until(
                "the healthy sources converged beside the broken ones",
                lambda: _all_ready(env, ns, good, sha) and all(_versions(env, ns).get(f"{n}-0") == "v2" for n in good),
                90,
                0.2,
            )
            print(f"healthy sources converged {took:.1f} s after their commits")
            # Two hung sources hold both --workers for the git timeout (60 s a command): the healthy ones
            # must not wait for that (a pass slower than 10 s stops counting against --workers).
            assert took < 30, f"healthy sources waited {took:.1f} s behind the hung ones"
            wait_until("broken to report", lambda: _ready(env, ns, "broken").get("status") == "False", 30, 0.3)
            wait_until("gone to report", lambda: _ready(env, ns, "gone").get("status") == "False", 30, 0.3)
            broken, gone = _ready(env, ns, "broken"), _ready(env, ns, "gone")
            assert broken["reason"] == "SourceFailed" and "bad.yaml" in broken["message"], broken
            assert gone["reason"] == "SourceFailed" and "gone" in gone["message"], gone
            assert _status(env, ns, "broken")["conditions"][2]["status"] == "True"  # Stalled
            # A second round: the healthy ones still move on time while the faults persist.
            sha = {n: repos[n].commit({f"{n}-1.json": configmap(f"{n}-1", "v3")}) for n in good}
            again = wait_until("the second round converged", lambda: _all_ready(env, ns, good, sha), 90, 0.2)
            assert again < 30, f"healthy sources waited {again:.1f} s behind the hung ones"
            after = _uids(env, ns)
            assert {k: after.get(k) for k in before} == before, "an object of a failing source was pruned"
            assert audit_deletes(audit, ns, offset) == []
            assert d.stop() == 0
    finally:
        hole.close()
    reliability.record(
        area="fleet",
        fault="one GitSync's commit has broken YAML (and drops an object), another's repository disappears, a "
        "third and fourth point at a Git server that accepts and never answers (as many as --workers 2)",
        outcome="broken and gone: Ready=False SourceFailed, Stalled=True, the message names the file / the "
        "repository; the healthy GitSyncs converge on new commits on time, twice",
        checked="no delete audited (the dropped object of the broken source is kept); every uid kept",
        figures=f"healthy sources converged {took:.1f} s and {again:.1f} s after their commits (interval 1s)",
    )


# -- 3. a GitSync suspended, then deleted, while its pass is in flight ------------------------------------


def _writes_after_suspend(audit: Path, ns: str, offset: int, grace: float) -> list[str]:
    """ConfigMap writes the API server completed more than `grace` seconds after it took kubectl's suspend."""
    from datetime import datetime

    events = audit_events(audit, ns, offset, ("create", "patch", "update", "delete"))

    def at(ev: dict[str, Any]) -> float:
        return datetime.fromisoformat(ev["stageTimestamp"]).timestamp()

    suspends = [
        at(ev)
        for ev in events
        if ev["objectRef"].get("resource") == "gitsyncs"
        and ev["verb"] == "patch"
        and "kubectl" in ev.get("userAgent", "")
    ]
    assert suspends, "the suspend patch is not in the audit log"
    return [
        f"{ev['verb']} {ev['objectRef'].get('name')}"
        for ev in events
        if ev["objectRef"].get("resource") == "configmaps" and at(ev) > suspends[0] + grace
    ]


def test_fleet_suspend_and_delete_in_flight(cluster: PrivateCluster, reliability: Recorder, tmp_path: Path) -> None:
    env, ns, audit = cluster.env, _ns(cluster, "fleet-flight"), _audit(cluster)
    many = GitRepo(tmp_path / "many", _files("m", 1, "v1"))
    other = GitRepo(tmp_path / "other", _files("o", 2, "v1"))
    _apply(env, _gitsync("many", ns, str(many.path)), _gitsync("other", ns, str(other.path)))
    with _fleet(cluster, ns, tmp_path / "fleet.log", "--concurrency", "1") as d:
        d.wait_ready(60)
        wait_until("both Ready", lambda: _all_ready(env, ns, ["many", "other"]), 90, 0.3)
        others = {k: v for k, v in _uids(env, ns).items() if k.startswith("o-")}
        offset = size(audit)
        n = 150
        many.commit(_files("m", n, "v2"))  # a long pass: 150 creates, one at a time
        wait_until(
            "the pass to be writing", lambda: len(audit_requests(audit, ns, offset, ("create", "patch"))) >= 5, 60
        )
        kubectl(env, "patch", "gitsync", "many", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        time.sleep(5)
        # The fence closes when the controller's watch shows the suspend: writes sent until then complete.
        # At a few ms per apply that can be a dozen, so the measure is time, not a count: the pass must not go
        # on writing for seconds after the API server took the suspend.
        after_suspend = _writes_after_suspend(audit, ns, offset, grace=0.0)
        late = _writes_after_suspend(audit, ns, offset, grace=1.0)
        assert late == [], f"{len(late)} ConfigMap writes more than 1 s after the suspend: {late[:5]}"
        created = len([k for k in _uids(env, ns) if k.startswith("m-")])
        assert created < n, "the whole pass ran although the GitSync was suspended in the middle"
        # Deleted while suspended: docs/fleet.md "Suspended means write nothing, deletion included".
        mine = {k: v for k, v in _uids(env, ns).items() if k.startswith("m-")}
        kubectl(env, "delete", "gitsync", "many", "-n", ns, "--timeout=60s", timeout=70)
        time.sleep(2)
        left = _uids(env, ns)
        assert {k: left.get(k) for k in mine} == mine, "a suspended GitSync's deletion pruned its objects"
        assert {k: left.get(k) for k in others} == others, "another source's object was touched"
        assert audit_requests(audit, ns, offset, ("delete",)) == []
        assert d.stop() == 0
    reliability.record(
        area="fleet",
        fault=f"a GitSync suspended while its pass creates {n} ConfigMaps one at a time, then deleted",
        outcome=f"writes stop within 1 s of the suspend ({len(after_suspend)} completed after it; "
        f"{created} of {n} created); "
        "the deletion leaves its objects in place as the README says for suspended sources",
        checked="no delete audited; the other GitSync's objects kept their uids",
        figures=f"{len(after_suspend)} writes completed after the suspend",
    )


# -- 4. a shard's replica frozen, another takes the shard, the first thawed ---------------------------------


def _held(d: Daemon) -> list[int]:
    return [s["shard"] for s in d.status()["fleet"]["shards"] if s["held"]]


def test_fleet_frozen_replica_loses_its_shards(cluster: PrivateCluster, reliability: Recorder, tmp_path: Path) -> None:
    env, ns, audit = cluster.env, _ns(cluster, "fleet-shard"), _audit(cluster)
    names = [f"s{i}" for i in range(4)]
    repos = {n: GitRepo(tmp_path / n, _files(n, 2, "v1")) for n in names}
    _apply(env, *(_gitsync(n, ns, str(repos[n].path)) for n in names))
    shard_args = ["--leader-elect", "--leader-elect-namespace", ns, "--shards", "2"]
    shard_args += ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"]
    a = _fleet(cluster, ns, tmp_path / "a.log", *shard_args, "--leader-elect-identity", "a")
    b: Daemon | None = None
    try:
        a.wait_ready(60)
        wait_until("a to hold both shards", lambda: _held(a) == [0, 1], 30, 0.2)
        wait_until("every GitSync Ready", lambda: _all_ready(env, ns, names), 90, 0.3)
        b = _fleet(cluster, ns, tmp_path / "b.log", *shard_args, "--leader-elect-identity", "b")
        b.wait_ready(60)
        assert _held(b) == []
        offset = size(audit)
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            sha = {n: repos[n].commit({f"{n}-0.json": configmap(f"{n}-0", "v2"), f"{n}-1.json": None}) for n in names}
            took = wait_until("b to converge every source", lambda: _all_ready(env, ns, names, sha), 60, 0.2)
            assert _held(b) == [0, 1]
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        thawed, passes_before = size(audit), len(a.logged("pass"))
        wait_until("a to see it lost its shards", lambda: _held(a) == [], 20, 0.2)
        time.sleep(4)  # a's poller and queued passes run now, with its stale view: none may write
        deletes = audit_deletes(audit, ns, offset)
        assert sorted(deletes) == sorted(f"configmaps/{n}-1" for n in names), deletes
        writes_after_thaw = audit_requests(audit, ns, thawed, ("create", "patch", "update", "delete"))
        assert writes_after_thaw == [], writes_after_thaw
        versions = _versions(env, ns)
        assert versions == {f"{n}-0": "v2" for n in names}, versions
        assert a.logged("shard lost"), a.log_tail()
        assert len(a.logged("pass")) == passes_before, "a ran a pass for a shard it no longer holds"
        # Phase 2: the API server itself frozen (SIGSTOP) longer than the lease under both replicas, while
        # commits drop one more object per source; after SIGCONT both race for the Leases.
        offset = size(audit)
        cluster.freeze(API)
        try:
            sha = {n: repos[n].commit({f"{n}-2.json": configmap(f"{n}-2", "v1"), f"{n}-0.json": None}) for n in names}
            time.sleep(8)
        finally:
            cluster.thaw(API)
        took2 = wait_until("every source converged after the freeze", lambda: _all_ready(env, ns, names, sha), 60, 0.2)
        time.sleep(3)
        deletes = audit_deletes(audit, ns, offset)
        assert sorted(deletes) == sorted(f"configmaps/{n}-0" for n in names), deletes
        # Nothing that left Git in phase 1 came back, not even for a moment (a stale view's "drift").
        revived = [w for w in audit_requests(audit, ns, offset, ("create", "patch", "update")) if w.endswith("-1")]
        assert revived == [], revived
        assert _versions(env, ns) == {f"{n}-2": "v1" for n in names}
        assert sorted(_held(a) + _held(b)) == [0, 1]
        assert b.stop() == 0 and a.stop() == 0
    finally:
        for d in (a, b):
            if d is not None and d.proc.poll() is None:
                os.kill(d.proc.pid, signal.SIGCONT)
                d.stop()
    reliability.record(
        area="fleet",
        fault="replica a (holding both shards of 4 GitSyncs) frozen with SIGSTOP; replica b takes the Leases; "
        "commits drop one object per source; then a is thawed with its stale view; then the API server frozen "
        "(SIGSTOP) 8 s under both replicas (lease 4 s) while commits drop one more object per source",
        outcome="b converged every source; a, thawed, finds its renewal overdue, writes nothing and drops the "
        "shards ('shard lost')",
        checked="each dropped object deleted exactly once (audit log); no write at all in the namespace after "
        "the thaw; every object in Git present at its new version",
        figures=f"b converged all 4 sources {took:.1f} s after the SIGSTOP of a (lease duration 4 s); "
        f"after the API server frozen 8 s under both: converged {took2:.1f} s after SIGCONT, each delete once",
    )


# -- 5. the GitSync watch cut, and the API server restarted -------------------------------------------------


def test_fleet_gitsync_watch_cut_and_api_server_restarted(
    cluster: PrivateCluster, reliability: Recorder, tmp_path: Path
) -> None:
    env, ns = cluster.env, _ns(cluster, "fleet-watch")
    text = cluster.kubeconfig.read_text()
    m = re.search(r"server: https://127\.0\.0\.1:(\d+)", text)
    assert m, "the private kubeconfig names no loopback server"
    repos = {n: GitRepo(tmp_path / n, _files(n, 1, "v1")) for n in ("keep", "drop", "late", "churn", "fresh")}
    _apply(env, _gitsync("keep", ns, str(repos["keep"].path)), _gitsync("drop", ns, str(repos["drop"].path)))
    with CuttingProxy(("127.0.0.1", int(m.group(1))), lifetime=300) as proxy:
        proxied = tmp_path / "proxied.kubeconfig"
        proxied.write_text(text.replace(m.group(0), f"server: https://{proxy.address}"))
        with _fleet(cluster, ns, tmp_path / "fleet.log", kubeconfig=proxied) as d:
            d.wait_ready(60)
            wait_until("both Ready", lambda: _all_ready(env, ns, ["keep", "drop"]), 90, 0.3)
            # Churn while every connection is cut again and again: the controller must end with exactly the set.
            stop = threading.Event()

            def cut() -> None:
                while not stop.wait(0.7):
                    proxy.cut_all()

            cutter = threading.Thread(target=cut, daemon=True)
            cutter.start()
            try:
                kubectl(env, "patch", "gitsync", "drop", "-n", ns, "--type=merge", "-p", '{"spec":{"prune":false}}')
                time.sleep(1)
                kubectl(env, "delete", "gitsync", "drop", "-n", ns, "--timeout=60s", timeout=70)
                _apply(env, _gitsync("late", ns, str(repos["late"].path)))
                for _ in range(3):
                    _apply(env, _gitsync("churn", ns, str(repos["churn"].path)))
                    kubectl(env, "delete", "gitsync", "churn", "-n", ns, "--wait=false", check=False)
                    time.sleep(0.3)
            finally:
                stop.set()
                cutter.join(5)
            # Restart the API server (its watch cache starts afresh) and change the set while the controller
            # is away. The controller relists after every broken watch, so it never resumes from a stale
            # resourceVersion: a 410 cannot arise on reconnect (only as an ERROR event mid-stream, relisted too).
            cluster.stop(API)
            cluster.start(API)
            # Right after a start the API server may answer 503 for the CRD's paths for a moment.
            fresh = _gitsync("fresh", ns, str(repos["fresh"].path))
            wait_until("the GitSync created after the restart", lambda: _apply(env, fresh, check=False), 30, 0.5)
            want = ["fresh", "keep", "late"]
            took = wait_until(
                "the controller's sources to be exactly what the API server has",
                lambda: sorted(_rows(d)) == want and _all_ready(env, ns, want),
                90,
                0.3,
            )
            rows = d.status()["fleet"]["sources"]
            assert len(rows) == len({r["name"] for r in rows}) == 3, rows
            wait_until("churn to be gone", lambda: _status(env, ns, "churn") == {}, 60, 0.5)
            versions = _versions(env, ns)
            assert versions.get("drop-0") == "v1", "the orphaned source's object was removed"
            assert versions.get("keep-0") == "v1" and versions.get("late-0") == "v1", versions
            relists = len(d.logged("GitSync watch failed; relisting")) + len(
                d.logged("GitSync watch expired; relisting")
            )
            assert relists >= 1, d.log_tail()
            assert d.stop() == 0
        cuts = proxy.cut
    reliability.record(
        area="fleet",
        fault=f"every connection of the fleet controller reset {cuts} times while GitSyncs are created, deleted "
        "and re-created; then the API server restarted and the set changed right after",
        outcome="the controller relists and ends with exactly the GitSyncs the API server has, each once, all Ready",
        checked="the deleted prune:false source's object kept; no source lost or duplicated",
        figures=f"exact set and all Ready {took:.1f} s after the API server was back ({relists} relists)",
    )
