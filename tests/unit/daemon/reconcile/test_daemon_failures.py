"""What a failed pass says (daemon/failures.py) and how a GitSync's status shows it (`status_of`): the first
real error, counted once, with a reason scripts can match; deletions that are refused or wait."""

from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet import status as fleet_status
from gitops_sync.daemon.fleetctl import row
from gitops_sync.daemon.reconcile.failures import APPLY_FAILED, PRUNE_FAILED, RECONCILE_FAILED, failures_of
from gitops_sync.daemon.reconcile.outcome import SourceSnapshot
from gitops_sync.engine import SourceOptions
from gitops_sync.plan.changeset import NOT_SENT, PRUNE_REFUSED, Action, Consequence, Entry
from gitops_sync.resource import ObjectKey

THEIRS = ObjectKey("", "ConfigMap", "team-b", "theirs")
MINE = ObjectKey("", "ConfigMap", "team-a", "mine")
GONE = ObjectKey("", "Namespace", "", "old")
FORBIDDEN = '403 Forbidden: configmaps "theirs" is forbidden: User "system:serviceaccount:team-a:t" cannot patch'
SKIPPED = Consequence("prune skipped: some objects failed to apply; nothing is deleted on a failed pass")


def refused(key: ObjectKey = THEIRS) -> Entry:
    return Entry(key, "v1", Action.ERROR, message=FORBIDDEN, origin="theirs.yaml#1", status=403, reason="Forbidden")


def test_the_first_failed_object_is_the_headline_and_a_consequence_is_not_counted() -> None:
    f = failures_of([Entry(MINE, "v1", Action.CREATE), refused()], [SKIPPED], {MINE, THEIRS})
    assert f.count == 1 and f.reason == APPLY_FAILED and f.stalled  # a 403 needs RBAC, not a retry
    assert f.first == f"ConfigMap/team-b/theirs (theirs.yaml#1): {FORBIDDEN}"
    assert f.summary() == f.first
    assert f.to_list() == [
        {
            "object": "ConfigMap/team-b/theirs",
            "file": "theirs.yaml#1",
            "status": 403,
            "reason": "Forbidden",
            "message": FORBIDDEN,
        }
    ]
    assert f.errors == [SKIPPED]  # still listed, last


def test_a_refusal_without_the_status_in_its_message_gets_it() -> None:
    denied = Entry(
        THEIRS, "v1", Action.ERROR, message='configmaps "theirs" is forbidden', status=403, reason="Forbidden"
    )
    assert (
        failures_of([denied], [], {THEIRS}).first
        == 'ConfigMap/team-b/theirs: 403 Forbidden: configmaps "theirs" is forbidden'
    )


def test_what_a_retry_may_fix_is_not_stalled_and_a_cause_among_pass_errors_counts() -> None:
    flaky = Entry(MINE, "v1", Action.ERROR, message="not attempted: API server down", reason=NOT_SENT)
    f = failures_of([flaky, refused()], ["not ready after 300s: Deployment/team-a/web"], {MINE, THEIRS})
    assert (f.count, f.stalled, f.reason) == (3, False, APPLY_FAILED)
    assert f.summary().endswith("(and 2 more error(s))")


def test_the_reason_says_which_step_failed() -> None:
    prune = Entry(GONE, "v1", Action.ERROR, message="prune failed: 500 InternalError: etcd", status=500)
    guard = Entry(GONE, "v1", Action.ERROR, message="prune refused: deleting Namespace old ...", reason=PRUNE_REFUSED)
    assert failures_of([prune], [], {MINE}).reason == PRUNE_FAILED
    assert (failures_of([guard], [], {MINE}).reason, failures_of([guard], [], {MINE}).stalled) == (PRUNE_REFUSED, True)
    only = failures_of([], ["cannot record the inventory: 500"], {MINE})
    assert (only.reason, only.first, only.count) == (RECONCILE_FAILED, "cannot record the inventory: 500", 1)
    assert not failures_of([Entry(MINE, "v1", Action.UNCHANGED)], [], {MINE})


def _snapshot(entries: dict[ObjectKey, Entry], pass_errors: list[str]) -> SourceSnapshot:
    """A source's snapshot after a pass (what `status_of` reads)."""
    return SourceSnapshot(
        entries=tuple(entries.values()),
        pass_errors=tuple(pass_errors),
        desired=frozenset({MINE, THEIRS}),
        first_sync=True,
        self_heal=True,
        forcing=True,
        applied=("r1", ""),
        attempted="r2",
        inventory_name="gitsync-app",
        inventory_namespace="team-a",
    )


def status(r: SourceSnapshot, **kwargs: Any) -> dict[str, Any]:
    gs = gitsync.parse(
        {"metadata": {"name": "app", "namespace": "team-a", "generation": 2}, "spec": {"repository": "r"}}
    )
    return fleet_status.status_of(gs, r, **kwargs)


def conditions(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in doc["conditions"]}


def test_status_of_a_failed_object_names_it_once_with_a_reason_and_stalls() -> None:
    doc = status(_snapshot({MINE: Entry(MINE, "v1", Action.UNCHANGED), THEIRS: refused()}, [SKIPPED]))
    assert doc["lastError"].startswith("ConfigMap/team-b/theirs (theirs.yaml#1): 403 Forbidden")
    assert doc["counts"]["error"] == 1 and [e["object"] for e in doc["errors"]] == ["ConfigMap/team-b/theirs"]
    c = conditions(doc)
    assert c["Ready"] == ("False", APPLY_FAILED) and c["Stalled"] == ("True", APPLY_FAILED)
    assert c["Reconciling"] == ("False", "Idle")
    ready = next(x for x in doc["conditions"] if x["type"] == "Ready")
    assert ready["message"] == doc["lastError"]


def test_status_of_a_clean_source_has_no_errors() -> None:
    doc = status(_snapshot({MINE: Entry(MINE, "v1", Action.UNCHANGED)}, []))
    assert doc["lastError"] == "" and doc["errors"] == [] and doc["counts"]["error"] == 0
    assert conditions(doc)["Ready"] == ("True", "ReconciliationSucceeded")


def test_status_of_a_refused_deletion_is_not_ready_whatever_the_last_pass_said() -> None:
    guard = Entry(
        GONE, "v1", Action.ERROR, message="prune refused: it still holds ConfigMap/old/by-hand", reason=PRUNE_REFUSED
    )
    deletion = fleet_status.Deletion(failures_of([guard], [], ()))
    doc = status(_snapshot({MINE: Entry(MINE, "v1", Action.UNCHANGED)}, []), deletion=deletion)
    assert conditions(doc)["Ready"] == ("False", PRUNE_REFUSED) and conditions(doc)["Stalled"][0] == "True"
    ready = next(x for x in doc["conditions"] if x["type"] == "Ready")
    assert ready["message"].startswith("deleting: Namespace/old: prune refused") and "by-hand" in ready["message"]
    assert doc["observedGeneration"] == 2


def test_status_of_a_deletion_waiting_for_its_objects() -> None:
    waiting = fleet_status.Deletion(
        failures_of([], [], ()), waiting="waiting for 1 object(s) to be gone: ConfigMap/a/x"
    )
    doc = status(_snapshot({}, []), deletion=waiting)
    assert conditions(doc)["Ready"] == ("False", fleet_status.WAITING_FOR_TERMINATION)
    assert conditions(doc)["Reconciling"] == ("True", fleet_status.WAITING_FOR_TERMINATION)


def test_get_shows_the_reason_the_first_error_and_the_errors() -> None:
    doc = status(_snapshot({THEIRS: refused()}, [SKIPPED]))
    shown = row({"metadata": {"name": "app", "namespace": "team-a", "generation": 2}, "spec": {}, "status": doc})
    assert shown["ready"] == "False" and shown["reason"] == APPLY_FAILED
    assert shown["message"] == shown["lastError"] == doc["lastError"]
    assert shown["errors"] == doc["errors"]


def test_deletion_policy_decides_the_finalizer_and_prune_cascade_reaches_the_pass() -> None:
    def parsed(**spec: Any) -> gitsync.GitSync:
        return gitsync.parse({"metadata": {"name": "a", "namespace": "n"}, "spec": {"repository": "r", **spec}})

    assert parsed().deletion_policy == gitsync.MIRROR_PRUNE and not parsed().wants_finalizer
    assert parsed(prune=True).wants_finalizer
    assert not parsed(prune=True, deletionPolicy="Orphan").wants_finalizer
    assert (
        parsed(deletionPolicy="Delete").wants_finalizer and parsed(deletionPolicy="WaitForTermination").wants_finalizer
    )
    assert not parsed(deletionPolicy="Delete", mode="detect-only").wants_finalizer
    opts = parsed(pruneCascade=True).source_spec(SourceOptions(repo=""), debounce=0.2).pass_opts
    assert opts.prune_cascade and opts.cascade_advice == "set spec.pruneCascade: true on GitSync n/a"
    with pytest.raises(gitsync.InvalidSpec, match=r"spec\.deletionPolicy must be one of MirrorPrune, Delete, "):
        parsed(deletionPolicy="Sometimes")


def test_status_fields_an_older_crd_does_not_declare_are_read_from_the_api_servers_refusal() -> None:
    """The API server's answer to a status apply with a field the installed (older) CRD lacks: the controller
    then writes the status without it rather than no status at all."""
    message = (
        "500 Error: failed to create typed patch object (team-a/app; gitops-sync.io/v1alpha1, Kind=GitSync): "
        ".status.errors: field not declared in schema"
    )
    assert fleet_status.undeclared_status_fields(message) == {"errors"}
    assert fleet_status.undeclared_status_fields("500 Error: etcdserver: request timed out") == set()
