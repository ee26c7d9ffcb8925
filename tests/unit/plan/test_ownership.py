from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from gitops_sync.plan.fieldpath import parse
from gitops_sync.plan.ownership import (
    Conflict,
    ManagedFieldsEntry,
    managed_fields,
    owners,
    owners_among,
    owners_excluding,
    parse_conflicts,
)

# Helm and kubectl sharing a Deployment, as the API server records it: `helm install` (Helm 3, Update), our
# apply, `kubectl scale` (Update through the scale subresource), the controller writing status,
# and a `kubectl patch` adding a finalizer.
LIVE: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {
        "name": "minha-api",
        "namespace": "default",
        "generation": 3,
        "resourceVersion": "48211",
        "uid": "0c5f1a7e-5d1c-4f83-9d2e-1f0b8c3a9e11",
        "labels": {"app": "minha-api", "app.kubernetes.io/name": "minha-api", "app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "minha-api", "deployment.kubernetes.io/revision": "1"},
        "finalizers": ["example.com/guard"],
        "managedFields": [
            {
                "manager": "helm",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "time": "2024-05-01T10:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:annotations": {".": {}, "f:meta.helm.sh/release-name": {}},
                        "f:labels": {
                            ".": {},
                            "f:app": {},
                            "f:app.kubernetes.io/managed-by": {},
                            "f:app.kubernetes.io/name": {},
                        },
                    },
                    "f:spec": {
                        "f:progressDeadlineSeconds": {},
                        "f:revisionHistoryLimit": {},
                        "f:selector": {},
                        "f:strategy": {
                            "f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}},
                            "f:type": {},
                        },
                        "f:template": {
                            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                            "f:spec": {
                                "f:containers": {
                                    'k:{"name":"api"}': {
                                        ".": {},
                                        "f:args": {},
                                        "f:image": {},
                                        "f:imagePullPolicy": {},
                                        "f:name": {},
                                        "f:ports": {
                                            ".": {},
                                            'k:{"containerPort":8080,"protocol":"TCP"}': {
                                                ".": {},
                                                "f:containerPort": {},
                                                "f:name": {},
                                                "f:protocol": {},
                                            },
                                        },
                                        "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}},
                                        "f:terminationMessagePath": {},
                                        "f:terminationMessagePolicy": {},
                                    }
                                },
                                "f:dnsPolicy": {},
                                "f:restartPolicy": {},
                                "f:schedulerName": {},
                                "f:securityContext": {},
                                "f:terminationGracePeriodSeconds": {},
                            },
                        },
                    },
                },
            },
            {
                "manager": "gitops-sync",
                "operation": "Apply",
                "apiVersion": "apps/v1",
                "time": "2024-05-01T10:05:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}, "f:app.kubernetes.io/name": {}}},
                    "f:spec": {
                        "f:selector": {},
                        "f:template": {
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {
                                "f:containers": {
                                    'k:{"name":"api"}': {
                                        ".": {},
                                        "f:image": {},
                                        "f:name": {},
                                        "f:ports": {
                                            'k:{"containerPort":8080,"protocol":"TCP"}': {
                                                ".": {},
                                                "f:containerPort": {},
                                            }
                                        },
                                    }
                                }
                            },
                        },
                    },
                },
            },
            {
                "manager": "kubectl",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "time": "2024-05-01T10:10:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}},
                "subresource": "scale",
            },
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "time": "2024-05-01T10:10:05Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}},
                    "f:status": {
                        "f:availableReplicas": {},
                        "f:conditions": {
                            ".": {},
                            'k:{"type":"Available"}': {
                                ".": {},
                                "f:lastTransitionTime": {},
                                "f:lastUpdateTime": {},
                                "f:message": {},
                                "f:reason": {},
                                "f:status": {},
                                "f:type": {},
                            },
                        },
                        "f:observedGeneration": {},
                        "f:readyReplicas": {},
                        "f:replicas": {},
                        "f:updatedReplicas": {},
                    },
                },
                "subresource": "status",
            },
            {
                "manager": "kubectl-patch",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "time": "2024-05-01T10:12:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, 'v:"example.com/guard"': {}}}},
            },
        ],
    },
    "spec": {
        "replicas": 10,
        "selector": {"matchLabels": {"app": "minha-api"}},
        "template": {
            "metadata": {"labels": {"app": "minha-api"}},
            "spec": {
                "containers": [
                    {
                        "name": "api",
                        "image": "ghcr.io/example/minha-api:1.4.2",
                        "args": ["--port", "8080"],
                        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                    }
                ]
            },
        },
    },
    "status": {"replicas": 10, "readyReplicas": 10},
}

SCALE_CONFLICT_409 = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": (
        'Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" using apps/v1: .spec.replicas'
    ),
    "reason": "Conflict",
    "details": {
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kubectl" with subresource "scale" using apps/v1',
                "field": ".spec.replicas",
            }
        ]
    },
    "code": 409,
}

MULTI_CONFLICT_409 = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": (
        'Apply failed with 3 conflicts: conflicts with "helm" using apps/v1:\n'
        '- .spec.template.spec.containers[name="api"].image\n'
        "- .metadata.labels.app.kubernetes.io/managed-by\n"
        'conflicts with "kubectl" with subresource "scale" using apps/v1:\n- .spec.replicas'
    ),
    "reason": "Conflict",
    "details": {
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "helm" using apps/v1',
                "field": '.spec.template.spec.containers[name="api"].image',
            },
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "helm" using apps/v1',
                "field": ".metadata.labels.app.kubernetes.io/managed-by",
            },
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kubectl" with subresource "scale" using apps/v1',
                "field": ".spec.replicas",
            },
        ]
    },
    "code": 409,
}

# Another server-side applier (Helm 4, `kubectl apply --server-side`): no `using`, no apiVersion.
APPLY_CONFLICT_409 = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'Apply failed with 1 conflict: conflict with "helm": .spec.replicas',
    "reason": "Conflict",
    "details": {
        "causes": [{"reason": "FieldManagerConflict", "message": 'conflict with "helm"', "field": ".spec.replicas"}]
    },
    "code": 409,
}

PRECONDITION_409 = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": (
        'Operation cannot be fulfilled on deployments.apps "minha-api": the object has been modified; '
        "please apply your changes to the latest version and try again"
    ),
    "reason": "Conflict",
    "details": {"name": "minha-api", "group": "apps", "kind": "deployments"},
    "code": 409,
}


def entry(manager: str) -> ManagedFieldsEntry:
    return next(e for e in managed_fields(LIVE) if e.manager == manager)


def test_managed_fields_entries() -> None:
    entries = managed_fields(LIVE)
    assert [(e.manager, e.operation, e.subresource) for e in entries] == [
        ("helm", "Update", ""),
        ("gitops-sync", "Apply", ""),
        ("kubectl", "Update", "scale"),
        ("kube-controller-manager", "Update", "status"),
        ("kubectl-patch", "Update", ""),
    ]
    kubectl = entries[2]
    assert kubectl.api_version == "apps/v1"
    assert kubectl.time == "2024-05-01T10:10:00Z"
    assert kubectl.fields == frozenset({parse(".spec.replicas")})
    assert kubectl.identity == ("kubectl", "Update", "scale")
    assert parse('.spec.template.spec.containers[name="api"]') in entries[1].fields  # the "." node
    assert managed_fields({"metadata": {}}) == []
    assert managed_fields({}) == []


def test_managed_fields_other_fields_type_owns_nothing() -> None:
    obj = {
        "metadata": {
            "managedFields": [
                {"manager": "m", "operation": "Update", "fieldsType": "FieldsV2", "fieldsV1": {"f:a": {}}}
            ]
        }
    }
    assert managed_fields(obj)[0].fields == frozenset()


def managers(found: list[ManagedFieldsEntry]) -> list[str]:
    return [e.manager for e in found]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".spec.replicas", ["kubectl"]),
        ('.spec.template.spec.containers[name="api"].image', ["helm", "gitops-sync"]),
        ('.spec.template.spec.containers[name="api"].imagePullPolicy', ["helm"]),
        ('.spec.template.spec.containers[name="api"]', ["helm", "gitops-sync"]),
        ('.spec.template.spec.containers[name="api"].ports[containerPort=8080,protocol="TCP"].name', ["helm"]),
        (
            '.spec.template.spec.containers[name="api"].ports[protocol="TCP",containerPort=8080].containerPort',
            ["helm", "gitops-sync"],
        ),
        (".metadata.labels.app.kubernetes.io/name", ["helm", "gitops-sync"]),
        (".metadata.labels.app.kubernetes.io/managed-by", ["helm"]),
        (".metadata.annotations.deployment.kubernetes.io/revision", ["kube-controller-manager"]),
        (".status.readyReplicas", ["kube-controller-manager"]),
        ('.status.conditions[type="Available"].status', ["kube-controller-manager"]),
        ('.metadata.finalizers[="example.com/guard"]', ["kubectl-patch"]),
        # inside atomic nodes: the owner of the nearest atomic ancestor
        (".spec.selector.matchLabels.app", ["helm", "gitops-sync"]),
        ('.spec.template.spec.containers[name="api"].args[1]', ["helm"]),
        ('.spec.template.spec.containers[name="api"].resources.limits.cpu', ["helm"]),
        # not owned by anyone
        (".spec.paused", []),
        ('.spec.template.spec.containers[name="api"].env', []),  # the container node is not atomic
        (".metadata.labels.other", []),
    ],
)
def test_owners(path: str, expected: list[str]) -> None:
    assert managers(owners(LIVE, path)) == expected
    assert managers(owners(LIVE, parse(path))) == expected
    assert managers(owners_among(managed_fields(LIVE), LIVE, parse(path))) == expected


def test_owners_label_is_not_an_atomic_ancestor_of_a_dotted_label() -> None:
    # `.metadata.labels.app` is owned (a string); the unowned label `app.example/x` is not inside it.
    live = json.loads(json.dumps(LIVE))
    live["metadata"]["labels"]["app.example/x"] = "y"
    assert owners(live, ".metadata.labels.app.example/x") == []
    # without an object to look at, the printed-path ambiguity cannot be settled: ancestors count
    assert managers(owners(managed_fields(live), ".spec.selector.matchLabels.app")) == ["helm", "gitops-sync"]


def test_owners_excluding_us() -> None:
    path = '.spec.template.spec.containers[name="api"].image'
    assert managers(owners_excluding(LIVE, path, manager="gitops-sync")) == ["helm"]
    assert managers(owners_excluding(LIVE, path, manager="gitops-sync", operation="Update")) == ["helm", "gitops-sync"]
    assert managers(owners_excluding(LIVE, ".spec.replicas", manager="kubectl", operation="Update")) == ["kubectl"]
    assert owners_excluding(LIVE, ".spec.replicas", manager="kubectl", operation="Update", subresource="scale") == []


def test_entry_owns_and_owns_whole() -> None:
    ours = entry("gitops-sync")
    assert ours.owns('.spec.template.spec.containers[name="api"]')
    assert not ours.owns_whole('.spec.template.spec.containers[name="api"]')  # children tracked
    assert ours.owns_whole(".spec.selector")
    assert not ours.owns(".spec.replicas")


def test_parse_conflicts_kubectl_scale() -> None:
    assert parse_conflicts(SCALE_CONFLICT_409) == [Conflict(".spec.replicas", "kubectl", "Update", "scale", "apps/v1")]
    assert parse_conflicts(json.dumps(SCALE_CONFLICT_409)) == parse_conflicts(SCALE_CONFLICT_409)


def test_parse_conflicts_several_managers() -> None:
    assert parse_conflicts(MULTI_CONFLICT_409, live=LIVE) == [
        Conflict('.spec.template.spec.containers[name="api"].image', "helm", "Update", "", "apps/v1"),
        Conflict(".metadata.labels.app.kubernetes.io/managed-by", "helm", "Update", "", "apps/v1"),
        Conflict(".spec.replicas", "kubectl", "Update", "scale", "apps/v1"),
    ]


def test_parse_conflicts_apply_manager_takes_api_version_from_live() -> None:
    assert parse_conflicts(APPLY_CONFLICT_409) == [Conflict(".spec.replicas", "helm", "Apply", "", "")]
    live = json.loads(json.dumps(LIVE))
    live["metadata"]["managedFields"][0].update(operation="Apply", apiVersion="apps/v1")
    assert parse_conflicts(APPLY_CONFLICT_409, live=live) == [
        Conflict(".spec.replicas", "helm", "Apply", "", "apps/v1")
    ]


def test_parse_conflicts_live_settles_a_manager_with_two_entries() -> None:
    # `kubectl` both applied server-side and scaled: the entry owning the field is the one in conflict.
    live = json.loads(json.dumps(LIVE))
    live["metadata"]["managedFields"].append(
        {
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:paused": {}}},
            "subresource": "scale",
        }
    )
    assert parse_conflicts(SCALE_CONFLICT_409, live=live)[0].operation == "Update"


@pytest.mark.parametrize(
    ("message", "manager", "operation", "subresource", "api_version"),
    [
        ('conflict with "kubectl" with subresource "scale" using apps/v1', "kubectl", "Update", "scale", "apps/v1"),
        ('conflict with "helm" using apps/v1', "helm", "Update", "", "apps/v1"),
        ('conflicts with "x"', "x", "Apply", "", ""),
        ('conflicts with "x":', "x", "Apply", "", ""),
        ('conflict with "helm" using apps/v1 at 2024-05-01T10:00:00Z', "helm", "Update", "", "apps/v1"),
        (
            'conflict with "kube-controller-manager" with subresource "status" using v1',
            "kube-controller-manager",
            "Update",
            "status",
            "v1",
        ),
        ('conflict with "we \\"quote\\""', 'we "quote"', "Apply", "", ""),
        ("something unexpected", "something unexpected", "", "", ""),
    ],
)
def test_parse_conflicts_message_variants(
    message: str, manager: str, operation: str, subresource: str, api_version: str
) -> None:
    body = {"code": 409, "details": {"causes": [{"reason": "FieldManagerConflict", "message": message, "field": ".a"}]}}
    assert parse_conflicts(body) == [Conflict(".a", manager, operation, subresource, api_version)]


def test_parse_conflicts_precondition_failure_is_not_a_field_conflict() -> None:
    assert parse_conflicts(PRECONDITION_409) == []
    assert parse_conflicts({"code": 409, "details": {"causes": [{"reason": "FieldValueInvalid", "field": ".a"}]}}) == []
    assert parse_conflicts({}) == []


def test_managed_fields_follow_the_object_content() -> None:
    # parsing is cached by content: a changed managedFields list must never answer from the cache
    live = json.loads(json.dumps(LIVE))
    assert managers(owners(live, ".spec.replicas")) == ["kubectl"]
    live["metadata"]["managedFields"][2]["manager"] = "kube-controller-manager"
    assert managers(owners(live, ".spec.replicas")) == ["kube-controller-manager"]


def test_managed_fields_accept_decoded_timestamps() -> None:
    # dicts made from the typed client carry datetime objects, not strings
    obj = {
        "metadata": {"managedFields": [{"manager": "m", "operation": "Update", "time": datetime.datetime(2024, 5, 1)}]}
    }
    assert managed_fields(obj)[0].time == "2024-05-01 00:00:00"
