"""Which HorizontalPodAutoscaler scales an object, told from the object's managedFields and the HPAs.

The HPA controller writes `.spec.replicas` through the `scale` subresource as `kube-controller-manager`
(operation Update). Seeing that owner is the hint; the HPA whose `scaleTargetRef` names the object is
the proof, and what a reader needs: its namespace/name and min/max. No I/O here: the daemon lists
the HPAs and hands them in; reports and the yield bookkeeping (daemon/yields.py) read the result.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gitops_sync.resource import Manifest, ObjectKey, split_api_version

HPA_MANAGER = "kube-controller-manager"
SCALE = "scale"
ADVICE = "remove spec.replicas from Git or add an ignore rule"


@dataclass(frozen=True)
class Autoscaler:
    """An HPA scaling an object: enough to name it and say what it allows."""

    namespace: str
    name: str
    min_replicas: int | None
    max_replicas: int | None

    def describe(self) -> str:
        """`HorizontalPodAutoscaler team/web (min 2, max 4)`."""
        bounds = ", ".join(
            f"{label} {value}"
            for label, value in (("min", self.min_replicas), ("max", self.max_replicas))
            if value is not None
        )
        return f"HorizontalPodAutoscaler {self.namespace}/{self.name}" + (f" ({bounds})" if bounds else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
        }


def is_autoscaler(manager: str, subresource: str) -> bool:
    """The owner the HPA controller leaves on a scaled object's `.spec.replicas`."""
    return manager == HPA_MANAGER and subresource == SCALE


def scaled_by_controller_manager(live: Manifest | None) -> bool:
    """Cheap first look (no parsing of fieldsV1): does a `kube-controller-manager` scale entry exist?"""
    entries = ((live or {}).get("metadata") or {}).get("managedFields") or []
    return any(
        is_autoscaler(str(e.get("manager", "")), str(e.get("subresource") or ""))
        and "f:replicas" in ((e.get("fieldsV1") or {}).get("f:spec") or {})
        for e in entries
    )


def find_autoscaler(key: ObjectKey, hpas: Iterable[Manifest]) -> Autoscaler | None:
    """The HPA in the object's namespace whose scaleTargetRef (group, kind, name) is the object."""
    for hpa in hpas:
        meta = hpa.get("metadata") or {}
        if str(meta.get("namespace") or "") != key.namespace:
            continue
        spec = hpa.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        group, _version = split_api_version(str(ref.get("apiVersion") or ""))
        if ref.get("kind") == key.kind and ref.get("name") == key.name and group == key.group:
            return Autoscaler(
                namespace=key.namespace,
                name=str(meta.get("name", "")),
                min_replicas=_int(spec.get("minReplicas", 1)),
                max_replicas=_int(spec.get("maxReplicas")),
            )
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
