"""Is an object ready? The kstatus rules (sigs.k8s.io/cli-utils/pkg/kstatus), on plain dicts.

The same rules `kubectl`-adjacent tooling (Flux, kpt, cli-utils) use, so `--wait` agrees with
what people see elsewhere. Order: deletionTimestamp -> Terminating; observedGeneration !=
generation -> InProgress; `Reconciling=True` -> InProgress, `Stalled=True` -> Failed; then the
kind's own rules; then a generic `Ready` condition; else Current.

One deliberate departure: kstatus calls a Pod in phase `Failed` Current (it has finished); a
reconciler waiting for health must say it failed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gitops_sync.resource import Manifest, split_api_version

__all__ = ["Health", "Status", "assess"]


class Status(enum.Enum):
    CURRENT = "Current"
    IN_PROGRESS = "InProgress"
    FAILED = "Failed"
    TERMINATING = "Terminating"
    NOT_FOUND = "NotFound"
    UNKNOWN = "Unknown"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Health:
    status: Status
    message: str

    @property
    def ready(self) -> bool:
        return self.status is Status.CURRENT


def _current(message: str) -> Health:
    return Health(Status.CURRENT, message)


def _progress(message: str) -> Health:
    return Health(Status.IN_PROGRESS, message)


def _failed(message: str) -> Health:
    return Health(Status.FAILED, message)


# --- field access ----------------------------------------------------------------------------------


def _field(obj: Mapping[str, Any], dotted: str) -> Any:
    node: Any = obj
    for name in dotted.split("."):
        if not isinstance(node, Mapping) or name not in node:
            return None
        node = node[name]
    return node


def _int(obj: Mapping[str, Any], dotted: str, default: int) -> int:
    value = _field(obj, dotted)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _str(obj: Mapping[str, Any], dotted: str, default: str = "") -> str:
    value = _field(obj, dotted)
    return value if isinstance(value, str) else default


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = _field(obj, "status.conditions")
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == kind), None)


def _why(condition: Mapping[str, Any], fallback: str) -> str:
    reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
    return ": ".join(p for p in (reason, message) if p) or fallback


# --- kinds -----------------------------------------------------------------------------------------


def _deployment(obj: Manifest) -> Health:
    # Without progressDeadlineSeconds the controller never sets Progressing; treat it as progressing.
    progressing = _field(obj, "spec.progressDeadlineSeconds") is None
    available = False
    for cond in _conditions(obj):
        if cond.get("type") == "Progressing":
            if cond.get("reason") == "ProgressDeadlineExceeded":
                return _failed(_why(cond, "progress deadline exceeded"))
            if cond.get("status") == "True" and cond.get("reason") == "NewReplicaSetAvailable":
                progressing = True
        elif cond.get("type") == "Available" and cond.get("status") == "True":
            available = True
    spec = _int(obj, "spec.replicas", 1)
    replicas = _int(obj, "status.replicas", 0)
    updated = _int(obj, "status.updatedReplicas", 0)
    ready = _int(obj, "status.readyReplicas", 0)
    avail = _int(obj, "status.availableReplicas", 0)
    if spec > replicas:
        return _progress(f"{replicas}/{spec} replicas created")
    if spec > updated:
        return _progress(f"{updated}/{spec} replicas updated")
    if replicas > spec:
        return _progress(f"{replicas - spec} old replicas pending termination")
    if updated > avail:
        return _progress(f"{avail}/{updated} updated replicas available")
    if spec > ready:
        return _progress(f"{ready}/{spec} replicas ready")
    if not progressing:
        return _progress("new ReplicaSet not available yet")
    if not available:
        return _progress("Deployment not Available")
    return _current(f"{ready}/{spec} replicas ready")


# The status counts that must reach the desired number, in the order a rollout fills them.
_REPLICASET_COUNTS = (
    ("fullyLabeledReplicas", "labelled"),
    ("availableReplicas", "available"),
    ("readyReplicas", "ready"),
)
_DAEMONSET_COUNTS = (
    ("currentNumberScheduled", "scheduled"),
    ("updatedNumberScheduled", "updated"),
    ("numberAvailable", "available"),
    ("numberReady", "ready"),
)


def _first_short(obj: Manifest, want: int, noun: str, counts: tuple[tuple[str, str], ...]) -> Health | None:
    """In progress at the first status count below `want` (`2/3 replicas available`); None when none is."""
    for field, what in counts:
        have = _int(obj, f"status.{field}", 0)
        if want > have:
            return _progress(f"{have}/{want} {noun} {what}")
    return None


def _replicaset(obj: Manifest) -> Health:
    failure = _condition(obj, "ReplicaFailure")
    if failure is not None and failure.get("status") == "True":
        return _progress(_why(failure, "replica failure, check the Pods"))
    spec = _int(obj, "spec.replicas", 1)
    short = _first_short(obj, spec, "replicas", _REPLICASET_COUNTS)
    if short is not None:
        return short
    replicas = _int(obj, "status.replicas", 0)
    if replicas > spec:
        return _progress(f"{replicas - spec} extra replicas pending termination")
    return _current(f"{spec}/{spec} replicas ready")


def _statefulset(obj: Manifest) -> Health:
    if _str(obj, "spec.updateStrategy.type") == "OnDelete":
        return _current("OnDelete update strategy: Pods are replaced by hand")
    spec = _int(obj, "spec.replicas", 1)
    replicas = _int(obj, "status.replicas", 0)
    ready = _int(obj, "status.readyReplicas", 0)
    current = _int(obj, "status.currentReplicas", 0)
    updated = _int(obj, "status.updatedReplicas", 0)
    partition = _int(obj, "spec.updateStrategy.rollingUpdate.partition", -1)
    if spec > replicas:
        return _progress(f"{replicas}/{spec} replicas created")
    if spec > ready:
        return _progress(f"{ready}/{spec} replicas ready")
    if replicas > spec:
        return _progress(f"{replicas - spec} extra replicas pending termination")
    if partition != -1:
        if updated < spec - partition:
            return _progress(f"{updated}/{spec - partition} replicas updated above partition {partition}")
        return _current(f"partitioned rollout complete: {updated} replicas updated")
    if spec > current:
        return _progress(f"{current}/{spec} replicas at the current revision")
    if _str(obj, "status.currentRevision") != _str(obj, "status.updateRevision"):
        return _progress("waiting for the update revision to become current")
    return _current(f"{ready}/{spec} replicas ready")


def _daemonset(obj: Manifest) -> Health:
    if _field(obj, "metadata.generation") is None:
        return _progress("metadata.generation not set yet")
    if _field(obj, "status.observedGeneration") is None:
        return _progress("status.observedGeneration not set yet")
    desired = _int(obj, "status.desiredNumberScheduled", -1)
    if desired == -1:
        return _progress("status.desiredNumberScheduled not set yet")
    short = _first_short(obj, desired, "Pods", _DAEMONSET_COUNTS)
    return short if short is not None else _current(f"{desired}/{desired} Pods ready")


def _job(obj: Manifest) -> Health:
    parallelism = _int(obj, "spec.parallelism", 1)
    completions = _int(obj, "spec.completions", parallelism)
    succeeded = _int(obj, "status.succeeded", 0)
    for cond in _conditions(obj):
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return _current(f"Job completed: {succeeded}/{completions} succeeded")
        if cond.get("type") == "Failed":
            failed = _int(obj, "status.failed", 0)
            return _failed(f"Job failed ({failed} failed Pods): {_why(cond, 'failed')}")
        if cond.get("type") == "Suspended" and _field(obj, "spec.suspend") is True:
            return _current("Job is suspended")
    if not _str(obj, "status.startTime"):
        return _progress("Job not started")
    active = _int(obj, "status.active", 0)
    return _current(f"Job running: {succeeded}/{completions} succeeded, {active} active")


def _pvc(obj: Manifest) -> Health:
    phase = _str(obj, "status.phase", "unknown")
    if phase != "Bound":
        return _progress(f"PVC not Bound (phase {phase})")
    return _current("PVC is Bound")


def _pod(obj: Manifest) -> Health:
    phase = _str(obj, "status.phase")
    if phase == "Succeeded":
        return _current("Pod completed successfully")
    if phase == "Failed":
        reason = _str(obj, "status.reason") or _str(obj, "status.message")
        return _failed("Pod failed" + (f": {reason}" if reason else ""))
    if phase == "Running":
        ready = _condition(obj, "Ready")
        if ready is not None and ready.get("status") == "True":
            return _current("Pod is Ready")
        looping = [
            str(cs.get("name"))
            for cs in _field(obj, "status.containerStatuses") or []
            if isinstance(cs, Mapping) and _str(cs, "state.waiting.reason") == "CrashLoopBackOff"
        ]
        if looping:
            return _failed(f"containers in CrashLoopBackOff: {', '.join(looping)}")
        return _progress("Pod is running but not Ready")
    if phase == "Pending":
        scheduled = _condition(obj, "PodScheduled")
        if scheduled is not None and scheduled.get("reason") == "Unschedulable":
            return _progress(_why(scheduled, "Pod not scheduled yet"))
        return _progress("Pod is Pending")
    if not phase:
        return _progress("Pod phase not reported yet")
    return Health(Status.UNKNOWN, f"unknown Pod phase {phase!r}")


def _crd(obj: Manifest) -> Health:
    for cond in _conditions(obj):
        if cond.get("type") == "NamesAccepted" and cond.get("status") == "False":
            return _failed(_why(cond, "names not accepted"))
        if cond.get("type") == "Established":
            if cond.get("status") == "False" and cond.get("reason") != "Installing":
                return _failed(_why(cond, "not established"))
            if cond.get("status") == "True":
                return _current("CRD is Established")
    return _progress("CRD not Established yet")


def _service(obj: Manifest) -> Health:
    # kstatus waits only for a cluster IP: a LoadBalancer's external address depends on a cloud
    # controller that local clusters lack, and waiting on it would time out forever.
    if _str(obj, "spec.type", "ClusterIP") == "LoadBalancer" and not _str(obj, "spec.clusterIP"):
        return _progress("LoadBalancer Service has no cluster IP yet")
    return _current("Service is ready")


def _always(obj: Manifest) -> Health:
    return _current(f"{obj.get('kind')} is always ready")


_BY_KIND: Final[dict[tuple[str, str], Callable[[Manifest], Health]]] = {
    ("apps", "Deployment"): _deployment,
    ("extensions", "Deployment"): _deployment,
    ("apps", "ReplicaSet"): _replicaset,
    ("extensions", "ReplicaSet"): _replicaset,
    ("apps", "StatefulSet"): _statefulset,
    ("apps", "DaemonSet"): _daemonset,
    ("extensions", "DaemonSet"): _daemonset,
    ("batch", "Job"): _job,
    ("", "PersistentVolumeClaim"): _pvc,
    ("", "Pod"): _pod,
    ("", "Service"): _service,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _crd,
    ("", "ConfigMap"): _always,
    ("", "Secret"): _always,
    ("batch", "CronJob"): _always,
    ("policy", "PodDisruptionBudget"): _always,
}


# --- generic rules ---------------------------------------------------------------------------------


def _generic(obj: Manifest) -> Health | None:
    if _field(obj, "metadata.deletionTimestamp"):
        return Health(Status.TERMINATING, "scheduled for deletion")
    generation = _field(obj, "metadata.generation")
    observed = _field(obj, "status.observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and generation != observed:
        return _progress(f"generation {generation} not observed yet (observed {observed})")
    for cond in _conditions(obj):
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Reconciling":
            return _progress(_why(cond, "reconciling"))
        if cond.get("type") == "Stalled":
            return _failed(_why(cond, "stalled"))
    return None


def _ready_condition(obj: Manifest) -> Health | None:
    ready = _condition(obj, "Ready")
    if ready is None:
        return None
    if ready.get("status") == "True":
        return _current("Ready")
    if ready.get("status") in ("False", "Unknown"):
        return _progress(_why(ready, f"Ready is {ready.get('status')}"))
    return None


def assess(obj: Manifest | None) -> Health:
    """The kstatus status of `obj` (None: it does not exist) and a message saying why."""
    if obj is None:
        return Health(Status.NOT_FOUND, "not found")
    if not isinstance(obj, Mapping) or not isinstance(obj.get("kind"), str):
        return Health(Status.UNKNOWN, "not a Kubernetes object")
    generic = _generic(obj)
    if generic is not None:
        return generic
    group, _ = split_api_version(str(obj.get("apiVersion", "")))
    rule = _BY_KIND.get((group, obj["kind"]))
    if rule is not None:
        return rule(obj)
    return _ready_condition(obj) or _current("no readiness conditions: current")
