"""The quiet-period check of a live work tree (daemon/desired.py): a render is acted on only once confirmed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.reconcile import desired
from gitops_sync.daemon.reconcile.desired import DesiredSource
from gitops_sync.engine import SourceOptions
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey


def test_a_new_render_of_a_work_tree_is_settling_until_its_second_look(tmp_path: Path) -> None:
    desired = DesiredSource(SourceOptions(repo=str(tmp_path)), debounce=0.05)
    assert desired.live_tree and not desired.settling
    assert desired.wait_before_acting("d1") > 0
    assert desired.settling  # fleet: a pass now answers no reconcile request (it still holds the old state)
    time.sleep(0.06)
    assert desired.wait_before_acting("d1") == 0.0
    assert not desired.settling
    assert desired.wait_before_acting("d2") > 0 and desired.settling
    assert not desired.unchanged("d2") and desired.settling  # nothing held yet: still waiting


def test_a_remote_commit_never_settles(tmp_path: Path) -> None:
    desired = DesiredSource(SourceOptions(repo="https://git.example/team/deploy.git"), debounce=1)
    assert desired.wait_before_acting("d1") == 0.0 and not desired.settling


def test_tracked_paths_are_worked_out_at_an_objects_first_look_not_when_the_source_loads(monkeypatch: Any) -> None:

    walked: list[str] = []
    real = desired.tracked_paths

    def counting(manifest: Any) -> list[str]:
        walked.append(manifest["metadata"]["name"])
        return real(manifest)

    monkeypatch.setattr(desired, "tracked_paths", counting)
    info = ResourceInfo("", "v1", "ConfigMap", "configmaps", True)
    keys = [ObjectKey("", "ConfigMap", "ns", f"cm-{i}") for i in range(1000)]
    by_key = {
        k: Target(
            k, info, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": k.name}, "data": {"a": "1"}}, ""
        )
        for k in keys
    }
    paths = desired.TrackedPaths(by_key)
    assert walked == []  # nothing at load
    assert paths.get(keys[7]) == [".data.a"] and paths.get(keys[7]) is paths.get(keys[7])
    assert walked == ["cm-7"]  # once, then remembered
    assert paths.get(ObjectKey("", "ConfigMap", "ns", "not-in-git")) == []
