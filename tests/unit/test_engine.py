"""`Engine.run` decisions that need no API server: when it prunes, when it writes the inventory parent and
with what, and that a pass with nothing to do writes nothing.

The API server is a script at the HTTP seam (tests/unit/fakes.py): a real Client, planner and resource
manager send their requests to it, and the tests read back exactly which requests went out. What the
server itself decides (apply results, deletes, conflicts) is tested on the real cluster in
tests/integration/test_sync.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.apply.inventory import applyset_id
from gitops_sync.conventions import APPLIED_REVISION, ATTEMPTED_REVISION, GROUP_KINDS, ID_LABEL, NAMESPACES, PART_OF
from gitops_sync.engine import Engine, PassOptions
from gitops_sync.engine.positions import field_position
from gitops_sync.errors import InventoryChangedError, NewerRevisionError
from gitops_sync.plan.changeset import Action, ChangeSet
from gitops_sync.render import locate
from gitops_sync.resource import ObjectKey
from gitops_sync.source import Checkout
from tests.unit.fakes import Call, FakeApi, StaticDiscovery, cm, fake_client, objs, status_body

REPO = "https://git.example.invalid/org/apps.git"  # a remote spelling: its identity needs no git command
PARENT = "/api/v1/namespaces/gitops/configmaps/inv"
ID = applyset_id("inv", "gitops")
MEMBERS = "/api/v1/configmaps"  # where prune lists the recorded ConfigMap members, by label
OLD = "/api/v1/namespaces/team/configmaps/old"  # a member that left Git
WEB = "/apis/apps/v1/namespaces/team/deployments/web"  # a Deployment member that left Git


def cm_path(name: str) -> str:
    return f"/api/v1/namespaces/team/configmaps/{name}"


def server(call: Call) -> tuple[int, Any]:
    """Anything unscripted: a read finds nothing, an apply creates its body, a delete succeeds."""
    if call.method == "GET" and "labelSelector" in call.query:
        return 200, listing()
    if call.method == "PATCH":
        body = copy.deepcopy(call.body)
        body.setdefault("metadata", {}).update(resourceVersion="2", uid=f"u-{body['metadata'].get('name')}")
        return 201, body
    if call.method == "DELETE":
        return 200, {"kind": "Status", "status": "Success"}
    return 404, status_body(404, "NotFound", "not found")


def with_parent(api: FakeApi, doc: dict[str, Any] | None) -> FakeApi:
    """The inventory parent as the API server keeps it: read back as last written, its resourceVersion
    counting writes and guarding them (prune checks it before deleting; the parent's writes carry it)."""
    state = {"doc": copy.deepcopy(doc)}
    if state["doc"] is not None:
        state["doc"]["metadata"]["resourceVersion"] = "1"

    def get(_call: Call) -> tuple[int, Any]:
        found = state["doc"]
        return (200, copy.deepcopy(found)) if found else (404, status_body(404, "NotFound", "not found"))

    def patch(call: Call) -> tuple[int, Any]:
        body, current = copy.deepcopy(call.body), state["doc"]
        want = body["metadata"].pop("resourceVersion", None)
        if current is not None and want and want != current["metadata"]["resourceVersion"]:
            return 409, status_body(409, "Conflict", "the object has been modified")
        version = int(current["metadata"]["resourceVersion"]) + 1 if current else 1
        body["metadata"].update(resourceVersion=str(version), uid="u-parent")
        state["doc"] = body
        return (200 if current else 201), copy.deepcopy(body)

    return api.on("GET", PARENT, get).on("PATCH", PARENT, patch)


def parent(kinds: str = "ConfigMap", namespaces: str = "team", applied: str = "r1") -> dict[str, Any]:
    ann = {GROUP_KINDS: kinds, NAMESPACES: namespaces, ATTEMPTED_REVISION: applied, APPLIED_REVISION: applied}
    meta = {"name": "inv", "namespace": "gitops", "uid": "u-parent", "labels": {ID_LABEL: ID}, "annotations": ann}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def member(name: str, api_version: str = "v1", kind: str = "ConfigMap") -> dict[str, Any]:
    meta = {"name": name, "namespace": "team", "uid": f"u-{name}", "labels": {PART_OF: ID}}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def listing(*items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": "1"}, "items": list(items)}


def api_with_old_member() -> FakeApi:
    """A cluster where our parent records ConfigMaps in `team` and member `old` is live (left Git)."""
    return with_parent(FakeApi(default=server), parent()).on("GET", MEMBERS, listing(member("old")))


def run(
    api: FakeApi,
    tmp_path: Path,
    *manifests: dict[str, Any],
    apply: bool = True,
    only: set[ObjectKey] | None = None,
    revision: str = "r2",
    **opts: Any,
) -> ChangeSet:
    engine = Engine(fake_client(api), discovery=StaticDiscovery(), concurrency=1)
    checkout = Checkout(root=tmp_path, revision=revision, repo=REPO, ref="")
    options = PassOptions(namespace="team", name="inv", inventory_namespace="gitops", **opts)
    targets = engine.resolve(objs(*manifests), options)
    return engine.run(checkout, targets, options, apply=apply, only=only)


def parent_writes(api: FakeApi) -> list[dict[str, str]]:
    """The annotations of every (non-dry) write to the inventory parent, in order."""
    return [c.body["metadata"]["annotations"] for c in api.writes() if c.path == PARENT]


def index(api: FakeApi, method: str, path: str) -> list[int]:
    return [i for i, c in enumerate(api.sent()) if (c.method, c.path) == (method, path)]


# -- a failed pass never prunes ------------------------------------------------------------------------


def test_a_pass_with_an_object_that_failed_to_apply_deletes_nothing_and_says_why(tmp_path: Path) -> None:
    api = api_with_old_member().on("PATCH", cm_path("bad"), (422, status_body(422, "Invalid", "data: bad value")))
    cs = run(api, tmp_path, cm("good", k="v"), cm("bad", k="v"), prune=True)
    assert api.sent("DELETE") == []
    assert any("prune skipped: some objects failed to apply" in e for e in cs.errors)
    assert {e.key.name: e.action for e in cs.entries} == {"good": Action.CREATE, "bad": Action.ERROR}
    assert index(api, "GET", MEMBERS) == [], "members are not even listed on a failed pass"
    assert all(w[APPLIED_REVISION] == "r1" for w in parent_writes(api)), "r2 is never recorded as applied"


def test_the_same_pass_without_the_failure_deletes_the_member_that_left_git(tmp_path: Path) -> None:
    """The counterpart of the test above: the scripted cluster really has a member prune would delete."""
    api = api_with_old_member()
    cs = run(api, tmp_path, cm("good", k="v"), cm("bad", k="v"), prune=True)
    assert not cs.has_errors
    (delete,) = api.sent("DELETE")
    assert delete.path == OLD and delete.body["preconditions"] == {"uid": "u-old"}


# -- a render of zero objects --------------------------------------------------------------------------


def test_zero_rendered_objects_refuse_to_prune_without_allow_empty(tmp_path: Path) -> None:
    api = api_with_old_member()
    cs = run(api, tmp_path, prune=True)
    assert api.sent("DELETE") == [] and api.writes() == []
    assert any("rendered zero objects: refusing to prune 1 object(s)" in e for e in cs.errors)


def test_zero_rendered_objects_prune_every_member_with_allow_empty(tmp_path: Path) -> None:
    api = api_with_old_member()
    cs = run(api, tmp_path, prune=True, allow_empty=True)
    assert not cs.has_errors
    assert [(c.method, c.path) for c in api.writes()] == [("DELETE", OLD)]
    assert [(e.key.name, e.action) for e in cs.entries] == [("old", Action.PRUNE)]


# -- a partial pass ------------------------------------------------------------------------------------


def test_a_partial_pass_applies_only_its_objects_and_neither_prunes_nor_writes_the_parent(tmp_path: Path) -> None:
    api = api_with_old_member()
    only = {ObjectKey("", "ConfigMap", "team", "a")}
    cs = run(api, tmp_path, cm("a", k="v"), cm("b", k="v"), prune=True, only=only)
    assert [(c.method, c.path) for c in api.writes()] == [("PATCH", cm_path("a"))]
    assert index(api, "GET", MEMBERS) == [] and not cs.has_errors
    assert [e.key.name for e in cs.entries] == ["a"]


# -- dry run and diff ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("apply", "dry_run"), [(False, False), (True, True)], ids=["diff", "dry-run"])
def test_dry_run_and_diff_record_nothing_and_delete_nothing(tmp_path: Path, apply: bool, dry_run: bool) -> None:
    api = api_with_old_member()
    cs = run(api, tmp_path, cm("a", k="v"), prune=True, apply=apply, dry_run=dry_run)
    assert api.writes() == [], "only dry-run requests"
    assert index(api, "PATCH", PARENT) == []
    assert all(c.body["dryRun"] == ["All"] for c in api.sent("DELETE"))
    assert {e.key.name: e.message for e in cs.entries}["old"] == "would delete (left Git)"


# -- what the parent records, and when -----------------------------------------------------------------


def test_the_parent_records_the_union_before_applying_and_shrinks_after_a_clean_prune(tmp_path: Path) -> None:
    api = with_parent(FakeApi(default=server), parent(kinds="Deployment.apps", namespaces="old-team")).on(
        "GET", "/apis/apps/v1/deployments", listing(member("web", "apps/v1", "Deployment"))
    )
    cs = run(api, tmp_path, cm("a", k="v"), prune=True)
    assert not cs.has_errors
    first, last = index(api, "PATCH", PARENT)
    assert first < index(api, "PATCH", cm_path("a"))[0] < index(api, "DELETE", WEB)[0] < last
    union, shrunk = parent_writes(api)
    assert (union[GROUP_KINDS], union[NAMESPACES]) == ("ConfigMap,Deployment.apps", "old-team,team")
    assert (shrunk[GROUP_KINDS], shrunk[NAMESPACES]) == ("ConfigMap", "team")


def test_the_parent_keeps_the_union_when_a_prune_fails(tmp_path: Path) -> None:
    api = (
        with_parent(FakeApi(default=server), parent(kinds="Deployment.apps", namespaces="old-team"))
        .on("GET", "/apis/apps/v1/deployments", listing(member("web", "apps/v1", "Deployment")))
        .on("DELETE", WEB, (500, status_body(500, "InternalError", "etcd timeout")))
    )
    cs = run(api, tmp_path, cm("a", k="v"), prune=True)
    assert cs.has_errors
    # The report says why up top, counted once: the error entry, and no pass error of its own (the daemon
    # must not back off for it); `errors` was [] with an error count of 1.
    doc = cs.to_dict()
    assert cs.errors == [] and doc["summary"]["error"] == 1
    assert doc["errors"] == [
        "prune incomplete: did not delete 1 object(s) that left Git: Deployment.apps/team/web (see their entries)"
    ]
    (union,) = parent_writes(api)  # the union is the last word: web is still listed by the next pass
    assert union[GROUP_KINDS] == "ConfigMap,Deployment.apps" and union[APPLIED_REVISION] == "r1"


def test_without_prune_the_parent_keeps_every_kind_it_recorded(tmp_path: Path) -> None:
    api = with_parent(FakeApi(default=server), parent(kinds="Deployment.apps", namespaces="old-team"))
    cs = run(api, tmp_path, cm("a", k="v"))
    assert not cs.has_errors and api.sent("DELETE") == []
    assert [w[GROUP_KINDS] for w in parent_writes(api)] == ["ConfigMap,Deployment.apps"] * 2


# -- what only refused applies reached is not kept (issue 22) ------------------------------------------

OTHER = "/api/v1/namespaces/other/configmaps/theirs"  # an object in a namespace this source may not write
FORBIDDEN = (403, status_body(403, "Forbidden", 'configmaps "theirs" is forbidden: User "tenant" cannot patch'))


def test_a_namespace_only_a_refused_apply_reached_is_recorded_first_and_taken_back(tmp_path: Path) -> None:
    api = FakeApi(default=server).on("GET", PARENT, parent()).on("PATCH", OTHER, FORBIDDEN)
    cs = run(api, tmp_path, cm("a", k="v"), cm("theirs", "other", k="v"), prune=True)
    (theirs,) = [e for e in cs.entries if e.key.name == "theirs"]
    assert (theirs.action, theirs.status, theirs.reason, theirs.wrote_nothing) == (Action.ERROR, 403, "Forbidden", True)
    before, after = parent_writes(api)
    assert index(api, "PATCH", PARENT)[0] < index(api, "PATCH", OTHER)[0] < index(api, "PATCH", PARENT)[1]
    assert before[NAMESPACES] == "other,team", "recorded before the apply, in case a crash follows it"
    assert after[NAMESPACES] == "team" and after[GROUP_KINDS] == "ConfigMap"
    assert after[APPLIED_REVISION] == "r1", "still a failed pass"


def test_a_kind_only_a_refused_apply_reached_is_taken_back(tmp_path: Path) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {}}
    api = (
        FakeApi(default=server)
        .on("GET", PARENT, parent())
        .on("PATCH", WEB, (422, status_body(422, "Invalid", "spec.selector: Required value")))
    )
    cs = run(api, tmp_path, cm("a", k="v"), deployment, prune=True)
    assert cs.has_errors
    before, after = parent_writes(api)
    assert (before[GROUP_KINDS], after[GROUP_KINDS]) == ("ConfigMap,Deployment.apps", "ConfigMap")
    assert after[NAMESPACES] == "team", "the namespace holds an applied object: kept"


@pytest.mark.parametrize(
    "answer",
    [
        (500, status_body(500, "InternalError", "etcd timeout")),
        (409, status_body(409, "Conflict", "the object has been modified")),
    ],
    ids=["500-may-have-landed", "409-not-a-refusal-of-the-whole"],
)
def test_an_answer_that_may_have_stored_something_keeps_the_record(tmp_path: Path, answer: tuple[int, Any]) -> None:
    api = FakeApi(default=server).on("GET", PARENT, parent()).on("PATCH", OTHER, answer)
    cs = run(api, tmp_path, cm("a", k="v"), cm("theirs", "other", k="v"), prune=True)
    assert cs.has_errors
    (union,) = parent_writes(api)
    assert union[NAMESPACES] == "other,team"


def test_a_namespace_recorded_before_is_kept_even_when_every_apply_there_is_refused(tmp_path: Path) -> None:
    """A member may be there from an earlier pass (when RBAC allowed it): only a LIST could say it is not."""
    api = FakeApi(default=server).on("GET", PARENT, parent(namespaces="other,team")).on("PATCH", OTHER, FORBIDDEN)
    cs = run(api, tmp_path, cm("a", k="v"), cm("theirs", "other", k="v"), prune=True)
    assert cs.has_errors
    assert all(w[NAMESPACES] == "other,team" for w in parent_writes(api))


def test_an_object_the_source_may_not_read_is_never_sent_and_its_namespace_never_recorded(tmp_path: Path) -> None:
    api = FakeApi(default=server).on("GET", PARENT, parent())
    engine = Engine(fake_client(api), discovery=StaticDiscovery(), concurrency=1)
    checkout = Checkout(root=tmp_path, revision="r2", repo=REPO, ref="")
    options = PassOptions(namespace="team", name="inv", inventory_namespace="gitops", prune=True)
    targets = engine.resolve(objs(cm("a", k="v"), cm("theirs", "other", k="v")), options)
    denied = {
        t.key: 'configmaps "theirs" is forbidden: User "tenant" cannot get' for t in targets if t.key.name == "theirs"
    }
    cs = engine.run(checkout, targets, options, apply=True, refused=denied)
    (theirs,) = [e for e in cs.entries if e.key.name == "theirs"]
    assert (theirs.status, theirs.reason) == (403, "Forbidden")
    assert [c.path for c in api.sent() if c.path == OTHER] == []
    assert all("other" not in w[NAMESPACES] for w in parent_writes(api))


def test_a_failed_object_is_counted_once_although_prune_says_it_was_skipped(tmp_path: Path) -> None:
    api = api_with_old_member().on("PATCH", cm_path("bad"), (422, status_body(422, "Invalid", "data: bad value")))
    cs = run(api, tmp_path, cm("good", k="v"), cm("bad", k="v"), prune=True)
    assert any("prune skipped" in e for e in cs.errors)
    assert cs.summary()["error"] == 1


# -- applied and attempted revisions -------------------------------------------------------------------


def test_attempted_revision_is_written_first_and_applied_revision_only_after_a_clean_pass(tmp_path: Path) -> None:
    api = api_with_old_member()
    cs = run(api, tmp_path, cm("a", k="v"), prune=True)
    assert not cs.has_errors
    attempt, done = parent_writes(api)
    assert (attempt[ATTEMPTED_REVISION], attempt[APPLIED_REVISION]) == ("r2", "r1")
    assert (done[ATTEMPTED_REVISION], done[APPLIED_REVISION]) == ("r2", "r2")
    assert index(api, "PATCH", PARENT)[-1] == len(api.sent()) - 1, "recorded as applied last of all"


@pytest.mark.parametrize("prune", [True, False], ids=["prune", "no-prune"])
def test_a_failed_pass_records_the_attempt_but_never_the_applied_revision(tmp_path: Path, prune: bool) -> None:
    api = api_with_old_member().on("PATCH", cm_path("a"), (500, status_body(500, "InternalError", "boom")))
    cs = run(api, tmp_path, cm("a", k="v"), prune=prune)
    assert cs.has_errors
    (attempt,) = parent_writes(api)
    assert (attempt[ATTEMPTED_REVISION], attempt[APPLIED_REVISION]) == ("r2", "r1")


# -- a pass with nothing to do -------------------------------------------------------------------------


def test_a_second_pass_of_the_same_revision_sends_no_write_at_all(tmp_path: Path) -> None:
    first = with_parent(FakeApi(default=server), None)
    manifests = (cm("a", k="v"), cm("b", k="w"))
    assert not run(first, tmp_path, *manifests, prune=True).has_errors
    # The cluster as the first pass left it: the objects and the parent exactly as applied.
    applied = {c.path: server(c)[1] for c in first.writes()}
    assert set(applied) == {PARENT, cm_path("a"), cm_path("b")}
    second = FakeApi(default=server)
    for path, obj in applied.items():
        second.on("GET", path, obj)
    second.on("GET", MEMBERS, listing(applied[cm_path("a")], applied[cm_path("b")]))
    cs = run(second, tmp_path, *manifests, prune=True)
    assert not cs.has_errors
    assert second.writes() == [] and second.sent("DELETE") == []
    assert [e.action for e in cs.entries] == [Action.UNCHANGED] * 2


# -- the Namespace holding the inventory parent (issue 20, item 6) ---------------------------------------

NAMESPACES_PATH = "/api/v1/namespaces"  # where prune lists the recorded Namespace members, by label
HOLDER = "/api/v1/namespaces/gitops"  # the Namespace our parent ConfigMap lives in
HOLD = "example.com/hold"


def namespace_member(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "uid": f"u-{name}", "labels": {PART_OF: ID}},
    }


def held(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as the API server answers a DELETE a finalizer holds: still there, with a deletionTimestamp."""
    out = copy.deepcopy(obj)
    out["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=[HOLD])
    return out


def api_with_holder(*others: dict[str, Any]) -> FakeApi:
    """Our parent lives in Namespace `gitops`, itself a member that left Git, beside ConfigMap members."""
    return (
        with_parent(FakeApi(default=server), parent(kinds="ConfigMap,Namespace"))
        .on("GET", MEMBERS, listing(*others))
        .on("GET", NAMESPACES_PATH, listing(namespace_member("gitops")))
    )


@pytest.mark.parametrize("cascade", [False, True], ids=["guard", "prune-cascade"])
def test_the_namespace_holding_the_inventory_is_refused_while_the_source_has_objects(
    tmp_path: Path, cascade: bool
) -> None:
    api = api_with_holder(member("old"))
    cs = run(api, tmp_path, cm("good", k="v"), prune=True, prune_cascade=cascade)
    assert [c.path for c in api.sent("DELETE")] == [OLD], "the rest is pruned, the Namespace never"
    (refusal,) = [e for e in cs.entries if e.key.kind == "Namespace"]
    assert refusal.action is Action.ERROR and "holds this source's inventory (ConfigMap gitops/inv)" in refusal.message
    assert "still records 1 other object(s)" in refusal.message
    assert all(w[APPLIED_REVISION] == "r1" for w in parent_writes(api)), "a refused prune is not a clean pass"


def test_as_the_last_member_the_namespace_holding_the_inventory_goes_after_every_other(tmp_path: Path) -> None:
    api = api_with_holder(member("old"))
    cs = run(api, tmp_path, prune=True, allow_empty=True, prune_cascade=True)  # the guard is tested elsewhere
    assert not cs.has_errors, cs.to_dict()
    assert [c.path for c in api.sent("DELETE")] == [OLD, HOLDER]


def test_the_namespace_holding_the_inventory_waits_while_another_member_is_held(tmp_path: Path) -> None:
    api = api_with_holder(member("old")).on("DELETE", OLD, held(member("old")))
    cs = run(api, tmp_path, prune=True, allow_empty=True, prune_cascade=True)
    assert [c.path for c in api.sent("DELETE")] == [OLD], "the parent would go with the Namespace"
    entries = {e.key.name: e for e in cs.entries}
    assert entries["old"].action is Action.TERMINATING and cs.has_pending and not cs.has_errors
    assert entries["gitops"].action is Action.UNCHANGED and "kept until the other members are gone" in (
        entries["gitops"].message
    )


# -- Terminating objects (issue 20, item 7) -------------------------------------------------------------


def test_a_held_prune_is_pending_and_the_revision_is_not_recorded_as_applied(tmp_path: Path) -> None:
    api = api_with_old_member().on("DELETE", OLD, held(member("old")))
    cs = run(api, tmp_path, cm("a", k="v"), prune=True)
    (entry,) = [e for e in cs.entries if e.key.name == "old"]
    assert entry.action is Action.TERMINATING and entry.message.startswith(f"deletion pending: finalizer {HOLD};")
    assert not cs.has_errors and cs.has_pending
    assert all(w[APPLIED_REVISION] == "r1" for w in parent_writes(api)), "pending: not complete, not applied"
    assert all("ConfigMap" in w[GROUP_KINDS] for w in parent_writes(api))


def test_a_member_already_terminating_is_sent_no_delete(tmp_path: Path) -> None:
    api = with_parent(FakeApi(default=server), parent()).on("GET", MEMBERS, listing(held(member("old"))))
    cs = run(api, tmp_path, cm("a", k="v"), prune=True)
    assert api.sent("DELETE") == []
    (entry,) = [e for e in cs.entries if e.key.name == "old"]
    assert entry.action is Action.TERMINATING and "no DELETE sent again" in entry.message


@pytest.mark.parametrize("apply", [True, False], ids=["sync", "diff"])
def test_a_desired_object_that_is_terminating_is_reported_and_not_applied(tmp_path: Path, apply: bool) -> None:
    live = held(member("a")) | {"data": {"k": "v"}}
    api = with_parent(FakeApi(default=server), parent()).on("GET", cm_path("a"), live)
    cs = run(api, tmp_path, cm("a", k="v"), apply=apply)
    assert [c for c in api.sent("PATCH") if c.path == cm_path("a")] == [], "nothing is sent to an object going away"
    (entry,) = cs.entries
    assert entry.action is Action.TERMINATING and entry.terminating is not None and entry.terminating.in_git
    assert "Git still wants it" in entry.message and cs.has_changes


def test_a_namespace_holding_the_inventory_already_terminating_is_pending_not_refused(tmp_path: Path) -> None:
    """Deleted by hand before: nothing a refusal could save, and no DELETE to send; the report says so."""
    api = api_with_holder(member("old")).on("GET", NAMESPACES_PATH, listing(held(namespace_member("gitops"))))
    cs = run(api, tmp_path, cm("good", k="v"), prune=True)
    assert [c.path for c in api.sent("DELETE")] == [OLD]
    (entry,) = [e for e in cs.entries if e.key.kind == "Namespace"]
    assert entry.action is Action.TERMINATING and "no DELETE sent again" in entry.message


LABELLED = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: lbl
  labels:
    app.kubernetes.io/component: grafana
    app.kubernetes.io/name: grafana
    app.kubernetes.io/part-of: kube-prometheus
data:
  a: "1"
"""


@pytest.mark.parametrize(
    ("path", "where"),
    [
        # A dotted key is printed split; the line of the labels map (its first key) was named: 2 lines early.
        (".metadata.labels.app.kubernetes.io/part-of", "app.yaml:8:32"),
        (".metadata.labels.app.kubernetes.io/component", "app.yaml:6:34"),
        (".metadata.labels.app.kubernetes.io/version", "app.yaml:6:5"),  # not in Git: its nearest ancestor
        (".data.a", "app.yaml:10:6"),
    ],
)
def test_a_field_is_located_at_its_own_line_even_under_a_dotted_key(path: str, where: str) -> None:
    assert field_position("app.yaml", locate.positions(LABELLED, 1), (), path, yaml.safe_load(LABELLED)) == where


# -- another pass of this source meanwhile ---------------------------------------------------------------


def test_a_parent_written_by_another_pass_before_the_prune_stops_the_prune_and_the_applied_record(
    tmp_path: Path,
) -> None:
    """Another pass (a newer revision, a run holding no Lease) recorded the parent while this one applied:
    the members it listed may be that pass's, so nothing is deleted, and its record is not written over."""
    api = api_with_old_member()
    newer = fake_client(api)

    def members_while_another_pass_records(_call: Call) -> tuple[int, Any]:
        record = parent(applied="r1")
        record["metadata"]["annotations"][ATTEMPTED_REVISION] = "r3"
        del record["metadata"]["uid"]
        newer.request("PATCH", PARENT, body=record, content_type="application/apply-patch+yaml")
        return 200, listing(member("old"))

    api.on("GET", MEMBERS, members_while_another_pass_records)
    cs = run(api, tmp_path, cm("a", k="v"), prune=True)
    assert api.sent("DELETE") == []
    assert any(
        "prune skipped: the inventory ConfigMap gitops/inv was written by another pass" in e and "attempted r3" in e
        for e in cs.errors
    ), cs.errors
    assert [w[ATTEMPTED_REVISION] for w in parent_writes(api)] == ["r2", "r3"], "r2 is not recorded over r3"


def test_a_parent_written_by_another_pass_before_the_first_record_is_not_written_over(tmp_path: Path) -> None:
    read, meanwhile = parent(), parent()
    read["metadata"]["resourceVersion"], meanwhile["metadata"]["resourceVersion"] = "1", "2"
    api = api_with_old_member()
    api.on("GET", PARENT, read, meanwhile)  # read at rv 1 by this pass; another pass wrote it since
    api.on("PATCH", PARENT, (409, status_body(409, "Conflict", "the object has been modified")))
    with pytest.raises(InventoryChangedError, match="written by another pass of this source since this one read it"):
        run(api, tmp_path, cm("a", k="v"), prune=True)
    assert api.sent("DELETE") == [] and [c.path for c in api.writes()] == [PARENT]
    (record,) = api.writes()
    assert record.body["metadata"]["resourceVersion"] == "1", "the record is conditional on what was read"


def _commits(tmp_path: Path) -> tuple[Path, str, str]:
    """A local repository with two commits: (work tree, older, newer)."""
    import git

    repo = git.Repo.init(tmp_path / "repo")
    with repo.config_writer() as w:
        w.set_value("user", "name", "t")
        w.set_value("user", "email", "t@example.invalid")
    (tmp_path / "repo" / "a.yaml").write_text("a: 1\n")
    repo.index.add(["a.yaml"])
    older = repo.index.commit("older").hexsha
    (tmp_path / "repo" / "a.yaml").write_text("a: 2\n")
    repo.index.add(["a.yaml"])
    newer = repo.index.commit("newer").hexsha
    return tmp_path / "repo", older, newer


def _run_at(api: FakeApi, root: Path, revision: str, **opts: Any) -> ChangeSet:
    engine = Engine(fake_client(api), discovery=StaticDiscovery(), concurrency=1)
    checkout = Checkout(root=root, revision=revision, repo=REPO, ref="", repo_root=root)
    options = PassOptions(namespace="team", name="inv", inventory_namespace="gitops", **opts)
    return engine.run(checkout, engine.resolve(objs(cm("a", k="v")), options), options, apply=True)


@pytest.mark.parametrize("recorded", [APPLIED_REVISION, ATTEMPTED_REVISION])
def test_a_sync_of_a_commit_older_than_the_recorded_one_is_refused_before_any_write(
    tmp_path: Path, recorded: str
) -> None:
    root, older, newer = _commits(tmp_path)
    record = parent(applied=older)
    record["metadata"]["annotations"][recorded] = newer
    api = with_parent(FakeApi(default=server), record).on("GET", MEMBERS, listing(member("old")))
    with pytest.raises(NewerRevisionError, match=f"records revision {newer[:12]}.*{older[:12]} is its ancestor"):
        _run_at(api, root, older, prune=True, refuse_older=True)
    assert api.writes() == []
    # --allow-rollback (refuse_older off), the daemon, and a newer or unrelated commit go ahead
    assert not _run_at(api, root, older, prune=True).has_errors
    assert api.sent("DELETE"), "the deliberate rollback prunes what the newer commit added"


def test_a_recorded_commit_this_clone_does_not_have_refuses_nothing(tmp_path: Path) -> None:
    root, older, _newer = _commits(tmp_path)
    api = with_parent(FakeApi(default=server), parent(applied="f" * 40))  # a shallow CI clone lacks it
    assert not _run_at(api, root, older, refuse_older=True).has_errors
