"""Field-ownership history and fight detection from what the watch shows (managedFields + values)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from bench.workload import manifest
from gitops_sync.conventions import MASK
from gitops_sync.daemon.reconcile.history import OwnershipHistory, is_fight, tracked_paths
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import FakeClock

KEY = ObjectKey("apps", "Deployment", "ns", "web")
REPLICAS = {"f:spec": {"f:replicas": {}}}
IMAGE = {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"web"}': {"f:image": {}}}}}}}


def mf(manager: str, fields: dict[str, Any], *, op: str = "Update", sub: str = "", at: str = "") -> dict[str, Any]:
    entry = {
        "manager": manager,
        "operation": op,
        "apiVersion": "apps/v1",
        "time": at or "2024-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if sub:
        entry["subresource"] = sub
    return entry


def deployment(replicas: int, managed: list[dict[str, Any]], rv: int, image: str = "web:1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "resourceVersion": str(rv), "managedFields": managed},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
    }


PATHS = [".spec.replicas", '.spec.template.spec.containers[name="web"].image']


def test_tracked_paths_skip_identity_and_bookkeeping() -> None:
    desired = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "x",
            "namespace": "ns",
            "labels": {"app": "x", "applyset.kubernetes.io/part-of": "id"},
            "annotations": {"gitops-sync.io/intent-hash": "h"},
        },
        "data": {"a": "1"},
    }
    assert tracked_paths(desired) == [".metadata.labels.app", ".data.a"]


def test_helm_then_kubectl_scale_then_helm_then_kubectl_is_a_fight_with_both_managers() -> None:
    clock = FakeClock()
    h = OwnershipHistory(clock=clock.wall)
    both = {"f:spec": {"f:replicas": {}, "f:template": IMAGE["f:spec"]["f:template"]}}
    assert h.observe(KEY, PATHS, deployment(3, [mf("helm", both)], 1)) == []
    clock.advance(10)
    scaled = [mf("helm", IMAGE), mf("kubectl", REPLICAS, sub="scale", at="2024-01-01T00:00:10Z")]
    assert h.observe(KEY, PATHS, deployment(10, scaled, 2)) == []
    clock.advance(10)
    assert h.observe(KEY, PATHS, deployment(3, [mf("helm", both, at="2024-01-01T00:00:20Z")], 3)) == [], (
        "one return is not a fight yet: kubectl took it only once"
    )
    clock.advance(10)
    fights = h.observe(KEY, PATHS, deployment(10, scaled, 4))
    assert len(fights) == 1
    f = fights[0]
    assert f.path == ".spec.replicas"
    assert f.managers == ["helm", "kubectl"]
    assert [r.value for r in f.records] == [3, 10, 3, 10]
    assert [(r.operation, r.subresource) for r in f.records][:2] == [("Update", ""), ("Update", "scale")]
    assert "helm and kubectl" in f.message() and "4 changes" in f.message()
    doc = f.to_dict()
    assert doc["field"] == ".spec.replicas" and doc["managers"] == ["helm", "kubectl"]
    assert [v["value"] for v in doc["values"]] == [3, 10, 3, 10]
    assert h.fights() == [f]
    # the image never changed: one record only
    assert len(h.fields(KEY)['.spec.template.spec.containers[name="web"].image']) == 1


def test_each_further_change_in_a_fight_is_reported_once() -> None:
    clock = FakeClock()
    h = OwnershipHistory(clock=clock.wall)
    seq = [("helm", 3), ("kubectl", 10), ("helm", 3), ("kubectl", 10), ("helm", 3)]
    reported = []
    for rv, (manager, value) in enumerate(seq, 1):
        clock.advance(1)
        reported.append(len(h.observe(KEY, [".spec.replicas"], deployment(value, [mf(manager, REPLICAS)], rv))))
    assert reported == [0, 0, 0, 1, 1]
    # the same object seen again (status update): no new record, no new report
    assert h.observe(KEY, [".spec.replicas"], deployment(3, [mf("helm", REPLICAS)], 99)) == []


def test_one_edit_reverted_by_self_heal_is_drift_not_a_fight_but_a_repeated_edit_is() -> None:
    clock = FakeClock()
    h = OwnershipHistory(clock=clock.wall)
    ours = mf("gitops-sync", REPLICAS, op="Apply")
    h.observe(KEY, [".spec.replicas"], deployment(3, [ours], 1))
    assert h.observe(KEY, [".spec.replicas"], deployment(5, [mf("kubectl-edit", REPLICAS)], 2)) == []
    assert h.observe(KEY, [".spec.replicas"], deployment(3, [ours], 3)) == []
    fights = h.observe(KEY, [".spec.replicas"], deployment(5, [mf("kubectl-edit", REPLICAS)], 4))
    assert [f.managers for f in fights] == [["gitops-sync", "kubectl-edit"]]


def test_old_changes_fall_out_of_the_window() -> None:
    clock = FakeClock()
    h = OwnershipHistory(clock=clock.wall, window=60)
    for rv, (manager, value) in enumerate([("helm", 3), ("kubectl", 10), ("helm", 3)], 1):
        h.observe(KEY, [".spec.replicas"], deployment(value, [mf(manager, REPLICAS)], rv))
        clock.advance(100)  # each change more than a window apart
    assert h.observe(KEY, [".spec.replicas"], deployment(10, [mf("kubectl", REPLICAS)], 4)) == []
    assert h.fights() == []


def test_secret_values_are_never_stored() -> None:
    h = OwnershipHistory()
    key = ObjectKey("", "Secret", "ns", "s")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "s",
            "namespace": "ns",
            "resourceVersion": "1",
            "managedFields": [mf("kubectl-edit", {"f:data": {"f:password": {}}})],
        },
        "data": {"password": "c2VjcmV0"},
    }
    h.observe(key, [".data.password"], secret)
    records = h.fields(key)[".data.password"]
    assert records[0].value == MASK and records[0].manager == "kubectl-edit"
    assert "c2VjcmV0" not in str(h.to_dict())


def test_forget_drops_history_and_fights() -> None:
    h = OwnershipHistory()
    for rv, (manager, value) in enumerate([("a", 1), ("b", 2), ("a", 1), ("b", 2)], 1):
        h.observe(KEY, [".spec.replicas"], deployment(value, [mf(manager, REPLICAS)], rv))
    assert h.fights()
    other = ObjectKey("apps", "Deployment", "ns", "api")
    h.forget([other])
    assert [f.key for f in h.fights()] == [KEY], "only the objects named are forgotten"
    h.forget(k for k in [other, KEY])  # any iterable, read once
    assert h.fights() == [] and h.to_dict() == []


def test_is_fight_needs_two_managers_each_taking_the_field_twice() -> None:
    assert not is_fight(["a", "b", "a"])
    assert is_fight(["a", "b", "a", "b"])
    assert not is_fight(["a", "a", "b", "b"])
    assert is_fight(["a", "b", "c", "a", "b"])
    assert not is_fight([])


def test_status_history_keeps_fields_that_changed_unless_all_are_asked_for() -> None:
    h = OwnershipHistory(clock=FakeClock().wall)
    both = {"f:spec": {"f:replicas": {}, "f:template": IMAGE["f:spec"]["f:template"]}}
    h.observe(KEY, PATHS, deployment(3, [mf("helm", both)], 1))
    assert h.to_dict() == []  # seen once: no history worth a line in /status
    full = h.to_dict(changed_only=False)
    assert set(full[0]["fields"]) == set(PATHS)
    h.observe(KEY, PATHS, deployment(10, [mf("helm", IMAGE), mf("kubectl", REPLICAS, sub="scale")], 2))
    (changed,) = h.to_dict()
    assert list(changed["fields"]) == [".spec.replicas"]
    assert [r["value"] for r in changed["fields"][".spec.replicas"]] == [3, 10]


def test_an_observed_object_has_its_managed_fields_read_once_not_once_per_field(monkeypatch: Any) -> None:
    # The watch shows every object the daemon creates: at 20,000 objects, reading managedFields again for
    # each of an object's fields was most of the watch threads' time during a cold apply.
    from gitops_sync.plan import ownership

    reads: list[object] = []
    real = ownership.managed_fields

    def counting(obj: Any) -> list[ownership.ManagedFieldsEntry]:
        reads.append(obj)
        return real(obj)

    monkeypatch.setattr(ownership, "managed_fields", counting)
    h = OwnershipHistory(clock=FakeClock().wall)
    both = mf("gitops-sync", {"f:spec": {**REPLICAS["f:spec"], **IMAGE["f:spec"]}}, op="Apply")
    h.observe(KEY, PATHS, deployment(3, [both], rv=1))
    assert len(reads) == 1
    assert [r.manager for p in PATHS for r in h.fields(KEY)[p]] == ["gitops-sync", "gitops-sync"]
    h.observe(KEY, PATHS, deployment(3, [both], rv=2))  # nothing changed: nothing to attribute
    assert len(reads) == 1


def test_a_tracked_path_is_parsed_once_for_every_object_that_has_it(monkeypatch: Any) -> None:
    from gitops_sync.daemon.reconcile import history
    from gitops_sync.plan import fieldpath

    parsed: list[str] = []
    real = fieldpath.parse

    def counting(text: str) -> fieldpath.Path:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(fieldpath, "parse", counting)
    history._parsed.cache_clear()
    h = OwnershipHistory(clock=FakeClock().wall)
    both = mf("gitops-sync", {"f:spec": {**REPLICAS["f:spec"], **IMAGE["f:spec"]}}, op="Apply")
    for name in ("a", "b", "c"):
        h.observe(ObjectKey("apps", "Deployment", "ns", name), PATHS, deployment(3, [both], rv=1))
    assert sorted(parsed) == sorted(PATHS)
    assert h.fields(ObjectKey("apps", "Deployment", "ns", "c"))[PATHS[0]][0].manager == "gitops-sync"


def test_the_history_of_a_field_seen_once_is_its_record_alone() -> None:
    """500 Deployments of the bench workload (a real live object, tracemalloc): the history of their 11
    fields cost 4.5 kB per object with a list and a _FieldHistory around each record and paths of their own;
    1.9 kB with a field's single record alone and the paths interned (shared between the objects)."""
    raw = (Path(__file__).parents[1] / "runtime" / "live" / "deployment.json").read_bytes()
    n = 500
    lives = [orjson.loads(raw) for _ in range(n)]
    desired = [{**manifest(3 * i + 2), "metadata": {"name": f"d{i}", "namespace": "ns"}} for i in range(n)]
    history = OwnershipHistory()
    tracemalloc.start()
    try:
        for i in range(n):
            key = ObjectKey("apps", "Deployment", "ns", f"d{i}")
            history.observe(key, tracked_paths(desired[i]), lives[i])
        per_object = tracemalloc.get_traced_memory()[0] / n
    finally:
        tracemalloc.stop()
    assert len(history.fields(ObjectKey("apps", "Deployment", "ns", "d0"))) == len(tracked_paths(desired[0])) == 11
    assert per_object < 3000, per_object
