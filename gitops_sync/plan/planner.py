"""From rendered manifests to targets, and from (desired, live, server answer) to a change entry.

No I/O here: the ResourceManager does the requests and hands the answers to these functions, so
the decisions are unit-testable and the same for `diff`, `sync` and the daemon.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from gitops_sync.cluster.discovery import Discovery, ResourceInfo
from gitops_sync.conventions import (
    ADOPT,
    ADOPTED,
    APPLY_MODE,
    BOOKKEEPING,
    BOOKKEEPING_KEYS,
    CREATE_ONLY,
    CSA_MANAGER,
    INTENT_HASH,
    ON_CONFLICT,
    PART_OF,
    PRUNE,
    PRUNE_DISABLED,
    SERVER_ANNOTATIONS,
    ConflictPolicy,
)
from gitops_sync.errors import RenderError
from gitops_sync.plan import actors, fieldpath, ownership
from gitops_sync.plan import diff as _diff
from gitops_sync.plan.changeset import (
    GIT_CHANGED,
    LIVE_CHANGED,
    SERVER_CHANGED,
    Action,
    CoOwner,
    Entry,
    FieldChange,
    Foreign,
    SharedWith,
)
from gitops_sync.plan.masking import MASK, VALUES_DIFFER, mask_diff
from gitops_sync.plan.normalize import equivalent, prepare_desired
from gitops_sync.resource import DesiredObject, Manifest, ObjectKey, is_secret


@dataclass
class Target:
    """A desired object resolved against the cluster: where it lives and exactly what we will apply."""

    key: ObjectKey
    info: ResourceInfo
    manifest: Manifest  # prepared, labelled, hashed: the apply body
    origin: str
    source: str = ""  # the file a tool (kustomize, Helm) rendered it from, when it says

    @property
    def path(self) -> str:
        return self.info.path(self.key.namespace or None, self.key.name)

    @property
    def collection(self) -> str:
        return self.info.path(self.key.namespace or None)


def resolve(objects: Iterable[DesiredObject], discovery: Discovery, default_namespace: str) -> list[Target]:
    """Default namespaces, check kinds and scopes against discovery (and CRDs in the same set), dedupe."""
    objects = list(objects)
    for obj in objects:
        if obj.kind == "CustomResourceDefinition" and obj.api_version.startswith("apiextensions.k8s.io/"):
            discovery.add_crd(obj.manifest)
    targets: dict[ObjectKey, Target] = {}
    for obj, info in zip(objects, _served(objects, discovery), strict=True):
        name = _object_name(obj)
        check_policy_annotations(obj.manifest, obj.origin, name)
        manifest = prepare_desired(obj.manifest)
        meta = manifest.setdefault("metadata", {})
        if info.namespaced:
            meta["namespace"] = meta.get("namespace") or default_namespace
        elif meta.get("namespace"):
            raise RenderError(
                f"{obj.kind} is cluster-scoped but has metadata.namespace {meta['namespace']!r}",
                file=obj.origin,
                obj=name,
            )
        key = ObjectKey.of(manifest)
        if key in targets:
            raise RenderError(
                f"duplicate object {key}: also defined in {targets[key].origin}", file=obj.origin, obj=name
            )
        source = str(obj.extra.get("source", ""))
        targets[key] = Target(key=key, info=info, manifest=manifest, origin=obj.origin, source=source)
    return list(targets.values())


def _object_name(obj: DesiredObject) -> str:
    return f"{obj.kind}/{(obj.manifest.get('metadata') or {}).get('name', '?')}"


def _served(objects: list[DesiredObject], discovery: Discovery) -> list[ResourceInfo]:
    """Each object's resource; every kind the cluster does not serve (and no CRD in the source defines) is
    named in one error: naming only the first made a user fix, re-run and fail again once per missing CRD."""
    infos: list[ResourceInfo] = []
    missing: dict[tuple[str, str], DesiredObject] = {}
    for obj in objects:
        info = discovery.lookup(obj.api_version, obj.kind)
        if info is None:
            missing.setdefault((obj.api_version, obj.kind), obj)
        else:
            infos.append(info)
    if not missing:
        return infos
    first, *others = missing.values()
    more = "; ".join(f"{o.kind} ({o.api_version}) in {o.origin}, {_object_name(o)}" for o in others)
    raise RenderError(
        f"kind {first.kind} ({first.api_version}) is not served by the cluster and no "
        "CustomResourceDefinition in the source defines it" + (f"; also not served: {more}" if more else ""),
        file=first.origin,
        obj=_object_name(first),
    )


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


def create_only_entry(target: Target, live: Manifest, field_manager: str, *, dry_run: bool) -> Entry:
    """An existing create-only object: left as it is, whatever Git says now."""
    entry = explain(target, live, live, field_manager, dry_run=dry_run)
    entry.message = f"exists; not updated ({APPLY_MODE}: {CREATE_ONLY})"
    return entry


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


# A resourceVersion no object has (the largest one etcd could give): as an apply's precondition, it lets the
# API server create an absent object and makes it refuse (409, nothing written) one that exists.
CREATE_ONLY_RV: Final = "18446744073709551615"


def with_resource_version(manifest: Manifest, resource_version: str) -> Manifest:
    """The apply body with a resourceVersion precondition; `manifest` (the target, reused) is not changed."""
    return {**manifest, "metadata": {**(manifest.get("metadata") or {}), "resourceVersion": resource_version}}


def foreign_applyset(live: Manifest | None, own_ids: Iterable[str]) -> str | None:
    """The id of another ApplySet the live object is a member of (its part-of label), else None."""
    label = (((live or {}).get("metadata") or {}).get("labels") or {}).get(PART_OF)
    return str(label) if label and label not in set(own_ids) else None


def wants_adoption(target: Target) -> bool:
    """Git asks, on this object, to take it over from another ApplySet (annotation gitops-sync.io/adopt)."""
    annotations = (target.manifest.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ADOPT, "")).lower() == "true"


def shared_entry(
    target: Target, live: Manifest, shared: SharedWith, field_manager: str, *, dry_run: bool, identity: str = ""
) -> Entry:
    """A `shared` conflict: the object belongs to another ApplySet, so it is left alone, and we say whose.

    `identity` is this source's (`repo//path`): when the other parent records the same source under another
    spelling, the advice is to sync under that inventory's name, not to take the object over."""
    entry = explain(target, live, None, field_manager, dry_run=dry_run)
    path = f".metadata.labels.{PART_OF}"
    owner = _owner(live, path, field_manager)
    entry.action = Action.CONFLICT
    entry.shared = shared
    entry.conflicts = [
        FieldChange(
            path=path,
            desired=((target.manifest.get("metadata") or {}).get("labels") or {}).get(PART_OF),
            live=shared.applyset_id,
            manager=owner.manager if owner else "",
            operation=owner.operation if owner else "",
            subresource=owner.subresource if owner else "",
            actor=shared.describe(),
        )
    ]
    if shared.same_source(identity):
        ns, _, name = shared.parent.partition(" ")[2].partition("/")
        option = f"--name {name}" + (f" --inventory-namespace {ns}" if ns else "")
        entry.message = (
            f"shared: already a member of {shared.describe()}, which records this repository under another "
            f"spelling or name; left alone. Same source? `{option}` syncs it as that one"
        )
        return entry
    entry.message = (
        f"shared: already a member of {shared.describe()}; left alone (--adopt-shared or the annotation "
        f'{ADOPT}: "true" in Git takes it over)'
    )
    return entry


def intent_hash(manifest: Manifest) -> str:
    # The manifest without the hash annotation: copies of the two maps on the way to it, not a deep copy.
    body = manifest
    meta = manifest.get("metadata")
    if meta and INTENT_HASH in (meta.get("annotations") or {}):
        annotations = {k: v for k, v in meta["annotations"].items() if k != INTENT_HASH}
        body = {**manifest, "metadata": {**meta, "annotations": annotations}}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def is_unchanged(target: Target, live: Manifest | None, field_manager: str) -> bool:
    """The fast path: exact without a request when the live object carries this very intent.

    Same intent hash = we last applied exactly this, so nothing needs removing; every field we set
    still holds its value (or was never stored, see `dropped_by_server`) = nobody drifted it. Any doubt
    falls through to a server-side apply.
    """
    if live is None:
        return False
    live_ann = (live.get("metadata") or {}).get("annotations") or {}
    want = (target.manifest.get("metadata") or {}).get("annotations", {}).get(INTENT_HASH)
    if live_ann.get(INTENT_HASH) != want:
        return False
    differences = _diff.diff_intent(target.manifest, live, prepared=True)
    return not differences or dropped_by_server(differences, live, field_manager)


def dropped_by_server(differences: Iterable[_diff.FieldDiff], live: Manifest, field_manager: str) -> bool:
    """Whether every difference is a field Git sets that the server accepted from our apply and did not store.

    Decided from the server's own record, not a list of such fields: our Apply entry in `managedFields` still
    owns the path although the live object lacks it. The server records what an apply set even where the
    stored object omits it (`readOnly: false`, a zero value its Go type leaves out), and a write that later
    removes a field takes it out of every manager's entry, ours too; so owned-but-absent means the server
    dropped it from our own apply, and applying again would store nothing new.
    """
    differences = list(differences)
    if any(d.live is not fieldpath.MISSING for d in differences):
        return False
    ours = next((e for e in ownership.managed_fields(live) if e.identity == (field_manager, "Apply", "")), None)
    return ours is not None and all(ours.owns(d.path) for d in differences)


def explain(
    target: Target,
    live: Manifest | None,
    result: Manifest | None,
    field_manager: str,
    *,
    conflicts: list[ownership.Conflict] | None = None,
    dry_run: bool,
) -> Entry:
    """Compare the object as the server would store it (`result`) with `live` and say who owns what."""
    entry = Entry(key=target.key, api_version=target.info.api_version, action=Action.UNCHANGED, origin=target.origin)
    verb = "would " if dry_run else ""
    if live is None:
        entry.action = Action.CREATE
        entry.message = f"{verb}create" if dry_run else "created"
        return entry
    changes: list[FieldChange] = []
    bookkeeping = False
    if result is not None and result is not live:  # the fast path passes live itself: nothing can differ
        bookkeeping = _bookkeeping(result) != _bookkeeping(live)
        for d in _diff.diff_objects(_without_bookkeeping(result), _without_bookkeeping(live)):
            change = _field_change(live, d.path, d.desired, d.live, field_manager)
            change.reason = _reason(change, target.manifest, result, field_manager)
            changes.append(change)
    contested = {c.path for c in conflicts or ()}
    entry.drift = _masked(target.key, [c for c in changes if c.path not in contested])
    if conflicts:
        entry.conflicts = _masked(target.key, [_conflict_change(target, live, c) for c in conflicts])
        entry.action = Action.CONFLICT
        entry.message = f"{len(conflicts)} field(s) owned by other managers with different values"
    elif changes:
        entry.action = Action.UPDATE
        entry.message = f"{verb}update {len(changes)} field(s)"
    elif bookkeeping and result is not None and _only_intent_changed(result, live):
        # Git changed what we claim, not what the object holds (a default now written in Git, a field left to
        # another manager): no difference to report; the apply (sync) still records it.
        entry.message = ownership_only_message(result, live, field_manager, dry_run=dry_run)
    elif bookkeeping:
        entry.action = Action.UPDATE
        entry.message = f"{verb}record gitops-sync ownership (no field value changes)"
    # A plan describes today's owners; an apply describes the owners it left behind.
    entry.co_owners = co_owners(target.manifest, live if dry_run or result is None else result, field_manager)
    entry.foreign = foreign_fields(target.key, target.manifest, live, field_manager)
    return entry


def _is_item_key(path: str) -> bool:
    """`...env[name="FOO"].name`: a key field of a list item (named by the item's path already)."""
    elements = fieldpath.parse(path)
    if len(elements) < 2:
        return False
    last, parent = elements[-1], elements[-2]
    if not isinstance(last, fieldpath.Field) or not isinstance(parent, fieldpath.Key):
        return False
    return last.name in {name for name, _ in parent.items}


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


def _only_intent_changed(result: Manifest, live: Manifest) -> bool:
    """Membership and adoption as they were: only the intent hash (what we claim) moves."""
    return [v for (_, name), v in zip(BOOKKEEPING_KEYS, _bookkeeping(result), strict=True) if name != INTENT_HASH] == [
        v for (_, name), v in zip(BOOKKEEPING_KEYS, _bookkeeping(live), strict=True) if name != INTENT_HASH
    ]


def ownership_only_message(result: Manifest, live: Manifest, field_manager: str, *, dry_run: bool) -> str:
    """`ownership only: would record gitops-sync ownership of .spec.x (live value already equals Git)`."""

    def ours(obj: Manifest) -> set[str]:
        return {
            p
            for e in ownership.managed_fields(obj)
            if e.identity == (field_manager, "Apply", "")
            for p in e.owned_paths
            if p not in BOOKKEEPING
        }

    before, after = ours(live), ours(result)
    gains = sorted(p for p in after - before if not any(o.startswith((p + ".", p + "[")) for o in after))
    releases = sorted(p for p in before - after if not any(o.startswith((p + ".", p + "[")) for o in before))
    verb = "would " if dry_run else ""
    parts = []
    if gains:
        parts.append(f"{verb}record {field_manager} ownership of {', '.join(gains)} (live value already equals Git)")
    if releases:
        parts.append(f"{verb}release {', '.join(releases)} (the value stays)")
    return "ownership only: " + ("; ".join(parts) or f"{verb}record the new intent (no field value changes)")


def _bookkeeping(obj: Manifest) -> tuple[object, ...]:
    meta = obj.get("metadata") or {}
    return tuple((meta.get(where) or {}).get(name) for where, name in BOOKKEEPING_KEYS)


def _without_bookkeeping(obj: Manifest) -> Manifest:
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


def _field_change(live: Manifest, path: str, desired: Any, live_value: Any, field_manager: str) -> FieldChange:
    owner = _owner(live, path, field_manager)
    if owner is None:
        return FieldChange(path=path, desired=_plain(desired), live=_plain(live_value))
    return FieldChange(
        since=owner.time if owner.manager != field_manager else "",
        path=path,
        desired=_plain(desired),
        live=_plain(live_value),
        manager=owner.manager,
        operation=owner.operation,
        subresource=owner.subresource,
        actor=actors.describe(owner.manager, owner.operation, owner.subresource, ours=field_manager),
    )


def _reason(change: FieldChange, git: Manifest, result: Manifest, field_manager: str) -> str:
    """Why a field differs: another manager wrote the live value; or the server's answer is not what Git
    says (defaulting, a mutating webhook) with nobody else owning it; else Git changed since our last apply."""
    if change.manager and change.manager != field_manager:
        return LIVE_CHANGED
    declared = fieldpath.get(git, change.path)
    answer = fieldpath.get(result, change.path)
    if declared is fieldpath.MISSING:
        return SERVER_CHANGED if answer is not fieldpath.MISSING else GIT_CHANGED
    if answer is not fieldpath.MISSING and not equivalent(declared, answer, change.path):
        return SERVER_CHANGED
    return GIT_CHANGED


def _conflict_change(target: Target, live: Manifest, c: ownership.Conflict) -> FieldChange:
    return FieldChange(
        reason=LIVE_CHANGED,
        since=_written_at(live, c.manager, c.operation, c.subresource),
        path=c.path,
        desired=_plain(fieldpath.get(target.manifest, c.path)),
        live=_plain(fieldpath.get(live, c.path)),
        manager=c.manager,
        operation=c.operation,
        subresource=c.subresource,
        actor=actors.describe(c.manager, c.operation, c.subresource),
    )


def _written_at(live: Manifest, manager: str, operation: str, subresource: str) -> str:
    """When that manager last wrote the object (its managedFields time; the scale subresource records none)."""
    for e in ownership.managed_fields(live):
        if e.manager == manager and e.subresource == subresource and (not operation or e.operation == operation):
            return e.time
    return ""


def _owner(live: Manifest, path: str, field_manager: str) -> ownership.ManagedFieldsEntry | None:
    """Prefer another manager (who drifted it) over ourselves (a Git change)."""
    found = ownership.owners(live, path)
    others = [e for e in found if not (e.manager == field_manager and e.operation == "Apply")]
    candidates = others or found
    return candidates[0] if candidates else None


def _plain(value: Any) -> Any:
    return None if value is fieldpath.MISSING else value


def _masked(key: ObjectKey, changes: list[FieldChange]) -> list[FieldChange]:
    if not is_secret(key):
        return changes
    diffs = [_diff.FieldDiff(c.path, c.desired, c.live) for c in changes]
    for c, d in zip(changes, mask_diff(key.kind, diffs), strict=True):
        c.desired, c.live = d.desired, d.live
        if c.desired == MASK and c.live == MASK:  # `***` against `***` reads as "the same"
            c.live = VALUES_DIFFER
    return changes
