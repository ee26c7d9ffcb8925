from __future__ import annotations

from typing import Any

import pytest

from gitops_sync.health import Health, Status, assess

C, P, F, T = Status.CURRENT, Status.IN_PROGRESS, Status.FAILED, Status.TERMINATING


def cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def obj(api_version: str, kind: str, spec: Any = None, status: Any = None, **meta: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", **meta}}
    if spec is not None:
        out["spec"] = spec
    if status is not None:
        out["status"] = status
    return out


def deploy(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    base_status: dict[str, Any] = {
        "observedGeneration": 2,
        "replicas": 3,
        "updatedReplicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "conditions": [
            cond("Available", reason="MinimumReplicasAvailable"),
            cond("Progressing", reason="NewReplicaSetAvailable"),
        ],
    }
    merged = {"replicas": 3, "progressDeadlineSeconds": 600, **(spec or {})}
    spec = {k: v for k, v in merged.items() if v is not None}  # None: leave the field out
    return obj("apps/v1", "Deployment", spec, {**base_status, **status}, generation=2)


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (deploy(), C, "3/3 replicas ready"),
        (deploy(replicas=2, updatedReplicas=2, readyReplicas=2, availableReplicas=2), P, "2/3 replicas created"),
        (deploy(updatedReplicas=1), P, "1/3 replicas updated"),
        (deploy(replicas=4), P, "1 old replicas pending termination"),
        (deploy(availableReplicas=2), P, "2/3 updated replicas available"),
        (deploy(readyReplicas=2), P, "2/3 replicas ready"),
        (deploy(conditions=[cond("Available")]), P, "new ReplicaSet not available yet"),
        (deploy(conditions=[cond("Progressing", reason="NewReplicaSetAvailable")]), P, "Deployment not Available"),
        (
            deploy(conditions=[cond("Available", "False"), cond("Progressing", reason="NewReplicaSetAvailable")]),
            P,
            "Deployment not Available",
        ),
        (
            deploy(
                conditions=[cond("Progressing", "False", "ProgressDeadlineExceeded", 'ReplicaSet "x-1" has timed out')]
            ),
            F,
            'ProgressDeadlineExceeded: ReplicaSet "x-1" has timed out',
        ),
        # no progressDeadlineSeconds: the controller never reports Progressing, so Available suffices
        (deploy({"progressDeadlineSeconds": None}, conditions=[cond("Available")]), C, "3/3 replicas ready"),
        (
            obj(
                "apps/v1",
                "Deployment",
                {"replicas": 1},
                {
                    "replicas": 1,
                    "updatedReplicas": 1,
                    "readyReplicas": 1,
                    "availableReplicas": 1,
                    "conditions": [cond("Available")],
                },
            ),
            C,
            "1/1 replicas ready",
        ),
        (obj("apps/v1", "Deployment", {}, {}), P, "0/1 replicas created"),  # spec.replicas defaults to 1
        (
            deploy({"replicas": 0}, replicas=0, updatedReplicas=0, readyReplicas=0, availableReplicas=0),
            C,
            "0/0 replicas ready",
        ),
    ],
)
def test_deployment(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


def sts(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    base = {
        "replicas": 3,
        "readyReplicas": 3,
        "currentReplicas": 3,
        "updatedReplicas": 3,
        "currentRevision": "web-1",
        "updateRevision": "web-1",
    }
    return obj("apps/v1", "StatefulSet", {"replicas": 3, **(spec or {})}, {**base, **status})


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (sts(), C, "3/3 replicas ready"),
        (
            sts({"updateStrategy": {"type": "OnDelete"}}, readyReplicas=0),
            C,
            "OnDelete update strategy: Pods are replaced by hand",
        ),
        (sts(replicas=2), P, "2/3 replicas created"),
        (sts(readyReplicas=1), P, "1/3 replicas ready"),
        (sts(replicas=4), P, "1 extra replicas pending termination"),
        (sts(currentReplicas=2), P, "2/3 replicas at the current revision"),
        (sts(updateRevision="web-2"), P, "waiting for the update revision to become current"),
        (
            sts(
                {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}},
                updatedReplicas=0,
                updateRevision="web-2",
            ),
            P,
            "0/1 replicas updated above partition 2",
        ),
        (
            sts(
                {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}},
                updatedReplicas=1,
                currentReplicas=2,
                updateRevision="web-2",
            ),
            C,
            "partitioned rollout complete: 1 replicas updated",
        ),
    ],
)
def test_statefulset(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


def ds(**status: Any) -> dict[str, Any]:
    base = {
        "observedGeneration": 1,
        "desiredNumberScheduled": 2,
        "currentNumberScheduled": 2,
        "updatedNumberScheduled": 2,
        "numberAvailable": 2,
        "numberReady": 2,
    }
    return obj("apps/v1", "DaemonSet", {}, {**base, **status}, generation=1)


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (ds(), C, "2/2 Pods ready"),
        (ds(currentNumberScheduled=1), P, "1/2 Pods scheduled"),
        (ds(updatedNumberScheduled=1), P, "1/2 Pods updated"),
        (ds(numberAvailable=0), P, "0/2 Pods available"),
        (ds(numberReady=1), P, "1/2 Pods ready"),
        (ds(desiredNumberScheduled=None), P, "status.desiredNumberScheduled not set yet"),
        (obj("apps/v1", "DaemonSet", {}, {"observedGeneration": 1}), P, "metadata.generation not set yet"),
        (obj("apps/v1", "DaemonSet", {}, {}, generation=1), P, "status.observedGeneration not set yet"),
    ],
)
def test_daemonset(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


def job(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return obj("batch/v1", "Job", {"completions": 2, **(spec or {})}, status)


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (job(succeeded=2, conditions=[cond("Complete")]), C, "Job completed: 2/2 succeeded"),
        (
            job(
                failed=3,
                conditions=[
                    cond("Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit")
                ],
            ),
            F,
            "Job failed (3 failed Pods): BackoffLimitExceeded: Job has reached the specified backoff limit",
        ),
        (job(), P, "Job not started"),
        (job(startTime="2024-05-01T10:00:00Z", active=1, succeeded=1), C, "Job running: 1/2 succeeded, 1 active"),
        (job({"suspend": True}, conditions=[cond("Suspended")]), C, "Job is suspended"),
        (job(conditions=[cond("Suspended")]), P, "Job not started"),  # suspended condition left over after resume
        (job(conditions=[cond("Complete", "False")]), P, "Job not started"),
    ],
)
def test_job(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (obj("v1", "PersistentVolumeClaim", {}, {"phase": "Bound"}), C, "PVC is Bound"),
        (obj("v1", "PersistentVolumeClaim", {}, {"phase": "Pending"}), P, "PVC not Bound (phase Pending)"),
        (obj("v1", "PersistentVolumeClaim", {}), P, "PVC not Bound (phase unknown)"),
    ],
)
def test_pvc(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


def crd(*conditions: dict[str, str]) -> dict[str, Any]:
    return obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", {}, {"conditions": list(conditions)})


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (
            crd(cond("NamesAccepted", reason="NoConflicts"), cond("Established", reason="InitialNamesAccepted")),
            C,
            "CRD is Established",
        ),
        (
            crd(cond("NamesAccepted", "False", "ListKindConflict", '"WidgetList" is already in use')),
            F,
            'ListKindConflict: "WidgetList" is already in use',
        ),
        (crd(cond("Established", "False", "Installing")), P, "CRD not Established yet"),
        (crd(cond("Established", "False", "Broken", "no")), F, "Broken: no"),
        (crd(), P, "CRD not Established yet"),
    ],
)
def test_crd(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


def pod(phase: str | None, *conditions: dict[str, str], **status: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"conditions": list(conditions), **status}
    if phase is not None:
        st["phase"] = phase
    return obj("v1", "Pod", {}, st)


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (pod("Running", cond("Ready")), C, "Pod is Ready"),
        (pod("Running", cond("Ready", "False")), P, "Pod is running but not Ready"),
        (
            pod(
                "Running",
                containerStatuses=[
                    {"name": "api", "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                    {"name": "ok", "state": {"running": {}}},
                ],
            ),
            F,
            "containers in CrashLoopBackOff: api",
        ),
        (pod("Succeeded"), C, "Pod completed successfully"),
        (pod("Failed", reason="Evicted"), F, "Pod failed: Evicted"),
        (pod("Failed"), F, "Pod failed"),
        (pod("Pending"), P, "Pod is Pending"),
        (
            pod("Pending", cond("PodScheduled", "False", "Unschedulable", "0/1 nodes are available")),
            P,
            "Unschedulable: 0/1 nodes are available",
        ),
        (pod(None), P, "Pod phase not reported yet"),
        (pod("Weird"), Status.UNKNOWN, "unknown Pod phase 'Weird'"),
    ],
)
def test_pod(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (obj("v1", "Service", {"type": "ClusterIP", "clusterIP": "10.0.0.1"}), C, "Service is ready"),
        (obj("v1", "Service", {"type": "LoadBalancer"}), P, "LoadBalancer Service has no cluster IP yet"),
        (obj("v1", "Service", {"type": "LoadBalancer", "clusterIP": "10.0.0.2"}), C, "Service is ready"),
        (obj("v1", "ConfigMap"), C, "ConfigMap is always ready"),
        (obj("v1", "Secret"), C, "Secret is always ready"),
        (obj("v1", "Namespace", {}, {"phase": "Active"}), C, "no readiness conditions: current"),
        (obj("example.com/v1", "Widget", {}, {"conditions": [cond("Ready")]}), C, "Ready"),
        (
            obj("example.com/v1", "Widget", {}, {"conditions": [cond("Ready", "False", "Waiting", "db")]}),
            P,
            "Waiting: db",
        ),
        (obj("example.com/v1", "Widget", {}, {"conditions": [cond("Ready", "Unknown")]}), P, "Ready is Unknown"),
        (
            obj("example.com/v1", "Widget", {}, {"conditions": [cond("Ready", "Bogus")]}),
            C,
            "no readiness conditions: current",
        ),
    ],
)
def test_other_kinds(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


@pytest.mark.parametrize(
    ("o", "status", "message"),
    [
        (
            deploy() | {"metadata": {"name": "x", "generation": 2, "deletionTimestamp": "2024-05-01T10:00:00Z"}},
            T,
            "scheduled for deletion",
        ),
        (deploy(observedGeneration=1), P, "generation 2 not observed yet (observed 1)"),
        (deploy(conditions=[cond("Reconciling", reason="Rolling", message="new pods")]), P, "Rolling: new pods"),
        (deploy(conditions=[cond("Stalled", reason="Quota", message="exceeded")]), F, "Quota: exceeded"),
        (
            deploy(
                conditions=[
                    cond("Stalled", "False"),
                    cond("Available"),
                    cond("Progressing", reason="NewReplicaSetAvailable"),
                ]
            ),
            C,
            "3/3 replicas ready",
        ),
        # generic rules come before kind rules: a Ready CR being deleted is Terminating
        (
            obj("example.com/v1", "Widget", {}, {"conditions": [cond("Ready")]}, deletionTimestamp="t"),
            T,
            "scheduled for deletion",
        ),
        (
            obj("example.com/v1", "Widget", {}, {"observedGeneration": 1, "conditions": [cond("Ready")]}, generation=2),
            P,
            "generation 2 not observed yet (observed 1)",
        ),
        (obj("example.com/v1", "Widget", {}, {"conditions": [cond("Ready"), cond("Stalled")]}), F, "stalled"),
    ],
)
def test_generic_rules_in_order(o: dict[str, Any], status: Status, message: str) -> None:
    assert assess(o) == Health(status, message)


def test_not_found_unknown_and_helpers() -> None:
    assert assess(None) == Health(Status.NOT_FOUND, "not found")
    assert assess({"metadata": {}}).status is Status.UNKNOWN
    assert assess(deploy()).ready
    assert not assess(None).ready
    assert str(Status.IN_PROGRESS) == "InProgress"


def test_replicaset() -> None:
    def rs(**status: Any) -> dict[str, Any]:
        base = {"replicas": 2, "fullyLabeledReplicas": 2, "availableReplicas": 2, "readyReplicas": 2}
        return obj("apps/v1", "ReplicaSet", {"replicas": 2}, {**base, **status})

    assert assess(rs()) == Health(C, "2/2 replicas ready")
    assert assess(rs(fullyLabeledReplicas=1)) == Health(P, "1/2 replicas labelled")
    assert assess(rs(availableReplicas=1)) == Health(P, "1/2 replicas available")
    assert assess(rs(readyReplicas=0)) == Health(P, "0/2 replicas ready")
    assert assess(rs(replicas=3)) == Health(P, "1 extra replicas pending termination")
    failure = cond("ReplicaFailure", reason="FailedCreate", message="quota")
    assert assess(rs(conditions=[failure])) == Health(P, "FailedCreate: quota")
