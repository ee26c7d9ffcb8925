"""What people read of one source, built from its snapshot only: /readyz's problems, /status's documents.

`SourceReconciler.snapshot()` (reconciler.py, outcome.py) is the input; the single-source daemon serves
these documents as its /status, the fleet one per GitSync under `sources` (serving/http.py, the page).
"""

from __future__ import annotations

from typing import Any

from gitops_sync.daemon.reconcile.conditions import Condition
from gitops_sync.daemon.reconcile.history import OwnershipHistory
from gitops_sync.daemon.reconcile.outcome import SourceSnapshot
from gitops_sync.daemon.reconcile.yields import Yields
from gitops_sync.daemon.runtime.metrics import object_state
from gitops_sync.formatting import rfc3339
from gitops_sync.plan.changeset import ChangeSet


def problems(snap: SourceSnapshot) -> list[str]:
    """Why this source is not ready on its own account (source failed, or not loaded yet)."""
    if not snap.healthy:
        rev = snap.condition.get("revision") or ""
        return [
            f"source failed: {snap.condition.get('error') or ''}"
            + (f" (revision {rev})" if rev else "")
            + (f"; keeping revision {snap.revision}" if snap.revision else "")
        ]
    if not snap.loaded:
        return ["source not loaded yet"]
    return []


def changeset_doc(
    snap: SourceSnapshot,
    history: OwnershipHistory,
    yields: Yields,
    cluster: Condition,
    *,
    full_history: bool = False,
) -> dict[str, Any]:
    """The `diff -o json` document of the latest state of every object, plus history and fights."""
    errors = list(snap.pass_errors)
    source = snap.condition
    if not snap.healthy:
        errors.insert(
            0, f"source: {source['error']}" + (f" (revision {source['revision']})" if source["revision"] else "")
        )
    if not cluster.ok:
        errors.insert(0, f"cluster: {cluster.error}")
    cs = ChangeSet(
        revision=snap.revision,
        source=snap.applied[1] if snap.applied else "",
        entries=list(snap.entries),
        errors=errors,
        dry_run=not snap.self_heal,
        inventory=snap.inventory_name,
        inventory_namespace=snap.inventory_namespace,
        source_identity=snap.identity,
        charts=[dict(c) for c in snap.charts],
        signer=snap.signer,
    )
    doc = cs.to_dict()
    for obj, e in zip(doc["objects"], cs.sorted_entries(), strict=True):
        obj["state"] = object_state(e, applied=snap.self_heal, forcing=snap.forcing)
    doc["history"] = history.to_dict(changed_only=not full_history)
    doc["fights"] = [f.to_dict() for f in history.fights()]
    doc["yields"] = [y.to_dict() for y in yields.all()]
    return doc


def source_doc(snap: SourceSnapshot) -> dict[str, Any]:
    """`daemon.source` of /status: where the source is, what it is at, its error."""
    source = snap.condition
    return {
        "repo": snap.repo,
        "revision": snap.revision,
        "lastChecked": rfc3339(snap.checked) if snap.checked else "",
        "error": source.get("error") or "",
        "errorRevision": (source.get("revision") or "") if source.get("error") else "",
        "charts": [dict(c) for c in snap.charts],  # repository, chart, resolved version, archive digest
    }


def daemon_doc(
    snap: SourceSnapshot, cluster: Condition, *, identity: str, field_manager: str, ready: bool, why: str
) -> dict[str, Any]:
    """The `daemon` block of one source's /status document, as both controllers write it (each adds its
    own: the Lease and threads of `run --repo`, the GitSync row and spec of the fleet)."""
    return {
        "mode": snap.mode,
        "identity": identity,
        "fieldManager": field_manager,
        "ready": ready,
        "readyReason": why,
        "appliedRevision": snap.applied[0] if snap.applied else "",
        "source": source_doc(snap),
        "conditions": {"source": dict(snap.condition), "cluster": cluster.to_dict(with_revision=False)},
        "lastPass": dict(snap.last_pass),
        "lastHooks": dict(snap.last_hooks),  # {revision, finished, hooks: [{event, object, weight, result, ok}]}
    }


__all__ = ["changeset_doc", "daemon_doc", "problems", "source_doc"]
