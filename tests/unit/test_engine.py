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

from gitops_sync.apply.inventory import applyset_id
from gitops_sync.conventions import APPLIED_REVISION, ATTEMPTED_REVISION, GROUP_KINDS, ID_LABEL, NAMESPACES, PART_OF
from gitops_sync.engine import Engine, PassOptions
from gitops_sync.plan.changeset import Action, ChangeSet
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
    return FakeApi(default=server).on("GET", PARENT, parent()).on("GET", MEMBERS, listing(member("old")))


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
    api = (
        FakeApi(default=server)
        .on("GET", PARENT, parent(kinds="Deployment.apps", namespaces="old-team"))
        .on("GET", "/apis/apps/v1/deployments", listing(member("web", "apps/v1", "Deployment")))
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
        FakeApi(default=server)
        .on("GET", PARENT, parent(kinds="Deployment.apps", namespaces="old-team"))
        .on("GET", "/apis/apps/v1/deployments", listing(member("web", "apps/v1", "Deployment")))
        .on("DELETE", WEB, (500, status_body(500, "InternalError", "etcd timeout")))
    )
    cs = run(api, tmp_path, cm("a", k="v"), prune=True)
    assert cs.has_errors
    (union,) = parent_writes(api)  # the union is the last word: web is still listed by the next pass
    assert union[GROUP_KINDS] == "ConfigMap,Deployment.apps" and union[APPLIED_REVISION] == "r1"


def test_without_prune_the_parent_keeps_every_kind_it_recorded(tmp_path: Path) -> None:
    api = FakeApi(default=server).on("GET", PARENT, parent(kinds="Deployment.apps", namespaces="old-team"))
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
    first = FakeApi(default=server)
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
