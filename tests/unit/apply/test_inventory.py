"""ApplySet inventory decisions that need no API server: whose parent it is, when it is written, where
prune looks for members, who owns a foreign id.

The API server is a script at the HTTP seam (tests/unit/fakes.py); the inventory on a real cluster
(kubectl reading it, prune, takeovers) is tested in tests/integration/test_sync.py and
test_source_identity.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.apply import inventory
from gitops_sync.apply.inventory import METADATA_ONLY, Inventory, applyset_id
from gitops_sync.cluster.client import APPLY_PATCH
from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.conventions import (
    APPLIED_REVISION,
    ATTEMPTED_REVISION,
    CLUSTER_ID,
    GROUP_KINDS,
    ID_LABEL,
    NAMESPACES,
    PART_OF,
    SOURCE,
    SOURCE_IDENTITY,
    TOOLING,
)
from gitops_sync.errors import ClusterError, ConflictError, SourceMismatchError
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import FakeApi, StaticDiscovery, fake_client, status_body

PARENT = "/api/v1/namespaces/gitops/configmaps/inv"
ID = applyset_id("inv", "gitops")


def parent(annotations: dict[str, str], *, label: str = ID) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "inv",
            "namespace": "gitops",
            "uid": "u-parent",
            "labels": {ID_LABEL: label},
            "annotations": annotations,
        },
    }


def listing(*items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": "1"}, "items": list(items)}


def item(name: str, ns: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, **({"namespace": ns} if ns else {}), "labels": {PART_OF: ID}}}


# -- reading the parent -----------------------------------------------------------------------------


def test_load_reads_what_the_parent_records_and_an_absent_one_is_new() -> None:
    assert not inventory.load(fake_client(FakeApi()), "inv", "gitops").exists
    ann = {GROUP_KINDS: "ConfigMap,Deployment.apps", NAMESPACES: "team-a,team-b", SOURCE_IDENTITY: "repo//apps"}
    inv = inventory.load(fake_client(FakeApi().on("GET", PARENT, parent(ann))), "inv", "gitops", "repo//apps")
    assert inv.exists and inv.uid == "u-parent"
    assert inv.group_kinds == {"ConfigMap", "Deployment.apps"}
    assert inv.namespaces == {"gitops", "team-a", "team-b"}


def test_load_refuses_a_configmap_that_is_not_this_parent() -> None:
    api = FakeApi().on("GET", PARENT, parent({}, label="applyset-other-v1"))
    with pytest.raises(ConflictError, match="exists but is not the ApplySet parent of this source"):
        inventory.load(fake_client(api), "inv", "gitops")


def test_load_refuses_the_parent_of_another_source_and_suggests_our_default_name() -> None:
    api = FakeApi().on("GET", PARENT, parent({SOURCE_IDENTITY: "their-repo//apps"}))
    with pytest.raises(SourceMismatchError, match="pass --name \\(its default here is gitops-sync-ours-1\\)") as info:
        inventory.load(fake_client(api), "inv", "gitops", "our-repo//apps", "gitops-sync-ours-1")
    assert (info.value.recorded, info.value.ours) == ("their-repo//apps", "our-repo//apps")


# -- writing the parent -----------------------------------------------------------------------------


def test_save_writes_only_when_the_record_changes_and_keeps_the_last_applied_revision() -> None:
    api = FakeApi(default={})
    client = fake_client(api)
    inv = Inventory("inv", "gitops", identity="repo//apps")
    inventory.save(client, inv, {"ConfigMap"}, {"gitops"}, field_manager="fm", revision="r1", source="s", applied=True)
    (first,) = api.sent()
    assert first.method == "PATCH" and first.path == PARENT and first.headers["Content-Type"] == APPLY_PATCH
    assert first.query == {"fieldManager": "fm", "force": "true"}
    ann = first.body["metadata"]["annotations"]
    assert ann[ATTEMPTED_REVISION] == ann[APPLIED_REVISION] == "r1" and ann[SOURCE_IDENTITY] == "repo//apps"
    assert ann[TOOLING].startswith("gitops-sync/v") and first.body["metadata"]["labels"] == {ID_LABEL: ID}

    inventory.save(client, inv, {"ConfigMap"}, {"gitops"}, field_manager="fm", revision="r1", source="s", applied=True)
    assert len(api.sent()) == 1, "nothing changed: no write"

    inventory.save(client, inv, {"ConfigMap"}, {"gitops"}, field_manager="fm", revision="r2", source="s")
    ann = api.sent()[-1].body["metadata"]["annotations"]
    assert ann[ATTEMPTED_REVISION] == "r2" and ann[APPLIED_REVISION] == "r1", "an attempt is not an applied revision"


def test_save_into_a_missing_namespace_says_so() -> None:
    api = FakeApi().on("PATCH", PARENT, (404, status_body(404, "NotFound", 'namespaces "gitops" not found')))
    with pytest.raises(ClusterError, match="namespace gitops does not exist"):
        inventory.save(fake_client(api), Inventory("inv", "gitops"), set(), set(), field_manager="fm")


def test_delete_parent_is_guarded_by_its_uid_and_a_gone_one_is_fine() -> None:
    api = FakeApi()  # 404: already gone
    inv = Inventory("inv", "gitops", exists=True, uid="u-parent")
    inventory.delete_parent(fake_client(api), inv)
    (call,) = api.sent()
    assert call.method == "DELETE" and call.body["preconditions"] == {"uid": "u-parent"} and not inv.exists


# -- members ------------------------------------------------------------------------------------------


def test_members_are_listed_by_label_in_each_recorded_kind_and_an_unserved_kind_is_skipped() -> None:
    api = (
        FakeApi()
        .on("GET", "/api/v1/configmaps", listing(item("a", "team"), item("b", "team")))
        .on("GET", "/apis/apps/v1/deployments", listing(item("web", "team")))
    )
    inv = Inventory("inv", "gitops", group_kinds={"ConfigMap", "Deployment.apps", "Widget.example.com"})
    members = inventory.list_members(fake_client(api), StaticDiscovery(), inv)
    assert sorted(members) == [
        ObjectKey("", "ConfigMap", "team", "a"),
        ObjectKey("", "ConfigMap", "team", "b"),
        ObjectKey("apps", "Deployment", "team", "web"),
    ]
    assert members[ObjectKey("apps", "Deployment", "team", "web")]["apiVersion"] == "apps/v1"
    assert [c.path for c in api.sent()] == ["/api/v1/configmaps", "/apis/apps/v1/deployments"]
    assert all(c.query["labelSelector"] == f"{PART_OF}={ID}" for c in api.sent())


def test_members_are_looked_for_in_each_recorded_namespace_when_a_cluster_wide_list_is_forbidden() -> None:
    api = (
        FakeApi()
        .on("GET", "/api/v1/configmaps", (403, status_body(403, "Forbidden", "cluster scope")))
        .on("GET", "/api/v1/namespaces/team-a/configmaps", listing(item("a", "team-a")))
        .on("GET", "/api/v1/namespaces/gitops/configmaps", listing())
    )
    inv = Inventory("inv", "gitops", group_kinds={"ConfigMap"}, namespaces={"team-a", "gitops"})
    members = inventory.list_members(fake_client(api), StaticDiscovery(), inv)
    assert list(members) == [ObjectKey("", "ConfigMap", "team-a", "a")]
    assert [c.path for c in api.sent()] == [
        "/api/v1/configmaps",
        "/api/v1/namespaces/gitops/configmaps",
        "/api/v1/namespaces/team-a/configmaps",
    ]


def test_a_forbidden_list_of_a_cluster_scoped_kind_is_an_error() -> None:
    d = StaticDiscovery()
    d._preferred[("rbac.authorization.k8s.io", "ClusterRole")] = ResourceInfo(
        "rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False
    )
    path = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    api = FakeApi().on("GET", path, (403, status_body(403, "Forbidden", "no")))
    inv = Inventory("inv", "gitops", group_kinds={"ClusterRole.rbac.authorization.k8s.io"})
    with pytest.raises(ClusterError, match="403 Forbidden"):
        inventory.list_members(fake_client(api), d, inv)


def test_a_recorded_namespace_that_cannot_be_listed_is_an_error_naming_it_and_the_ways_out() -> None:
    api = (
        FakeApi()
        .on("GET", "/api/v1/configmaps", (403, status_body(403, "Forbidden", "cluster scope")))
        .on("GET", "/api/v1/namespaces/gitops/configmaps", listing())
        .on("GET", "/api/v1/namespaces/team-b/configmaps", (403, status_body(403, "Forbidden", "not team-b")))
    )
    inv = Inventory("inv", "gitops", group_kinds={"ConfigMap"}, namespaces={"team-b", "gitops"})
    with pytest.raises(ClusterError) as raised:
        inventory.list_members(fake_client(api), StaticDiscovery(), inv)
    message = str(raised.value)
    assert "cannot list ConfigMap in namespace team-b: 403 Forbidden: not team-b" in message, message
    assert "ConfigMap gitops/inv records it" in message and f"remove team-b from its annotation {NAMESPACES}" in message


def test_find_parent_names_the_owner_of_a_foreign_id_reading_metadata_only() -> None:
    secret_parent = {
        "metadata": {"name": "theirs", "namespace": "team-b", "annotations": {SOURCE: "git@x:b", TOOLING: "kubectl/1"}}
    }
    api = (
        FakeApi()
        .on("GET", "/api/v1/configmaps", (403, status_body(403, "Forbidden", "no")))
        .on("GET", "/api/v1/secrets", listing(secret_parent))
    )
    shared = inventory.find_parent(fake_client(api), "applyset-theirs-v1")
    assert (shared.parent, shared.source, shared.tooling) == ("Secret team-b/theirs", "git@x:b", "kubectl/1")
    for call in api.sent():
        assert call.headers["Accept"] == METADATA_ONLY
        assert call.query == {"labelSelector": f"{ID_LABEL}=applyset-theirs-v1", "limit": "1"}


# -- the cluster the parent records -------------------------------------------------------------------


def test_a_parent_without_a_cluster_records_ours_on_the_next_write_and_keeps_it() -> None:
    api = FakeApi(default={}).on("GET", PARENT, parent({SOURCE_IDENTITY: "repo//apps", ATTEMPTED_REVISION: "r1"}))
    client = fake_client(api)
    inv = inventory.load(client, "inv", "gitops", "repo//apps", cluster_id="uid-a")
    assert inv.recorded_cluster == "" and inv.foreign_cluster() == ""  # an old parent: used as it is
    inventory.save(client, inv, {"ConfigMap"}, {"gitops"}, field_manager="fm", revision="r1", source="s")
    assert api.sent()[-1].body["metadata"]["annotations"][CLUSTER_ID] == "uid-a"
    assert inv.recorded_cluster == "uid-a"
    writes = len(api.sent())
    inventory.save(client, inv, {"ConfigMap"}, {"gitops"}, field_manager="fm", revision="r1", source="s")
    assert len(api.sent()) == writes, "recorded: no second write"


def test_a_parent_recording_another_cluster_is_foreign_and_keeps_its_record() -> None:
    api = FakeApi(default={}).on("GET", PARENT, parent({SOURCE_IDENTITY: "repo//apps", CLUSTER_ID: "uid-a"}))
    client = fake_client(api)
    inv = inventory.load(client, "inv", "gitops", "repo//apps", cluster_id="uid-b")
    why = inv.foreign_cluster()
    assert "records cluster uid-a" in why and "reaches cluster uid-b" in why
    inventory.save(client, inv, {"ConfigMap"}, {"gitops"}, field_manager="fm", revision="r2", source="s")
    assert api.sent()[-1].body["metadata"]["annotations"][CLUSTER_ID] == "uid-a", "never overwritten by a pass"
    assert inv.foreign_cluster()  # still refused after the write
    same = inventory.load(client, "inv", "gitops", "repo//apps", cluster_id="uid-a")
    unknown = inventory.load(client, "inv", "gitops", "repo//apps")  # may not read kube-system: not checked
    assert same.foreign_cluster() == "" and unknown.foreign_cluster() == ""
    unknown_write = Inventory("inv", "gitops", identity="repo//apps")
    assert (
        CLUSTER_ID
        not in unknown_write.parent_manifest(set(), set(), attempted="r", applied="", source="s")["metadata"][
            "annotations"
        ]
    )
