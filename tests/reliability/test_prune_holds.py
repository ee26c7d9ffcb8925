"""Prunes that cannot (or must not) finish at once (issue 20, items 6 and 7), on the shared control plane.

- the Namespace that holds this source's own inventory parent leaves Git while the source still has
  members elsewhere: deleting it would delete the record of those members (every later pass failing, the
  members never pruned), so it is refused, also with --prune-cascade; as the last member it goes last;
- a member held by a finalizer (`example.com/hold`: nothing removes it until the test does): its DELETE
  answers 200 with the object still there. It is "deletion pending", exit 1, never "deleted", and no later
  pass sends a DELETE again; an object Git wants that is Terminating is reported, not `unchanged`.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import KubeCluster
from tests.integration.test_sync import by_name, get, gs, report, write
from tests.integration.test_terminating import HOLD, cm, hold, live, release, requests
from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

PART_OF = "applyset.kubernetes.io/part-of"


def namespace_doc(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}) + "\n"


def timed(kube: KubeCluster, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = gs(kube, *args)
    return r, time.monotonic() - t0


def test_the_namespace_holding_the_inventory_is_never_pruned_while_the_source_has_members(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    holder = f"{namespace}-inv"[:63]
    repo = write(
        tmp_path / "repo",
        {
            "ns.yaml": namespace_doc(holder),
            "inside.yaml": cm("inside", holder),
            "outside.yaml": cm("outside"),
            "later.yaml": cm("later"),
        },
    )
    name = f"inv-{namespace}"[:57]
    args = ["--repo", str(repo), "-n", namespace, "--inventory-namespace", holder, "--name", name, "-o", "json"]
    try:
        r = gs(kube, "sync", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        applyset = live(kube, "configmap/outside", namespace)["metadata"]["labels"][PART_OF]  # type: ignore[index]

        (repo / "ns.yaml").unlink()
        (repo / "inside.yaml").unlink()
        d = gs(kube, "diff", *args, "--prune")
        r, refused_took = timed(kube, "sync", *args, "--prune")
        c = gs(kube, "sync", *args, "--prune", "--prune-cascade")
        for run in (d, r, c):
            assert run.returncode == 2, run.stdout + run.stderr
            entry = by_name(report(run))[f"Namespace/{holder}"]
            assert entry["action"] == "error" and "holds this source's inventory" in entry["message"], entry
            assert f"ConfigMap {holder}/{name}" in entry["message"] and "--prune-cascade" in entry["message"]
        ns = live(kube, f"namespace/{holder}")
        assert ns and not ns["metadata"].get("deletionTimestamp"), "the Namespace holding the inventory was deleted"
        assert live(kube, f"configmap/{name}", holder), "the inventory parent is gone"
        assert live(kube, "configmap/inside", holder) is None, "the rest of the prune still ran"
        assert live(kube, "configmap/outside", namespace)["metadata"]["labels"][PART_OF] == applyset  # type: ignore[index]

        # Kept by the annotation the refusal names: the source converges, and a member leaving Git is pruned.
        kube.kubectl("annotate", "namespace", holder, "gitops-sync.io/prune=disabled")
        r = gs(kube, "sync", *args, "--prune")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "kept" in by_name(report(r))[f"Namespace/{holder}"]["message"]
        (repo / "later.yaml").unlink()
        r = gs(kube, "sync", *args, "--prune")
        assert r.returncode == 0, r.stdout + r.stderr
        assert by_name(report(r))["ConfigMap/later"]["action"] == "prune"
        assert live(kube, "configmap/later", namespace) is None

        # The last member: Git renders nothing. While another member is still held, the Namespace waits.
        kube.kubectl("annotate", "namespace", holder, "gitops-sync.io/prune-")
        hold(kube, "configmap/outside", namespace)
        (repo / "outside.yaml").unlink()
        waiting = gs(kube, "sync", *args, "--prune", "--allow-empty", "--log-level", "debug")
        assert waiting.returncode == 1, waiting.stdout + waiting.stderr
        objs = by_name(report(waiting))
        assert objs["ConfigMap/outside"]["action"] == "terminating", objs
        assert "kept until the other members are gone" in objs[f"Namespace/{holder}"]["message"], objs
        assert not [p for p in requests(waiting, "DELETE") if p.endswith(f"/namespaces/{holder}")]
        assert live(kube, f"configmap/{name}", holder), "the parent went while a member was still there"
        release(kube, "configmap/outside", namespace)
        last = gs(kube, "sync", *args, "--prune", "--allow-empty", "--log-level", "debug")
        assert last.returncode == 0, last.stdout + last.stderr
        assert by_name(report(last))[f"Namespace/{holder}"]["action"] == "prune"
        gone = live(kube, f"namespace/{holder}")
        assert gone is None or gone["metadata"].get("deletionTimestamp")
    finally:
        release(kube, "configmap/outside", namespace)
        kube.kubectl("delete", "namespace", holder, "--wait=false", "--ignore-not-found", check=False)
    figures = (
        f"3 of 3 runs (diff, sync, sync --prune-cascade) exit 2, Namespace kept; refused sync {refused_took:.2f} s; "
        "with the source emptied: kept while 1 member was held (exit 1), deleted in the pass after"
    )
    print(f"figures: {figures}")
    reliability.record(
        area="prune",
        fault="the Namespace holding this source's inventory parent left Git while the source had members elsewhere",
        outcome="diff/sync --prune (also --prune-cascade): exit 2, error entry naming the inventory; other prunes done",
        checked="Namespace and parent kept, remaining member still labelled; a later member leaving Git is pruned; "
        "as the last member the Namespace goes only after every other member is gone",
        figures=figures,
    )


def test_a_prune_held_by_a_finalizer_is_pending_and_never_deleted_again(
    kube: KubeCluster, namespace: str, tmp_path: Path, reliability: Recorder
) -> None:
    repo = write(tmp_path / "repo", {"held.yaml": cm("held"), "wanted.yaml": cm("wanted"), "keep.yaml": cm("keep")})
    args = ["--repo", str(repo), "-n", namespace, "--name", f"hold-{namespace}"[:57], "-o", "json"]
    held_path = f"/api/v1/namespaces/{namespace}/configmaps/held"
    wanted_path = f"/api/v1/namespaces/{namespace}/configmaps/wanted"
    try:
        r = gs(kube, "sync", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        hold(kube, "configmap/held", namespace)
        hold(kube, "configmap/wanted", namespace)

        (repo / "held.yaml").unlink()
        first = gs(kube, "sync", *args, "--prune", "--log-level", "debug")
        assert first.returncode == 1, first.stdout + first.stderr
        entry = by_name(report(first))["ConfigMap/held"]
        assert entry["action"] == "terminating", entry
        assert entry["message"].startswith(f"deletion pending: finalizer {HOLD}"), entry
        assert entry["terminating"]["finalizers"] == [HOLD] and entry["terminating"]["inGit"] is False
        assert requests(first, "DELETE") == [held_path]
        assert live(kube, "configmap/held", namespace)["metadata"]["deletionTimestamp"]  # type: ignore[index]

        deletes, codes = 0, []
        for _ in range(3):
            again = gs(kube, "sync", *args, "--prune", "--log-level", "debug")
            codes.append(again.returncode)
            deletes += len(requests(again, "DELETE"))
            entry = by_name(report(again))["ConfigMap/held"]
            assert entry["action"] == "terminating" and "no DELETE sent again" in entry["message"], entry
        assert codes == [1, 1, 1] and deletes == 0, (codes, deletes)
        d = gs(kube, "diff", *args, "--prune")
        assert d.returncode == 1, d.stdout + d.stderr
        assert by_name(report(d))["ConfigMap/held"]["action"] == "terminating"

        # An object Git wants, deleted by someone else and held: it will vanish, so it is not `unchanged`.
        kube.kubectl("delete", "configmap", "wanted", "-n", namespace, "--wait=false")
        before = live(kube, "configmap/wanted", namespace)
        d = gs(kube, "diff", *args)
        assert d.returncode == 1, d.stdout + d.stderr
        entry = by_name(report(d))["ConfigMap/wanted"]
        assert entry["action"] == "terminating" and entry["terminating"]["inGit"] is True, entry
        s = gs(kube, "sync", *args, "--prune", "--log-level", "debug")
        assert s.returncode == 1, s.stdout + s.stderr
        assert wanted_path not in requests(s, "PATCH"), "an apply was sent to an object about to vanish"
        assert (
            live(kube, "configmap/wanted", namespace)["metadata"]["resourceVersion"]
            == (  # type: ignore[index]
                before["metadata"]["resourceVersion"]  # type: ignore[index]
            )
        )

        release(kube, "configmap/held", namespace)
        release(kube, "configmap/wanted", namespace)
        t0 = time.monotonic()
        done = gs(kube, "sync", *args, "--prune")
        converged = time.monotonic() - t0
        assert done.returncode == 0, done.stdout + done.stderr
        objs = by_name(report(done))
        assert objs["ConfigMap/wanted"]["action"] == "create" and "ConfigMap/held" not in objs, objs
        assert live(kube, "configmap/held", namespace) is None
        assert get(kube, "configmap/wanted", namespace)["metadata"]["uid"] != before["metadata"]["uid"]  # type: ignore[index]
    finally:
        release(kube, "configmap/held", namespace)
        release(kube, "configmap/wanted", namespace)
    figures = (
        f"sync --prune exits {[1, *codes]}; DELETE requests for the held member over 4 passes: 1; "
        f"converged (re-created, gone) {converged:.2f} s after the finalizers were removed"
    )
    print(f"figures: {figures}")
    reliability.record(
        area="prune",
        fault=f"a pruned member and a desired object held by a finalizer ({HOLD}) that nothing removes",
        outcome="sync and diff: action terminating, 'deletion pending: finalizer example.com/hold', exit 1",
        checked="never reported deleted nor unchanged; one DELETE, none on later passes; no apply to the held "
        "object; after the finalizers went the next sync exits 0, the desired object re-created",
        figures=figures,
    )
