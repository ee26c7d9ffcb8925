"""foreign.co_owners: other managers' fields among ours, computed on the cut of `desired` to the top-level
fields they own (foreign._within) — always the same answer as the whole object's leaf paths."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gitops_sync.plan import fieldpath, foreign, ownership, planner

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}, "annotations": {"team": "a"}},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1", "ports": [{"containerPort": 80}]}]},
        },
    },
}


def _entry(manager: str, operation: str, fields: dict[str, Any], subresource: str = "") -> dict[str, Any]:
    out = {"manager": manager, "operation": operation, "apiVersion": "apps/v1", "fieldsType": "FieldsV1"}
    out["fieldsV1"] = fields
    if subresource:
        out["subresource"] = subresource
    return out


OURS = _entry("gitops-sync", "Apply", {"f:spec": {"f:replicas": {}, "f:template": {}}})
CONTROLLER = _entry(
    "kube-controller-manager",
    "Update",
    {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}, "f:status": {"f:replicas": {}}},
    "status",
)
SCALE = _entry("kubectl", "Update", {"f:spec": {"f:replicas": {}}}, "scale")
EDIT = _entry(
    "kubectl-edit",
    "Update",
    {
        "f:metadata": {"f:annotations": {"f:team": {}}},
        "f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"app"}': {"f:image": {}}}}}},
    },
)
ODD = _entry("odd", "Update", {"f:we.ird": {}, "f:spec": {"f:replicas": {}}})


def _reference(desired: dict[str, Any], live: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """What co_owners answered before the cut: every leaf path of the whole object."""
    ours = {p for p in fieldpath.leaf_paths(desired) if p not in planner.BOOKKEEPING}
    out = []
    for mf in ownership.managed_fields(live):
        if mf.manager == "gitops-sync" and mf.operation == "Apply":
            continue
        shared = sorted(ours & mf.owned_paths)
        if shared:
            out.append((mf.manager, shared))
    return out


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([OURS], []),
        ([OURS, CONTROLLER], []),
        ([OURS, CONTROLLER, SCALE], [("kubectl", [".spec.replicas"])]),
        (
            [OURS, EDIT],
            [("kubectl-edit", [".metadata.annotations.team", '.spec.template.spec.containers[name="app"].image'])],
        ),
        ([OURS, ODD], [("odd", [".spec.replicas"])]),
    ],
)
def test_the_cut_answers_as_the_whole_object(entries: list[dict[str, Any]], expected: list[Any]) -> None:
    desired = json.loads(json.dumps(DEPLOYMENT))
    live = json.loads(json.dumps(DEPLOYMENT))
    live["metadata"]["managedFields"] = entries
    got = [(o.manager, o.fields) for o in foreign.co_owners(desired, live, "gitops-sync")]
    assert got == expected
    assert got == _reference(desired, live)


def test_the_cut_keeps_only_owned_top_level_fields_and_kind() -> None:
    live = {"metadata": {"managedFields": [CONTROLLER]}}
    others = ownership.managed_fields(live)
    assert sorted(foreign._within(DEPLOYMENT, others)) == ["kind", "metadata"]


def test_a_field_name_with_a_dot_is_kept() -> None:
    """`.we.ird` may be field `we.ird` or `ird` under `we`: both are kept, nothing shared is lost."""
    desired = {**DEPLOYMENT, "we.ird": "x", "we": {"ird": "y"}}
    live = {**desired, "metadata": {"managedFields": [OURS, ODD]}}
    assert sorted(foreign._within(desired, ownership.managed_fields(live)[1:])) == ["kind", "spec", "we", "we.ird"]
    got = [(o.manager, o.fields) for o in foreign.co_owners(desired, live, "gitops-sync")]
    assert got == _reference(desired, live) == [("odd", [".spec.replicas", ".we.ird"])]
