"""Two runs of one source at once: two CI pipelines, a retried job, CI racing the daemon (issue 20, item 2).

Every interleaving is made certain, never hoped for: the test holds the source's Lease itself (as another
run would), runs the other pass from a hook of this one's client (between its plan and its apply, or
between its record and its prune), or starts a daemon that holds the Lease for as long as it runs.
On the shared local control plane (nothing is stopped), each test in its own namespace.
"""

from __future__ import annotations

import json
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
from tests.integration.daemon_support import GitRepo, configmap
from tests.integration.test_sync import gs, report
from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster


def _names(kube: KubeCluster, namespace: str, prefix: str) -> dict[str, str]:
    """name -> uid of the ConfigMaps whose name starts with `prefix`."""
    doc = json.loads(kube.kubectl("get", "configmaps", "-n", namespace, "-o", "json").stdout)
    return {
        i["metadata"]["name"]: i["metadata"]["uid"] for i in doc["items"] if i["metadata"]["name"].startswith(prefix)
    }


def _parent(kube: KubeCluster, namespace: str, name: str) -> dict[str, str]:
    doc = json.loads(kube.kubectl("get", "configmap", name, "-n", namespace, "-o", "json").stdout)
    return dict(doc["metadata"].get("annotations") or {})


def _lease(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    r = kube.kubectl("get", "lease", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


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
        return self.proc.returncode, (json.loads(out) if out.strip() else {}), stderr, took


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


def _ten(prefix: str) -> dict[str, str | None]:
    return {f"{prefix}-{i}.yaml": configmap(f"{prefix}-{i}", {"v": str(i)}) for i in range(10)}


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
    reliability.record(
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
        live = json.loads(kube.kubectl("get", "configmap", name, "-n", namespace, "-o", "json").stdout)
        assert ADOPTED not in (live["metadata"].get("annotations") or {}), f"{name} was marked adopted"
        assert live["metadata"]["labels"][PART_OF]
    git.commit({f"r-{i}.yaml": None for i in range(5)}, "the five leave Git")
    pruned = gs(kube, *_sync(git.path, namespace, cache, "--prune"))
    assert pruned.returncode == 0, pruned.stderr
    messages = {o["name"]: o.get("message", "") for o in report(pruned)["objects"] if o["action"] == "prune"}
    assert set(messages) == set(raced) and all("release" not in m for m in messages.values()), messages
    assert _names(kube, namespace, "r-") == {}, "deleted when they left Git, not orphaned"
    reliability.record(
        area="concurrent runs",
        fault="two runs of one commit: another run creates 5 new ConfigMaps between this pass's read and its "
        "creates (409 to each create)",
        outcome="each applied as an ordinary member of this ApplySet (no adopted marker); pass clean",
        checked="when the 5 left Git, sync --prune deleted them (not released): none left behind",
        figures=f"pass with the racing run inside it {took:.2f} s; 5 of 5 pruned",
    )
