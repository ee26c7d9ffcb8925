"""Fields another manager added that Git does not declare: listed with manager and time, never drift."""

from __future__ import annotations

from typing import Any

from gitops_sync.plan.foreign import foreign_fields
from gitops_sync.resource import ObjectKey

KEY = ObjectKey("", "ConfigMap", "ns", "c")
DESIRED = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "c", "labels": {"app": "c"}},
    "data": {"a": "1"},
}


def entry(manager: str, time: str, fields: dict[str, Any], op: str = "Update", sub: str = "") -> dict[str, Any]:
    e = {"manager": manager, "operation": op, "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields}
    if sub:
        e["subresource"] = sub
    return e


def live(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "c",
            "labels": {"app": "c", "team": "a"},
            "managedFields": list(entries),
            "annotations": {"deployment.kubernetes.io/revision": "3"},
        },
        "data": {"a": "1", "extra": "x"},
    }


OURS = entry(
    "gitops-sync",
    "2026-01-01T10:00:00Z",
    {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}},
    op="Apply",
)


def test_added_after_our_apply_by_another_manager() -> None:
    later = entry("kubectl-label", "2026-01-01T11:00:00Z", {"f:metadata": {"f:labels": {"f:team": {}}}})
    earlier = entry("kubectl-patch", "2026-01-01T09:00:00Z", {"f:data": {"f:extra": {}}})
    noise = entry(
        "kube-controller-manager",
        "2026-01-01T12:00:00Z",
        {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}},
    )
    status = entry("kubelet", "2026-01-01T12:00:00Z", {"f:data": {"f:extra": {}}}, sub="status")
    got = foreign_fields(KEY, DESIRED, live(OURS, later, earlier, noise, status), "gitops-sync")
    assert [(f.path, f.value, f.manager, f.time) for f in got] == [
        (".metadata.labels.team", "a", "kubectl-label", "2026-01-01T11:00:00Z")
    ]


def test_nothing_before_we_applied_and_secret_values_masked() -> None:
    later = entry("kubectl-patch", "2026-01-01T11:00:00Z", {"f:data": {"f:extra": {}}})
    assert foreign_fields(KEY, DESIRED, live(later), "gitops-sync") == [], "never applied by us"
    secret = ObjectKey("", "Secret", "ns", "c")
    (f,) = foreign_fields(secret, DESIRED, live(OURS, later), "gitops-sync")
    assert (f.path, f.value) == (".data.extra", "***")
