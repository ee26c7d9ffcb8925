"""`diff` sees the deletions `sync` makes when it takes over `kubectl apply` (client-side) fields."""

from __future__ import annotations

from typing import Any

from gitops_sync.plan import client_side
from gitops_sync.plan.diff import diff_objects

CSA = {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1"}
OURS = {"manager": "gitops-sync", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1"}
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def configmap(data: dict[str, str], managed: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "ns", "annotations": {LAST_APPLIED: "{}"}, "managedFields": managed},
        "data": dict(data),
    }


def csa_fields(*keys: str) -> dict[str, Any]:
    return {
        **CSA,
        "fieldsV1": {
            "f:data": {".": {}, **{f"f:{k}": {} for k in keys}},
            "f:metadata": {"f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}}},
        },
    }


def ours(*keys: str) -> dict[str, Any]:
    return {**OURS, "fieldsV1": {"f:data": {f"f:{k}": {} for k in keys}}}


DESIRED = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}, "data": {"a": "1"}}


def test_a_key_only_kubectl_apply_set_is_removed_once_taken_over() -> None:
    live = configmap({"a": "1", "b": "2"}, [csa_fields("a", "b")])
    result = configmap({"a": "1", "b": "2"}, [csa_fields("a", "b"), ours("a")])  # the dry run keeps b
    after = client_side.after_takeover(result, DESIRED, "gitops-sync")
    assert after["data"] == {"a": "1"}
    assert LAST_APPLIED not in after["metadata"].get("annotations", {})  # Git does not set it either
    assert [(d.path, d.live) for d in diff_objects(after, live)] == [(".data.b", "2")]
    assert result["data"] == {"a": "1", "b": "2"}  # the input is left alone


def test_a_field_another_manager_also_owns_stays() -> None:
    helm = {"manager": "helm", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1"}
    result = configmap(
        {"a": "1", "b": "2"}, [csa_fields("a", "b"), ours("a"), {**helm, "fieldsV1": {"f:data": {"f:b": {}}}}]
    )
    assert client_side.after_takeover(result, DESIRED, "gitops-sync")["data"] == {"a": "1", "b": "2"}


def test_a_map_stays_while_another_manager_owns_something_in_it() -> None:
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}}
    edit = {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1"}
    result = configmap({"b": "2", "c": "3"}, [csa_fields("b"), {**edit, "fieldsV1": {"f:data": {"f:c": {}}}}])
    assert client_side.after_takeover(result, desired, "gitops-sync")["data"] == {"c": "3"}


def test_nothing_to_take_over_returns_the_result_itself() -> None:
    result = configmap({"a": "1", "b": "2"}, [ours("a", "b")])
    assert client_side.after_takeover(result, DESIRED, "gitops-sync") is result
    assert not client_side.has_client_side_apply(result)
    assert client_side.has_client_side_apply(configmap({}, [csa_fields("a")]))
    assert not client_side.has_client_side_apply(None)
