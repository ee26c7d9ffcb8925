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
