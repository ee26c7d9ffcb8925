"""From rendered manifests to targets, and from (desired, live, server answer) to a change entry.

No I/O here: the ResourceManager does the requests and hands the answers to these functions, so
the decisions are unit-testable and the same for `diff`, `sync` and the daemon.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gitops_sync.cluster.discovery import Discovery, ResourceInfo
from gitops_sync.conventions import (
    ADOPT,
    APPLY_MODE,
    BOOKKEEPING,
    CREATE_ONLY,
    INTENT_HASH,
    PART_OF,
)
from gitops_sync.errors import RenderError
from gitops_sync.plan import actors, fieldpath, ownership
from gitops_sync.plan import diff as _diff
from gitops_sync.plan.bookkeeping import bookkeeping_of, only_intent_changed, without_bookkeeping
from gitops_sync.plan.changeset import (
    GIT_CHANGED,
    LIVE_CHANGED,
    SERVER_CHANGED,
    Action,
    Entry,
    FieldChange,
    SharedWith,
)
from gitops_sync.plan.foreign import co_owners, foreign_fields
from gitops_sync.plan.masking import MASK, VALUES_DIFFER, mask_diff
from gitops_sync.plan.normalize import equivalent, prepare_desired
from gitops_sync.plan.policy import check_policy_annotations
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


def create_only_entry(target: Target, live: Manifest, field_manager: str, *, dry_run: bool) -> Entry:
    """An existing create-only object: left as it is, whatever Git says now."""
    entry = explain(target, live, live, field_manager, dry_run=dry_run)
    entry.message = f"exists; not updated ({APPLY_MODE}: {CREATE_ONLY})"
    return entry


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
        bookkeeping = bookkeeping_of(result) != bookkeeping_of(live)
        for d in _diff.diff_objects(without_bookkeeping(result), without_bookkeeping(live)):
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
    elif bookkeeping and result is not None and only_intent_changed(result, live):
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
