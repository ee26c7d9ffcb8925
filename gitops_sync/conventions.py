"""The project's vocabulary: every label and annotation key, field manager name and policy, in one place.

The lowest layer: it imports nothing of gitops_sync, so every step of the loop (plan, apply, daemon, report,
cli) reads the same names from here instead of from one another. A key written on a cluster object is a
contract with what other versions and kubectl read back, so change a value here only with a migration.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "ADOPT",
    "ADOPTED",
    "APPLIED_REVISION",
    "APPLY_MODE",
    "ATTEMPTED_REVISION",
    "BOOKKEEPING",
    "BOOKKEEPING_KEYS",
    "CLUSTER_ID",
    "CREATE_ONLY",
    "CSA_MANAGER",
    "DELETE_HOOKS",
    "DEPLOYMENT_REVISION",
    "FIELD_MANAGER",
    "GROUP_KINDS",
    "HISTORY_SKIP_PREFIXES",
    "IDENTITY_PATHS",
    "ID_LABEL",
    "INTENT_HASH",
    "LAST_APPLIED",
    "LIFECYCLE_FINALIZERS",
    "MASK",
    "NAMESPACES",
    "ON_CONFLICT",
    "ORIGIN_ANNOTATION",
    "PART_OF",
    "PRUNE",
    "PRUNE_DISABLED",
    "RECONCILE_REQUESTED",
    "REVISION",
    "RULES_FILE",
    "SERVER_ANNOTATIONS",
    "SERVER_METADATA",
    "SOURCE",
    "SOURCE_IDENTITY",
    "TOOLING",
    "ConflictPolicy",
]

# What stands in for a Secret value everywhere it could be shown: plain, no hash or length (see plan/masking).
MASK: Final = "***"

# ---- field managers ------------------------------------------------------------------------------
# The server-side apply field manager every source applies under unless `--field-manager` says otherwise.
FIELD_MANAGER: Final = "gitops-sync"
# The manager `kubectl apply` (client-side) records; `sync` hands its fields to our Apply manager first.
CSA_MANAGER: Final = "kubectl-client-side-apply"

# ---- ApplySet (kubectl's keys, so `kubectl apply --prune --applyset` reads our inventories) -------------
PART_OF: Final = "applyset.kubernetes.io/part-of"  # label on every member: the parent's id
ID_LABEL: Final = "applyset.kubernetes.io/id"  # label on the parent
TOOLING: Final = "applyset.kubernetes.io/tooling"  # annotation on the parent, e.g. "gitops-sync/v0.1.0"
GROUP_KINDS: Final = "applyset.kubernetes.io/contains-group-kinds"
NAMESPACES: Final = "applyset.kubernetes.io/additional-namespaces"

# ---- ours, on members ----------------------------------------------------------------------------
# The hash of the intent last applied: the same hash and every field still as desired means no request.
INTENT_HASH: Final = "gitops-sync.io/intent-hash"
# Set on objects that existed before we first applied them; prune releases them, never deletes.
ADOPTED: Final = "gitops-sync.io/adopted"
# In Git, on one object: take it over even when it is a member of another ApplySet (as --adopt-shared).
ADOPT: Final = "gitops-sync.io/adopt"

# In Git, on one object: `disabled` keeps it when it leaves Git (never pruned, as Flux's annotation).
PRUNE: Final = "gitops-sync.io/prune"
PRUNE_DISABLED: Final = "disabled"
# In Git, on one object: `create-only` creates it when absent and never updates it (a Secret an operator fills).
APPLY_MODE: Final = "gitops-sync.io/apply"
CREATE_ONLY: Final = "create-only"
# In Git, on one object: its own --on-conflict (force, report, skip).
ON_CONFLICT: Final = "gitops-sync.io/on-conflict"
# The repository's rules file (ignore rules), at the rendered root or the repository root; hidden, so
# never rendered as a manifest.
RULES_FILE: Final = ".gitops-sync.yaml"

# ---- ours, on the inventory parent ---------------------------------------------------------------
# The revision a pass started to apply, written before it applies anything; the revision of the last clean
# pass (every object applied, prune done if asked), written only after it. They differ after a failed pass.
ATTEMPTED_REVISION: Final = "gitops-sync.io/attempted-revision"
APPLIED_REVISION: Final = "gitops-sync.io/applied-revision"
# Before the two were apart, one annotation (written before the pass). Read only, on older parents.
REVISION: Final = "gitops-sync.io/revision"
# The source as given (repo//path@ref); read to take over inventories of the older naming.
SOURCE: Final = "gitops-sync.io/source"
# The normalised source (`gitops_sync.source.identity`) this inventory belongs to; absent on parents
# written before source identities (legacy: accepted, and recorded on the next write).
SOURCE_IDENTITY: Final = "gitops-sync.io/source-identity"
# The cluster the parent was written on: its kube-system namespace UID (cluster/connection.py). A parent
# that records another cluster than the one a pass reaches (copied by a backup tool, restored elsewhere) is
# never pruned from; absent on parents written before it (recorded on the next write).
CLUSTER_ID: Final = "gitops-sync.io/cluster-id"
# The Helm pre-delete/post-delete hooks of the releases applied (engine/delete_hooks.py): what runs when a
# release leaves Git, or the source is deleted, once its objects are no longer rendered. gzip + base64 of JSON.
DELETE_HOOKS: Final = "gitops-sync.io/delete-hooks"

# ---- ours, on a GitSync (the fleet controller's custom resource) ---------------------------------------
# Set by `gitops-sync reconcile` (any value, a time by convention): fetch and reconcile now.
RECONCILE_REQUESTED: Final = "gitops-sync.io/reconcile-requested-at"

# ---- written by others, never a difference -------------------------------------------------------
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
DEPLOYMENT_REVISION: Final = "deployment.kubernetes.io/revision"
# What the server fills in under `metadata`: dropped before desired and live are compared.
SERVER_METADATA: Final = (
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
SERVER_ANNOTATIONS: Final = (LAST_APPLIED, DEPLOYMENT_REVISION)
# kustomize's record of the file an object came from (kustomization `buildMetadata: [originAnnotations]`):
# read for reports, removed before applying.
ORIGIN_ANNOTATION: Final = "config.kubernetes.io/origin"

# Finalizers by which the API server itself deletes what an object holds, and that nobody else must
# remove: a Namespace's `spec.finalizers` entry (the namespace controller empties it) and a CRD's (its
# custom resources go first). An object held by these alone after our DELETE is being deleted, not held:
# what it waits for is either ours (pruned and reported on its own) or was checked by the cascade guard.
LIFECYCLE_FINALIZERS: Final = frozenset({"kubernetes", "customresourcecleanup.apiextensions.k8s.io"})

# ---- bookkeeping paths ---------------------------------------------------------------------------
# What we write for our own bookkeeping: written with every apply, but never a field difference, a
# conflict or drift to report (a change there is "record gitops-sync ownership").
BOOKKEEPING_KEYS: Final = (("labels", PART_OF), ("annotations", INTENT_HASH), ("annotations", ADOPTED))
BOOKKEEPING: Final = tuple(f".metadata.{where}.{name}" for where, name in BOOKKEEPING_KEYS)
# The object's identity: the same for every revision, so never part of a field's history.
IDENTITY_PATHS: Final = (".apiVersion", ".kind", ".metadata.name", ".metadata.namespace")
# What the daemon's ownership history skips: identity and bookkeeping, in either path spelling.
HISTORY_SKIP_PREFIXES: Final = (
    *IDENTITY_PATHS,
    *(
        spelling
        for where, name in BOOKKEEPING_KEYS
        for spelling in (f".metadata.{where}.{name}", f'.metadata.{where}["{name}"]')
    ),
)


class ConflictPolicy(enum.StrEnum):
    """What to do with a field another manager owns with a different value (`--on-conflict`)."""

    REPORT = "report"  # apply everything else, leave the conflicting fields to their owner, say so
    FORCE = "force"  # take ownership (Git wins)
    SKIP = "skip"  # leave conflicted objects entirely alone


# `-o` of `sync` and `diff`: the report's formats (the CLI adds html, the web page's).
REPORT_FORMATS: Final = ("table", "json", "markdown")
