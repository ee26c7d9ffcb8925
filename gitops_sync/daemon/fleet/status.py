"""A GitSync's status document, built from its source's snapshot (and what the controller knows of it).

The status writer (writer.py) writes `status_of(...)` to the status subresource after a pass, only when it
changed; the fleet's /status (documents.py) shows the same document. `vacant_status` is what a replica
writes for a shard no replica holds. Pure functions: no cluster access here.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from gitops_sync.daemon.fleet.gitsync import CONDITION_TYPES, GitSync, InvalidSpec, without_times
from gitops_sync.daemon.reconcile.failures import Failures, failures_of
from gitops_sync.daemon.reconcile.outcome import SourceSnapshot
from gitops_sync.daemon.runtime.metrics import object_state
from gitops_sync.plan.changeset import Action

CLUSTER_UNREACHABLE = "ClusterUnreachable"  # Ready's reason while a GitSync's target cluster does not answer
WAITING_FOR_TERMINATION = "WaitingForTermination"  # Ready's reason while deletionPolicy waits for objects to go
MAX_HOOKS = 20  # status.lastHooks.hooks: the first of the last pass that ran Helm hooks (its /status has them all)
SUSPENDED_MESSAGE = "reconciliation is suspended (spec.suspend: true); the rest of the status is from before"


@dataclass(frozen=True)
class Deletion:
    """Why a GitSync being deleted is still there: its prune's failures, or (none) what it waits for."""

    failures: Failures
    waiting: str = ""


def _condition(ctype: str, status: bool | None, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "Unknown" if status is None else ("True" if status else "False"),
        "reason": reason,
        "message": message[:1024],
        "observedGeneration": generation,
    }


def with_cluster(doc: dict[str, Any], cluster: str, unreachable: str) -> dict[str, Any]:
    """A remote GitSync's status: `cluster` names its target; while that cluster does not answer, Ready is
    False with reason ClusterUnreachable (its message naming the cluster), the rest as last known."""
    if cluster:
        doc["cluster"] = cluster
    if unreachable and doc.get("conditions"):
        gen = int(doc.get("observedGeneration") or 0)
        doc["conditions"] = [
            _condition(c["type"], False, CLUSTER_UNREACHABLE, unreachable, gen)
            if c["type"] == "Ready"
            else (
                _condition("Reconciling", True, CLUSTER_UNREACHABLE, unreachable, gen)
                if c["type"] == "Reconciling"
                else c
            )
            for c in doc["conditions"]
        ]
        doc["lastError"] = unreachable
    return doc


def status_of(
    gs: GitSync,
    snap: SourceSnapshot | None,
    *,
    waiting_for: str = "",
    invalid: str = "",
    invalid_reason: str = InvalidSpec.reason,
    handled: str = "",
    shard: int = 0,
    last: dict[str, Any] | None = None,
    deletion: Deletion | None = None,
) -> dict[str, Any]:
    """The status document (no transition times: `with_transition_times` adds them from the last one).

    `snap`: the source's snapshot (None: it has no reconciler). `invalid`: why the controller will not
    act on this GitSync (`invalid_reason`: InvalidSpec, or RepositoryNotAllowed); it then has no
    reconciler. `last` is the status as the GitSync object holds it now: a suspended source keeps it (see
    `_suspended`). `deletion`: the GitSync is being deleted and its objects are not all gone yet (a
    refused or failed prune, or WaitForTermination waiting): that is what Ready says, never the last
    pass's success.
    """
    gen = gs.generation
    if gs.suspend and not invalid:
        return _suspended(gs, last or {}, handled, shard)
    doc: dict[str, Any] = {"observedGeneration": gen, "shard": shard}
    if handled:
        doc["lastHandledReconcileAt"] = handled
    if invalid or snap is None:
        message = invalid or "not loaded yet"
        reason = invalid_reason if invalid else "Progressing"
        doc["lastError"] = invalid
        doc["conditions"] = [
            _condition("Ready", False if invalid else None, reason, message, gen),
            _condition("Reconciling", not invalid, reason, message, gen),
            _condition("Stalled", bool(invalid), reason, message, gen),
        ]
        return doc
    failures = deletion.failures if deletion else failures_of(snap.entries, snap.pass_errors, snap.desired)
    counts = _counts(snap, failures)
    doc["counts"] = counts
    doc["lastAppliedRevision"] = snap.applied[0] if snap.applied else ""
    doc["lastAttemptedRevision"] = snap.attempted or snap.revision
    doc["charts"] = [dict(c) for c in snap.charts]  # pulled from repositories: repository, chart, version, digest
    if snap.signer:  # spec.verify: who signed the revision held
        doc["signedBy"] = snap.signer
    if snap.last_hooks:  # the Helm hooks the last pass that ran any ran (revision, finished, hooks)
        doc["lastHooks"] = {**snap.last_hooks, "hooks": list(snap.last_hooks.get("hooks") or [])[:MAX_HOOKS]}
    objects = sum(1 for e in snap.entries if not e.left_git)
    doc["inventory"] = {"name": snap.inventory_name, "namespace": snap.inventory_namespace, "objects": objects}
    source_error = snap.source_error
    doc["lastError"] = (source_error if deletion is None else "") or failures.first
    doc["errors"] = failures.to_list()  # the first MAX_ERRORS failed objects: object, file, status, message
    doc["conditions"] = _conditions(snap, doc, counts, failures, waiting_for=waiting_for, deletion=deletion)
    return doc


def _counts(snap: SourceSnapshot, failures: Failures) -> dict[str, int]:
    states = [object_state(e, applied=snap.self_heal, forcing=snap.forcing) for e in snap.entries if not e.left_git]
    counts = {a.value: 0 for a in Action}
    for e in snap.entries:
        counts[e.action.value] += 1
    counts["drifted"] = sum(1 for s in states if s in ("drifted", "missing"))
    counts["planned"] = sum(1 for s in states if s == "planned")  # Git's changes a detect-only pass left
    counts["conflict"] = sum(1 for s in states if s == "conflict")
    counts["error"] = failures.count  # each failed object once, and the pass errors that are causes
    return counts


def _conditions(
    snap: SourceSnapshot,
    doc: dict[str, Any],
    counts: dict[str, int],
    failures: Failures,
    *,
    waiting_for: str,
    deletion: Deletion | None,
) -> list[dict[str, Any]]:
    gen = int(doc["observedGeneration"])
    ready, reason, message, reconciling, stalled = _ready(snap, doc, counts, failures, waiting_for, deletion)
    drifted, conflicted = counts["drifted"] > 0, counts["conflict"] > 0
    return [
        _condition("Ready", ready, reason, message, gen),
        _condition("Reconciling", reconciling, reason if reconciling else "Idle", message if reconciling else "", gen),
        _condition("Stalled", stalled, reason if stalled else "Idle", message if stalled else "", gen),
        _condition(
            "Drifted",
            drifted,
            "DriftDetected" if drifted else "InSync",
            f"{counts['drifted']} object(s) differ from Git" if drifted else "",
            gen,
        ),
        _condition(
            "Conflicted",
            conflicted,
            "ConflictDetected" if conflicted else "NoConflict",
            f"{counts['conflict']} object(s) have fields another manager owns" if conflicted else "",
            gen,
        ),
        _condition("Suspended", False, "NotSuspended", "", gen),
    ]


def _ready(
    snap: SourceSnapshot,
    doc: dict[str, Any],
    counts: dict[str, int],
    failures: Failures,
    waiting_for: str,
    deletion: Deletion | None,
) -> tuple[bool | None, str, str, bool, bool]:
    """(Ready, reason, message, Reconciling, Stalled): the first of these that holds decides."""
    if snap.source_error and deletion is None:
        return False, snap.source_reason, snap.source_error, False, True
    if deletion is not None and not failures:
        return False, WAITING_FOR_TERMINATION, f"deleting: {deletion.waiting}", True, False
    if waiting_for and deletion is None:
        return False, "DependencyNotReady", f"waiting for {waiting_for} to be Ready", True, False
    if failures:  # a retry alone cannot fix some (a 403 needs RBAC, a refused prune a person): Stalled
        message = ("deleting: " if deletion else "") + failures.summary()
        return False, failures.reason, message, not failures.stalled, failures.stalled
    if not snap.first_sync:
        return None, "Progressing", "first sync in progress", True, False
    message = f"applied revision {doc['lastAppliedRevision'] or '(plain directory)'}"
    if not snap.self_heal and (counts["drifted"] or counts["planned"]):
        message += f" (detect-only: {counts['drifted']} drifted, {counts['planned']} planned)"
    return True, "ReconciliationSucceeded", message, False, False


def vacant_status(generation: int, shard: int, message: str) -> dict[str, Any]:
    """The status of a GitSync whose shard no replica holds (written by a replica that will not take it):
    Stalled, for nothing progresses until an operator acts; the rest of the last status is left as it was."""
    return {
        "observedGeneration": generation,
        "shard": shard,
        "conditions": [
            {**_condition("Ready", None, "ShardUnheld", message, generation), "lastTransitionTime": _now()},
            {**_condition("Reconciling", False, "Idle", "", generation), "lastTransitionTime": _now()},
            {**_condition("Stalled", True, "ShardUnheld", message, generation), "lastTransitionTime": _now()},
        ],
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _suspended(gs: GitSync, last: dict[str, Any], handled: str, shard: int) -> dict[str, Any]:
    """The last status kept as it was (revision, counts, inventory, Ready), plus `Suspended=True`.

    As Flux does, so what is live stays visible during an incident; and a dependent of a GitSync that was
    Ready keeps running while it is suspended (only one never Ready holds its dependents back).
    """
    gen = gs.generation
    doc = {k: v for k, v in last.items() if k != "conditions"}
    doc.update(observedGeneration=gen, shard=shard)
    if handled:
        doc["lastHandledReconcileAt"] = handled
    kept = [
        {**c, "observedGeneration": gen}
        for c in without_times(list(last.get("conditions") or []))
        if c.get("type") in CONDITION_TYPES and c.get("type") != "Suspended"
    ]
    if not any(c.get("type") == "Ready" for c in kept):
        kept.insert(0, _condition("Ready", None, "Suspended", SUSPENDED_MESSAGE, gen))
    doc["conditions"] = [*kept, _condition("Suspended", True, "Suspended", SUSPENDED_MESSAGE, gen)]
    return doc


_UNDECLARED = re.compile(r"\.status\.(\w+): field not declared in schema")


def undeclared_status_fields(message: str) -> set[str]:
    """The top-level status fields a server-side apply was refused for because the installed CRD does not
    declare them (an older CRD than the controller: `.status.errors: field not declared in schema`)."""
    return set(_UNDECLARED.findall(message))


__all__ = [
    "SUSPENDED_MESSAGE",
    "WAITING_FOR_TERMINATION",
    "Deletion",
    "status_of",
    "undeclared_status_fields",
    "vacant_status",
    "with_cluster",
]
