"""Deleting a GitSync on the real API server: prune: true collects its objects through a finalizer (every
prune guard holds); prune: false, detect-only and suspended sources leave them in place."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import KubeCluster
from tests.integration.daemon_support import Daemon, GitRepo, configmap, wait_until
from tests.integration.test_fleet import cm_data, crd, fleet_args, gitsync, wait_ready

__all__ = ["crd"]  # the module-scoped fixture, shared

FINALIZER = "gitops-sync.io/finalizer"


def _meta(kube: KubeCluster, kind: str, namespace: str, name: str) -> dict[str, object] | None:
    doc = kube.find(kind, name, namespace)
    if doc is None:
        return None
    meta: dict[str, object] = doc["metadata"]
    return meta


def _finalizers(kube: KubeCluster, namespace: str, name: str) -> list[str]:
    meta = _meta(kube, "gitsync", namespace, name) or {}
    return list(meta.get("finalizers") or [])  # type: ignore[call-overload]


def test_deleting_a_gitsync_prunes_only_with_prune_on(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    # Existed before any GitSync: adopted by "pruner", so released (label removed), never deleted.
    kube.kubectl("apply", "-f", "-", input=configmap("pre", {"v": "0"}, namespace=namespace))
    kept = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kept", "annotations": {"gitops-sync.io/prune": "disabled"}},
            "data": {"v": "1"},
        }
    )
    pruner = GitRepo(
        tmp_path / "pruner",
        {"a.yaml": configmap("a", {"v": "1"}), "pre.yaml": configmap("pre", {"v": "1"}), "kept.yaml": kept},
    )
    orphaner = GitRepo(tmp_path / "orphaner", {"o.yaml": configmap("o", {"v": "1"})})
    paused = GitRepo(tmp_path / "paused", {"p.yaml": configmap("p", {"v": "1"})})
    # Never applies cleanly (one object's namespace does not exist): no applied revision, nothing to collect.
    broken = GitRepo(
        tmp_path / "broken",
        {"g.yaml": configmap("g", {"v": "1"}), "x.yaml": configmap("x", {"v": "1"}, namespace=f"{namespace}-none")},
    )
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(
            [
                gitsync("pruner", namespace, pruner.path, prune=True),
                gitsync("orphaner", namespace, orphaner.path, prune=False),
                gitsync("paused", namespace, paused.path, prune=True),
                gitsync("broken", namespace, broken.path, prune=True),
            ]
        ),
    )
    with Daemon(fleet_args(namespace, tmp_path), kube.env, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        for name in ("pruner", "orphaner", "paused"):
            wait_ready(kube, namespace, name)
        assert cm_data(kube, namespace, "a") == {"v": "1"}
        wait_until("the finalizers", lambda: FINALIZER in _finalizers(kube, namespace, "pruner"), 20)
        wait_until("the finalizers", lambda: FINALIZER in _finalizers(kube, namespace, "paused"), 20)
        assert _finalizers(kube, namespace, "orphaner") == []  # prune: false orphans: no finalizer

        # Per-source metrics, labelled source=namespace/name, while it exists; none of its series after.
        ref = f"{namespace}/pruner"
        wait_until("pruner's metrics", lambda: d.metric("gitops_sync_gitsync_ready", source=ref) == 1, 20)
        assert d.metric("gitops_sync_gitsync_objects", source=ref, state="synced") == 3
        assert d.metric("gitops_sync_gitsync_source_healthy", source=ref) == 1
        head = subprocess.run(
            ["git", "-C", str(pruner.path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        revision = [
            line
            for line in d.get("/metrics")[1].decode().splitlines()
            if line.startswith("gitops_sync_gitsync_last_applied_revision_info{") and f'source="{ref}"' in line
        ]
        assert len(revision) == 1 and f'revision="{head}"' in revision[0], revision

        # prune: true → its objects are collected before the GitSync goes, with every prune guard.
        kube.kubectl("delete", "gitsync", "pruner", "-n", namespace, "--timeout=60s", timeout=70)
        assert _meta(kube, "gitsync", namespace, "pruner") is None
        assert cm_data(kube, namespace, "a") is None  # created by it: deleted
        pre = _meta(kube, "configmap", namespace, "pre")
        assert pre is not None, "an adopted object was deleted"
        assert "applyset.kubernetes.io/part-of" not in (pre.get("labels") or {}), pre  # type: ignore[operator]
        assert cm_data(kube, namespace, "kept") == {"v": "1"}  # gitops-sync.io/prune: disabled
        assert _meta(kube, "configmap", namespace, "gitsync-pruner") is None  # its ApplySet parent too
        assert d.logged("GitSync deleted: its objects were pruned")
        wait_until("pruner's series removed", lambda: f'source="{ref}"' not in d.get("/metrics")[1].decode(), 10)
        assert f'source="{namespace}/orphaner"' in d.get("/metrics")[1].decode()  # the others stay

        # prune: false → objects and the ApplySet parent stay (orphaned, still labelled).
        kube.kubectl("delete", "gitsync", "orphaner", "-n", namespace, "--timeout=60s", timeout=70)
        assert cm_data(kube, namespace, "o") == {"v": "1"}
        assert _meta(kube, "configmap", namespace, "gitsync-orphaner") is not None

        # Never applied cleanly → nothing is collected (what it created may have been meant as adopted).
        wait_until("the broken source's object", lambda: cm_data(kube, namespace, "g") == {"v": "1"}, 60)
        wait_until("the finalizers", lambda: FINALIZER in _finalizers(kube, namespace, "broken"), 20)
        kube.kubectl("delete", "gitsync", "broken", "-n", namespace, "--timeout=60s", timeout=70)
        assert cm_data(kube, namespace, "g") == {"v": "1"}
        assert d.logged("GitSync deleted: nothing applied cleanly, nothing pruned")

        # Suspended → nothing is written, deletion included: the finalizer goes, the objects stay.
        kube.kubectl("patch", "gitsync", "paused", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        kube.kubectl("delete", "gitsync", "paused", "-n", namespace, "--timeout=60s", timeout=70)
        assert cm_data(kube, namespace, "p") == {"v": "1"}
        assert any(
            line.get("reason") == "suspended" for line in d.logged("GitSync deleted: its objects are left in place")
        )


def test_deleting_a_gitsync_does_not_wait_for_a_member_its_finalizers_hold(
    kube: KubeCluster, crd: None, namespace: str, tmp_path: Path
) -> None:
    """deletionPolicy MirrorPrune (prune: true) and Delete: a member whose DELETE the API server accepted but a
    finalizer holds is deletion pending, nothing of ours is left to do: the GitSync and its parent go while the
    member is still Terminating (only WaitForTermination waits: tests/reliability/test_fleet_forbidden.py)."""
    hold = "example.com/hold"
    repos = {}
    for name in ("mirror", "deleter"):
        held = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-held", "finalizers": [hold]}}
        repos[name] = GitRepo(tmp_path / name, {"h.yaml": json.dumps(held) + "\n"})
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(
            [
                gitsync("mirror", namespace, repos["mirror"].path, prune=True),
                gitsync("deleter", namespace, repos["deleter"].path, prune=False, deletionPolicy="Delete"),
            ]
        ),
    )
    try:
        with Daemon(fleet_args(namespace, tmp_path), kube.env, tmp_path / "fleet.log") as d:
            d.wait_ready(60)
            for name in ("mirror", "deleter"):
                wait_ready(kube, namespace, name)
                wait_until("the finalizer", lambda n=name: FINALIZER in _finalizers(kube, namespace, n), 20)
            for name in ("mirror", "deleter"):
                kube.kubectl("delete", "gitsync", name, "-n", namespace, "--timeout=60s", timeout=70)
                assert _meta(kube, "gitsync", namespace, name) is None
                member = _meta(kube, "configmap", namespace, f"{name}-held")
                assert member is not None and member.get("deletionTimestamp"), member  # deleted, still held
                assert _meta(kube, "configmap", namespace, f"gitsync-{name}") is None  # its ApplySet parent went
            assert d.logged("GitSync deleted: prune failed; keeping it until it succeeds") == []
            pruned = d.logged("GitSync deleted: its objects were pruned")
            assert sorted(line.get("policy", "") for line in pruned) == ["Delete", "MirrorPrune"], pruned
            assert all(line.get("pending") == 1 for line in pruned), pruned
    finally:
        for name in ("mirror", "deleter"):
            kube.kubectl(
                "patch",
                "configmap",
                f"{name}-held",
                "-n",
                namespace,
                "--type=merge",
                "-p",
                '{"metadata":{"finalizers":null}}',
                check=False,
            )
