"""A body the watch cache keeps (daemon/runtime/kept.py: interned strings, managedFields entries shared between
objects) answers every reader exactly as the object decoded from the API server does.

The objects in live/ were read from the local control plane (`kubectl get -o json --show-managed-fields`):
a Deployment the daemon applied, with the status kube-controller-manager wrote; a Deployment scaled by
kubectl; a Service annotated by hand; a ConfigMap labelled by hand (the bench workload's objects 0-2)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.workload import manifest
from gitops_sync import health
from gitops_sync.apply import takeover
from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.reconcile.history import OwnershipHistory, tracked_paths
from gitops_sync.daemon.reconcile.reporter import fingerprint
from gitops_sync.daemon.runtime import kept
from gitops_sync.plan import autoscaler, ownership, planner, terminating
from gitops_sync.plan.normalize import prepare_desired
from gitops_sync.resource import ObjectKey

LIVE = sorted((Path(__file__).parent / "live").glob("*.json"))
MANAGER = "gitops-sync"
INFOS = {
    "ConfigMap": ResourceInfo("", "v1", "ConfigMap", "configmaps", True),
    "Service": ResourceInfo("", "v1", "Service", "services", True),
    "Deployment": ResourceInfo("apps", "v1", "Deployment", "deployments", True),
}


def _kept(raw: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads(raw)
    kept.compact(obj)
    return obj


def _target(live: dict[str, Any], **changes: Any) -> planner.Target:
    """What Git declares for this object: the bench workload's manifest of the same number, `changes` applied."""
    meta = live["metadata"]
    body = manifest(int(meta["name"].rsplit("-", 1)[1]))
    body["metadata"]["namespace"] = meta["namespace"]
    for dotted, value in changes.items():
        node = body
        *parents, last = dotted.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    body = prepare_desired(body)
    return planner.Target(ObjectKey.of(body), INFOS[body["kind"]], body, origin="objs.yaml#0")


def _answers(live: dict[str, Any]) -> dict[str, Any]:
    """Every decision a pass, a report, health, history and prune make from a live object."""
    kind = live["kind"]
    same = _target(live)
    changed = _target(live, **{"metadata.labels.team": "git"})
    result = copy.deepcopy(live)  # a dry-run answer that changes a field Git sets, and one nobody does
    result["metadata"]["labels"]["team"] = "git"
    result.setdefault("spec" if kind != "ConfigMap" else "data", {})["added"] = "by-the-server"
    conflicts = [
        ownership.Conflict(f".metadata.labels.{k}", e["manager"], e["operation"], e.get("subresource", ""), "v1")
        for e in live["metadata"]["managedFields"]
        if e["manager"] != MANAGER
        for k in ("app",)
    ]
    history = OwnershipHistory(clock=lambda: 1000.0)
    history.observe(same.key, tracked_paths(same.manifest), live)
    return {
        "unchanged": planner.is_unchanged(same, live, MANAGER),
        "unchanged-after-git-change": planner.is_unchanged(changed, live, MANAGER),
        "plan": planner.explain(changed, live, result, MANAGER, dry_run=True).to_dict(),
        "plan-fast-path": planner.explain(same, live, live, MANAGER, dry_run=False).to_dict(),
        "conflicts": planner.explain(changed, live, None, MANAGER, conflicts=conflicts, dry_run=True).to_dict(),
        "create-only": planner.create_only_entry(same, live, MANAGER, dry_run=True).to_dict(),
        "owners": [(e.identity, e.api_version, e.time, sorted(e.owned_paths)) for e in ownership.managed_fields(live)],
        "autoscaled": autoscaler.scaled_by_controller_manager(live),
        "health": str(health.assess(live)),
        "terminating": terminating.terminating(live, in_git=False),
        "fingerprint": fingerprint(live),
        "history": {p: [r.to_dict() for r in rs] for p, rs in history.fields(same.key).items()},
    }


@pytest.mark.parametrize("path", LIVE, ids=lambda p: p.stem)
def test_a_kept_body_is_the_same_document_and_shares_its_entries(path: Path) -> None:
    raw = path.read_bytes()
    first, second = _kept(raw), _kept(raw)
    assert orjson.dumps(first) == orjson.dumps(orjson.loads(raw))  # same content, same key order
    entries = first["metadata"]["managedFields"]
    assert len(entries) >= 2
    for a, b in zip(entries, second["metadata"]["managedFields"], strict=True):
        assert a is b  # the second object holds the first one's entries, not copies


@pytest.mark.parametrize("path", LIVE, ids=lambda p: p.stem)
def test_every_reader_answers_the_same_for_a_kept_body(path: Path) -> None:
    raw = path.read_bytes()
    _kept(raw)  # another object of the same shape seen first: the body below is made of shared parts
    full, compact = orjson.loads(raw), _kept(raw)
    answers = _answers(compact)
    assert answers == _answers(full)
    assert answers["plan"]["drift"]  # the comparison has something to compare
    assert compact == full  # and no reader changed the shared parts


def test_entries_differing_only_in_time_share_their_trie_not_the_entry() -> None:
    raw = LIVE[0].read_bytes()
    a, b = _kept(raw), orjson.loads(raw)
    b["metadata"]["managedFields"][0]["time"] = "2099-01-01T00:00:00Z"
    kept.compact(b)
    ea, eb = a["metadata"]["managedFields"][0], b["metadata"]["managedFields"][0]
    assert ea is not eb and ea["time"] != eb["time"]
    assert ea["fieldsV1"] is eb["fieldsV1"]


def test_equal_but_differently_typed_values_are_never_shared() -> None:
    one = {"metadata": {"managedFields": [{"manager": "m", "fieldsV1": {"f:a": 1}}]}}
    true = {"metadata": {"managedFields": [{"manager": "m", "fieldsV1": {"f:a": True}}]}}
    kept.compact(one)
    kept.compact(true)
    assert true["metadata"]["managedFields"][0]["fieldsV1"]["f:a"] is True


class _Recorder:
    def __init__(self) -> None:
        self.bodies: list[Any] = []

    def request(self, method: str, path: str, **kw: Any) -> None:
        self.bodies.append(kw.get("body"))


def test_takeover_of_kubectl_apply_leaves_the_kept_body_as_it_was() -> None:
    raw = next(p for p in LIVE if p.stem.startswith("configmap")).read_bytes()
    live = orjson.loads(raw)
    live["metadata"]["managedFields"].append(
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:extra": {}}},
        }
    )
    kept.compact(live)
    before = copy.deepcopy(live)
    client = _Recorder()
    assert takeover.upgrade(client, _target(live), live, MANAGER)  # type: ignore[arg-type]
    assert live == before
    (ops,) = client.bodies
    ours = next(e for e in ops[1]["value"] if e["manager"] == MANAGER)
    assert "f:extra" in ours["fieldsV1"]["f:data"]


def _numbered(raw: bytes, old: str, new: str) -> dict[str, Any]:
    """Another object of the same template: its number (names, labels, selector, SHARD) replaced."""
    return _kept(raw.replace(f"-{old}".encode(), f"-{new}".encode()).replace(f'"{old}"'.encode(), f'"{new}"'.encode()))


def test_maps_and_lists_outside_metadata_are_shared_between_objects_of_one_template() -> None:
    raw = next(p for p in LIVE if p.stem == "deployment").read_bytes()
    a, b = _numbered(raw, "1001", "7"), _numbered(raw, "1001", "8")
    assert orjson.dumps(b) == orjson.dumps(orjson.loads(raw.replace(b"-1001", b"-8").replace(b'"1001"', b'"8"')))
    pod_a, pod_b = a["spec"]["template"]["spec"], b["spec"]["template"]["spec"]
    assert a["spec"]["strategy"] is b["spec"]["strategy"]
    assert pod_a["containers"][0]["ports"] is pod_b["containers"][0]["ports"]
    assert pod_a["containers"][0]["resources"] is pod_b["containers"][0]["resources"]
    assert pod_a["containers"][0]["env"] is not pod_b["containers"][0]["env"]  # SHARD differs
    assert pod_a is not pod_b and a["spec"]["selector"] is not b["spec"]["selector"]
    assert a["metadata"]["annotations"] is not b["metadata"]["annotations"]  # metadata is left as it is
    assert a["metadata"]["labels"]["bench.gitops-sync.io/set"] is b["metadata"]["labels"]["bench.gitops-sync.io/set"]


@pytest.mark.parametrize("values", [(1, True), (1, 1.0), (0.0, -0.0), ("1", 1), (None, {}), ([], {})])
def test_maps_of_equal_but_differently_typed_or_spelled_values_are_never_shared(values: tuple[Any, Any]) -> None:
    first, second = ({"spec": {"x": {"v": v}, "l": [v]}} for v in values)
    kept.share_nodes(first)
    kept.share_nodes(second)
    assert orjson.dumps(second) == orjson.dumps({"spec": {"x": {"v": values[1]}, "l": [values[1]]}})
    assert second["spec"]["x"] is not first["spec"]["x"] and second["spec"]["l"] is not first["spec"]["l"]


def test_maps_with_the_same_items_in_another_order_are_not_shared() -> None:
    first, second = {"data": {"a": "1", "b": "2"}}, {"data": {"b": "2", "a": "1"}}
    kept.share_nodes(first)
    kept.share_nodes(second)
    assert list(second["data"]) == ["b", "a"]


def test_desired_manifests_share_among_themselves_never_with_a_kept_body() -> None:
    live = _kept(next(p for p in LIVE if p.stem == "service-annotated").read_bytes())
    one, two = prepare_desired(manifest(4)), prepare_desired(manifest(7))
    before = orjson.dumps(two)
    kept.compact_desired(one)
    kept.compact_desired(two)
    assert orjson.dumps(two) == before
    assert one["spec"]["ports"] is two["spec"]["ports"] and one["spec"]["selector"] is not two["spec"]["selector"]
    assert one["metadata"]["labels"] is not two["metadata"]["labels"]
    assert two["spec"]["ports"][0]["protocol"] is live["spec"]["ports"][0]["protocol"]  # interned
    assert two["spec"]["ports"] == live["spec"]["ports"]  # equal, and still not the live body's
    assert two["spec"]["ports"] is not live["spec"]["ports"]
