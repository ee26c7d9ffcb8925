"""ResourceManager decisions that need no API server: which requests it sends, in which order, with what.

The real planner resolves and finalizes the targets; the API server is a script at the HTTP seam
(tests/unit/fakes.py). What the server itself decides (defaulting, managedFields, conflicts, deletes)
is tested on the real cluster: tests/integration/test_sync.py, test_safety.py, test_newcomer.py.
"""

from __future__ import annotations

import copy
from typing import Any

from gitops_sync.apply.live import uses_list
from gitops_sync.apply.manager import NOT_ATTEMPTED, ResourceManager
from gitops_sync.cluster.client import APPLY_PATCH, JSON_PATCH
from gitops_sync.conventions import ADOPTED, INTENT_HASH, PART_OF, ConflictPolicy
from gitops_sync.health import Status
from gitops_sync.plan import bookkeeping, planner
from gitops_sync.plan.changeset import Action
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import Call, FakeApi, StaticDiscovery, cm, fake_client, objs, status_body

APPLYSET = "applyset-x-v1"


def echo_apply(call: Call) -> tuple[int, Any]:
    """A server-side apply answered with its own body plus a resourceVersion (as if it created the object)."""
    body = copy.deepcopy(call.body)
    body.setdefault("metadata", {})["resourceVersion"] = "2"
    return 201, body


def manager(api: FakeApi, concurrency: int = 1) -> ResourceManager:
    return ResourceManager(fake_client(api), StaticDiscovery(), concurrency=concurrency)


def targets(*manifests: dict[str, Any]) -> list[planner.Target]:
    out = planner.resolve(objs(*manifests), StaticDiscovery(), "ns")
    for t in out:
        bookkeeping.finalize(t, None, APPLYSET)
    return out


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def deployment(name: str, ns: str = "ns") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1},
    }


def live_of(t: planner.Target) -> dict[str, Any]:
    """The object as it would be live after our last apply of exactly this intent."""
    obj = copy.deepcopy(t.manifest)
    obj["metadata"].update(resourceVersion="1", uid=f"uid-{t.key.name}", managedFields=[])
    return obj


# -- reading live state -----------------------------------------------------------------------------


def test_fetch_live_lists_a_busy_collection_once_and_gets_the_rest() -> None:
    busy = targets(*(cm(f"c{i}") for i in range(4)), cm("lone", "other"))
    listed = [{"metadata": {"name": n, "namespace": "ns"}, "data": {}} for n in ("c0", "c1", "c2", "unrelated")]
    api = FakeApi().on(
        "GET", "/api/v1/namespaces/ns/configmaps", {"metadata": {"resourceVersion": "9"}, "items": listed}
    )
    live = manager(api, concurrency=4).fetch_live(busy)
    assert sorted(c.path for c in api.sent()) == [
        "/api/v1/namespaces/ns/configmaps",
        "/api/v1/namespaces/other/configmaps/lone",
    ]
    by_name = {k.name: v for k, v in live.items()}
    assert by_name["c0"] is not None and (by_name["c0"]["apiVersion"], by_name["c0"]["kind"]) == ("v1", "ConfigMap")
    assert by_name["c3"] is None and by_name["lone"] is None  # not in the list / 404
    assert "unrelated" not in by_name


def test_fetch_live_falls_back_to_gets_when_the_list_is_forbidden_and_a_refused_get_is_absent() -> None:
    four = targets(*(cm(f"c{i}") for i in range(4)))
    base = "/api/v1/namespaces/ns/configmaps"
    api = (
        FakeApi()
        .on("GET", base, (403, status_body(403, "Forbidden", "cannot list")))
        .on("GET", f"{base}/c0", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c0"}})
        .on("GET", f"{base}/c1", (403, status_body(403, "Forbidden", "cannot get c1")))
    )
    live = manager(api, concurrency=4).fetch_live(four)
    assert sorted(c.path for c in api.sent()) == [base, f"{base}/c0", f"{base}/c1", f"{base}/c2", f"{base}/c3"]
    assert {k.name for k, v in live.items() if v is not None} == {"c0"}


def test_fetch_live_reads_a_collection_not_served_yet_as_every_object_absent() -> None:
    # A CRD and its custom resources in one source, on a fresh cluster: the LIST gets the mux's bare 404.
    four = targets(*(cm(f"c{i}") for i in range(4)))
    api = FakeApi().on("GET", "/api/v1/namespaces/ns/configmaps", (404, b"404 page not found"))
    live = manager(api, concurrency=4).fetch_live(four)
    assert [c.path for c in api.sent()] == ["/api/v1/namespaces/ns/configmaps"]
    assert live == {t.key: None for t in four}


def test_a_list_is_used_for_four_targets_or_more_unless_the_collection_is_known_crowded() -> None:
    assert not uses_list(3, None) and not uses_list(3, 3), "three targets: a GET each"
    assert uses_list(4, None), "size unknown (the CLI, a cache not covering it): one LIST, as before"
    assert uses_list(4, 64) and not uses_list(4, 65), "more than 16 objects per target: GETs"
    assert uses_list(5000, 5000), "a source alone in its namespace lists it"


def test_fetch_live_gets_each_target_of_a_collection_known_many_times_bigger() -> None:
    # The fleet's cold start: 4 new ConfigMaps of one source in a namespace of 4,000 (everyone's).
    eight = targets(*(cm(f"c{i}") for i in range(4)), *(cm(f"d{i}", "small") for i in range(4)))
    base = "/api/v1/namespaces/ns/configmaps"
    api = (
        FakeApi()
        .on("GET", f"{base}/c1", {"metadata": {"name": "c1", "namespace": "ns"}})
        .on("GET", "/api/v1/namespaces/small/configmaps", {"metadata": {"resourceVersion": "9"}, "items": []})
    )
    asked: list[str] = []

    def sizes(t: planner.Target) -> int | None:
        asked.append(t.key.namespace)
        return {"ns": 4000, "small": 10}[t.key.namespace]

    live = manager(api, concurrency=4).fetch_live(eight, sizes=sizes)
    assert sorted(c.path for c in api.sent()) == [
        *(f"{base}/c{i}" for i in range(4)),
        "/api/v1/namespaces/small/configmaps",
    ], "the crowded namespace is read with GETs, the small one with one LIST"
    assert {k.name for k, v in live.items() if v is not None} == {"c1"}
    assert sorted(asked) == ["ns", "small"], "asked once per collection"


# -- applying ---------------------------------------------------------------------------------------


def test_apply_sends_one_server_side_apply_per_object_in_stage_order() -> None:
    ts = targets(deployment("web"), cm("conf"), namespace("ns"))
    api = FakeApi(default=echo_apply)
    entries = manager(api).apply_all(ts, {t.key: None for t in ts})
    assert [(c.method, c.path) for c in api.sent()] == [
        ("PATCH", "/api/v1/namespaces/ns"),
        ("PATCH", "/api/v1/namespaces/ns/configmaps/conf"),
        ("PATCH", "/apis/apps/v1/namespaces/ns/deployments/web"),
    ]
    for c in api.sent():
        assert c.query == {"fieldManager": "gitops-sync", "force": "false"}
        assert c.headers["Content-Type"] == APPLY_PATCH
        assert c.body["metadata"]["labels"][PART_OF] == APPLYSET and INTENT_HASH in c.body["metadata"]["annotations"]
    assert [e.action for e in entries] == [Action.CREATE] * 3


def test_apply_sends_nothing_for_an_object_live_with_this_intent() -> None:
    same, drifted = targets(cm("same", k="v"), cm("drifted", k="v"))
    live = {same.key: live_of(same), drifted.key: live_of(drifted)}
    live[drifted.key]["data"]["k"] = "changed by hand"
    api = FakeApi(default=echo_apply)
    entries = manager(api).apply_all([same, drifted], live)
    assert [c.path for c in api.sent()] == ["/api/v1/namespaces/ns/configmaps/drifted"]
    assert {e.key.name: e.action for e in entries} == {"same": Action.UNCHANGED, "drifted": Action.UPDATE}


def test_dry_run_asks_the_server_in_dry_run_and_nothing_for_objects_in_a_namespace_it_creates() -> None:
    ts = targets(namespace("new"), cm("inside", "new"), cm("elsewhere"))
    api = FakeApi(default=echo_apply)
    entries = {e.key.name: e for e in manager(api).apply_all(ts, {t.key: None for t in ts}, dry_run=True)}
    assert [c.path for c in api.sent()] == ["/api/v1/namespaces/new", "/api/v1/namespaces/ns/configmaps/elsewhere"]
    assert all(c.query.get("dryRun") == "All" for c in api.sent()) and api.writes() == []
    assert entries["inside"].message == "would create (namespace new is created first)"
    assert entries["elsewhere"].message == "would create"


def _conflict_409(path: str, manager_name: str = "kubectl-edit") -> tuple[int, dict[str, Any]]:
    cause = {"reason": "FieldManagerConflict", "message": f'conflict with "{manager_name}" using v1', "field": path}
    return 409, {**status_body(409, "Conflict", "Apply failed with 1 conflict"), "details": {"causes": [cause]}}


def _conflicted() -> tuple[ResourceManager, FakeApi, planner.Target, dict[ObjectKey, Any]]:
    (t,) = targets(cm("c", a="1", b="2"))
    live = live_of(t)
    live["metadata"]["annotations"][INTENT_HASH] = "older"
    live["data"]["b"] = "edited"
    live["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-edit",
            "operation": "Update",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:b": {}}},
        },
    ]
    api = FakeApi().on("PATCH", t.path, _conflict_409(".data.b"), echo_apply)
    return manager(api), api, t, {t.key: live}


def test_conflict_report_reapplies_without_the_contested_field() -> None:
    rm, api, t, live = _conflicted()
    (entry,) = rm.apply_all([t], live, policy=ConflictPolicy.REPORT)
    first, second = api.sent("PATCH")
    assert first.body["data"] == {"a": "1", "b": "2"} and second.body["data"] == {"a": "1"}
    assert second.query["force"] == "false"
    assert entry.action is Action.CONFLICT and [c.path for c in entry.conflicts] == [".data.b"]
    assert entry.message.startswith("applied all but 1 conflicting field(s), left to their owner")


def test_conflict_skip_sends_nothing_more_and_force_takes_the_field() -> None:
    rm, api, t, live = _conflicted()
    (entry,) = rm.apply_all([t], live, policy=ConflictPolicy.SKIP)
    assert len(api.sent("PATCH")) == 1
    assert entry.message == "skipped: 1 conflicting field(s); nothing applied to this object"

    rm, api, t, live = _conflicted()
    rm.apply_all([t], live, policy=ConflictPolicy.FORCE)
    (forced,) = api.sent("PATCH")
    assert forced.query["force"] == "true" and forced.body["data"] == {"a": "1", "b": "2"}


def test_past_the_deadline_nothing_is_sent_and_every_object_is_not_attempted() -> None:
    ts = targets(cm("a"), deployment("web"))
    api = FakeApi(default=echo_apply)
    rm = manager(api)
    rm.client.set_deadline(0.0)
    entries = rm.apply_all(ts, {t.key: None for t in ts})
    assert api.sent() == []
    assert all(e.action is Action.ERROR and e.message.startswith(NOT_ATTEMPTED) for e in entries)


# -- pruning ----------------------------------------------------------------------------------------


def member(manifest: dict[str, Any], uid: str, *, adopted: bool = False) -> dict[str, Any]:
    obj = copy.deepcopy(manifest)
    meta = obj["metadata"]
    meta.update(uid=uid, resourceVersion="5", labels={PART_OF: APPLYSET})
    meta["annotations"] = {INTENT_HASH: "h", **({ADOPTED: "true"} if adopted else {})}
    return obj


def test_prune_deletes_workloads_before_their_namespace_by_uid_and_releases_what_it_adopted() -> None:
    members = [
        member(namespace("team"), "u-ns"),
        member(deployment("web", "team"), "u-web"),
        member(cm("found", "team"), "u-found", adopted=True),
    ]
    api = FakeApi(default={"kind": "Status", "status": "Success"})
    entries = manager(api).prune(members, dry_run=False)
    assert [(c.method, c.path) for c in api.sent()] == [
        ("DELETE", "/apis/apps/v1/namespaces/team/deployments/web"),
        ("PATCH", "/api/v1/namespaces/team/configmaps/found"),
        ("DELETE", "/api/v1/namespaces/team"),
    ]
    delete = api.sent("DELETE")[0]
    assert delete.body["preconditions"] == {"uid": "u-web"} and delete.body["propagationPolicy"] == "Background"
    release = api.sent("PATCH")[0]
    assert release.headers["Content-Type"] == JSON_PATCH
    assert release.body == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
        {"op": "remove", "path": "/metadata/labels/applyset.kubernetes.io~1part-of"},
        {"op": "remove", "path": "/metadata/annotations/gitops-sync.io~1adopted"},
        {"op": "remove", "path": f"/metadata/annotations/{INTENT_HASH.replace('/', '~1')}"},
    ]
    messages = {e.key.name: e.message for e in entries}
    assert messages == {
        "web": "deleted (left Git)",
        "found": "release (not created by gitops-sync: label removed, object kept)",
        "team": "deleted (left Git)",
    }


def test_prune_dry_run_deletes_only_in_dry_run_and_releases_nothing() -> None:
    members = [member(cm("gone", "ns"), "u1"), member(cm("found", "ns"), "u2", adopted=True)]
    api = FakeApi(default={"kind": "Status", "status": "Success"})
    entries = manager(api).prune(members, dry_run=True)
    (delete,) = api.sent()
    assert delete.method == "DELETE" and delete.body["dryRun"] == ["All"] and api.writes() == []
    assert sorted(e.message for e in entries) == [
        "would delete (left Git)",
        "would release (not created by gitops-sync: label removed, object kept)",
    ]


def deleting(obj: dict[str, Any], *finalizers: str) -> dict[str, Any]:
    """`obj` as a DELETE leaves it while something holds it: still there, with a deletionTimestamp."""
    out = copy.deepcopy(obj)
    out["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if finalizers:
        out["metadata"]["finalizers"] = list(finalizers)
    return out


def test_a_delete_answered_with_the_object_still_held_is_pending_not_deleted() -> None:
    gone = member(cm("gone", "ns"), "u1")
    api = FakeApi().on("DELETE", "/api/v1/namespaces/ns/configmaps/gone", deleting(gone, "example.com/hold"))
    (entry,) = manager(api).prune([gone], dry_run=False)
    assert entry.action is Action.TERMINATING and entry.terminating is not None
    assert entry.terminating.finalizers == ["example.com/hold"] and not entry.terminating.in_git
    assert entry.message == (
        "deletion pending: finalizer example.com/hold; "
        "left Git: DELETE accepted, it stays until its finalizers are removed"
    )


def test_a_member_already_terminating_gets_no_delete_on_any_pass_dry_or_not() -> None:
    held = deleting(member(cm("held", "ns"), "u1"), "example.com/hold")
    for dry_run in (False, True):
        api = FakeApi()
        (entry,) = manager(api).prune([held], dry_run=dry_run)
        assert api.sent() == [], "another DELETE changes nothing"
        assert entry.action is Action.TERMINATING
        assert entry.message.endswith("since 2026-01-01T00:00:00Z; left Git: no DELETE sent again")


def test_a_dry_run_delete_says_which_finalizer_the_deletion_would_wait_for() -> None:
    gone = member(cm("gone", "ns"), "u1")
    api = FakeApi().on("DELETE", "/api/v1/namespaces/ns/configmaps/gone", deleting(gone, "example.com/hold"))
    (entry,) = manager(api).prune([gone], dry_run=True)
    assert entry.action is Action.PRUNE
    assert entry.message == "would delete (left Git); deletion would wait for finalizer example.com/hold"


def test_a_namespace_the_api_server_is_emptying_is_deleted_not_held() -> None:
    team = member(namespace("team"), "u-ns")
    emptying = deleting(team) | {"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Terminating"}}
    api = FakeApi().on("DELETE", "/api/v1/namespaces/team", emptying)
    (entry,) = manager(api).prune([team], dry_run=False)
    assert entry.action is Action.PRUNE
    assert entry.message == "deleted (left Git; terminating: the API server deletes what it holds first)"


def test_prune_of_an_unserved_kind_sends_nothing_and_a_vanished_member_is_already_gone() -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}
    api = FakeApi()  # every path answers 404
    entries = {
        e.key.name: e for e in manager(api).prune([member(widget, "u1"), member(cm("c", "ns"), "u2")], dry_run=False)
    }
    assert [c.path for c in api.sent()] == ["/api/v1/namespaces/ns/configmaps/c"]
    assert entries["w"].action is Action.ERROR and entries["w"].message == "kind no longer served; cannot prune"
    assert entries["c"].action is Action.PRUNE and entries["c"].message == "already gone"


def test_relabel_moves_the_label_guarded_by_resource_version_and_reports_refusals() -> None:
    api = (
        FakeApi(default={})
        .on("PATCH", "/api/v1/namespaces/ns/configmaps/gone", (404, status_body(404, "NotFound")))
        .on("PATCH", "/api/v1/namespaces/ns/configmaps/locked", (403, status_body(403, "Forbidden", "no patch")))
    )
    members = [member(cm(n, "ns"), f"u-{n}") for n in ("moved", "gone", "locked")]
    errors = manager(api).relabel(members, "applyset-new-v1")
    moved = next(c for c in api.sent() if c.path.endswith("/moved"))
    assert moved.body == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
        {"op": "replace", "path": "/metadata/labels/applyset.kubernetes.io~1part-of", "value": "applyset-new-v1"},
    ]
    assert errors == ["ConfigMap/ns/locked: cannot move it into the new inventory: 403 Forbidden: no patch"]


# -- waiting ----------------------------------------------------------------------------------------


def test_wait_returns_what_is_not_current_and_reports_each_ready_object() -> None:
    ready_cm, rolling = targets(cm("conf"), deployment("web"))
    not_rolled_out = {**deployment("web"), "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 0}}
    not_rolled_out["metadata"]["generation"] = 1
    api = FakeApi().on("GET", ready_cm.path, live_of(ready_cm)).on("GET", rolling.path, not_rolled_out)
    ready: list[ObjectKey] = []
    (left,) = manager(api).wait([ready_cm, rolling], timeout=0, on_ready=ready.append)
    assert ready == [ready_cm.key]
    assert left.key == rolling.key and left.status is Status.IN_PROGRESS
