"""A change that only moves our ownership (the value already equals Git) is not a difference."""

from __future__ import annotations

import copy
from typing import Any

from gitops_sync.conventions import INTENT_HASH
from gitops_sync.plan import planner
from gitops_sync.plan.changeset import Action
from tests.unit.plan.test_planner import StaticDiscovery, cm, objs


def owned(obj: dict[str, Any], fields: dict[str, Any], hash_: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["annotations"] = {INTENT_HASH: hash_}
    out["metadata"]["managedFields"] = [
        {"manager": "gitops-sync", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields}
    ]
    return out


def test_git_writing_down_the_live_value_is_ownership_only_not_an_update() -> None:
    (t,) = planner.resolve(objs(cm("a", k="v", d="default")), StaticDiscovery(), "ns")
    base = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "ns"},
        "data": {"k": "v", "d": "default"},
    }
    live = owned(base, {"f:data": {"f:k": {}}}, "old")
    result = owned(base, {"f:data": {"f:k": {}, "f:d": {}}}, "new")
    entry = planner.explain(t, live, result, "gitops-sync", dry_run=True)
    assert entry.action is Action.UNCHANGED and entry.drift == []
    assert entry.message == (
        "ownership only: would record gitops-sync ownership of .data.d (live value already equals Git)"
    )
    released = planner.explain(t, result, live, "gitops-sync", dry_run=False)
    assert released.action is Action.UNCHANGED
    assert released.message == "ownership only: release .data.d (the value stays)"
