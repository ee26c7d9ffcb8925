"""`Engine.collect` (a deleted GitSync's garbage collection) never forgets a member it cannot list, and the
cascade guard never judges a Namespace on a discovery snapshot it could not renew.

The API server is a script at the HTTP seam (tests/unit/fakes.py); collect through the fleet's finalizer
on a real cluster is tested in tests/integration.
"""

from __future__ import annotations

from typing import Any

from gitops_sync.apply import cascade
from gitops_sync.apply.inventory import applyset_id
from gitops_sync.conventions import APPLIED_REVISION, GROUP_KINDS, ID_LABEL, NAMESPACES, PART_OF
from gitops_sync.engine import Engine
from tests.unit.fakes import FakeApi, StaticDiscovery, fake_client

PARENT = "/api/v1/namespaces/gitops/configmaps/inv"
ID = applyset_id("inv", "gitops")


def _parent(kinds: str) -> dict[str, Any]:
    ann = {GROUP_KINDS: kinds, NAMESPACES: "team", APPLIED_REVISION: "abc"}
    meta = {"name": "inv", "namespace": "gitops", "uid": "u-parent", "labels": {ID_LABEL: ID}, "annotations": ann}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def _member(name: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "team", "uid": f"u-{name}", "labels": {PART_OF: ID}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def test_collect_keeps_the_parent_while_it_records_a_kind_the_server_does_not_serve() -> None:
    """Members of an unserved kind (CRD versions set `served: false`) cannot be listed: deleting the
    parent would forget them for good, so collect reports an error (the finalizer retries) and keeps it."""
    api = (
        FakeApi()
        .on("GET", PARENT, _parent("ConfigMap,Widget.example.com"))
        .on("GET", "/api/v1/configmaps", {"metadata": {}, "items": [_member("a")]})
        .on("DELETE", "/api/v1/namespaces/team/configmaps/a", {"kind": "Status", "status": "Success"})
    )
    cs, due = Engine(fake_client(api), discovery=StaticDiscovery()).collect("inv", "gitops", "")
    assert due
    assert [c.path for c in api.sent("DELETE")] == ["/api/v1/namespaces/team/configmaps/a"]
    assert cs.has_errors and "Widget.example.com" in " ".join(cs.errors)


def test_collect_deletes_the_parent_once_every_recorded_kind_was_listed_and_pruned() -> None:
    api = (
        FakeApi()
        .on("GET", PARENT, _parent("ConfigMap"))
        .on("GET", "/api/v1/configmaps", {"metadata": {}, "items": [_member("a")]})
        .on("DELETE", "/api/v1/namespaces/team/configmaps/a", {"kind": "Status", "status": "Success"})
        .on("DELETE", PARENT, {"kind": "Status", "status": "Success"})
    )
    cs, due = Engine(fake_client(api), discovery=StaticDiscovery()).collect("inv", "gitops", "")
    assert due and not cs.has_errors
    assert [c.path for c in api.sent("DELETE")] == ["/api/v1/namespaces/team/configmaps/a", PARENT]


def test_collect_keeps_the_parent_while_a_finalizer_holds_a_member() -> None:
    """A member still Terminating is still there: the parent is how the retry finds and reports it (and the
    GitSync keeps its finalizer meanwhile), never deleted while it stays."""
    held = _member("a")
    held["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["example.com/hold"])
    api = (
        FakeApi()
        .on("GET", PARENT, _parent("ConfigMap"))
        .on("GET", "/api/v1/configmaps", {"metadata": {}, "items": [_member("a")]})
        .on("DELETE", "/api/v1/namespaces/team/configmaps/a", held)
    )
    cs, due = Engine(fake_client(api), discovery=StaticDiscovery()).collect("inv", "gitops", "")
    assert due and [c.path for c in api.sent("DELETE")] == ["/api/v1/namespaces/team/configmaps/a"]
    assert cs.errors == [
        "inventory kept: 1 member(s) not gone yet: ConfigMap/team/a (deletion pending: finalizer example.com/hold)"
    ]


def test_a_namespace_is_not_pruned_when_discovery_cannot_be_read_again() -> None:
    """The cascade guard reads discovery afresh (a CRD may have come since the snapshot); when that read
    fails, what the Namespace holds is unknown: its prune is refused, not judged on the old snapshot."""
    api = FakeApi().on("GET", "/api", (503, {"kind": "Status", "code": 503, "message": "down"}))
    discovery = StaticDiscovery()
    discovery._client = fake_client(api)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "uid": "u-ns", "labels": {}}}
    refused = cascade.refusals(fake_client(api), discovery, [ns])
    assert [e.key.name for e in refused] == ["team"] and "discovery failed" in refused[0].message
    assert [c.path for c in api.sent()] == ["/api"], "nothing listed on the strength of the old snapshot"


def _held(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as the API server answers a DELETE a finalizer holds: still there, with a deletionTimestamp."""
    obj["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["example.com/hold"])
    return obj


def test_collect_with_pending_done_deletes_the_parent_while_a_finalizer_holds_a_member() -> None:
    """deletionPolicy Delete / MirrorPrune: the API server accepted the member's deletion and nothing waits for
    its finalizers, so it counts as gone: no error (the GitSync may go) and the parent goes with it."""
    api = (
        FakeApi()
        .on("GET", PARENT, _parent("ConfigMap"))
        .on("GET", "/api/v1/configmaps", {"metadata": {}, "items": [_member("a")]})
        .on("DELETE", "/api/v1/namespaces/team/configmaps/a", _held(_member("a")))
        .on("DELETE", PARENT, {"kind": "Status", "status": "Success"})
    )
    cs, due = Engine(fake_client(api), discovery=StaticDiscovery()).collect("inv", "gitops", "", pending_done=True)
    assert due and not cs.has_errors and cs.has_pending, cs.to_dict()
    assert [c.path for c in api.sent("DELETE")] == ["/api/v1/namespaces/team/configmaps/a", PARENT]


def test_collect_with_keep_parent_reports_no_error_for_a_held_member_and_keeps_the_parent() -> None:
    """WaitForTermination: the caller waits (`Engine.remaining`) and collects again; the held member is no
    failure (not PruneFailed with backoff), and the parent stays until it is gone."""
    api = (
        FakeApi()
        .on("GET", PARENT, _parent("ConfigMap"))
        .on("GET", "/api/v1/configmaps", {"metadata": {}, "items": [_member("a")]})
        .on("DELETE", "/api/v1/namespaces/team/configmaps/a", _held(_member("a")))
    )
    cs, due = Engine(fake_client(api), discovery=StaticDiscovery()).collect("inv", "gitops", "", keep_parent=True)
    assert due and not cs.has_errors and cs.has_pending, cs.to_dict()
    assert [c.path for c in api.sent("DELETE")] == ["/api/v1/namespaces/team/configmaps/a"]


def _with_holder() -> FakeApi:
    """The parent lives in Namespace `gitops`, itself a member, beside ConfigMap `a`, which a finalizer holds."""
    holder = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gitops", "uid": "u-ns"}}
    holder["metadata"]["labels"] = {PART_OF: ID}
    return (
        FakeApi()
        .on("GET", PARENT, _parent("ConfigMap,Namespace"))
        .on("GET", "/api/v1/configmaps", {"metadata": {}, "items": [_member("a")]})
        .on("GET", "/api/v1/namespaces", {"metadata": {}, "items": [holder]})
        .on("DELETE", "/api/v1/namespaces/team/configmaps/a", _held(_member("a")))
        .on("DELETE", "/api/v1/namespaces/gitops", {"kind": "Status", "status": "Success"})
        .on("DELETE", PARENT, {"kind": "Status", "status": "Success"})
    )


def test_the_namespace_holding_the_parent_waits_for_a_held_member_unless_pending_counts_as_done() -> None:
    engine_api = _with_holder()
    cs, _ = Engine(fake_client(engine_api), discovery=StaticDiscovery()).collect(
        "inv", "gitops", "", prune_cascade=True
    )
    assert [c.path for c in engine_api.sent("DELETE")] == ["/api/v1/namespaces/team/configmaps/a"]
    (ns,) = [e for e in cs.entries if e.key.kind == "Namespace"]
    assert "kept until the other members are gone" in ns.message
    done_api = _with_holder()
    cs, _ = Engine(fake_client(done_api), discovery=StaticDiscovery()).collect(
        "inv", "gitops", "", prune_cascade=True, pending_done=True
    )
    assert not cs.has_errors, cs.to_dict()
    assert [c.path for c in done_api.sent("DELETE")] == [
        "/api/v1/namespaces/team/configmaps/a",
        "/api/v1/namespaces/gitops",
        PARENT,
    ]
