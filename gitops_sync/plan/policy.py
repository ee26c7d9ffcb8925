"""Per-object policy annotations in Git (`gitops-sync.io/prune`, `/apply`, `/on-conflict`, `/adopt`) and on
the live members: read here, checked when targets are resolved (`planner.resolve`), obeyed by `apply`
(conflict policy, create-only) and by the engine's prune (kept, released)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gitops_sync.conventions import (
    ADOPT,
    ADOPTED,
    APPLY_MODE,
    CREATE_ONLY,
    ON_CONFLICT,
    PRUNE,
    PRUNE_DISABLED,
    ConflictPolicy,
)
from gitops_sync.errors import RenderError
from gitops_sync.resource import Manifest

if TYPE_CHECKING:
    from gitops_sync.plan.planner import Target

# Per-object policy annotations in Git and the values each accepts.
_POLICY_VALUES = {
    PRUNE: (PRUNE_DISABLED,),
    APPLY_MODE: (CREATE_ONLY,),
    ON_CONFLICT: tuple(p.value for p in ConflictPolicy),
}


def _annotation(manifest: Manifest | None, name: str) -> str:
    return str((((manifest or {}).get("metadata") or {}).get("annotations") or {}).get(name, ""))


def check_policy_annotations(manifest: Manifest, origin: str, name: str) -> None:
    """A policy annotation with a value we do not know is a render error (exit 2), never ignored."""
    for key, allowed in _POLICY_VALUES.items():
        value = _annotation(manifest, key)
        if value and value not in allowed:
            raise RenderError(f"annotation {key}: {value!r} is not one of {', '.join(allowed)}", file=origin, obj=name)


def object_policy(target: Target, default: ConflictPolicy) -> ConflictPolicy:
    """The object's own `gitops-sync.io/on-conflict`, else the pass's policy."""
    value = _annotation(target.manifest, ON_CONFLICT)
    return ConflictPolicy(value) if value else default


def is_create_only(target: Target) -> bool:
    """`gitops-sync.io/apply: create-only`: created when absent, never updated."""
    return _annotation(target.manifest, APPLY_MODE) == CREATE_ONLY


def prune_disabled(live: Manifest) -> bool:
    """`gitops-sync.io/prune: disabled` on the live member (as Git last applied it): never pruned."""
    return _annotation(live, PRUNE) == PRUNE_DISABLED


def is_adopted(live: Manifest) -> bool:
    """`gitops-sync.io/adopted` on a member: it existed before us, so prune releases it, never deletes it."""
    return _annotation(live, ADOPTED) == "true"


def wants_adoption(target: Target) -> bool:
    """Git asks, on this object, to take it over from another ApplySet (annotation gitops-sync.io/adopt)."""
    annotations = (target.manifest.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ADOPT, "")).lower() == "true"
