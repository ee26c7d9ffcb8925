"""Objects last written by `kubectl apply` (client-side): recognising its managedFields entries, and what a
dry run will look like once `sync` has taken its fields over (apply/takeover.py does the takeover)."""

from __future__ import annotations

from gitops_sync.conventions import CSA_MANAGER
from gitops_sync.plan import fieldpath, ownership
from gitops_sync.resource import Manifest


def is_client_side_apply(manager: str, operation: str, subresource: str) -> bool:
    return manager == CSA_MANAGER and operation == "Update" and not subresource


def is_client_side_apply_entry(entry: Manifest) -> bool:
    """A raw managedFields entry of `kubectl apply` (client-side), without parsing its fields."""
    return is_client_side_apply(
        str(entry.get("manager", "")), str(entry.get("operation", "")), str(entry.get("subresource") or "")
    )


def has_client_side_apply(live: Manifest | None) -> bool:
    """Whether `sync` would take over `kubectl apply` (client-side) fields of this object before applying."""
    entries = ((live or {}).get("metadata") or {}).get("managedFields") or []
    return any(is_client_side_apply_entry(e) for e in entries)


def after_takeover(result: Manifest, desired: Manifest, field_manager: str) -> Manifest:
    """A dry-run apply result as it will be once `sync` has taken over the client-side-apply fields.

    The dry run cannot see the takeover (`sync` patches managedFields first, then applies), so it leaves
    the fields `kubectl apply` set and Git no longer sets where they are; after the takeover they are ours,
    and an apply without them removes them (unless another manager owns them or something below them).
    Without this `diff` would hide a deletion that `sync` makes.
    """
    entries = ownership.managed_fields(result)
    taken = {p for e in entries if is_client_side_apply(*e.identity) for p in e.owned_paths}
    if not taken:
        return result
    others = [
        p
        for e in entries
        if not is_client_side_apply(*e.identity) and e.identity != (field_manager, "Apply", "")
        for p in e.owned_paths
    ]
    wanted: set[str] = set()
    for leaf, _ in fieldpath.leaves(desired):
        wanted.add(leaf.format())
        wanted.update(prefix.format() for prefix in leaf.prefixes())
    out = result
    for path in sorted(taken, key=len):  # a parent before its children: once it is gone they are too
        if path in wanted or any(o == path or o.startswith((path + ".", path + "[")) for o in others):
            continue
        out = fieldpath.remove(out, path)
    return out
