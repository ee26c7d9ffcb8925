"""Fields of other field managers, for the report: those Git does not declare that someone wrote after our
last apply (`foreign_fields`), and those we set that others own too (`co_owners`). `planner.explain`
puts both on each entry."""

from __future__ import annotations

from gitops_sync.conventions import BOOKKEEPING, SERVER_ANNOTATIONS
from gitops_sync.plan import fieldpath, ownership
from gitops_sync.plan.changeset import CoOwner, Foreign
from gitops_sync.plan.masking import MASK
from gitops_sync.resource import Manifest, ObjectKey

# Written by the server or its controllers on every object of a kind, whoever applies it: never news.
_NOT_FOREIGN = tuple(f".metadata.annotations.{a}" for a in SERVER_ANNOTATIONS)


def foreign_fields(key: ObjectKey, desired: Manifest, live: Manifest, field_manager: str) -> list[Foreign]:
    """Fields Git does not declare that another manager owns and wrote after our last apply (its
    managedFields time is not earlier than ours: the times have one-second resolution); status and server
    bookkeeping excluded. Secret values masked.

    Called for every object of every pass (the fast path too), so it leaves as early as it can: without a
    later writer (read from the raw entries), and without a candidate field, before walking `desired`."""
    raw = (live.get("metadata") or {}).get("managedFields") or []
    ours_time = next(
        (str(e.get("time") or "") for e in raw if e.get("manager") == field_manager and e.get("operation") == "Apply"),
        None,
    )
    if ours_time is None:
        return []  # never applied by us: everything on it is someone else's
    if not any(
        e.get("subresource") != "status" and str(e.get("time") or "") >= ours_time
        for e in raw
        if not (e.get("manager") == field_manager and e.get("operation") == "Apply")
    ):
        return []
    candidates = [
        (e, path)
        for e in ownership.managed_fields(live)
        if e.identity != (field_manager, "Apply", "") and e.subresource != "status" and e.time >= ours_time
        for path in sorted(e.owned_paths)
        if e.owns_whole(path)
        and not path.startswith(_NOT_FOREIGN)
        and path not in BOOKKEEPING
        and not _is_item_key(path)
    ]
    if not candidates:
        return []
    whole = {leaf.format() for leaf, _ in fieldpath.leaves(desired)}  # values Git sets as one
    declared = whole | {prefix.format() for leaf, _ in fieldpath.leaves(desired) for prefix in leaf.prefixes()}
    out = []
    for e, path in candidates:
        if path in declared or any(path.startswith((w + ".", w + "[")) for w in whole):
            continue  # Git sets it (drift, not an addition), or it is inside a value Git sets whole
        value = fieldpath.get(live, path)
        if value is fieldpath.MISSING:
            continue
        if key.kind == "Secret" and not key.group:
            value = MASK
        out.append(Foreign(path, value, e.manager, e.operation, e.subresource, e.time))
    return out


def _is_item_key(path: str) -> bool:
    """`...env[name="FOO"].name`: a key field of a list item (named by the item's path already)."""
    elements = fieldpath.parse(path)
    if len(elements) < 2:
        return False
    last, parent = elements[-1], elements[-2]
    if not isinstance(last, fieldpath.Field) or not isinstance(parent, fieldpath.Key):
        return False
    return last.name in {name for name, _ in parent.items}


def co_owners(desired: Manifest, live: Manifest, field_manager: str) -> list[CoOwner]:
    """Other managers owning fields we set, for the report: who else would fight over them."""
    others = [
        mf for mf in ownership.managed_fields(live) if not (mf.manager == field_manager and mf.operation == "Apply")
    ]
    if not others:  # only our own apply owns fields (most objects we create): no need to list ours
        return []
    ours = {p for p in fieldpath.leaf_paths(_within(desired, others)) if p not in BOOKKEEPING}
    out = []
    for mf in others:
        shared = sorted(ours & mf.owned_paths)
        if shared:
            out.append(CoOwner(mf.manager, mf.operation, mf.subresource, shared))
    return out


def _within(desired: Manifest, others: list[ownership.ManagedFieldsEntry]) -> Manifest:
    """`desired` cut to the top-level fields some other manager owns a path under: only those of our leaf
    paths can be shared, and formatting every leaf of every object was most of a no-op sync's comparison
    time (a Deployment's status and revision annotation, owned by its controller, cut 40 leaves to 6).
    A leaf path under field `k` reads `.k`, `.k.…` or `.k[…]`; a field whose name holds a dot may be kept
    for nothing, never dropped. `kind` stays for the walk (list keys depend on it); a leaf nobody else
    owns drops out of the intersection anyway."""
    owned = [path for entry in others for path in entry.owned_paths]
    kept = {}
    for name, value in desired.items():
        head = "." + str(name)
        if name == "kind" or any(p == head or p.startswith((head + ".", head + "[")) for p in owned):
            kept[name] = value
    return kept
