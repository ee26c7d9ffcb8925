"""The registry's index of who wants which object (fleet/registry.py: `reindex_clusters`), kept source by
source: a source whose desired state did not change is not indexed again, and the union each cluster's
watch cache is given, and the sources an object's events go to, stay what a full recount would say."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.fleet.registry import Registry
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey

CM = ResourceInfo("", "v1", "ConfigMap", "configmaps", True)


def key(name: str) -> ObjectKey:
    return ObjectKey("", "ConfigMap", "ns", name)


def targets(*names: str) -> list[Target]:
    return [Target(key(n), CM, {}, "test") for n in names]


def source(ts: list[Target] | None, remote: str = "") -> Any:
    """A record as the registry reads it: its reconciler's current state, its remote cluster."""
    state = None if ts is None else SimpleNamespace(targets=ts)
    return SimpleNamespace(
        reconciler=SimpleNamespace(current=state), remote=SimpleNamespace(key=remote) if remote else None
    )


def refs_wanting(reg: Registry, name: str, cluster: str = "") -> list[str]:
    return [r for r, _ in reg.wanting(key(name), cluster)]


def test_the_union_and_the_wanting_sources_follow_each_change_of_one_source() -> None:
    reg = Registry()
    a, b = targets("x", "shared"), targets("y", "shared")
    reg.put("ns/a", source(a))
    reg.put("ns/b", source(b))
    reg.put("ns/loading", source(None))  # not loaded yet: wants nothing
    union = reg.reindex_clusters()
    assert set(union) == {""} and set(union[""]) == {key("x"), key("y"), key("shared")}
    assert any(union[""][key("shared")] is t for t in (a[1], b[1])), "one wanting source's target of it"
    assert refs_wanting(reg, "shared") == ["ns/a", "ns/b"]
    # a's new revision drops x and shared: b's target of shared takes over; x is nobody's.
    a2 = targets("z")
    reg.put("ns/a", source(a2))
    union = reg.reindex_clusters()
    assert set(union[""]) == {key("y"), key("shared"), key("z")}
    assert union[""][key("shared")] is b[1]
    assert refs_wanting(reg, "shared") == ["ns/b"] and refs_wanting(reg, "x") == []
    # b goes away; a source on a remote cluster comes; its objects are that cluster's.
    reg.drop("ns/b")
    reg.put("ns/far", source(targets("y"), remote="cluster-1"))
    union = reg.reindex_clusters()
    assert set(union[""]) == {key("z")} and set(union["cluster-1"]) == {key("y")}
    assert refs_wanting(reg, "y") == [] and refs_wanting(reg, "y", "cluster-1") == ["ns/far"]
    reg.drop("ns/far")
    assert set(reg.reindex_clusters()) == {""}, "a cluster nobody targets any more has no union"


def test_a_source_that_loads_in_place_is_indexed_again_when_named_and_only_then() -> None:
    reg = Registry()
    rec = source(targets("x"))
    reg.put("ns/a", rec)
    reg.reindex_clusters()
    rec.reconciler.current = SimpleNamespace(targets=targets("y"))  # its reconciler took a new revision
    assert set(reg.reindex_clusters()[""]) == {key("x")}, "not named, not looked at"
    assert set(reg.reindex_clusters("ns/a")[""]) == {key("y")}
    assert refs_wanting(reg, "y") == ["ns/a"] and refs_wanting(reg, "x") == []


def test_the_copy_handed_out_does_not_change_with_the_index() -> None:
    reg = Registry()
    reg.put("ns/a", source(targets("x")))
    first = reg.reindex_clusters()[""]
    reg.put("ns/b", source(targets("y")))
    reg.reindex_clusters()
    assert set(first) == {key("x")}


def test_indexing_one_loaded_source_costs_the_same_whatever_the_fleet_holds() -> None:
    # Measured at two sizes: the old full recount grew with every source's objects (O(N^2) over a cold start).
    def one_load(n: int) -> float:
        reg = Registry()
        for i in range(n):
            reg.put(f"ns/s{i}", source(targets(*(f"s{i}-{j}" for j in range(10)))))
        reg.reindex_clusters()
        rec = reg.get("ns/s0")
        rec.reconciler.current = SimpleNamespace(targets=targets(*(f"new-{j}" for j in range(10))))
        t0 = time.perf_counter()
        reg.reindex_clusters("ns/s0")
        return time.perf_counter() - t0

    small, big = min(one_load(200) for _ in range(3)), min(one_load(2000) for _ in range(3))
    # 10x the objects: only the copy of the union grows (dict.copy, C); a recount of everything grew 10x in
    # Python (66 ms at 20,000 objects); bounds loose enough for a loaded 2-core machine.
    assert big < 0.02, (small, big)


def test_reindex_hands_the_local_cache_only_what_changed_since_the_last_call() -> None:
    reg = Registry()
    a, b = targets("x", "shared"), targets("shared")
    reg.put("ns/a", source(a))
    reg.put("ns/b", source(b))
    reg.put("ns/far", source(targets("y"), remote="cluster-1"))
    first = reg.reindex()
    assert set(first.local.added) == {key("x"), key("shared")} and not first.local.removed
    assert set(first.remote) == {"cluster-1"} and set(first.remote["cluster-1"]) == {key("y")}
    assert not reg.reindex().local.added, "nothing changed: nothing to tell"
    reg.put("ns/a", source(targets("z")))
    change = reg.reindex().local
    assert change.removed == {key("x")}, "shared is still b's"
    assert set(change.added) == {key("z"), key("shared")} and change.added[key("shared")] is b[0]
    reg.drop("ns/b")
    assert reg.reindex().local.removed == {key("shared")}
