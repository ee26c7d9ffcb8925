"""Two runs of one source at once: two CI pipelines, a retried job, CI racing the daemon (issue 20, items 1-2).

Every interleaving is made certain, never hoped for: the test holds the source's Lease itself (as another
run would), runs the other pass from a hook of this one's client (between its plan and its apply, or
between its record and its prune), or starts a daemon that holds the Lease for as long as it runs.
On the shared local control plane (nothing is stopped), each test in its own namespace.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.apply.manager import LiveMap
from gitops_sync.cluster.client import Client
from gitops_sync.cluster.lease import ApiLeaseStore, LeaderConfig, LeaderElector, lease_name
from gitops_sync.conventions import ADOPTED, APPLIED_REVISION, ATTEMPTED_REVISION, PART_OF
from gitops_sync.engine import Engine, PassOptions, SourceOptions, default_inventory_name, load
from gitops_sync.plan.changeset import Action, ChangeSet
from gitops_sync.plan.planner import Target
from tests.conftest import REPO, KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, sa_kubeconfig, wait_until
from tests.integration.test_sync import gs, report
from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster


def _names(kube: KubeCluster, namespace: str, prefix: str) -> dict[str, str]:
    """name -> uid of the ConfigMaps whose name starts with `prefix`."""
    return {
        i["metadata"]["name"]: i["metadata"]["uid"]
        for i in kube.list("configmaps", namespace)
        if i["metadata"]["name"].startswith(prefix)
    }


def _parent(kube: KubeCluster, namespace: str, name: str) -> dict[str, str]:
    return dict(kube.get("configmap", name, namespace)["metadata"].get("annotations") or {})


def _lease(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.find("lease", name, namespace)


class Run:
    """`gitops-sync sync` in a subprocess whose stderr is read as it comes (to see it start waiting)."""

    def __init__(self, kube: KubeCluster, *args: str) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gitops_sync", *args],
            env=kube.env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def said(self, text: str) -> bool:
        if self.proc.poll() is not None:
            self._reader.join(5)
        return any(text in line for line in self.lines)

    def finish(self, timeout: float = 120) -> tuple[int, dict[str, Any], str, float]:
        """(exit code, the JSON report, stderr, seconds from start to exit)."""
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()  # stderr is the reader thread's: communicate() would race it for lines
        self.proc.wait(timeout)
        took = time.monotonic() - self.started
        self._reader.join(5)
        stderr = "".join(self.lines)
        try:
            doc = json.loads(out) if out.strip() else {}
        except ValueError as exc:
            raise AssertionError(
                f"not one JSON document on stdout (rc={self.proc.returncode}):\n{out[:2000]}\n{stderr}"
            ) from exc
        return self.proc.returncode, doc, stderr, took


@contextmanager
def holding(client: Client, namespace: str, inventory: str, identity: str) -> Iterator[LeaderElector]:
    """The source's Lease held (and renewed) by `identity`, as another run or a daemon replica would."""
    store = ApiLeaseStore(client, namespace, lease_name(inventory, namespace, namespace))
    elector = LeaderElector(store, identity, LeaderConfig())
    assert elector.step(), "the test takes the free Lease"
    renewer = threading.Thread(target=elector.run, daemon=True)
    renewer.start()
    try:
        yield elector
    finally:
        elector.stop()
        renewer.join(5)
        elector.release()


def _pass(
    client: Client, repo: Path, revision: str | None, namespace: str, cache: Path, **opts: Any
) -> tuple[Engine, Any, list[Target], PassOptions]:
    """What a pass of this source needs, loaded in-process (the CLI's own code path after the source)."""
    engine = Engine(client)
    options = PassOptions(namespace=namespace, **opts)
    checkout, objects = load(SourceOptions(repo=str(repo), revision=revision, cache_dir=cache))
    return engine, checkout, engine.resolve(objects, options), options


def _sync(repo: Path, namespace: str, cache: Path, *extra: str) -> list[str]:
    return ["sync", "--repo", str(repo), "-n", namespace, "--cache-dir", str(cache), "-o", "json", *extra]


def _row(reliability: Recorder, **row: str) -> None:
    """The RELIABILITY.md row (after the test's assertions), its figures printed for `pytest -s` too."""
    print(f"figures ({reliability.nodeid.rsplit(':', 1)[-1]}): {row.get('figures', '')}")
    reliability.record(**row)


def _ten(prefix: str) -> dict[str, str | None]:
    return {f"{prefix}-{i}.yaml": configmap(f"{prefix}-{i}", {"v": str(i)}) for i in range(10)}


# -- item 1: an older pipeline never undoes (or prunes) a newer one -----------------------------------------


def test_an_older_pipeline_started_while_a_newer_one_runs_is_refused_and_prunes_nothing(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """Issue 20 item 1: `sync --revision B --prune` (B adds 10 ConfigMaps) and, while it runs, `sync
    --revision A --prune` of the same source. Pipeline B is this test: it holds the source's Lease for
    its whole pass, as a sync does; A starts while B still holds it."""
    git = GitRepo(tmp_path / "repo", {"base.yaml": configmap("base", {"v": "1"})})
    a = git.repo.head.commit.hexsha
    b = git.commit(_ten("b"), "B adds ten ConfigMaps")
    cache = tmp_path / "cache"
    inventory = default_inventory_name(str(git.path), None)
    first = gs(kube, *_sync(git.path, namespace, cache, "--revision", a))
    assert first.returncode == 0, first.stderr
    with Client(kube.kubeconfig) as client, holding(client, namespace, inventory, "pipeline-B (test)"):
        engine, checkout, targets, opts = _pass(client, git.path, b, namespace, cache, prune=True)
        cs = engine.run(checkout, targets, opts, apply=True)  # B's pass; B still holds the Lease (its --wait)
        assert not cs.has_errors, cs.to_dict()
        created = _names(kube, namespace, "b-")
        assert len(created) == 10
        older = Run(kube, *_sync(git.path, namespace, cache, "--revision", a, "--prune"))
        code, rep, stderr, took = older.finish()
    assert code == 2, f"the older pipeline must be refused (rc={code}):\n{stderr}"
    assert f"records revision {b[:12]}" in stderr and f"{a[:12]} is its ancestor" in stderr, stderr
    assert rep["errors"] and rep["objects"] == [], rep
    assert _names(kube, namespace, "b-") == created, "every ConfigMap of the newer revision survived (same uids)"
    assert _parent(kube, namespace, inventory)[APPLIED_REVISION] == b
    figures = f"older pipeline refused in {took:.2f} s (CLI start-up included), 0 of 10 objects deleted"
    _row(
        reliability,
        area="concurrent runs",
        fault="sync --revision A --prune started while sync --revision B (a descendant of A, +10 ConfigMaps) "
        "holds the source's Lease",
        outcome="A exits 2 before any write: the inventory records B, a newer commit (A is its ancestor); "
        "--allow-rollback to mean it",
        checked="all 10 ConfigMaps B created survive with their uids; the inventory still records B applied",
        figures=figures,
    )


def test_a_run_that_finds_the_lease_held_waits_naming_the_holder_then_plans_again(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """A retried job: the same commit, one ConfigMap deleted by hand. The run finds the Lease held by
    another run, which re-creates it meanwhile: the waiting run says whom it waits for, and once it has
    the Lease it reads again (its plan said `create`; it is `unchanged` now, nothing adopted)."""
    git = GitRepo(tmp_path / "repo", {**_ten("c"), "base.yaml": configmap("base", {"v": "1"})})
    cache = tmp_path / "cache"
    inventory = default_inventory_name(str(git.path), None)
    assert gs(kube, *_sync(git.path, namespace, cache)).returncode == 0
    kube.kubectl("delete", "configmap", "c-0", "-n", namespace)
    with Client(kube.kubeconfig) as client, holding(client, namespace, inventory, "pipeline-X (test)"):
        waiting = Run(kube, *_sync(git.path, namespace, cache))
        wait_until("the second run to wait for the Lease", lambda: waiting.said("waiting for the Lease"), 60)
        noticed = time.monotonic() - waiting.started
        assert waiting.said("pipeline-X (test) since "), "".join(waiting.lines)
        engine, checkout, targets, opts = _pass(client, git.path, None, namespace, cache)
        assert not engine.run(checkout, targets, opts, apply=True).has_errors  # the holder re-creates c-0
        released = time.monotonic()
    code, rep, stderr, took = waiting.finish()
    after_release = waiting.started + took - released
    assert code == 0, stderr
    entry = next(o for o in rep["objects"] if o["name"] == "c-0")
    assert entry["action"] == "unchanged" and "member" not in entry.get("message", ""), entry
    assert "took the Lease of this source" in stderr, stderr
    live = kube.get("configmap", "c-0", namespace)
    assert ADOPTED not in (live["metadata"].get("annotations") or {})
    lease = _lease(kube, namespace, lease_name(inventory, namespace, namespace))
    assert lease is not None and not lease["spec"].get("holderIdentity"), "released at the end"
    figures = f"waiting announced {noticed:.2f} s after start; done {after_release:.2f} s after the holder released"
    _row(
        reliability,
        area="concurrent runs",
        fault="sync whose first write finds the source's Lease held by another run (which re-creates the object)",
        outcome="waits, logging the holder's identity and since when; takes the Lease when released, plans "
        "again under it (create became unchanged), releases it; exit 0",
        checked="no write before the Lease was held; nothing adopted; the Lease is free afterwards",
        figures=figures,
    )


class _HookAfterFirstWrite(Client):
    """A real client that runs `hook` once, right after its first write to `path` was answered."""

    def __init__(self, kubeconfig: Path, path: str, hook: Callable[[], None]) -> None:
        super().__init__(kubeconfig)
        self.target, self.hook, self.fired = path, hook, False

    def request_status(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        answer = super().request_status(method, path, **kw)
        if method == "PATCH" and path == self.target and not self.fired and not (kw.get("query") or {}).get("dryRun"):
            self.fired = True
            self.hook()
        return answer


def test_a_run_without_the_lease_never_prunes_what_another_pass_recorded_meanwhile(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """A writer that takes no Lease (a daemon without --leader-elect, an older gitops-sync) prunes with
    revision A; between its record and its prune, `sync --revision B` (+10 ConfigMaps) runs to the end.
    The check on the inventory parent (its resourceVersion) keeps A from pruning B's objects."""
    git = GitRepo(tmp_path / "repo", {"base.yaml": configmap("base", {"v": "1"})})
    a = git.repo.head.commit.hexsha
    b = git.commit(_ten("b"), "B adds ten ConfigMaps")
    cache = tmp_path / "cache"
    inventory = default_inventory_name(str(git.path), None)
    newer: list[subprocess.CompletedProcess[str]] = []

    def newer_pipeline() -> None:
        newer.append(gs(kube, *_sync(git.path, namespace, cache, "--revision", b, "--prune")))

    parent_path = f"/api/v1/namespaces/{namespace}/configmaps/{inventory}"
    with _HookAfterFirstWrite(kube.kubeconfig, parent_path, newer_pipeline) as client:
        engine, checkout, targets, opts = _pass(client, git.path, a, namespace, cache, prune=True)
        cs = engine.run(checkout, targets, opts, apply=True)
    assert client.fired and newer and newer[0].returncode == 0, newer[0].stderr if newer else "hook not run"
    assert any("prune skipped: the inventory ConfigMap" in e and "written by another pass" in e for e in cs.errors), (
        cs.errors
    )
    assert [e for e in cs.entries if e.action is Action.PRUNE] == []
    assert len(_names(kube, namespace, "b-")) == 10, "the newer revision's ConfigMaps were not pruned"
    recorded = _parent(kube, namespace, inventory)
    assert recorded[APPLIED_REVISION] == b and recorded[ATTEMPTED_REVISION] == b, "B's record was not written over"
    _row(
        reliability,
        area="concurrent runs",
        fault="a pass holding no Lease (revision A, --prune); sync --revision B (+10 ConfigMaps) runs to the end "
        "between A's inventory record and A's prune",
        outcome="A's prune skipped with an error naming what the inventory now records; A records nothing over it",
        checked="B's 10 ConfigMaps survive; the inventory records B attempted and applied",
        figures="0 of 10 deleted; 1 extra GET of the parent per prune",
    )


# -- item 2: two runs of one commit never orphan their own objects ------------------------------------------


def test_a_create_race_between_two_runs_of_one_commit_leaves_ordinary_members(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """Issue 20 item 2: a retried job (or CI racing the daemon). This pass reads the five new ConfigMaps
    as absent; before it applies, another run of the same commit creates them. Its creates get 409: the
    objects are members of this very ApplySet, so they are applied as members, not adopted, and a later
    prune deletes them when they leave Git (adopted members would only be released: orphaned for ever)."""
    git = GitRepo(tmp_path / "repo", {"base.yaml": configmap("base", {"v": "1"})})
    cache = tmp_path / "cache"
    assert gs(kube, *_sync(git.path, namespace, cache)).returncode == 0
    git.commit({f"r-{i}.yaml": configmap(f"r-{i}", {"v": str(i)}) for i in range(5)}, "five more")
    other: list[subprocess.CompletedProcess[str]] = []

    def read_then_other_run(engine: Engine) -> Callable[[Sequence[Target]], LiveMap]:
        def live_of(ts: Sequence[Target]) -> LiveMap:
            live = engine.manager.fetch_live(ts)  # the real read: the five are absent
            other.append(gs(kube, *_sync(git.path, namespace, cache)))  # the other run creates them now
            return live

        return live_of

    with Client(kube.kubeconfig) as client:
        engine, checkout, targets, opts = _pass(client, git.path, None, namespace, cache)
        t0 = time.monotonic()
        cs: ChangeSet = engine.run(checkout, targets, opts, apply=True, live_of=read_then_other_run(engine))
        took = time.monotonic() - t0
    assert other and other[0].returncode == 0, other[0].stderr if other else ""
    assert not cs.has_errors, cs.to_dict()
    raced = {e.key.name: e.message for e in cs.entries if e.key.name.startswith("r-")}
    assert len(raced) == 5 and all("already a member of this source" in m for m in raced.values()), raced
    for name in raced:
        live = kube.get("configmap", name, namespace)
        assert ADOPTED not in (live["metadata"].get("annotations") or {}), f"{name} was marked adopted"
        assert live["metadata"]["labels"][PART_OF]
    git.commit({f"r-{i}.yaml": None for i in range(5)}, "the five leave Git")
    pruned = gs(kube, *_sync(git.path, namespace, cache, "--prune"))
    assert pruned.returncode == 0, pruned.stderr
    messages = {o["name"]: o.get("message", "") for o in report(pruned)["objects"] if o["action"] == "prune"}
    assert set(messages) == set(raced) and all("release" not in m for m in messages.values()), messages
    assert _names(kube, namespace, "r-") == {}, "deleted when they left Git, not orphaned"
    _row(
        reliability,
        area="concurrent runs",
        fault="two runs of one commit: another run creates 5 new ConfigMaps between this pass's read and its "
        "creates (409 to each create)",
        outcome="each applied as an ordinary member of this ApplySet (no adopted marker); pass clean",
        checked="when the 5 left Git, sync --prune deleted them (not released): none left behind",
        figures=f"pass with the racing run inside it {took:.2f} s; 5 of 5 pruned",
    )


# -- the daemon, a crashed holder ---------------------------------------------------------------------------


def test_a_sync_while_the_daemon_of_the_source_leads_waits_then_exits_2_naming_it(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    git = GitRepo(tmp_path / "repo", {"base.yaml": configmap("base", {"v": "1"})})
    cache = tmp_path / "cache"
    inventory = default_inventory_name(str(git.path), None)
    assert gs(kube, *_sync(git.path, namespace, cache)).returncode == 0
    # --detect-only: the daemon holds the Lease as a leader does but does not apply the commit below itself
    args = ["--repo", str(git.path), "-n", namespace, "--cache-dir", str(cache), "--leader-elect", "--detect-only"]
    args += ["--leader-elect-namespace", namespace, "--leader-elect-identity", "daemon-replica-1", "--interval", "0"]
    with Daemon(args, kube.env, tmp_path / "daemon.log") as daemon:
        daemon.wait_ready(60)
        lease = _lease(kube, namespace, lease_name(inventory, namespace, namespace))
        assert lease is not None and lease["spec"]["holderIdentity"] == "daemon-replica-1"
        noop = Run(kube, *_sync(git.path, namespace, cache, "--lock-timeout", "3s"))
        noop_code, _, noop_err, noop_took = noop.finish()
        assert noop_code == 0, f"nothing to write: no Lease needed\n{noop_err}"
        git.commit({"more.yaml": configmap("more", {"v": "1"})}, "more")  # the CLI has something to write
        blocked = Run(kube, *_sync(git.path, namespace, cache, "--lock-timeout", "3s"))
        code, rep, stderr, took = blocked.finish()
    assert code == 2, stderr
    assert "more" not in _names(kube, namespace, "more"), "nothing written"
    assert "is held by daemon-replica-1 since " in stderr and "--lock-timeout 3s" in stderr, stderr
    assert "A daemon of this source" in stderr and rep["errors"], stderr
    assert 3 <= took < 15, took
    _row(
        reliability,
        area="concurrent runs",
        fault="sync of a source whose daemon (run --leader-elect) holds the Lease",
        outcome="a sync with nothing to write exits 0 at once; one with writes waits --lock-timeout and exits 2 "
        "naming the daemon's identity and since when",
        checked="the CLI sent no write while the daemon led",
        figures=f"no-op sync {noop_took:.2f} s; blocked sync exit 2 after {took:.2f} s (--lock-timeout 3s)",
    )


def test_a_lease_left_by_a_crashed_run_is_taken_after_its_duration(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    git = GitRepo(tmp_path / "repo", {"base.yaml": configmap("base", {"v": "1"})})
    cache = tmp_path / "cache"
    inventory = default_inventory_name(str(git.path), None)
    with Client(kube.kubeconfig) as client:  # a run that took the Lease and was SIGKILLed: never renewed
        store = ApiLeaseStore(client, namespace, lease_name(inventory, namespace, namespace))
        crashed = LeaderElector(store, "crashed-run", LeaderConfig(lease_duration=4, renew_deadline=3, retry_period=1))
        assert crashed.step()
    code, rep, stderr, took = Run(kube, *_sync(git.path, namespace, cache)).finish()
    assert code == 0, stderr
    assert "crashed-run since" in stderr and "took the Lease of this source" in stderr, stderr
    assert 4 <= took < 20, took
    assert rep["summary"]["create"] == 1
    _row(
        reliability,
        area="concurrent runs",
        fault="the source's Lease left held by a run that died (leaseDurationSeconds 4, never renewed)",
        outcome="sync waits, naming the dead holder, takes the Lease once its record has not changed for its "
        "duration (on its own clock), applies; exit 0",
        checked="nothing written before the Lease expired; the object was created",
        figures=f"sync done {took:.2f} s after start (Lease duration 4 s)",
    )


def test_a_user_the_lease_is_refused_to_writes_nothing_and_is_told_which_rights(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """RBAC allows ConfigMaps but no Leases: a sync with nothing to write still exits 0 (no Lease needed);
    one with something to write exits 2 before its first write, naming the Lease and the rights it needs."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "configmaps-only", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
    }
    kube.kubectl("create", "serviceaccount", "gitops-sync", "-n", namespace)
    kube.kubectl("apply", "-f", "-", input=json.dumps(role))
    kube.kubectl(
        "create", "rolebinding", "configmaps-only", "-n", namespace, "--role=configmaps-only",
        f"--serviceaccount={namespace}:gitops-sync",
    )  # fmt: skip
    git = GitRepo(tmp_path / "repo", {"base.yaml": configmap("base", {"v": "1"})})
    cache = tmp_path / "cache"
    assert gs(kube, *_sync(git.path, namespace, cache)).returncode == 0  # the admin applied it before
    user = ["--kubeconfig", str(sa_kubeconfig(kube, namespace, tmp_path / "sa.kubeconfig"))]
    noop = gs(kube, *_sync(git.path, namespace, cache, *user))
    assert noop.returncode == 0, noop.stderr
    git.commit({"more.yaml": configmap("more", {"v": "1"})}, "more")
    t0 = time.monotonic()
    refused = gs(kube, *_sync(git.path, namespace, cache, *user))
    took = time.monotonic() - t0
    assert refused.returncode == 2, refused.stderr
    assert "may not take Lease" in refused.stderr and "get, create and update on leases" in refused.stderr
    assert "Nothing was written" in refused.stderr and "Traceback" not in refused.stderr
    assert _names(kube, namespace, "more") == {}, "nothing written"
    assert "more" not in _parent(kube, namespace, default_inventory_name(str(git.path), None)).get(
        ATTEMPTED_REVISION, ""
    )
    _row(
        reliability,
        area="concurrent runs",
        fault="RBAC lets the sync's user write ConfigMaps but not Leases",
        outcome="a sync with nothing to write exits 0; one with something to write exits 2 naming the Lease and "
        "the rights it needs (get, create, update on leases)",
        checked="nothing written: the new ConfigMap absent, the inventory untouched",
        figures=f"refused sync exit 2 after {took:.2f} s (CLI start-up included), 0 writes",
    )


def test_a_frozen_sync_that_lost_the_lease_writes_nothing_when_it_wakes(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """SIGSTOP a sync in the middle of its applies (it holds the Lease); once the Lease expires another run
    (this test) takes it. The sync, woken, finds its renewal overdue: it sends no further write, exits 2."""
    git = GitRepo(tmp_path / "repo", {f"f-{i:03}.yaml": configmap(f"f-{i:03}", {"v": str(i)}) for i in range(300)})
    cache = tmp_path / "cache"
    inventory = default_inventory_name(str(git.path), None)
    name = lease_name(inventory, namespace, namespace)
    frozen = Run(kube, *_sync(git.path, namespace, cache, "--concurrency", "1"))
    pid = f"pid {frozen.proc.pid})"

    def mid_apply() -> bool:
        lease = _lease(kube, namespace, name)
        holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
        return pid in holder and len(_names(kube, namespace, "f-")) >= 20

    wait_until("the sync to hold the Lease and be applying", mid_apply, 60, interval=0.05)
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(0.5)
        at_stop = len(_names(kube, namespace, "f-"))
        assert at_stop < 300, "still applying when stopped"
        with Client(kube.kubeconfig) as client:  # the other run: takes the Lease once it expired
            other = LeaderElector(ApiLeaseStore(client, namespace, name), "other-run (test)", LeaderConfig())
            took = wait_until("the frozen sync's Lease to expire", other.step, 40, interval=0.5)
            assert took >= 10, took
            frozen.proc.send_signal(signal.SIGCONT)
            code, rep, stderr, _took = frozen.finish()
            after = len(_names(kube, namespace, "f-"))
            holder = (_lease(kube, namespace, name) or {})["spec"]["holderIdentity"]
            other.release()
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    assert code == 2, stderr
    lost = [o for o in rep["objects"] if "lost Lease" in o.get("message", "")]
    assert lost and not [o for o in rep["objects"] if o["action"] == "prune"], rep["summary"]
    assert after - at_stop <= 1, f"{after - at_stop} object(s) written after the wake"
    assert holder == "other-run (test)", "the woken sync did not take the Lease back"
    figures = (
        f"stopped after {at_stop} of 300 ConfigMaps; Lease taken {took:.1f} s later (its duration 15 s on this "
        f"clock, first observed at the stop); {after - at_stop} written after the wake; {len(lost)} refused"
    )
    _row(
        reliability,
        area="concurrent runs",
        fault="sync SIGSTOPped mid-apply while holding the source's Lease; another run takes the expired Lease; "
        "SIGCONT",
        outcome="the woken sync refuses every further write (renewal overdue past the renew deadline): error "
        "entries, no prune, exit 2; the other run keeps the Lease",
        checked="at most the one request already past the fence when the signal came; the Lease is not taken back",
        figures=figures,
    )
