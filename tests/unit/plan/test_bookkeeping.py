"""Our own bookkeeping (membership label, intent hash, adopted marker) is never drift or a conflict."""

from __future__ import annotations

import copy
from typing import Any

from gitops_sync.conventions import ADOPTED, PART_OF
from gitops_sync.plan import bookkeeping, ownership, planner
from gitops_sync.plan.changeset import Action
from gitops_sync.plan.masking import MASK, VALUES_DIFFER
from tests.unit.fakes import StaticDiscovery, cm, objs


def target(manifest: dict[str, Any], live: dict[str, Any] | None) -> planner.Target:
    (t,) = planner.resolve(objs(manifest), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, live, "applyset-x-v1")
    return t


def test_a_live_object_without_labels_or_annotations_shows_no_metadata_difference() -> None:
    """Before: `.metadata.annotations` (hash + adopted marker) and `.metadata.labels` were listed as drift."""
    live = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}}
    t = target(cm("a", k="v"), live)
    assert ADOPTED in t.manifest["metadata"]["annotations"]  # still written
    entry = planner.explain(t, live, t.manifest, "gitops-sync", dry_run=True)
    assert entry.drift == [] and entry.conflicts == []
    assert entry.action is Action.UPDATE and "record gitops-sync ownership" in entry.message


def test_other_labels_and_annotations_are_still_compared() -> None:
    desired = cm("a", k="v")
    desired["metadata"]["labels"] = {"team": "x"}
    live = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}}
    t = target(desired, live)
    entry = planner.explain(t, live, t.manifest, "gitops-sync", dry_run=True)
    assert [(d.path, d.desired) for d in entry.drift] == [(".metadata.labels", {"team": "x"})]  # ours left out


def test_a_bookkeeping_only_change_is_no_field_difference() -> None:
    t = target(cm("a", k="v"), None)
    live = copy.deepcopy(t.manifest)
    del live["metadata"]["labels"][PART_OF]  # someone removed our label
    entry = planner.explain(t, live, t.manifest, "gitops-sync", dry_run=True)
    assert entry.drift == [] and entry.action is Action.UPDATE
    same = planner.explain(t, copy.deepcopy(t.manifest), t.manifest, "gitops-sync", dry_run=True)
    assert same.action is Action.UNCHANGED


def test_conflicts_over_bookkeeping_are_not_conflicts() -> None:
    hash_conflict = ownership.Conflict(
        ".metadata.annotations.gitops-sync.io/intent-hash", "gitops-sync", "Apply", "", ""
    )
    data_conflict = ownership.Conflict(".data.k", "gitops-sync", "Apply", "", "")
    assert bookkeeping.is_bookkeeping_conflict(hash_conflict)
    assert not bookkeeping.is_bookkeeping_conflict(data_conflict)


def test_a_secret_value_that_differs_says_so() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"password": "new"}}
    (t,) = planner.resolve(objs(secret), StaticDiscoveryWithSecret(), "ns")
    bookkeeping.finalize(t, None, "id")
    live = copy.deepcopy(t.manifest)
    live["data"]["password"] = "b2xk"
    live["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-edit",
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:password": {}}},
        },
    ]
    conflict = ownership.Conflict(".data.password", "kubectl-edit", "Update", "", "v1")
    entry = planner.explain(t, live, t.manifest, "gitops-sync", conflicts=[conflict], dry_run=True)
    (c,) = entry.conflicts
    assert (c.desired, c.live) == (MASK, VALUES_DIFFER)
    assert "b2xk" not in str(entry.to_dict()) and "new" not in str(c.to_dict())


class StaticDiscoveryWithSecret(StaticDiscovery):
    def __init__(self) -> None:
        super().__init__()
        info = planner.ResourceInfo("", "v1", "Secret", "secrets", True)
        self._by_gvk[("", "v1", "Secret")] = info
        self._preferred[("", "Secret")] = info
