"""The cascade guard: what deleting a Namespace or a CustomResourceDefinition would take with it.

The API server deletes everything in a Namespace with it, and every custom resource with its CRD. So
before prune deletes either, this lists what it still holds; objects this prune does not remove itself
(another team's Pod, a ConfigMap made by hand, a member still in Git, an adopted member that prune only
releases) make it refuse that one deletion. The engine turns each refusal into an error entry of the
pass and prunes everything else; `--prune-cascade` (a GitSync: `spec.pruneCascade`) skips the guard.
A kind it may not list makes the contents unknown: the refusal names the exact `list` rule to grant.

One Namespace is refused whatever `--prune-cascade` says: the one holding this source's own inventory
parent while the source still has members (`inventory_refusal`). Deleting it deletes the record of every
member elsewhere: no later pass could prune them, and another inventory would find them `shared` with an
ApplySet nobody holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gitops_sync.apply.inventory import METADATA_ONLY
from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery, ResourceInfo, served_by_crd
from gitops_sync.conventions import PRUNE, PRUNE_DISABLED
from gitops_sync.errors import ClusterError, ForbiddenError, NotFoundError
from gitops_sync.log import get_logger
from gitops_sync.plan.changeset import PRUNE_REFUSED, Action, Entry
from gitops_sync.plan.policy import is_adopted
from gitops_sync.plan.terminating import terminating
from gitops_sync.resource import Manifest, ObjectKey

log = get_logger(__name__)

# What Kubernetes itself puts in every namespace, and Events: none of it is anybody's to lose.
_DEFAULTS = frozenset({("", "ServiceAccount", "default"), ("", "ConfigMap", "kube-root-ca.crt")})
_IGNORED_KINDS = frozenset({("", "Event"), ("events.k8s.io", "Event")})
_NAMED = 5  # foreign objects named in a refusal
_PAGE = 100
# How a refusal ends: what the user can do besides emptying the Namespace or CRD (a GitSync says its field).
CASCADE_ADVICE = "pass --prune-cascade"
# The shipped read-only rule that lets the guard list every kind (deploy/kubernetes/cluster-wide/rbac.yaml).
GUARD_ROLE = "ClusterRole gitops-sync-cascade-guard of deploy/kubernetes/cluster-wide"


@dataclass
class Holdings:
    """What a Namespace or CRD still holds that prune does not remove, and what could not be checked."""

    foreign: list[ObjectKey]
    more: bool = False  # more than were listed (a further page)
    unchecked: list[str] = field(default_factory=list)  # kinds that could not be listed: contents unknown
    forbidden: list[ResourceInfo] = field(default_factory=list)  # of those, the ones RBAC refuses to list

    def __bool__(self) -> bool:
        return bool(self.foreign or self.unchecked)


def refusals(
    client: Client,
    discovery: Discovery,
    gone: Sequence[Manifest],
    *,
    parent: ObjectKey | None = None,
    ours: Iterable[ObjectKey] = (),
    advice: str = CASCADE_ADVICE,
) -> list[Entry]:
    """An error entry for every Namespace/CRD in `gone` that still holds objects prune leaves behind.

    `gone` are the members prune is about to remove; adopted ones are only released (kept), so what they
    hold stays and is not checked, and they count as left behind. `parent` (our inventory ConfigMap) is
    ours and does not count, nor do `ours` (the source's own Lease beside it: nothing of anybody's is lost
    with it). `advice` ends each refusal: how to let prune delete them anyway.
    """
    deleted = {ObjectKey.of(m) for m in gone if not is_adopted(m)} | set(ours)
    if parent is not None:
        deleted.add(parent)
    out: list[Entry] = []
    fresh = False
    unknown: Holdings | None = None  # discovery could not be read again: no contents can be vouched for
    for m in gone:
        key = ObjectKey.of(m)
        if key not in deleted or key.group not in ("", "apiextensions.k8s.io") or terminating(m, in_git=False):
            continue  # not deleted by this prune (released, or already being deleted: no DELETE is sent)
        if not fresh and key.kind in ("Namespace", "CustomResourceDefinition"):
            # The daemon's snapshot may predate a CRD installed since: its resources must be listed too.
            fresh = True
            try:
                discovery.refresh()
            except ClusterError as exc:
                log.info("cannot refresh discovery for the cascade guard", error=str(exc))
                unknown = Holdings([], unchecked=["the served kinds (discovery failed)"])
        if key.kind == "Namespace" and not key.group:
            held = unknown or namespace_holdings(client, discovery, key.name, deleted)
            what = f"Namespace {key.name}"
        elif key.kind == "CustomResourceDefinition" and key.group == "apiextensions.k8s.io":
            held = unknown or crd_holdings(client, discovery, m, deleted)
            what = f"CustomResourceDefinition {key.name}"
        else:
            continue
        if held:
            message = _message(what, held, advice)
            log.warning("prune refused", object=str(key), reason=message)
            out.append(Entry(key, str(m.get("apiVersion", "")), Action.ERROR, message=message, reason=PRUNE_REFUSED))
    return out


def inventory_refusal(namespace: Manifest, parent: ObjectKey, remaining: int) -> Entry:
    """The error entry of the Namespace holding our inventory parent while `remaining` members stay."""
    name = ObjectKey.of(namespace).name
    message = (
        f"prune refused: Namespace {name} holds this source's inventory (ConfigMap {parent.namespace}/{parent.name}), "
        f"which still records {remaining} other object(s) of this source: deleting it would delete that record "
        "and leave them impossible to prune (keep the Namespace in Git, or keep it with "
        f"`kubectl annotate namespace {name} {PRUNE}={PRUNE_DISABLED}`; --prune-cascade does not override this)"
    )
    log.warning("prune refused", object=str(ObjectKey.of(namespace)), reason=message)
    key = ObjectKey.of(namespace)
    return Entry(key, str(namespace.get("apiVersion", "")), Action.ERROR, message=message, reason=PRUNE_REFUSED)


def namespace_holdings(client: Client, discovery: Discovery, namespace: str, deleted: Iterable[ObjectKey]) -> Holdings:
    """Objects in `namespace`, across every listable namespaced kind, that are not in `deleted`.

    A group-version discovery could not read (an unavailable aggregated API) may serve namespaced kinds
    nobody can list now: the contents are unknown, never empty."""
    held = _holdings(client, discovery.namespaced_listable(), namespace, set(deleted))
    held.unchecked += [f"the kinds of {gv} (not discovered: its API is unavailable)" for gv in discovery.unavailable()]
    return held


def crd_holdings(client: Client, discovery: Discovery, crd: Manifest, deleted: Iterable[ObjectKey]) -> Holdings:
    """Custom resources of `crd`, in every namespace, that are not in `deleted`."""
    spec = crd.get("spec") or {}
    group, kind = str(spec.get("group", "")), str((spec.get("names") or {}).get("kind", ""))
    info = discovery.preferred(group, kind) or _served_version(spec)
    if info is None:
        return Holdings([], unchecked=[f"{kind}.{group} (no version served)"])
    return _holdings(client, [info], None, set(deleted))


def _holdings(
    client: Client, infos: Sequence[ResourceInfo], namespace: str | None, deleted: set[ObjectKey]
) -> Holdings:
    held = Holdings([])
    services: set[tuple[str, str]] = set()  # (namespace, name) of every Service seen, ours or not
    for info in infos:
        if (info.group, info.kind) in _IGNORED_KINDS:
            continue
        try:
            listing = client.list_collection(info.path(namespace), limit=_PAGE, pages=1, accept=METADATA_ONLY)
        except NotFoundError:
            continue  # not served (any more): nothing of this kind to lose
        except ClusterError as exc:
            held.unchecked.append(f"{info.kind}.{info.group}" if info.group else info.kind)
            if isinstance(exc, ForbiddenError):
                held.forbidden.append(info)
            log.info("cannot list for the cascade guard", kind=info.kind, error=str(exc))
            continue
        for item in listing.items:
            meta = item.get("metadata") or {}
            key = ObjectKey(info.group, info.kind, str(meta.get("namespace") or ""), str(meta.get("name", "")))
            if key.kind == "Service" and not key.group:
                services.add((key.namespace, key.name))
            if key in deleted or (key.group, key.kind, key.name) in _DEFAULTS:
                continue
            # Owned objects (a ReplicaSet's Pods) go with their owner, which is listed itself.
            if meta.get("ownerReferences"):
                continue
            held.foreign.append(key)
        held.more = held.more or listing.more
    # The endpoints controller writes a Service's Endpoints without an owner reference: it goes with the
    # Service, which is judged itself.
    held.foreign = [
        k for k in held.foreign if not (k.kind == "Endpoints" and not k.group and (k.namespace, k.name) in services)
    ]
    return held


def _served_version(spec: Manifest) -> ResourceInfo | None:
    """The CRD's own first served version, when discovery does not (yet) list the kind."""
    served = served_by_crd(spec, frozenset({"list"}))
    return served[0][0] if served else None


def _message(what: str, held: Holdings, advice: str = CASCADE_ADVICE) -> str:
    parts = []
    if held.foreign:
        names = ", ".join(str(k) for k in held.foreign[:_NAMED])
        extra = len(held.foreign) - _NAMED
        count = f"{len(held.foreign)}{'+' if held.more else ''}"
        tail = f" and {extra}{'+' if held.more else ''} more" if extra > 0 else (" and more" if held.more else "")
        parts.append(f"it still holds {count} object(s) this prune does not remove: {names}{tail}")
    if held.unchecked:
        kinds = ", ".join(held.unchecked[:_NAMED]) + (
            f" and {len(held.unchecked) - _NAMED} more kind(s)" if len(held.unchecked) > _NAMED else ""
        )
        parts.append(f"its contents could not be checked (cannot list {kinds})")
    if held.forbidden:
        parts.append(f"to let it check, grant {grant(held.forbidden)} (as the {GUARD_ROLE} does)")
    return (
        f"prune refused: deleting {what} would delete what it holds; "
        + "; ".join(parts)
        + f" (delete or move them first, or {advice})"
    )


def grant(infos: Sequence[ResourceInfo]) -> str:
    """The RBAC rule(s) that would let the guard list `infos`, as one reads them in a ClusterRole:
    `list on pods, endpoints (apiGroups ""), replicasets (apiGroups apps)`."""
    by_group: dict[str, list[str]] = {}
    for info in infos:
        plurals = by_group.setdefault(info.group, [])
        if info.plural not in plurals:
            plurals.append(info.plural)
    core = '""'
    rules = [f"{', '.join(plurals)} (apiGroups {group or core})" for group, plurals in by_group.items()]
    return "list on " + "; ".join(rules)
