"""Bad reads and bad input that must never delete what is not provably ours.

- a stale read (a lagging watch cache, a refused GET) that plans an existing object as absent;
- prune of a Namespace holding a foreign Pod and ConfigMap, and of a CRD with a foreign custom resource;
- a half-written file in a work tree the daemon watches.
All on the shared local control plane (no component is stopped), each test in its own namespace.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.apply.manager import LiveMap
from gitops_sync.cluster.client import Client
from gitops_sync.conventions import ConflictPolicy
from gitops_sync.daemon.reconcile.live import LiveReads
from gitops_sync.engine import Engine, PassOptions, SourceOptions, load
from gitops_sync.plan.changeset import Action
from gitops_sync.plan.planner import Target
from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, wait_until
from tests.integration.test_safety import crd
from tests.integration.test_sync import by_name, get, gs, report, write
from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

PART_OF = "applyset.kubernetes.io/part-of"
ADOPTED = "gitops-sync.io/adopted"


def cm(name: str, value: str, namespace: str | None = None) -> str:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": value}}) + "\n"


def exists(kube: KubeCluster, *ref: str) -> bool:
    """Whether `kubectl get <ref...>` (`kind/name`, or `kind name`, then `-n namespace` or not) would find it."""
    what, namespace = (ref[:-2], ref[-1]) if ref[-2:-1] == ("-n",) else (ref, None)
    return kube.find(*what, namespace=namespace) is not None


def test_a_stale_read_never_makes_a_preexisting_object_deletable(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    kube.kubectl("create", "configmap", "preexisting", "-n", namespace, "--from-literal=v=by-hand")
    uid = get(kube, "configmap/preexisting", namespace)["metadata"]["uid"]
    repo = write(tmp_path / "repo", {"pre.yaml": cm("preexisting", "git"), "new.yaml": cm("created", "git")})
    opts = PassOptions(namespace=namespace, name=f"stale-{namespace}", prune=True)
    with Client(kube.kubeconfig) as client:
        engine = Engine(client)
        checkout, objects = load(SourceOptions(repo=str(repo)))
        targets = engine.resolve(objects, opts)

        def absent(ts: Sequence[Target]) -> LiveMap:
            """What a lagging watch cache or a refused read answers: nothing is there."""
            return {t.key: None for t in ts}

        t0 = time.monotonic()
        cs = engine.run(checkout, targets, opts, apply=True, live_of=absent)
        took = time.monotonic() - t0
        assert not cs.has_errors, cs.to_dict()
        entries = {e.key.name: e for e in cs.entries}
        assert "existed before" in entries["preexisting"].message, entries["preexisting"].message
        assert entries["created"].action is Action.CREATE
        writes_stale = client.stats.writes

        pre = get(kube, "configmap/preexisting", namespace)
        assert pre["metadata"]["annotations"][ADOPTED] == "true" and pre["metadata"]["labels"][PART_OF]
        # kubectl create owns data.v with another value: a real conflict, left to its owner (policy report)
        assert pre["data"] == {"v": "by-hand"} and entries["preexisting"].action is Action.CONFLICT
        assert ADOPTED not in (get(kube, "configmap/created", namespace)["metadata"].get("annotations") or {})

        # both leave Git: the one we created is deleted, the pre-existing one only released
        (repo / "pre.yaml").unlink()
        (repo / "new.yaml").write_text(cm("other", "git"))
        checkout, objects = load(SourceOptions(repo=str(repo)))
        cs = engine.run(checkout, engine.resolve(objects, opts), opts, apply=True)
        assert not cs.has_errors, cs.to_dict()
        prunes = {e.key.name: e.message for e in cs.entries if e.action is Action.PRUNE}
        assert set(prunes) == {"preexisting", "created"} and "release" in prunes["preexisting"], prunes
    live = get(kube, "configmap/preexisting", namespace)
    assert live["metadata"]["uid"] == uid, "the pre-existing object was kept"
    assert PART_OF not in (live["metadata"].get("labels") or {})
    assert not exists(kube, "configmap/created", "-n", namespace)
    figures = f"pass {took:.2f} s, {writes_stale} write requests (conflicting applies included)"
    print(f"figures ({reliability.nodeid.rsplit(':', 1)[-1]}): {figures}")
    reliability.record(
        area="cluster reads",
        fault="stale read: live map says absent for a ConfigMap that exists (lagging watch cache / refused GET)",
        outcome="apply answered 200 not 201: object re-applied with the adopted marker; later prune released it",
        checked="the pre-existing ConfigMap (same uid) survived the prune, only our label removed; "
        "the object we really created was deleted",
        figures=figures,
    )


class _LaggingCache:
    """A watch cache that has not seen an object yet: it answers "known, absent" for every target."""

    def live_of(self, targets: Sequence[Target], fallback: Any) -> LiveMap:
        return {t.key: None for t in targets}

    def collection_size(self, target: Target) -> int | None:
        return None  # not counted: the re-read of what it calls absent lists the collection, as before


class _DaemonReads:
    """What the daemon's `_live_of` uses: its watch cache (here a lagging one) and its API reads."""

    _read_live = LiveReads._read_live
    _live_of = LiveReads._live_of

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.cache = _LaggingCache()


def test_a_lagging_watch_cache_never_hides_a_shared_object_from_the_daemon(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    team_a = write(tmp_path / "team-a", {"cm.yaml": cm("settings", "a")})
    assert gs(kube, "sync", "--repo", str(team_a), "-n", namespace, "--name", "team-a").returncode == 0
    before = get(kube, "configmap/settings", namespace)
    team_b = write(tmp_path / "team-b", {"cm.yaml": cm("settings", "b")})
    opts = PassOptions(namespace=namespace, name="team-b", policy=ConflictPolicy.FORCE)  # the daemon's default
    with Client(kube.kubeconfig) as client:
        engine = Engine(client)
        checkout, objects = load(SourceOptions(repo=str(team_b)))
        cs = engine.run(
            checkout, engine.resolve(objects, opts), opts, apply=True, live_of=_DaemonReads(engine)._live_of
        )
    (entry,) = cs.entries
    assert entry.action is Action.CONFLICT and entry.shared is not None, entry
    assert entry.shared.parent == f"ConfigMap {namespace}/team-a"
    after = get(kube, "configmap/settings", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["metadata"]["labels"][PART_OF] == before["metadata"]["labels"][PART_OF]
    reliability.record(
        area="cluster reads",
        fault="daemon watch cache lags: says absent for a ConfigMap that is a member of another ApplySet",
        outcome="the daemon re-reads what its cache calls absent; reported a shared conflict naming team-a",
        checked="the other team's ConfigMap unchanged (same resourceVersion, label and data), even with "
        "--on-conflict force",
    )


def test_a_namespace_whose_contents_cannot_be_listed_is_not_pruned(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    """The deploy/kubernetes cluster-wide RBAC without its cascade-guard role (an install that dropped it) may
    delete Namespaces but not list Pods: contents unknown, and the refusal names the rule to grant."""
    from tests.integration.daemon_support import as_list, relocate, rendered, sa_kubeconfig

    suffix = f"-{namespace}"
    rbac = [
        d
        for d in relocate(rendered(kube, "cluster-wide"), namespace, suffix)
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
        and not d["metadata"]["name"].startswith("gitops-sync-cascade-guard")
    ]
    team = f"{namespace}-lp"[:63]
    try:
        kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(rbac))
        sa = sa_kubeconfig(kube, namespace, tmp_path / "sa.kubeconfig")
        ns_doc = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}}) + "\n"
        repo = write(tmp_path / "repo", {"ns.yaml": ns_doc, "keep.yaml": cm("keep", "1")})
        args = ["--repo", str(repo), "-n", namespace, "--name", f"lp-{namespace}", "--kubeconfig", str(sa)]
        r = gs(kube, "sync", *args, "-o", "json")
        assert r.returncode == 0, r.stdout + r.stderr
        (repo / "ns.yaml").unlink()
        r = gs(kube, "sync", *args, "--prune", "-o", "json")
        assert r.returncode == 2, r.stdout + r.stderr
        refused = by_name(report(r))[f"Namespace/{team}"]
        assert refused["action"] == "error" and "could not be checked" in refused["message"], refused
        assert "Pod" in refused["message"] and "Traceback" not in r.stderr
        assert "grant list on " in refused["message"] and "pods" in refused["message"], refused["message"]
        ns = kube.get("namespace", team)
        assert not ns["metadata"].get("deletionTimestamp"), "nothing deleted on unknown contents"
    finally:
        kube.kubectl("delete", "namespace", team, "--wait=false", "--ignore-not-found", check=False)
        for d in rbac:
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                kube.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], "--ignore-not-found", check=False)
    reliability.record(
        area="prune",
        fault="Namespace left Git; the ServiceAccount (deploy/kubernetes cluster-wide RBAC without its cascade-guard "
        "role) may not list Pods etc.",
        outcome="sync --prune: exit 2, error entry saying the contents could not be checked, naming the kinds and "
        "the list rule to grant",
        checked="the Namespace was not deleted (unknown contents count as foreign)",
    )


def _pod(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/app:1"}]},
        }
    )


def _refused_prune(kube: KubeCluster, args: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """`sync --prune` that must refuse (exit 2), and the seconds it took (CLI start-up included)."""
    t0 = time.monotonic()
    r = gs(kube, "sync", *args, "--prune")
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stdout + r.stderr
    return r, took


def _cascade_prunes(kube: KubeCluster, args: list[str], refused: str) -> None:
    """With --prune-cascade the prune of `refused` (Kind/name) that plain --prune refused goes through."""
    r = gs(kube, "sync", *args, "--prune", "--prune-cascade")
    assert r.returncode == 0, r.stdout + r.stderr
    assert by_name(report(r))[refused]["action"] == "prune"


def _record_refusal(reliability: Recorder, took: float, *, fault: str, outcome: str, checked: str) -> None:
    figures = f"refused sync --prune (CLI, start-up included) {took:.2f} s"
    print(f"figures ({reliability.nodeid.rsplit(':', 1)[-1]}): {figures}")
    reliability.record(area="prune", fault=fault, outcome=outcome, checked=checked, figures=figures)


def test_pruning_a_namespace_with_foreign_objects_is_refused(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    team = f"{namespace}-team"[:63]
    ns_doc = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}}) + "\n"
    repo = write(
        tmp_path / "repo",
        {
            "ns.yaml": ns_doc,
            "inside.yaml": cm("ours", "1", team),
            "keep.yaml": cm("keep", "1"),
            "gone.yaml": cm("gone", "1"),
        },
    )
    args = ["--repo", str(repo), "-n", namespace, "--name", f"cascade-{namespace}", "-o", "json"]
    try:
        r = gs(kube, "sync", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        kube.kubectl("wait", "--for=create", f"--namespace={team}", "serviceaccount/default", "--timeout=30s")
        kube.kubectl("create", "configmap", "foreign", "-n", team, "--from-literal=who=other-team")
        kube.kubectl("apply", "-n", team, "-f", "-", input=_pod("bare"))

        for name in ("ns.yaml", "inside.yaml", "gone.yaml"):
            (repo / name).unlink()
        d = gs(kube, "diff", *args, "--prune")
        assert d.returncode == 2, d.stdout + d.stderr
        r, took = _refused_prune(kube, args)
        for rep, verb in ((report(d), "would not delete"), (report(r), "did not delete")):
            objs = by_name(rep)
            refused = objs[f"Namespace/{team}"]
            assert refused["action"] == "error", refused
            # the exit 2 is explained up top too: `jq .errors` was [] with an error count of 1
            assert rep["errors"] == [
                f"prune incomplete: {verb} 1 object(s) that left Git: Namespace/{team} (see their entries)"
            ], rep["errors"]
            assert f"ConfigMap/{team}/foreign" in refused["message"] and f"Pod/{team}/bare" in refused["message"]
            assert "--prune-cascade" in refused["message"]
            assert "kube-root-ca.crt" not in refused["message"] and "ServiceAccount" not in refused["message"]
            assert objs["ConfigMap/ours"]["action"] == "prune" and objs["ConfigMap/gone"]["action"] == "prune"
        # the refusal did not block the other prunes
        assert not exists(kube, "configmap/gone", "-n", namespace) and not exists(kube, "configmap/ours", "-n", team)
        ns = kube.get("namespace", team)
        assert ns["status"]["phase"] == "Active" and not ns["metadata"].get("deletionTimestamp")
        assert exists(kube, "configmap/foreign", "-n", team) and exists(kube, "pod/bare", "-n", team)
        assert exists(kube, "configmap/keep", "-n", namespace)

        # the next pass still knows the namespace is ours and refuses again; --prune-cascade deletes it
        r, _ = _refused_prune(kube, args)
        assert by_name(report(r))[f"Namespace/{team}"]["action"] == "error"
        _cascade_prunes(kube, args, f"Namespace/{team}")
        gone = kube.find("namespace", team) or {}
        assert not gone or gone["metadata"].get("deletionTimestamp"), "deleted (terminating) with --prune-cascade"
    finally:
        kube.kubectl("delete", "namespace", team, "--wait=false", "--ignore-not-found", check=False)
    _record_refusal(
        reliability,
        took,
        fault="Namespace left Git while holding a foreign ConfigMap and a bare Pod",
        outcome="sync --prune and diff --prune: exit 2, error entry naming ConfigMap and Pod, `errors` saying the "
        "prune is incomplete; other prunes done",
        checked="namespace still Active, foreign ConfigMap and Pod kept; deleted only with --prune-cascade",
    )


def test_pruning_a_crd_with_foreign_custom_resources_is_refused(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    group = f"{namespace}.example.com"
    widget = f"apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: ours}}\nspec: {{size: 1}}\n"
    repo = write(tmp_path / "repo", {"crd.yaml": crd(group, "Widget"), "w.yaml": widget, "keep.yaml": cm("keep", "1")})
    args = ["--repo", str(repo), "-n", namespace, "--name", f"crd-{namespace}", "-o", "json"]
    try:
        r = gs(kube, "sync", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        kube.kubectl(
            "apply",
            "-n",
            namespace,
            "-f",
            "-",
            input=f"apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: foreign}}\nspec: {{size: 2}}\n",
        )
        (repo / "crd.yaml").unlink()
        (repo / "w.yaml").unlink()
        r, took = _refused_prune(kube, args)
        objs = by_name(report(r))
        refused = objs[f"CustomResourceDefinition/widgets.{group}"]
        assert refused["action"] == "error" and f"Widget.{group}/{namespace}/foreign" in refused["message"], refused
        assert objs["Widget/ours"]["action"] == "prune"
        assert exists(kube, "crd", f"widgets.{group}")
        assert exists(kube, f"widgets.{group}/foreign", "-n", namespace)

        _cascade_prunes(kube, args, f"CustomResourceDefinition/widgets.{group}")
    finally:
        kube.kubectl("delete", "crd", f"widgets.{group}", "--wait=false", "--ignore-not-found", check=False)
    _record_refusal(
        reliability,
        took,
        fault="CRD left Git while a custom resource of another owner still exists",
        outcome="sync --prune: exit 2, error entry naming the foreign Widget; our Widget pruned",
        checked="CRD and the foreign Widget kept; deleted only with --prune-cascade",
    )


def test_a_half_written_file_in_a_watched_work_tree_never_causes_a_prune(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    full = cm("first", "1") + "---\n" + cm("second", "1")
    repo = GitRepo(tmp_path / "repo", {"app.yaml": full})
    debounce = 0.5
    args = ["--repo", str(repo.path), "-n", namespace, "--prune", "--interval", "3600", "--debounce", str(debounce)]
    with Daemon(args, kube.env, tmp_path / "daemon.log") as d:
        d.wait_ready()
        uid = get(kube, "configmap/second", namespace)["metadata"]["uid"]
        deletes: list[str] = []
        stop = threading.Event()

        def watch_second() -> None:  # polls for the whole scenario: a delete and re-create must not slip by
            while not stop.is_set():
                live = kube.find("configmap/second", namespace=namespace)
                now = live["metadata"]["uid"] if live is not None else ""
                if now != uid:
                    deletes.append(now or "(absent)")
                time.sleep(0.05)

        watcher = threading.Thread(target=watch_second, daemon=True)
        watcher.start()
        try:
            # a slow writer: the first half lands, a pause longer than the watch's quiet period, then the rest
            path = repo.path / "app.yaml"
            half = full[: full.index("---")]
            path.write_text(half)
            wait_until(
                "the half-written render seen",
                lambda: d.logged("source changed; reading it again after the quiet period before acting on it"),
                5,
            )
            time.sleep(debounce * 0.5)
            path.write_text(full)
            time.sleep(debounce * 6)
        finally:
            stop.set()
            watcher.join(5)
        assert not deletes, f"the second ConfigMap was deleted while its file was half-written: {deletes}"
        assert not d.logged("pruned"), d.log_tail()
        assert get(kube, "configmap/second", namespace)["metadata"]["uid"] == uid

        # a real removal (the file stays without it) is pruned once seen twice
        path.write_text(half)
        t1 = time.monotonic()
        wait_until(
            "second pruned after the stable render", lambda: not exists(kube, "configmap/second", "-n", namespace), 10
        )
        took = time.monotonic() - t1
        assert d.stop() == 0
    figures = f"stable removal pruned {took:.2f} s after the write (--debounce {debounce})"
    print(f"figures ({reliability.nodeid.rsplit(':', 1)[-1]}): {figures}")
    reliability.record(
        area="daemon",
        fault=f"half-written file in a watched work tree (second object missing for {debounce * 0.5:.2f} s "
        f"after the watch fired, --debounce {debounce})",
        outcome="render read again after the quiet period; the completed file matched the applied state",
        checked="no prune, the second ConfigMap kept its uid throughout; a stable removal was pruned",
        figures=figures,
    )
