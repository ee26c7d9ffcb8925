"""Objects being deleted: what holds them, so no report calls a Terminating object deleted or unchanged.

A DELETE the API server accepts does not remove an object that carries finalizers: it answers 200 with
the object, now carrying a `deletionTimestamp`, and the object stays until whoever owns each finalizer
removes it (a controller, or for a finalizer like `example.com/hold` maybe nobody, ever). So the answer
and every later read decide what a report says: "deletion pending: finalizer X", never "deleted", and a
member already Terminating is not sent a DELETE again. An object Git wants that is Terminating will
vanish; it is reported as such instead of `unchanged`, and re-created once it is gone.
"""

from __future__ import annotations

from gitops_sync.conventions import LIFECYCLE_FINALIZERS
from gitops_sync.plan.changeset import Action, Entry, Terminating
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest

_NOTE_LIMIT = 3  # of a Namespace's conditions, the first few that say why it is still there


def terminating(obj: Manifest | None, *, in_git: bool) -> Terminating | None:
    """What holds `obj` while it is being deleted; None when it is not (no deletionTimestamp)."""
    meta = (obj or {}).get("metadata") or {}
    since = meta.get("deletionTimestamp")
    if not since or obj is None:
        return None
    return Terminating(
        since=str(since),
        finalizers=finalizers_of(obj),
        in_git=in_git,
        note=_note(obj),
        graceful=bool(meta.get("deletionGracePeriodSeconds")),
    )


def finalizers_of(obj: Manifest) -> list[str]:
    """`metadata.finalizers`, and a Namespace's `spec.finalizers` (the namespace controller's `kubernetes`)."""
    names = [str(f) for f in (obj.get("metadata") or {}).get("finalizers") or []]
    if obj.get("kind") == "Namespace":
        names += [str(f) for f in (obj.get("spec") or {}).get("finalizers") or [] if str(f) not in names]
    return names


def holders(obj: Manifest) -> list[str]:
    """The finalizers that keep `obj` beyond the API server's own deletion of what it holds.

    After our DELETE, an object held by none of them (a Namespace being emptied, a CRD whose custom
    resources go first, a Pod's grace period) is being deleted by the server itself: what it waits for is
    ours, pruned and reported on its own, or was checked by the cascade guard. Anything else (a
    controller's finalizer, a protection like `kubernetes.io/pvc-protection`) holds it: deletion pending.
    """
    return [f for f in finalizers_of(obj) if f not in LIFECYCLE_FINALIZERS]


def desired_entry(target: Target, pending: Terminating, *, dry_run: bool) -> Entry:
    """A desired object that is Terminating: nothing is sent (it would vanish with the change); re-created
    by a later pass once it is gone."""
    after = "would be re-created" if dry_run else "not applied; re-created by a later pass"
    message = f"{pending.describe()} since {pending.since}; Git still wants it: {after} once it is gone"
    return Entry(
        target.key,
        target.info.api_version,
        Action.TERMINATING,
        message=message,
        origin=target.origin,
        terminating=pending,
    )


def _note(obj: Manifest) -> str:
    """A Namespace's own account of what it still waits for (its True deletion conditions)."""
    if obj.get("kind") != "Namespace":
        return ""
    said = [
        str(c.get("message"))
        for c in (obj.get("status") or {}).get("conditions") or []
        if c.get("status") == "True" and c.get("message")
    ]
    return "; ".join(said[:_NOTE_LIMIT])
