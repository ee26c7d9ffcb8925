"""Safety decisions that need no API server: shared objects, the adoption marker, the cascade message,
unserved kinds, and how a `shared` conflict reads in every report format."""

from __future__ import annotations

import json
from io import StringIO

import pytest

from gitops_sync.apply import cascade, inventory
from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.conventions import ADOPT, ADOPTED, INTENT_HASH, PART_OF
from gitops_sync.plan import bookkeeping, planner, policy
from gitops_sync.plan.changeset import Action, ChangeSet, SharedWith
from gitops_sync.report import exit_code_diff, exit_code_sync, write
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import FakeApi, StaticDiscovery, cm, fake_client, objs, status_body

OURS = "applyset-ours-v1"
THEIRS = "applyset-theirs-v1"


def _live(labels: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "a",
            "namespace": "ns",
            "labels": labels,
            "managedFields": [
                {
                    "manager": "team-a-sync",
                    "operation": "Apply",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {f"f:{PART_OF}": {}}}},
                }
            ],
        },
        "data": {"k": "v"},
    }


def test_foreign_applyset_is_another_sets_label_only() -> None:
    assert bookkeeping.foreign_applyset(_live({PART_OF: THEIRS}), {OURS}) == THEIRS
    assert bookkeeping.foreign_applyset(_live({PART_OF: OURS}), {OURS}) is None
    assert bookkeeping.foreign_applyset(_live({}), {OURS}) is None
    assert bookkeeping.foreign_applyset(None, {OURS}) is None
    # an id counted as ours (e.g. a legacy name being migrated) is not foreign
    assert bookkeeping.foreign_applyset(_live({PART_OF: THEIRS}), {OURS, THEIRS}) is None


def test_adoption_annotation_in_git_opts_in() -> None:
    with_ann = cm("a")
    with_ann["metadata"]["annotations"] = {ADOPT: "true"}
    (t,) = planner.resolve(objs(with_ann), StaticDiscovery(), "ns")
    (plain,) = planner.resolve(objs(cm("b")), StaticDiscovery(), "ns")
    assert policy.wants_adoption(t) and not policy.wants_adoption(plain)


def test_mark_adopted_changes_the_intent_hash() -> None:
    (t,) = planner.resolve(objs(cm("a", k="v")), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, None, OURS)
    before = t.manifest["metadata"]["annotations"][INTENT_HASH]
    bookkeeping.mark_adopted(t)
    ann = t.manifest["metadata"]["annotations"]
    assert ann[ADOPTED] == "true"
    assert ann[INTENT_HASH] != before
    assert ann[INTENT_HASH] == bookkeeping.intent_hash(t.manifest)


def _shared_changeset() -> ChangeSet:
    (t,) = planner.resolve(objs(cm("a", k="v")), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, _live({PART_OF: THEIRS}), OURS)
    who = SharedWith(THEIRS, parent="ConfigMap team-a/gitops-sync-deploy", source="/src/team-a/deploy//apps")
    entry = planner.shared_entry(t, _live({PART_OF: THEIRS}), who, "gitops-sync", dry_run=False)
    return ChangeSet(revision="abc", source="/src/team-b/deploy//apps", entries=[entry])


def test_shared_entry_is_a_conflict_naming_the_other_applyset() -> None:
    cs = _shared_changeset()
    (e,) = cs.entries
    assert e.action is Action.CONFLICT and e.shared is not None
    (c,) = e.conflicts
    assert c.path == f".metadata.labels.{PART_OF}"
    assert (c.desired, c.live, c.manager) == (OURS, THEIRS, "team-a-sync")
    assert "ConfigMap team-a/gitops-sync-deploy" in e.message and "/src/team-a/deploy//apps" in e.message
    assert exit_code_sync(cs) == 1 and exit_code_diff(cs) == 1


def test_shared_conflict_in_every_report_format() -> None:
    cs = _shared_changeset()
    out = {}
    for fmt in ("json", "table", "markdown"):
        buf = StringIO()
        write(cs, fmt, buf, color=False)
        out[fmt] = buf.getvalue()
    doc = json.loads(out["json"])
    (obj,) = doc["objects"]
    assert obj["action"] == "conflict"
    assert obj["shared"] == {
        "applySet": THEIRS,
        "parent": "ConfigMap team-a/gitops-sync-deploy",
        "source": "/src/team-a/deploy//apps",
        "tooling": "",
    }
    for fmt in ("table", "markdown"):
        assert "shared" in out[fmt] and "team-a/gitops-sync-deploy" in out[fmt], out[fmt]


def test_shared_without_a_parent_names_the_id() -> None:
    assert SharedWith(THEIRS).describe() == f"ApplySet {THEIRS} (parent not found)"
    assert SharedWith(THEIRS, parent="Secret x/y", tooling="kubectl/v1.33").describe() == (
        "ApplySet Secret x/y (kubectl/v1.33)"
    )


def test_cascade_message_names_the_first_few_and_counts_the_rest() -> None:
    keys = [ObjectKey("", "ConfigMap", "team", f"c{i}") for i in range(7)]
    msg = cascade._message("Namespace team", cascade.Holdings(keys, more=True))
    assert "7+ object(s)" in msg and "ConfigMap/team/c0" in msg and "ConfigMap/team/c4" in msg
    assert "ConfigMap/team/c5" not in msg and "and 2+ more" in msg and "--prune-cascade" in msg
    unknown = cascade._message("Namespace team", cascade.Holdings([], unchecked=["Widget.example.com"]))
    assert "could not be checked" in unknown and "Widget.example.com" in unknown


def test_a_kind_rbac_refuses_to_list_is_named_with_the_rule_to_grant_and_the_advice_is_the_callers() -> None:
    forbidden = [
        ResourceInfo("", "v1", "Pod", "pods", True),
        ResourceInfo("", "v1", "Endpoints", "endpoints", True),
        ResourceInfo("apps", "v1", "ReplicaSet", "replicasets", True),
    ]
    held = cascade.Holdings([], unchecked=["Pod", "Endpoints", "ReplicaSet.apps"], forbidden=forbidden)
    msg = cascade._message("Namespace team", held, "set spec.pruneCascade: true on GitSync a/web")
    assert 'grant list on pods, endpoints (apiGroups ""); replicasets (apiGroups apps)' in msg, msg
    assert "gitops-sync-cascade-guard" in msg and msg.endswith("or set spec.pruneCascade: true on GitSync a/web)")
    assert "--prune-cascade" not in msg


def test_unserved_kinds_are_the_recorded_ones_discovery_lacks() -> None:
    inv = inventory.Inventory("x", "ns", group_kinds={"ConfigMap", "Deployment.apps", "Widget.example.com"})
    assert inventory.unserved_kinds(StaticDiscovery(), inv) == {"Widget.example.com"}


def _listing(*metadata: dict[str, object]) -> dict[str, object]:
    """A LIST answer whose items have these `metadata` (and nothing else: holdings read no more)."""
    return {"items": [{"metadata": m} for m in metadata], "metadata": {}}


def test_namespace_holdings_ignore_defaults_owned_objects_events_and_a_services_endpoints() -> None:
    d = StaticDiscovery()
    kinds = [
        ResourceInfo("", "v1", "ServiceAccount", "serviceaccounts", True, frozenset({"list"})),
        ResourceInfo("", "v1", "Endpoints", "endpoints", True, frozenset({"list"})),
        ResourceInfo("", "v1", "Service", "services", True, frozenset({"list"})),
        ResourceInfo("", "v1", "Event", "events", True, frozenset({"list"})),
        ResourceInfo("", "v1", "Pod", "pods", True, frozenset({"list"})),
        ResourceInfo("", "v1", "ConfigMap", "configmaps", True, frozenset({"list"})),
    ]
    d._preferred.update({(i.group, i.kind): i for i in kinds})
    ns = "/api/v1/namespaces/team"
    api = FakeApi(default=_listing())  # a kind with nothing listed: no objects
    listings: dict[str, list[dict[str, object]]] = {
        f"{ns}/serviceaccounts": [{"name": "default", "namespace": "team"}],
        f"{ns}/configmaps": [
            {"name": "kube-root-ca.crt", "namespace": "team"},
            {"name": "mine", "namespace": "team"},
        ],
        f"{ns}/services": [{"name": "web", "namespace": "team"}],
        f"{ns}/endpoints": [{"name": "web", "namespace": "team"}, {"name": "manual", "namespace": "team"}],
        f"{ns}/events": [{"name": "e1", "namespace": "team"}],
        f"{ns}/pods": [
            {"name": "web-1", "namespace": "team", "ownerReferences": [{"kind": "ReplicaSet"}]},
            {"name": "bare", "namespace": "team"},
        ],
    }
    for path, items in listings.items():
        api.on("GET", path, _listing(*items))
    client = fake_client(api)
    deleted = {ObjectKey("", "Service", "team", "web"), ObjectKey("", "ConfigMap", "team", "mine")}
    held = cascade.namespace_holdings(client, d, "team", deleted)
    assert held.foreign == [ObjectKey("", "Endpoints", "team", "manual"), ObjectKey("", "Pod", "team", "bare")]
    assert not held.unchecked

    api.on("GET", f"{ns}/pods", (403, status_body(403, "Forbidden", f"GET {ns}/pods")))
    held = cascade.namespace_holdings(client, d, "team", deleted)
    assert held.unchecked == ["Pod"] and bool(held), "a kind that cannot be listed blocks: contents unknown"


@pytest.mark.parametrize(
    ("theirs", "ours", "same"),
    [
        ("git.example/team/deploy//apps", "git.example/team/deploy//apps", True),  # same source, other --name
        ("/work/trees/deploy//apps", "git.example/team/deploy.git//apps", True),  # a work tree and its URL
        ("git.example/team/deploy//apps", "git.example/team/deploy//web", False),  # another sub-directory
        ("git.example/team/other//apps", "git.example/team/deploy//apps", False),
        ("", "git.example/team/deploy//apps", False),  # not made by gitops-sync: nothing to compare
    ],
)
def test_a_shared_object_of_the_same_source_spelled_otherwise_hints_its_inventory_name(
    theirs: str, ours: str, same: bool
) -> None:
    (t,) = planner.resolve(objs(cm("a", k="v")), StaticDiscovery(), "ns")
    bookkeeping.finalize(t, _live({PART_OF: THEIRS}), OURS)
    who = SharedWith(THEIRS, parent="ConfigMap team-a/gitops-sync-deploy-1a2b", source="x", identity=theirs)
    entry = planner.shared_entry(t, _live({PART_OF: THEIRS}), who, "gitops-sync", dry_run=False, identity=ours)
    hint = "`--name gitops-sync-deploy-1a2b --inventory-namespace team-a`"
    assert (hint in entry.message) is same, entry.message
    assert ("--adopt-shared" in entry.message) is not same, entry.message
