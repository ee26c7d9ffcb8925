"""The desired state of a source (daemon/reconcile/desired.py): the quiet-period check of a live work tree, and
what a load costs when Git has not changed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gitops_sync import rendercache
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


def _configmap(path: Path, value: str) -> None:
    path.write_text(f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  k: {value}\n")


def test_the_render_cache_entry_the_state_was_taken_from_is_not_decoded_again(tmp_path: Path, monkeypatch: Any) -> None:
    """A full pass reads the source again: the entry it would be served from is the state held, so the ~50 MB
    copy of 20,000 objects it used to decode (the daemon's peak of memory, bench case 6) is never made."""
    _configmap(tmp_path / "cm.yaml", "a")
    source = DesiredSource(SourceOptions(repo=str(tmp_path)), debounce=0.05)
    first = source.load()
    assert first is not None and source.render_cache.misses == 1
    checkout, objects, digest = first
    again = source.load()  # nothing held yet: served (decoded), the same identity as the render it stored
    assert again is not None and again[2] == digest and source.render_cache.hits == 1
    assert [o.manifest for o in again[1]] == [o.manifest for o in objects]
    source.state = desired.DesiredState(checkout, [], digest, {}, desired.TrackedPaths({}))
    decoded: list[str] = []  # keys of entries decoded

    def get(store: rendercache.MemoryStore, key: str) -> Any:
        found = real_get(store, key)
        if found is not None:
            decoded.append(key)
        return found

    real_get = rendercache.MemoryStore.get
    monkeypatch.setattr(rendercache.MemoryStore, "get", get)
    source.wait_before_acting("pending")
    assert source.load() is None and decoded == [] and not source.settling  # held: nothing decoded, nothing pending
    _configmap(tmp_path / "cm.yaml", "b")
    changed = source.load()
    assert changed is not None and changed[2] != digest and changed[1][0].manifest["data"] == {"k": "b"}
    _configmap(tmp_path / "cm.yaml", "a")  # back at the state held: served from its entry without a decode
    assert source.load() is None and decoded == []


def test_a_render_in_no_cache_entry_is_known_by_its_objects(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(rendercache.MemoryStore, "put", lambda store, key, objects: None)  # nothing stored
    _configmap(tmp_path / "cm.yaml", "a")
    source = DesiredSource(SourceOptions(repo=str(tmp_path)), debounce=0.05)
    first = source.load()
    assert first is not None and source.render_cache.digest is None
    assert first[2] == desired.digest(first[0].revision, first[1])
    source.state = desired.DesiredState(first[0], [], first[2], {}, desired.TrackedPaths({}))
    assert source.load() is None and source.render_cache.misses == 2  # rendered again, and known as the same


def test_the_second_look_at_a_work_tree_gets_the_first_reads_objects_back_not_a_decoded_copy(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """At start (and at every change of a work tree) the source is read twice, `debounce` apart; at 20,000
    objects decoding the same entry again took ~0.5 s before the first pass could start."""
    _configmap(tmp_path / "cm.yaml", "a")
    source = DesiredSource(SourceOptions(repo=str(tmp_path)), debounce=0.01)
    first = source.load()
    assert first is not None and source.wait_before_acting(first[2]) > 0
    decoded: list[str] = []
    real_get = rendercache.MemoryStore.get

    def get(store: rendercache.MemoryStore, key: str) -> Any:
        found = real_get(store, key)
        if found is not None:
            decoded.append(key)
        return found

    monkeypatch.setattr(rendercache.MemoryStore, "get", get)
    time.sleep(0.06)  # the quiet period is 0.05 s at least
    second = source.load()
    assert second is not None and second[2] == first[2] and second[1] is first[1] and decoded == []
    assert source.wait_before_acting(second[2]) == 0.0 and not source.settling
    # Taken: a later read that finds the same entry without a state held decodes it (nothing kept twice).
    third = source.load()
    assert third is not None and third[1] is not first[1] and len(decoded) == 1


def test_a_second_look_that_finds_the_tree_changed_renders_it_anew(tmp_path: Path) -> None:
    _configmap(tmp_path / "cm.yaml", "a")
    source = DesiredSource(SourceOptions(repo=str(tmp_path)), debounce=0.01)
    first = source.load()
    assert first is not None and source.wait_before_acting(first[2]) > 0
    _configmap(tmp_path / "cm.yaml", "b")  # written again during the quiet period
    second = source.load()
    assert second is not None and second[2] != first[2] and second[1][0].manifest["data"] == {"k": "b"}
    assert source.wait_before_acting(second[2]) > 0  # the new content gets its own quiet period
