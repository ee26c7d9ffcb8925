"""Apply in stages where order matters; concurrently within a stage.

Server-side apply does not care about order between most objects, but a namespaced object needs its
Namespace and a custom resource needs its CRD Established; workloads should find their ConfigMaps,
Secrets and ServiceAccounts in place so the first rollout does not fail. Prune runs in reverse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from gitops_sync.resource import ObjectKey

T = TypeVar("T")

# Groups served by Kubernetes itself; anything else is treated as a custom resource.
_BUILTIN_SUFFIX = ".k8s.io"
_BUILTIN_GROUPS = frozenset({"", "apps", "batch", "autoscaling", "policy", "extensions", "events.k8s.io"})

_CLUSTER_FIRST = frozenset({"CustomResourceDefinition", "Namespace"})
_FOUNDATION = frozenset(
    {
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "Secret",
        "ConfigMap",
        "ResourceQuota",
        "LimitRange",
        "NetworkPolicy",
        "PriorityClass",
        "StorageClass",
        "IngressClass",
        "RuntimeClass",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
    }
)

STAGE_NAMES = ("crds-and-namespaces", "foundation", "workloads", "custom-resources")


def is_builtin_group(group: str) -> bool:
    return group in _BUILTIN_GROUPS or group.endswith(_BUILTIN_SUFFIX)


def stage_of(key: ObjectKey) -> int:
    if key.kind in _CLUSTER_FIRST and is_builtin_group(key.group):
        return 0
    if not is_builtin_group(key.group):
        return 3
    if key.kind in _FOUNDATION or key.kind.endswith("Class"):
        return 1
    return 2


def stages(items: Iterable[T], key_of: Callable[[T], ObjectKey]) -> list[list[T]]:
    """Group items into the four stages, each sorted by key for stable output."""
    buckets: list[list[T]] = [[] for _ in STAGE_NAMES]
    for item in items:
        buckets[stage_of(key_of(item))].append(item)
    for b in buckets:
        b.sort(key=key_of)
    return buckets


def prune_order(keys: Sequence[ObjectKey]) -> list[list[ObjectKey]]:
    """Reverse of apply order: custom resources first, Namespaces and CRDs last."""
    return list(reversed(stages(keys, lambda k: k)))
