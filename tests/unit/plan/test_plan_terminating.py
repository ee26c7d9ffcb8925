"""What holds an object being deleted, in the words every report uses (gitops_sync.plan.terminating)."""

from __future__ import annotations

from typing import Any

from gitops_sync.plan import planner
from gitops_sync.plan.changeset import Action, ChangeSet, Entry, Terminating
from gitops_sync.plan.terminating import desired_entry, finalizers_of, holders, terminating
from gitops_sync.report import exit_code_diff, exit_code_sync
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import StaticDiscovery, cm, objs

SINCE = "2026-01-01T00:00:00Z"


def going(obj: dict[str, Any], *finalizers: str, **meta: Any) -> dict[str, Any]:
    obj["metadata"].update(deletionTimestamp=SINCE, finalizers=list(finalizers), **meta)
    return obj


def test_an_object_without_a_deletion_timestamp_is_not_terminating() -> None:
    assert terminating(None, in_git=True) is None
    assert terminating(cm("a", "ns"), in_git=True) is None
    assert terminating(cm("a", "ns") | {"metadata": {"name": "a", "finalizers": ["x"]}}, in_git=True) is None


def test_a_held_object_names_its_finalizers() -> None:
    t = terminating(going(cm("a", "ns"), "example.com/hold"), in_git=False)
    assert t == Terminating(since=SINCE, finalizers=["example.com/hold"], in_git=False)
    assert t.describe() == "deletion pending: finalizer example.com/hold"
    two = terminating(going(cm("a", "ns"), "a.io/x", "b.io/y"), in_git=True)
    assert two is not None and two.describe() == "deletion pending: finalizers a.io/x, b.io/y"
    assert two.to_dict() == {"since": SINCE, "finalizers": ["a.io/x", "b.io/y"], "inGit": True, "note": ""}


def test_a_pod_in_its_grace_period_is_terminating_without_a_finalizer() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    t = terminating(going(pod, deletionGracePeriodSeconds=30), in_git=True)
    assert t is not None and t.describe() == "deletion pending: graceful termination"


def test_a_namespace_counts_its_spec_finalizer_and_says_what_it_waits_for() -> None:
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team", "deletionTimestamp": SINCE},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {
            "phase": "Terminating",
            "conditions": [
                {"type": "NamespaceDeletionContentFailure", "status": "False", "message": "All content deleted"},
                {
                    "type": "NamespaceFinalizersRemaining",
                    "status": "True",
                    "message": "Some content in the namespace has finalizers remaining: "
                    "example.com/hold in 1 resource instances",
                },
            ],
        },
    }
    assert finalizers_of(ns) == ["kubernetes"]
    assert holders(ns) == [], "the namespace controller's own clean-up: being deleted, not held"
    t = terminating(ns, in_git=False)
    assert t is not None and t.describe() == (
        "deletion pending: finalizer kubernetes (Some content in the namespace has finalizers remaining: "
        "example.com/hold in 1 resource instances)"
    )


def test_only_the_api_servers_own_clean_up_finalizers_are_not_holders() -> None:
    crd = going(
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "w"}},
        "customresourcecleanup.apiextensions.k8s.io",
    )
    assert holders(crd) == []
    pvc = going(
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "d"}}, "kubernetes.io/pvc-protection"
    )
    assert holders(pvc) == ["kubernetes.io/pvc-protection"]


def test_a_desired_terminating_object_is_a_difference_and_not_in_sync() -> None:
    (target,) = planner.resolve(objs(cm("a")), StaticDiscovery(), "ns")
    pending = terminating(going(cm("a", "ns"), "example.com/hold"), in_git=True)
    assert pending is not None
    entry = desired_entry(target, pending, dry_run=True)
    assert entry.action is Action.TERMINATING and entry.terminating is pending
    assert entry.message == (
        f"deletion pending: finalizer example.com/hold since {SINCE}; "
        "Git still wants it: would be re-created once it is gone"
    )
    assert entry.to_dict()["terminating"]["inGit"] is True
    cs = ChangeSet(entries=[entry])
    assert exit_code_diff(cs) == 1 and exit_code_sync(cs) == 1
    assert cs.summary()["terminating"] == 1 and not entry.left_git


def test_a_pending_prune_leaves_git_and_keeps_sync_from_exiting_0() -> None:
    key = ObjectKey("", "ConfigMap", "ns", "a")
    entry = Entry(key, "v1", Action.TERMINATING, terminating=Terminating(SINCE, ["example.com/hold"]))
    cs = ChangeSet(entries=[entry, Entry(ObjectKey("", "ConfigMap", "ns", "b"), "v1", Action.PRUNE)])
    assert entry.left_git and cs.has_pending and not cs.has_errors
    assert exit_code_sync(cs) == 1 and exit_code_diff(cs) == 1
    assert exit_code_sync(ChangeSet(entries=[Entry(key, "v1", Action.PRUNE)])) == 0, "a prune done is in sync"
