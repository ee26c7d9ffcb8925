"""The identity of a Kubernetes object and the desired object with where it came from.

Objects are plain dicts end to end (decoded JSON): the typed client models are ~10x slower to
decode and hide fields the API server added after the client was generated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Manifest = dict[str, Any]


def split_api_version(api_version: str) -> tuple[str, str]:
    """`apps/v1` -> (`apps`, `v1`); the core group `v1` -> (``, `v1`)."""
    group, _, version = api_version.rpartition("/")
    return group, version


@dataclass(frozen=True, order=True, slots=True)
class ObjectKey:
    """Group, kind, namespace, name: what makes two manifests the same object (version excluded).

    Slotted: the daemon holds several keys per managed object (its watch cache, history, reporter, queue
    and entries each keep the key they were given), ~150 bytes less each without an instance dict."""

    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Manifest) -> ObjectKey:
        meta = obj.get("metadata") or {}
        group, _ = split_api_version(str(obj.get("apiVersion", "")))
        return cls(group, str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", "")))

    @property
    def group_kind(self) -> str:
        """`Deployment.apps`, `ConfigMap` — the ApplySet spelling."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.group_kind}/{where}{self.name}"


def is_secret(key_or_obj: ObjectKey | Mapping[str, Any] | str) -> bool:
    """A core-group Secret (a `Secret` kind of some other API group is not one): its values are masked.

    Takes an object's key, the object itself, or a bare kind (assumed core)."""
    if isinstance(key_or_obj, ObjectKey):
        return key_or_obj.kind == "Secret" and not key_or_obj.group
    if isinstance(key_or_obj, Mapping):
        group, _ = split_api_version(str(key_or_obj.get("apiVersion", "")))
        return key_or_obj.get("kind") == "Secret" and not group
    return key_or_obj == "Secret"


def resource_version(obj: Any) -> str:
    """`metadata.resourceVersion` as a string; "" for an object without one (or no object)."""
    if not isinstance(obj, dict):
        return ""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass
class DesiredObject:
    """One object rendered from the source, with the file it came from for error messages."""

    manifest: Manifest
    origin: str = ""  # e.g. `apps/web/deploy.yaml#2` or `charts/api (helm)`
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> ObjectKey:
        return ObjectKey.of(self.manifest)

    @property
    def api_version(self) -> str:
        return str(self.manifest.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind", ""))
