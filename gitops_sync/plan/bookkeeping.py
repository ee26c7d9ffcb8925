"""Our bookkeeping on every apply body: ApplySet membership, adoption, the intent hash; and the body's
variants `apply` sends (with a create-only precondition, without contested fields).

The engine adds it once it knows what is live (`finalize`); `planner.explain` compares objects without it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from gitops_sync.conventions import ADOPTED, BOOKKEEPING, BOOKKEEPING_KEYS, INTENT_HASH, PART_OF
from gitops_sync.plan import fieldpath, ownership
from gitops_sync.resource import Manifest

if TYPE_CHECKING:
    from gitops_sync.plan.planner import Target


def finalize(target: Target, live: Manifest | None, applyset_id: str | None, legacy_id: str | None = None) -> None:
    """Add membership, adoption and intent-hash bookkeeping to the apply body, given what is live.

    `legacy_id`: the id of an inventory of this very source being taken over (see the engine): its
    members are ours already, so moving them over does not mark them adopted.
    """
    meta = target.manifest.setdefault("metadata", {})
    annotations = meta.setdefault("annotations", {})
    annotations.pop(INTENT_HASH, None)
    if applyset_id:
        meta.setdefault("labels", {})[PART_OF] = applyset_id
        live_meta = (live or {}).get("metadata") or {}
        live_ann = live_meta.get("annotations") or {}
        already_member = (live_meta.get("labels") or {}).get(PART_OF) in (applyset_id, legacy_id or applyset_id)
        if live is not None and (live_ann.get(ADOPTED) == "true" or not already_member):
            annotations[ADOPTED] = "true"  # existed before we applied it: release, never delete, on prune
    annotations[INTENT_HASH] = intent_hash(target.manifest)


def mark_adopted(target: Target) -> None:
    """The object existed before our first apply (learnt from the apply's answer): release, never delete."""
    annotations = target.manifest.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.pop(INTENT_HASH, None)
    annotations[ADOPTED] = "true"
    annotations[INTENT_HASH] = intent_hash(target.manifest)


def intent_hash(manifest: Manifest) -> str:
    # The manifest without the hash annotation: copies of the two maps on the way to it, not a deep copy.
    body = manifest
    meta = manifest.get("metadata")
    if meta and INTENT_HASH in (meta.get("annotations") or {}):
        annotations = {k: v for k, v in meta["annotations"].items() if k != INTENT_HASH}
        body = {**manifest, "metadata": {**meta, "annotations": annotations}}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


# A resourceVersion no object has (the largest one etcd could give): as an apply's precondition, it lets the
# API server create an absent object and makes it refuse (409, nothing written) one that exists.
CREATE_ONLY_RV: Final = "18446744073709551615"


def with_resource_version(manifest: Manifest, resource_version: str) -> Manifest:
    """The apply body with a resourceVersion precondition; `manifest` (the target, reused) is not changed."""
    return {**manifest, "metadata": {**(manifest.get("metadata") or {}), "resourceVersion": resource_version}}


def without_conflicts(manifest: Manifest, conflicts: list[ownership.Conflict]) -> Manifest:
    """The apply body minus the conflicting fields: everything else still applies (policy `report`).

    Its intent hash is that of what it applies, not of Git's whole manifest: the live object must not claim
    an intent that was only partly applied, or the next pass's fast path would call the object unchanged
    while the contested fields are still someone else's (a server dry-run still refuses them)."""
    body = manifest
    for c in conflicts:
        body = fieldpath.remove(body, c.path)
    annotations = (body.get("metadata") or {}).get("annotations")
    if conflicts and isinstance(annotations, dict) and INTENT_HASH in annotations:
        annotations[INTENT_HASH] = intent_hash(body)  # `remove` copied the body: the target keeps its own
    return body


def foreign_applyset(live: Manifest | None, own_ids: Iterable[str]) -> str | None:
    """The id of another ApplySet the live object is a member of (its part-of label), else None."""
    label = (((live or {}).get("metadata") or {}).get("labels") or {}).get(PART_OF)
    return str(label) if label and label not in set(own_ids) else None


def only_intent_changed(result: Manifest, live: Manifest) -> bool:
    """Membership and adoption as they were: only the intent hash (what we claim) moves."""
    return [
        v for (_, name), v in zip(BOOKKEEPING_KEYS, bookkeeping_of(result), strict=True) if name != INTENT_HASH
    ] == [v for (_, name), v in zip(BOOKKEEPING_KEYS, bookkeeping_of(live), strict=True) if name != INTENT_HASH]


def bookkeeping_of(obj: Manifest) -> tuple[object, ...]:
    meta = obj.get("metadata") or {}
    return tuple((meta.get(where) or {}).get(name) for where, name in BOOKKEEPING_KEYS)


def without_bookkeeping(obj: Manifest) -> Manifest:
    """`obj` without our labels and annotations, for comparison: a live object without any annotation
    must not show `.metadata.annotations` as a difference because we add ours. Maps left empty are dropped
    (the server keeps none). Copies only what it changes."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    trimmed = dict(meta)
    changed = False
    for where in ("labels", "annotations"):
        values = meta.get(where)
        if not isinstance(values, dict):
            continue
        kept = {k: v for k, v in values.items() if (where, k) not in BOOKKEEPING_KEYS}
        if not kept:
            del trimmed[where]
            changed = True
        elif len(kept) != len(values):
            trimmed[where] = kept
            changed = True
    return {**obj, "metadata": trimmed} if changed else obj


def is_bookkeeping_conflict(conflict: ownership.Conflict) -> bool:
    """A conflict over our own bookkeeping (another field manager name of this tool wrote it): not a fight
    to report; the apply takes it (the intent hash describes the last apply, whoever made it)."""
    return conflict.path in BOOKKEEPING
