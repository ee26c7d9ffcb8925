"""Which objects this source applied before: a kubectl-compatible ApplySet.

Members carry the label `applyset.kubernetes.io/part-of=<id>`; a parent ConfigMap carries the id
and records the group-kinds and namespaces to look in. Prune lists exactly those and deletes only
labelled members that left Git, so an object this tool did not create is never a candidate.
The parent also records the source identity it belongs to; a parent of another source is refused.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
from dataclasses import dataclass, field

from gitops_sync import __version__
from gitops_sync.cluster.client import APPLY_PATCH, Client
from gitops_sync.cluster.discovery import Discovery, ResourceInfo
from gitops_sync.conventions import (
    APPLIED_REVISION,
    ATTEMPTED_REVISION,
    CLUSTER_ID,
    DELETE_HOOKS,
    FIELD_MANAGER,
    GROUP_KINDS,
    ID_LABEL,
    NAMESPACES,
    PART_OF,
    SOURCE,
    SOURCE_IDENTITY,
    TOOLING,
)
from gitops_sync.errors import (
    ClusterError,
    ConflictError,
    ForbiddenError,
    InventoryChangedError,
    NotFoundError,
    SourceMismatchError,
)
from gitops_sync.plan.bookkeeping import CREATE_ONLY_RV
from gitops_sync.plan.changeset import SharedWith
from gitops_sync.resource import Manifest, ObjectKey

# Lists answer with metadata only: finding a parent or a namespace's contents never reads Secret data.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


@functools.lru_cache(maxsize=256)
def applyset_id(name: str, namespace: str, kind: str = "ConfigMap", group: str = "") -> str:
    """The id kubectl derives for a parent: base64url(sha256(name.namespace.kind.group)), unpadded. One string
    per parent: it labels every member, and the daemon's desired state held a copy per object (2 MB at 20,000)."""
    digest = hashlib.sha256(f"{name}.{namespace}.{kind}.{group}".encode()).digest()
    return "applyset-" + base64.urlsafe_b64encode(digest).decode().rstrip("=") + "-v1"


@dataclass
class Inventory:
    name: str
    namespace: str
    group_kinds: set[str] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)
    exists: bool = False
    recorded: dict[str, str] = field(default_factory=dict)  # the parent's annotations as last read/written
    identity: str = ""  # the source identity this pass records on the parent
    uid: str = ""
    resource_version: str = ""  # of the parent as this pass last read or wrote it: its writes are guarded by it
    cluster_id: str = (
        ""  # the kube-system UID of the cluster this pass reaches ("" unknown: neither recorded nor checked)
    )

    @property
    def recorded_cluster(self) -> str:
        """The cluster the parent records (its kube-system UID), "" on a parent written before it was recorded."""
        return self.recorded.get(CLUSTER_ID, "")

    def foreign_cluster(self) -> str:
        """Why this pass must not prune from this parent, "" when it may: the parent records another cluster
        than the one this pass reaches (copied there by a backup tool, or restored from another cluster's)."""
        if not (self.exists and self.cluster_id and self.recorded_cluster) or self.recorded_cluster == self.cluster_id:
            return ""
        return (
            f"the inventory ConfigMap {self.namespace}/{self.name} records cluster {self.recorded_cluster} (the UID of "
            f"its kube-system namespace), but this connection reaches cluster {self.cluster_id}"
        )

    @property
    def id(self) -> str:
        return applyset_id(self.name, self.namespace)

    @property
    def parent_key(self) -> ObjectKey:
        return ObjectKey("", "ConfigMap", self.namespace, self.name)

    @property
    def parent_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}"

    def label_member(self, manifest: Manifest) -> None:
        manifest.setdefault("metadata", {}).setdefault("labels", {})[PART_OF] = self.id

    def parent_manifest(
        self, group_kinds: set[str], namespaces: set[str], *, attempted: str, applied: str, source: str
    ) -> Manifest:
        extra = sorted(n for n in namespaces if n and n != self.namespace)
        body: Manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {ID_LABEL: self.id},
                "annotations": {
                    TOOLING: f"{FIELD_MANAGER}/v{__version__}",
                    GROUP_KINDS: ",".join(sorted(group_kinds)),
                    NAMESPACES: ",".join(extra),
                    ATTEMPTED_REVISION: attempted,
                    SOURCE: source,
                    **({SOURCE_IDENTITY: self.identity} if self.identity else {}),
                    # the recorded cluster is kept (another cluster's too: its prunes stay refused until a
                    # person removes it); a parent without one records the cluster of this pass
                    **({CLUSTER_ID: cluster} if (cluster := self.recorded_cluster or self.cluster_id) else {}),
                },
            },
        }
        if applied:  # absent until a first clean pass: never "applied" on the strength of an attempt
            body["metadata"]["annotations"][APPLIED_REVISION] = applied
        if self.recorded.get(DELETE_HOOKS):  # kept as recorded unless `save` is given new ones
            body["metadata"]["annotations"][DELETE_HOOKS] = self.recorded[DELETE_HOOKS]
        return body


def load(
    client: Client, name: str, namespace: str, identity: str = "", default_name: str = "", *, cluster_id: str = ""
) -> Inventory:
    """Read the parent. Refused (SourceMismatchError) when it records a source identity other than ours.

    `default_name` is this source's own default, suggested when an explicit --name hit another source.
    `cluster_id`: the cluster this pass reaches (its kube-system UID), recorded and checked (`foreign_cluster`).
    """
    inv = Inventory(name=name, namespace=namespace, identity=identity, cluster_id=cluster_id)
    live = client.get_or_none(inv.parent_path)
    if live is None:
        return inv
    meta = live.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(ID_LABEL) != inv.id:
        raise ConflictError(
            409,
            "Conflict",
            f"ConfigMap {namespace}/{name} exists but is not the ApplySet parent of this source "
            f"(label {ID_LABEL} is {labels.get(ID_LABEL)!r}); choose another --name",
        )
    ann = meta.get("annotations") or {}
    recorded = str(ann.get(SOURCE_IDENTITY, ""))
    if identity and recorded and recorded != identity:
        hint = (
            f"pass --name (its default here is {default_name})"
            if default_name and default_name != name
            else "pass a --name of its own"
        )
        raise SourceMismatchError(
            f"inventory ConfigMap {namespace}/{name} belongs to source {recorded}, not to this source "
            f"{identity}: sharing it would let one source prune the other's objects; refusing to use it. "
            f"Choose another inventory for this source: {hint}",
            inventory=f"{namespace}/{name}",
            recorded=recorded,
            ours=identity,
        )
    return _read(inv, meta)


def find_legacy(client: Client, name: str, namespace: str) -> Inventory | None:
    """A parent written before source identities (no identity recorded) under `name`, or None.

    The caller decides from its recorded source label whether it is ours to take over.
    """
    inv = Inventory(name=name, namespace=namespace)
    live = client.get_or_none(inv.parent_path)
    meta = (live or {}).get("metadata") or {}
    ann = meta.get("annotations") or {}
    if live is None or (meta.get("labels") or {}).get(ID_LABEL) != inv.id or SOURCE_IDENTITY in ann:
        return None
    return _read(inv, meta)


def _read(inv: Inventory, meta: Manifest) -> Inventory:
    """Fill `inv` from the live parent's metadata."""
    ann = meta.get("annotations") or {}
    inv.group_kinds = {g for g in str(ann.get(GROUP_KINDS, "")).split(",") if g}
    inv.namespaces = {n for n in str(ann.get(NAMESPACES, "")).split(",") if n} | {inv.namespace}
    inv.exists = True
    inv.recorded = {k: str(v) for k, v in ann.items()}
    inv.uid = str(meta.get("uid") or "")
    inv.resource_version = str(meta.get("resourceVersion") or "")
    return inv


def delete_parent(client: Client, inv: Inventory) -> None:
    """Remove a parent that has been taken over (guarded by its uid: never a re-created one)."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": inv.uid or None}}
    with contextlib.suppress(NotFoundError):
        client.request("DELETE", inv.parent_path, body=body)
    inv.exists = False


def save(
    client: Client,
    inv: Inventory,
    group_kinds: set[str],
    namespaces: set[str],
    *,
    field_manager: str,
    revision: str = "",
    source: str = "",
    applied: bool = False,
    delete_hooks: str | None = None,
) -> None:
    """Record the parent. Before applying, record the union of old and new so a crash never hides members.

    `revision` is recorded as attempted; with `applied` (after a clean pass) also as applied, else the
    applied revision recorded earlier is kept. Writes only when the record changes, so a pass with
    nothing to do sends no write at all. An existing parent is written only as this pass last saw it (its
    resourceVersion, a precondition of the apply), and one this pass found absent is only created (a
    precondition no object meets): a parent another pass wrote meanwhile is not written over
    (InventoryChangedError), so a pass never records its revision, or fewer kinds, over another's record
    (members of a kind dropped from the record could never be pruned). One that already records as much
    (another pass of this revision) is taken as it is.
    """
    kept = inv.recorded.get(APPLIED_REVISION, "")
    body = inv.parent_manifest(
        group_kinds, namespaces, attempted=revision, applied=revision if applied else kept, source=source
    )
    annotations = body["metadata"]["annotations"]
    if not _set_delete_hooks(inv, annotations, delete_hooks) and inv.exists:
        return
    # Written only over the parent this pass read, or created only where none was: see the docstring.
    body["metadata"]["resourceVersion"] = inv.resource_version if inv.exists else CREATE_ONLY_RV
    try:
        written = client.request(
            "PATCH",
            inv.parent_path,
            query={"fieldManager": field_manager, "force": True},
            body=body,
            content_type=APPLY_PATCH,
        )
    except NotFoundError as exc:
        raise ClusterError(
            f"cannot record the inventory ConfigMap {inv.namespace}/{inv.name}: namespace {inv.namespace} "
            "does not exist (create it, declare it in Git, or pass --inventory-namespace)"
        ) from exc
    except ConflictError as exc:  # the resourceVersion precondition: another pass wrote it since we read it
        live = client.get_or_none(inv.parent_path)
        if live is not None and _covers(inv, live, annotations, applied=applied):
            _read(inv, live.get("metadata") or {})  # another pass of this revision recorded as much: kept
            return
        raise InventoryChangedError(
            f"the inventory ConfigMap {inv.namespace}/{inv.name} was written by another pass of this source "
            f"since this one read it ({_describe(live)}): not recording over it"
        ) from exc
    inv.group_kinds, inv.namespaces, inv.exists = set(group_kinds), set(namespaces) | {inv.namespace}, True
    inv.recorded.pop(DELETE_HOOKS, None)
    inv.recorded.update(annotations)
    inv.resource_version = str(((written or {}).get("metadata") or {}).get("resourceVersion") or "")


def _set_delete_hooks(inv: Inventory, annotations: dict[str, str], delete_hooks: str | None) -> bool:
    """`delete_hooks` (the Helm delete hooks to record now, "" none, None: as recorded; engine/delete_hooks.py)
    into `annotations`; whether they now differ from what the parent records."""
    if delete_hooks is not None:
        annotations.pop(DELETE_HOOKS, None)
        annotations.update({DELETE_HOOKS: delete_hooks} if delete_hooks else {})
    dropped = DELETE_HOOKS in inv.recorded and DELETE_HOOKS not in annotations
    return dropped or any(inv.recorded.get(k) != v for k, v in annotations.items())


def _covers(inv: Inventory, live: Manifest, annotations: dict[str, str], *, applied: bool) -> bool:
    """Whether a parent another pass wrote already records what this write would: this revision attempted
    (and applied, when this write records it), every kind and namespace of ours, our source."""
    meta = live.get("metadata") or {}
    ann = {k: str(v) for k, v in (meta.get("annotations") or {}).items()}
    kinds, spaces = ({x for x in ann.get(key, "").split(",") if x} for key in (GROUP_KINDS, NAMESPACES))
    want_kinds, want_spaces = ({x for x in annotations[key].split(",") if x} for key in (GROUP_KINDS, NAMESPACES))
    return (
        (meta.get("labels") or {}).get(ID_LABEL) == inv.id
        and ann.get(SOURCE_IDENTITY, "") == annotations.get(SOURCE_IDENTITY, "")
        and ann.get(ATTEMPTED_REVISION) == annotations[ATTEMPTED_REVISION]
        and (not applied or ann.get(APPLIED_REVISION) == annotations[APPLIED_REVISION])
        and kinds >= want_kinds
        and spaces >= want_spaces
    )


def changed_since(client: Client, inv: Inventory) -> str:
    """What another pass recorded on the parent since this pass last read or wrote it; "" when unchanged.

    Prune asks right before it deletes: members it listed may be another pass's, of a newer revision."""
    if not inv.exists:
        return ""
    live = client.get_or_none(inv.parent_path)
    if live is not None and str((live.get("metadata") or {}).get("resourceVersion") or "") == inv.resource_version:
        return ""
    return _describe(live)


def _describe(live: Manifest | None) -> str:
    """What a parent another pass wrote records now, for a message."""
    if live is None:
        return "the parent was deleted"
    ann = (live.get("metadata") or {}).get("annotations") or {}
    recorded = (("attempted", ATTEMPTED_REVISION), ("applied", APPLIED_REVISION))
    revisions = ", ".join(f"{what} {str(ann[key])[:12]}" for what, key in recorded if ann.get(key))
    return f"it now records {revisions}" if revisions else "its record changed"


def list_members(client: Client, discovery: Discovery, inv: Inventory) -> dict[ObjectKey, Manifest]:
    """Every live object labelled as a member, looked up in the recorded group-kinds."""
    members: dict[ObjectKey, Manifest] = {}
    selector = f"{PART_OF}={inv.id}"
    for gk in sorted(inv.group_kinds):
        kind, _, group = gk.partition(".")
        info = discovery.preferred(group, kind)
        if info is None:
            continue  # the kind is gone from the cluster (CRD deleted): nothing left to prune
        try:
            items = _list(client, info, kind, selector, None)
        except ForbiddenError as exc:
            if not info.namespaced:
                raise _unlistable(inv, gk, None, exc) from exc
            # No cluster-wide list permission (a namespaced install): look in each recorded namespace.
            items = []
            for ns in sorted(inv.namespaces):
                try:
                    items += _list(client, info, kind, selector, ns)
                except ForbiddenError as refused:
                    raise _unlistable(inv, gk, ns, refused) from refused
        members.update((ObjectKey.of(item), item) for item in items)
    return members


def _unlistable(inv: Inventory, gk: str, namespace: str | None, exc: ForbiddenError) -> ClusterError:
    """Members that cannot be looked for: what the parent records there, and the two ways out."""
    where = f" in namespace {namespace}" if namespace else ""
    drop = (
        f"remove {namespace} from its annotation {NAMESPACES}"
        if namespace and namespace != inv.namespace
        else f"remove {gk} from its annotation {GROUP_KINDS}"
    )
    return ClusterError(
        f"cannot list {gk}{where}: {exc}; the inventory ConfigMap {inv.namespace}/{inv.name} records it, so a "
        f"member may be there: grant list on it, or, if nothing of this source was ever created there, {drop}"
    )


def unserved_kinds(discovery: Discovery, inv: Inventory) -> set[str]:
    """Recorded group-kinds the server does not serve now (CRD deleted or its versions unserved).

    Their members cannot be listed, so nobody can say they are gone: they stay recorded, to be pruned
    once the kind is served again, instead of being forgotten.
    """
    out = set()
    for gk in inv.group_kinds:
        kind, _, group = gk.partition(".")
        if discovery.preferred(group, kind) is None:
            out.add(gk)
    return out


def find_parent(client: Client, applyset_id: str) -> SharedWith:
    """Who owns an ApplySet id: its parent ConfigMap or Secret (kubectl's default), by the id label.

    The id is a one-way hash of the parent's name, so a label lookup is the only way back. A refused or
    failed list leaves the id alone to name it.
    """
    shared = SharedWith(applyset_id)
    for kind, path in (("ConfigMap", "/api/v1/configmaps"), ("Secret", "/api/v1/secrets")):
        try:
            found = client.list_collection(
                path, label_selector=f"{ID_LABEL}={applyset_id}", limit=1, pages=1, accept=METADATA_ONLY
            )
        except ClusterError:
            continue
        for item in found.items:
            meta = item.get("metadata") or {}
            ann = meta.get("annotations") or {}
            shared.parent = f"{kind} {meta.get('namespace', '')}/{meta.get('name', '')}"
            shared.source = str(ann.get(SOURCE, ""))
            shared.tooling = str(ann.get(TOOLING, ""))
            shared.identity = str(ann.get(SOURCE_IDENTITY, ""))
            return shared
    return shared


def _list(client: Client, info: ResourceInfo, kind: str, selector: str, namespace: str | None) -> list[Manifest]:
    path = info.path(namespace)
    return client.list_collection(path, label_selector=selector, api_version=info.api_version, kind=kind).items
