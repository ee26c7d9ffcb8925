"""Taking over the fields of `kubectl apply` (client-side), as client-go's csaupgrade does.

An object created with client-side `kubectl apply` has its fields owned by `kubectl-client-side-apply`
(an Update manager). A server-side apply under another name can only drop its own claims, so a field
later removed from Git would stay forever. `sync` therefore first hands those entries to our Apply
manager (`upgrade`, a JSON patch of managedFields guarded by resourceVersion); `diff`, which cannot
perform that step, computes its result (`preview`) so it reports the deletions `sync` will make. Both are
called by `apply.Applier`; the pure parts (which fields move) are `plan.client_side.after_takeover` and
`has_client_side_apply`.
"""

from __future__ import annotations

from gitops_sync.cluster.client import JSON_PATCH, Client
from gitops_sync.errors import ApiError
from gitops_sync.log import get_logger
from gitops_sync.plan import ownership
from gitops_sync.plan.client_side import (
    after_takeover,
    has_client_side_apply,
    is_client_side_apply,
    is_client_side_apply_entry,
)
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest

log = get_logger(__name__)

# How an entry's message names the takeover: "took over …" (sync), "would take over …" (diff).
TAKEOVER = "the fields of kubectl apply (client-side)"


def upgrade(client: Client, t: Target, live: Manifest, field_manager: str) -> bool:
    """Hand `kubectl apply` (client-side) ownership to our Apply manager; whether it was done.

    Otherwise a field later removed from Git stays forever: the old manager still owns it, and a
    server-side apply under another name can only drop its own claim.
    """
    meta = live.get("metadata") or {}
    if not has_client_side_apply(live):
        return False
    # Copies: `ours` is changed below, and a live object (the watch cache's, its entries shared between
    # objects: daemon/runtime/kept.py) is read-only.
    entries = [dict(e) for e in meta.get("managedFields") or []]
    ours = next((e for e in entries if e.get("manager") == field_manager and e.get("operation") == "Apply"), None)
    upgraded: list[Manifest] = []
    for e in entries:
        if not is_client_side_apply_entry(e):
            upgraded.append(e)
        elif ours is not None:
            ours["fieldsV1"] = _merge_fields(ours.get("fieldsV1") or {}, e.get("fieldsV1") or {})
        else:
            ours = {**e, "manager": field_manager, "operation": "Apply"}
            upgraded.append(ours)
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        {"op": "replace", "path": "/metadata/managedFields", "value": upgraded},
    ]
    try:
        client.request("PATCH", t.path, body=ops, content_type=JSON_PATCH)
    except ApiError as exc:  # changed meanwhile (test failed) or forbidden: apply anyway, retry next pass
        log.info("client-side apply upgrade skipped", object=str(t.key), error=str(exc))
        return False
    return True


def preview(client: Client, t: Target, result: Manifest, field_manager: str) -> Manifest:
    """What a dry-run apply's `result` becomes once `sync` has taken over and re-applied: the fields only
    kubectl owned that Git dropped are gone, and whatever the server defaults again is back."""
    taken = after_takeover(result, t.manifest, field_manager)
    return result if taken is result else _defaulted(client, t, taken, field_manager)


def remaining_conflicts(conflicts: list[ownership.Conflict]) -> list[ownership.Conflict]:
    """The conflicts a takeover does not settle: those with kubectl (client-side) go, its fields become ours."""
    return [c for c in conflicts if not is_client_side_apply(c.manager, c.operation, c.subresource)]


def _defaulted(client: Client, t: Target, obj: Manifest, field_manager: str) -> Manifest:
    """`obj` as the server would store it (a dry-run update): a field the takeover removes that the
    server defaults again (a Deployment's `strategy`, a container's `imagePullPolicy`) is no change."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("managedFields", "resourceVersion")}
    try:
        stored: Manifest = client.request(
            "PUT",
            t.path,
            query={"dryRun": "All", "fieldManager": field_manager},
            body={**obj, "metadata": meta},
        )
    except ApiError as exc:  # the local estimate still shows the removals sync will make
        log.debug("dry-run update refused; showing the takeover as computed", object=str(t.key), error=str(exc))
        return obj
    return stored


def _merge_fields(a: Manifest, b: Manifest) -> Manifest:
    """Union of two fieldsV1 trees."""
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge_fields(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out
