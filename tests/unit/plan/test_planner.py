"""Planner decisions that need no API server: resolution, bookkeeping, the no-request fast path."""

from __future__ import annotations

import copy

import pytest

from gitops_sync.apply.inventory import applyset_id
from gitops_sync.apply.ordering import prune_order, stage_of, stages
from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.conventions import ADOPTED, INTENT_HASH, PART_OF
from gitops_sync.errors import RenderError
from gitops_sync.plan import bookkeeping, ownership, planner
from gitops_sync.plan.changeset import Action, ChangeSet, Entry, FieldChange
from gitops_sync.report import exit_code_diff, exit_code_sync, markdown
from gitops_sync.resource import ObjectKey
from gitops_sync.source.identity import legacy_inventory_name
from tests.unit.fakes import StaticDiscovery, cm, objs


def test_resolve_defaults_namespace_and_rejects_duplicates_after_defaulting() -> None:
    d = StaticDiscovery()
    (t,) = planner.resolve(objs(cm("a")), d, "team")
    assert t.key == ObjectKey("", "ConfigMap", "team", "a")
    assert t.path == "/api/v1/namespaces/team/configmaps/a"
    with pytest.raises(RenderError, match="duplicate object ConfigMap/team/a"):
        planner.resolve(objs(cm("a"), cm("a", "team")), d, "team")


def test_resolve_rejects_unknown_kind_and_namespaced_cluster_object() -> None:
    d = StaticDiscovery()
    with pytest.raises(RenderError, match=r"f0.yaml#0.*Gadget"):
        planner.resolve(objs({"apiVersion": "x.io/v1", "kind": "Gadget", "metadata": {"name": "g"}}), d, "ns")
    with pytest.raises(RenderError, match="cluster-scoped"):
        planner.resolve(
            objs({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "namespace": "x"}}), d, "ns"
        )


def test_resolve_names_every_kind_the_cluster_does_not_serve_at_once() -> None:
    gadget = {"apiVersion": "x.io/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    gizmos = [{"apiVersion": "y.io/v2", "kind": "Gizmo", "metadata": {"name": f"z{i}"}} for i in range(3)]
    with pytest.raises(RenderError) as err:
        planner.resolve(objs(gadget, *gizmos, cm("a")), StaticDiscovery(), "ns")
    assert str(err.value) == (
        "f0.yaml#0, Gadget/g: kind Gadget (x.io/v1) is not served by the cluster and no CustomResourceDefinition "
        "in the source defines it; also not served: Gizmo (y.io/v2) in f1.yaml#0, Gizmo/z0"
    )


def test_resolve_accepts_custom_resource_whose_crd_is_in_the_same_set() -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    d = StaticDiscovery()
    d._by_gvk[("apiextensions.k8s.io", "v1", "CustomResourceDefinition")] = ResourceInfo(
        "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False
    )
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    targets = planner.resolve(objs(crd, widget), d, "ns")
    assert [t.path for t in targets][1] == "/apis/example.com/v1/namespaces/ns/widgets/w"


def test_fast_path_needs_same_intent_and_every_field_still_live() -> None:
    (t,) = planner.resolve(objs(cm("a", LEVEL="info")), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, None, "applyset-x-v1")
    live = copy.deepcopy(t.manifest)
    live["metadata"].update(resourceVersion="5", uid="u", managedFields=[])
    assert planner.is_unchanged(t, live, "gitops-sync")
    drifted = copy.deepcopy(live)
    drifted["data"]["LEVEL"] = "debug"
    assert not planner.is_unchanged(t, drifted, "gitops-sync")
    extra = copy.deepcopy(live)
    extra["data"]["OTHER"] = "set by someone else"  # fields we do not set are not ours to judge
    assert planner.is_unchanged(t, extra, "gitops-sync")
    (t2,) = planner.resolve(objs(cm("a", LEVEL="info", NEW="x")), StaticDiscovery(), "ns")
    bookkeeping.finalize(t2, live, "applyset-x-v1")
    assert not planner.is_unchanged(t2, live, "gitops-sync")  # a new Git intent always goes to the server
    assert not planner.is_unchanged(t, None, "gitops-sync")


def test_a_body_without_its_conflicts_records_its_own_intent_not_gits() -> None:
    (t,) = planner.resolve(objs(cm("a", LEVEL="info", OWNER="x")), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, None, "applyset-x-v1")
    full = t.manifest["metadata"]["annotations"][INTENT_HASH]
    conflict = ownership.Conflict(".data.OWNER", "kubectl-rw", "Apply", "", "v1")
    body = bookkeeping.without_conflicts(t.manifest, [conflict])
    assert "OWNER" not in body["data"] and t.manifest["data"]["OWNER"] == "x"
    assert body["metadata"]["annotations"][INTENT_HASH] == bookkeeping.intent_hash(body) != full
    assert t.manifest["metadata"]["annotations"][INTENT_HASH] == full


def test_finalize_marks_objects_that_existed_before_as_adopted() -> None:
    (t,) = planner.resolve(objs(cm("a")), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, {"metadata": {"name": "a", "labels": {}}}, "applyset-x-v1")
    meta = t.manifest["metadata"]
    assert meta["labels"][PART_OF] == "applyset-x-v1"
    assert meta["annotations"][ADOPTED] == "true"
    (fresh,) = planner.resolve(objs(cm("b")), StaticDiscovery(), "ns")
    bookkeeping.finalize(fresh, None, "applyset-x-v1")
    assert ADOPTED not in fresh.manifest["metadata"]["annotations"]


def test_explain_names_the_owner_of_a_drifted_field() -> None:
    (t,) = planner.resolve(objs(cm("a", LEVEL="info")), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, None, "id")
    live = copy.deepcopy(t.manifest)
    live["data"]["LEVEL"] = "debug"
    live["metadata"]["managedFields"] = [
        {
            "manager": "gitops-sync",
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {}}},
        },
        {
            "manager": "kubectl-edit",
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:LEVEL": {}}},
        },
    ]
    entry = planner.explain(t, live, t.manifest, "gitops-sync", dry_run=True)
    assert entry.action is Action.UPDATE
    (d,) = entry.drift
    assert (d.path, d.desired, d.live, d.manager, d.operation) == (
        ".data.LEVEL",
        "info",
        "debug",
        "kubectl-edit",
        "Update",
    )
    assert [(o.manager, o.fields) for o in entry.co_owners] == [("kubectl-edit", [".data.LEVEL"])]


def test_applyset_id_matches_kubectl_algorithm() -> None:
    # kubectl: base64url(sha256("<name>.<namespace>.<Kind>.<group>")) without padding, "applyset-" ... "-v1"
    got = applyset_id("demo", "default", "ConfigMap", "")
    assert got.startswith("applyset-") and got.endswith("-v1") and "=" not in got and len(got) == 9 + 43 + 3


def test_stages_put_namespaces_first_and_custom_resources_last() -> None:
    keys = [
        ObjectKey("example.com", "Widget", "ns", "w"),
        ObjectKey("apps", "Deployment", "ns", "d"),
        ObjectKey("", "ConfigMap", "ns", "c"),
        ObjectKey("", "Namespace", "", "ns"),
        ObjectKey("apiextensions.k8s.io", "CustomResourceDefinition", "", "widgets.example.com"),
    ]
    assert [stage_of(k) for k in keys] == [3, 2, 1, 0, 0]
    assert [len(s) for s in stages(keys, lambda k: k)] == [2, 1, 1, 1]
    assert prune_order(keys)[0] == [keys[0]] and keys[3] in prune_order(keys)[-1]


def test_legacy_inventory_name_keeps_the_old_algorithm_for_the_takeover() -> None:
    # The names versions before source identities chose: the migration looks for exactly these.
    assert (
        legacy_inventory_name("https://git.example/org/My_App.git", "overlays/prod")
        == "gitops-sync-my-app-overlays-prod"
    )
    assert legacy_inventory_name("git@host:org/app.git", None) == "gitops-sync-app"
    assert legacy_inventory_name(".", "apps") == legacy_inventory_name("./", "apps") == "gitops-sync-apps"
    assert len(legacy_inventory_name("/x/" + "a" * 100, "b" * 100)) <= 63


def test_exit_codes_follow_kubectl_diff() -> None:
    key = ObjectKey("", "ConfigMap", "ns", "a")
    clean = ChangeSet(entries=[Entry(key, "v1", Action.UNCHANGED)])
    assert exit_code_diff(clean) == 0 and exit_code_sync(clean) == 0
    changed = ChangeSet(entries=[Entry(key, "v1", Action.UPDATE)])
    assert exit_code_diff(changed) == 1 and exit_code_sync(changed) == 0
    conflict = ChangeSet(entries=[Entry(key, "v1", Action.UPDATE, conflicts=[FieldChange(".data.a", 1, 2, "helm")])])
    assert exit_code_diff(conflict) == 1 and exit_code_sync(conflict) == 1
    broken = ChangeSet(entries=[Entry(key, "v1", Action.ERROR)])
    assert exit_code_diff(broken) == 2 and exit_code_sync(broken) == 2


def test_markdown_escapes_pipes_and_lists_fields() -> None:
    key = ObjectKey("apps", "Deployment", "ns", "web")
    cs = ChangeSet(
        revision="abc",
        source="repo",
        entries=[
            Entry(
                key,
                "apps/v1",
                Action.CONFLICT,
                message="a|b",
                conflicts=[FieldChange(".spec.replicas", 3, 10, "kubectl", "Update", "scale", "kubectl scale")],
            )
        ],
    )
    md = markdown(cs)
    assert "a\\|b" in md
    assert (
        "| `Deployment.apps/ns/web` | conflict | `.spec.replicas` | `3` | `10` "
        "| kubectl (Update, subresource scale): kubectl scale |" in md
    )
