"""The GitSync custom resource: its spec read into a `SourceSpec`, its shard, and its status document.

The fleet controller (fleet.py) reads each GitSync through `parse`, builds a `SourceReconciler` from
it, and after every pass writes `status_of(...)` to the status subresource. The CLI (fleetctl.py) reads
the same status back. Pure functions only: no cluster access here.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from typing import Any

from gitops_sync.conventions import RECONCILE_REQUESTED, ConflictPolicy
from gitops_sync.daemon.reconcile.failures import Failures, failures_of
from gitops_sync.daemon.reconcile.reconciler import SOURCE_FAILED, SourceReconciler, SourceSpec
from gitops_sync.daemon.runtime.metrics import object_state
from gitops_sync.engine import PassOptions, SourceOptions
from gitops_sync.options import parse_duration
from gitops_sync.plan.changeset import Action
from gitops_sync.resource import Manifest, ObjectKey

GROUP = "gitops-sync.io"
VERSION = "v1alpha1"
KIND = "GitSync"
PLURAL = "gitsyncs"
API_VERSION = f"{GROUP}/{VERSION}"
RECONCILE_ANNOTATION = RECONCILE_REQUESTED  # every key lives in conventions.py
CONDITION_TYPES = ("Ready", "Reconciling", "Stalled", "Drifted", "Conflicted", "Suspended")
# spec fields that change how a source is run, not what it is: changing one keeps its reconciler (and status).
_RUN_FIELDS = frozenset({"suspend"})
# On a GitSync whose deletion prunes its objects (see `wants_finalizer`): the controller garbage-collects
# them before the API server lets the GitSync go (as Flux's Kustomization finalizer does).
FINALIZER = "gitops-sync.io/finalizer"
# spec.deletionPolicy, Flux's names: what deleting the GitSync does to its objects.
MIRROR_PRUNE = "MirrorPrune"  # delete them when spec.prune is true (the default)
DELETE = "Delete"  # delete them whatever spec.prune says
WAIT_FOR_TERMINATION = "WaitForTermination"  # as Delete, and wait until they are gone (or spec.timeout passed)
ORPHAN = "Orphan"  # leave them
DELETION_POLICIES = (MIRROR_PRUNE, DELETE, WAIT_FOR_TERMINATION, ORPHAN)


class InvalidSpec(ValueError):
    """A GitSync the controller cannot act on; the message names the object and the field."""

    reason = "InvalidSpec"  # of its Ready condition and Event


def collection_path(namespace: str | None = None) -> str:
    base = f"/apis/{GROUP}/{VERSION}"
    return f"{base}/namespaces/{namespace}/{PLURAL}" if namespace else f"{base}/{PLURAL}"


def object_path(namespace: str, name: str, subresource: str = "") -> str:
    return f"{collection_path(namespace)}/{name}" + (f"/{subresource}" if subresource else "")


@dataclass(frozen=True)
class GitSync:
    """One GitSync as the controller acts on it."""

    namespace: str
    name: str
    generation: int
    uid: str
    repository: str
    revision: str | None
    path: str | None
    interval: float
    prune: bool
    self_heal: bool
    policy: ConflictPolicy
    target_namespace: str
    service_account: str
    suspend: bool
    depends_on: tuple[tuple[str, str], ...]
    wait: bool
    timeout: float
    reconcile_requested: str = ""
    spec_doc: dict[str, Any] = field(default_factory=dict, compare=False)
    deletion_policy: str = MIRROR_PRUNE
    prune_cascade: bool = False  # spec.pruneCascade: the cascade guard does not refuse its prunes

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def wants_finalizer(self) -> bool:
        """Only a source that writes, and whose deletion policy deletes, collects its objects when deleted
        (MirrorPrune: when it prunes); the rest orphan them."""
        if not self.self_heal or self.deletion_policy == ORPHAN:
            return False
        return self.prune or self.deletion_policy in (DELETE, WAIT_FOR_TERMINATION)

    @property
    def cascade_advice(self) -> str:
        """How a refusal of the cascade guard tells this GitSync's owner to override it."""
        return f"set spec.pruneCascade: true on GitSync {self.ref}"

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(GROUP, KIND, self.namespace, self.name)

    @property
    def impersonate(self) -> str:
        """The user every request of this source is sent as ("" = the controller's own)."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}" if self.service_account else ""

    def source_spec(self, base: SourceOptions, *, debounce: float) -> SourceSpec:
        """Options of the source: the controller's render options, this object's repository and policy."""
        src = SourceOptions(
            repo=self.repository,
            revision=self.revision,
            path=self.path,
            cache_dir=base.cache_dir,
            render=base.render,
            timeout=base.timeout,
            local_policy=base.local_policy,
        )
        # The ApplySet parent (inventory) of a GitSync is named after it and lives beside it.
        pass_opts = PassOptions(
            namespace=self.target_namespace,
            prune=self.prune,
            policy=self.policy,
            wait=self.wait,
            timeout=self.timeout,
            name=f"gitsync-{self.name}",
            inventory_namespace=self.namespace,
            prune_cascade=self.prune_cascade,
            cascade_advice=self.cascade_advice,
        )
        return SourceSpec(src, pass_opts, self_heal=self.self_heal, debounce=debounce)


def parse(obj: Manifest) -> GitSync:
    """The GitSync's spec, checked beyond what the CRD's schema already refused."""
    meta = obj.get("metadata") or {}
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    where = f"GitSync {ns}/{name}"
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise InvalidSpec(f"{where}: spec is missing")
    repo = spec.get("repository")
    if not isinstance(repo, str) or not repo.strip():
        raise InvalidSpec(f"{where}: spec.repository is required")

    def duration(key: str, default: str) -> float:
        try:
            return parse_duration(spec.get(key) or default)
        except ValueError as exc:
            raise InvalidSpec(f"{where}: spec.{key}: {exc}") from None

    mode = str(spec.get("mode") or "self-heal")
    if mode not in ("self-heal", "detect-only"):
        raise InvalidSpec(f"{where}: spec.mode must be self-heal or detect-only, not {mode!r}")
    try:
        policy = ConflictPolicy(str(spec.get("conflictPolicy") or "force"))
    except ValueError:
        raise InvalidSpec(
            f"{where}: spec.conflictPolicy must be one of {', '.join(p.value for p in ConflictPolicy)}"
        ) from None
    deletion_policy = str(spec.get("deletionPolicy") or MIRROR_PRUNE)
    if deletion_policy not in DELETION_POLICIES:
        raise InvalidSpec(f"{where}: spec.deletionPolicy must be one of {', '.join(DELETION_POLICIES)}")
    path = spec.get("path") or None
    if path is not None and (str(path).startswith("/") or ".." in str(path).split("/")):
        raise InvalidSpec(f"{where}: spec.path must be relative and stay inside the repository")
    deps: list[tuple[str, str]] = []
    for i, dep in enumerate(spec.get("dependsOn") or []):
        if not isinstance(dep, dict) or not dep.get("name"):
            raise InvalidSpec(f"{where}: spec.dependsOn[{i}] needs a name")
        deps.append((str(dep.get("namespace") or ns), str(dep["name"])))
    annotations = meta.get("annotations") or {}
    return GitSync(
        namespace=ns,
        name=name,
        generation=int(meta.get("generation") or 0),
        uid=str(meta.get("uid") or ""),
        repository=repo.strip(),
        revision=spec.get("revision") or None,
        path=path,
        interval=duration("interval", "1m"),
        prune=bool(spec.get("prune", False)),
        self_heal=mode == "self-heal",
        policy=policy,
        target_namespace=str(spec.get("targetNamespace") or ns),
        service_account=str(spec.get("serviceAccountName") or ""),
        suspend=bool(spec.get("suspend", False)),
        depends_on=tuple(deps),
        wait=bool(spec.get("wait", False)),
        timeout=duration("timeout", "5m"),
        reconcile_requested=str(annotations.get(RECONCILE_ANNOTATION) or ""),
        spec_doc={k: v for k, v in spec.items() if k not in _RUN_FIELDS},
        deletion_policy=deletion_policy,
        prune_cascade=bool(spec.get("pruneCascade", False)),
    )


def is_deleting(obj: Manifest) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def finalizers(obj: Manifest) -> list[str]:
    return [str(f) for f in (obj.get("metadata") or {}).get("finalizers") or []]


def finalizer_patch(obj: Manifest, *, present: bool) -> Manifest | None:
    """A merge patch adding or removing FINALIZER (guarded by resourceVersion: other finalizers are kept
    as read, and a GitSync changed meanwhile is a 409, retried on its next event); None: nothing to do."""
    have = finalizers(obj)
    if (FINALIZER in have) == present:
        return None
    want = [*have, FINALIZER] if present else [f for f in have if f != FINALIZER]
    rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return {"metadata": {"finalizers": want, "resourceVersion": rv}}


def shard_of(namespace: str, name: str, shards: int) -> int:
    """Stable across processes and restarts (not Python's salted hash): every replica agrees."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % max(shards, 1)


def is_ready(obj: Manifest) -> bool:
    """Ready=True for the current generation: what `dependsOn` waits for (as `kubectl wait` would)."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


WAITING_FOR_TERMINATION = "WaitingForTermination"  # Ready's reason while deletionPolicy waits for objects to go


@dataclass(frozen=True)
class Deletion:
    """Why a GitSync being deleted is still there: its prune's failures, or (none) what it waits for."""

    failures: Failures
    waiting: str = ""


def _condition(ctype: str, status: bool | None, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "Unknown" if status is None else ("True" if status else "False"),
        "reason": reason,
        "message": message[:1024],
        "observedGeneration": generation,
    }


def status_of(
    gs: GitSync,
    r: SourceReconciler | None,
    *,
    waiting_for: str = "",
    invalid: str = "",
    invalid_reason: str = InvalidSpec.reason,
    handled: str = "",
    shard: int = 0,
    last: dict[str, Any] | None = None,
    deletion: Deletion | None = None,
) -> dict[str, Any]:
    """The status document (no transition times: `with_transition_times` adds them from the last one).

    `invalid`: why the controller will not act on this GitSync (`invalid_reason`: InvalidSpec, or
    RepositoryNotAllowed); it then has no reconciler. `last` is the status as the GitSync object holds it
    now: a suspended source keeps it (see `_suspended`). `deletion`: the GitSync is being deleted and its
    objects are not all gone yet (a refused or failed prune, or WaitForTermination waiting): that is what
    Ready says, never the last pass's success.
    """
    gen = gs.generation
    if gs.suspend and not invalid:
        return _suspended(gs, last or {}, handled, shard)
    doc: dict[str, Any] = {"observedGeneration": gen, "shard": shard}
    if handled:
        doc["lastHandledReconcileAt"] = handled
    if invalid or r is None:
        message = invalid or "not loaded yet"
        reason = invalid_reason if invalid else "Progressing"
        doc["lastError"] = invalid
        doc["conditions"] = [
            _condition("Ready", False if invalid else None, reason, message, gen),
            _condition("Reconciling", not invalid, reason, message, gen),
            _condition("Stalled", bool(invalid), reason, message, gen),
        ]
        return doc
    with r.state:
        entries = list(r.entries.values())
        pass_errors = list(r.pass_errors)
    states = [object_state(e, applied=r.spec.self_heal, forcing=r.forcing) for e in entries if not e.left_git]
    desired = r.current.by_key if r.current else {}
    failures = deletion.failures if deletion else failures_of(entries, pass_errors, desired)
    counts = {a.value: 0 for a in Action}
    for e in entries:
        counts[e.action.value] += 1
    counts["drifted"] = sum(1 for s in states if s in ("drifted", "missing"))
    counts["conflict"] = sum(1 for s in states if s == "conflict")
    counts["error"] = failures.count  # each failed object once, and the pass errors that are causes
    doc["counts"] = counts
    doc["lastAppliedRevision"] = r.applied[0] if r.applied else ""
    doc["lastAttemptedRevision"] = r.attempted or (r.current.checkout.revision if r.current else "")
    doc["inventory"] = {"name": r.inventory_name, "namespace": r.inventory_namespace, "objects": len(states)}
    source_error = r.load_error or r.crashed
    error = (source_error if deletion is None else "") or failures.first
    doc["lastError"] = error
    doc["errors"] = failures.to_list()  # the first MAX_ERRORS failed objects: object, file, status, message
    drifted, conflicted = counts["drifted"] > 0, counts["conflict"] > 0
    ready: bool | None
    if source_error and deletion is None:
        ready, message = False, source_error
        reason = r.load_error_reason if r.load_error else SOURCE_FAILED
        reconciling, stalled = False, True
    elif deletion is not None and not failures:
        ready, reason, message = False, WAITING_FOR_TERMINATION, f"deleting: {deletion.waiting}"
        reconciling, stalled = True, False
    elif waiting_for and deletion is None:
        ready, reason, message = False, "DependencyNotReady", f"waiting for {waiting_for} to be Ready"
        reconciling, stalled = True, False
    elif failures:  # a retry alone cannot fix some (a 403 needs RBAC, a refused prune a person): Stalled
        ready, reason, message = False, failures.reason, ("deleting: " if deletion else "") + failures.summary()
        reconciling, stalled = not failures.stalled, failures.stalled
    elif not r.first_sync:
        ready, reason, message = None, "Progressing", "first sync in progress"
        reconciling, stalled = True, False
    else:
        ready, reason = True, "ReconciliationSucceeded"
        message = f"applied revision {doc['lastAppliedRevision'] or '(plain directory)'}"
        if not r.spec.self_heal and drifted:
            message += f" (detect-only: {counts['drifted']} drifted)"
        reconciling, stalled = False, False
    doc["conditions"] = [
        _condition("Ready", ready, reason, message, gen),
        _condition("Reconciling", reconciling, reason if reconciling else "Idle", message if reconciling else "", gen),
        _condition("Stalled", stalled, reason if stalled else "Idle", message if stalled else "", gen),
        _condition(
            "Drifted",
            drifted,
            "DriftDetected" if drifted else "InSync",
            f"{counts['drifted']} object(s) differ from Git" if drifted else "",
            gen,
        ),
        _condition(
            "Conflicted",
            conflicted,
            "ConflictDetected" if conflicted else "NoConflict",
            f"{counts['conflict']} object(s) have fields another manager owns" if conflicted else "",
            gen,
        ),
        _condition("Suspended", False, "NotSuspended", "", gen),
    ]
    return doc


def vacant_status(generation: int, shard: int, message: str) -> dict[str, Any]:
    """The status of a GitSync whose shard no replica holds (written by a replica that will not take it):
    Stalled, for nothing progresses until an operator acts; the rest of the last status is left as it was."""
    return {
        "observedGeneration": generation,
        "shard": shard,
        "conditions": [
            {**_condition("Ready", None, "ShardUnheld", message, generation), "lastTransitionTime": _now()},
            {**_condition("Reconciling", False, "Idle", "", generation), "lastTransitionTime": _now()},
            {**_condition("Stalled", True, "ShardUnheld", message, generation), "lastTransitionTime": _now()},
        ],
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


SUSPENDED_MESSAGE = "reconciliation is suspended (spec.suspend: true); the rest of the status is from before"


def _suspended(gs: GitSync, last: dict[str, Any], handled: str, shard: int) -> dict[str, Any]:
    """The last status kept as it was (revision, counts, inventory, Ready), plus `Suspended=True`.

    As Flux does, so what is live stays visible during an incident; and a dependent of a GitSync that was
    Ready keeps running while it is suspended (only one never Ready holds its dependents back).
    """
    gen = gs.generation
    doc = {k: v for k, v in last.items() if k != "conditions"}
    doc.update(observedGeneration=gen, shard=shard)
    if handled:
        doc["lastHandledReconcileAt"] = handled
    kept = [
        {**c, "observedGeneration": gen}
        for c in without_times(list(last.get("conditions") or []))
        if c.get("type") in CONDITION_TYPES and c.get("type") != "Suspended"
    ]
    if not any(c.get("type") == "Ready" for c in kept):
        kept.insert(0, _condition("Ready", None, "Suspended", SUSPENDED_MESSAGE, gen))
    doc["conditions"] = [*kept, _condition("Suspended", True, "Suspended", SUSPENDED_MESSAGE, gen)]
    return doc


_UNDECLARED = re.compile(r"\.status\.(\w+): field not declared in schema")


def undeclared_status_fields(message: str) -> set[str]:
    """The top-level status fields a server-side apply was refused for because the installed CRD does not
    declare them (an older CRD than the controller: `.status.errors: field not declared in schema`)."""
    return set(_UNDECLARED.findall(message))


def with_transition_times(doc: dict[str, Any], previous: list[dict[str, Any]], now: float | None = None) -> None:
    """Keep each condition's lastTransitionTime unless its status changed (as metav1.Condition wants)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now if now is not None else time.time()))
    before = {c.get("type"): c for c in previous}
    for c in doc.get("conditions") or []:
        old = before.get(c["type"])
        c["lastTransitionTime"] = (
            (old.get("lastTransitionTime") or stamp) if old and old.get("status") == c["status"] else stamp
        )


def without_times(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conditions]


__all__ = [
    "API_VERSION",
    "CONDITION_TYPES",
    "DELETE",
    "DELETION_POLICIES",
    "FINALIZER",
    "GROUP",
    "KIND",
    "MIRROR_PRUNE",
    "ORPHAN",
    "PLURAL",
    "RECONCILE_ANNOTATION",
    "VERSION",
    "WAITING_FOR_TERMINATION",
    "WAIT_FOR_TERMINATION",
    "Deletion",
    "GitSync",
    "InvalidSpec",
    "collection_path",
    "is_ready",
    "object_path",
    "parse",
    "shard_of",
    "status_of",
    "vacant_status",
    "with_transition_times",
    "without_times",
]
