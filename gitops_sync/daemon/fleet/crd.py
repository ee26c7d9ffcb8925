"""The installed GitSync CRD must declare every spec field the controller reads.

An API server prunes, silently, every field of a custom resource its CRD's structural schema does not
declare: on a create or update, and on every read from etcd after the CRD changed. A cluster whose GitSync
CRD predates `spec.kubeConfig` stores a GitSync without it, and the controller would apply that GitSync's
repository to its own cluster (and prune there) instead of the remote one the user named. No trace of the
lost field is left on the object, so the check is on the schema, against what the model reads
(`gitsync.spec_fields()`, recorded from `parse` itself, so a field added to the model is checked with no
list to update):

- `SpecSchema.check()` (the GitSync watch, before a list's GitSyncs are handled and whenever its watch
  begins again, which a CRD change forces): a top-level field the schema lacks is `CrdOutdated`, and the
  controller stops with exit 2, the message naming the CRD, the fields and the fix. Nothing was acted on.
- `SpecSchema.admit(gs)`: a field inside an object (`kubeConfig.secretRef.key`) is read only when its parent
  is set; one the schema lacks refuses that GitSync (Ready=False, reason `CRDOutdated`), nothing applied.

`x-kubernetes-preserve-unknown-fields: true` (and a map's `additionalProperties`) on the way to a field
keeps it: nothing below is pruned.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.gitsync import GitSync, InvalidSpec
from gitops_sync.errors import ApiError, ClusterError
from gitops_sync.resource import Manifest

CRD_NAME = f"{gitsync.PLURAL}.{gitsync.GROUP}"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
FIX = (
    "apply this version's CRD: kubectl apply -f deploy/kubernetes/crd/gitsyncs.gitops-sync.io.yaml "
    "(or kubectl apply -k deploy/kubernetes/fleet; the chart: helm upgrade with crds.install=true)"
)


class CrdOutdated(ClusterError):
    """The installed GitSync CRD would prune spec fields this controller reads: it must not start (exit 2)."""


class FieldsPruned(InvalidSpec):
    """One GitSync reads a field (inside an object) the installed CRD's schema lacks."""

    reason = "CRDOutdated"


def _parts(path: str) -> list[str]:
    out: list[str] = []
    for name in path.split("."):
        out.extend([name[:-2], "[]"] if name.endswith("[]") else [name])
    return out


def _declares(node: dict[str, Any], parts: list[str]) -> bool:
    """Whether a structural schema `node` keeps the field at `parts` (not pruned)."""
    for part in parts:
        if node.get("x-kubernetes-preserve-unknown-fields") is True:
            return True
        if part == "[]":
            node = node.get("items") or {}
            continue
        props = node.get("properties") or {}
        extra = node.get("additionalProperties")
        if part in props:
            node = props[part]
        elif isinstance(extra, dict):
            node = extra
        else:
            return extra is True
    return True


def pruned_fields(crd: Manifest, fields: Iterable[str], version: str = gitsync.VERSION) -> list[str]:
    """The fields (spec paths) the CRD's schema of `version` would prune, as `spec.<path>`, sorted; every one
    when the CRD does not serve that version or has no schema."""
    schema: dict[str, Any] | None = None
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version and v.get("served", True):
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
    return sorted(
        f"spec.{f}" for f in fields if not (isinstance(schema, dict) and _declares(schema, ["spec", *_parts(f)]))
    )


def outdated_message(missing: list[str]) -> str:
    return (
        f"the installed CustomResourceDefinition {CRD_NAME} does not declare {', '.join(missing)}: the API server "
        f"drops {'them' if len(missing) > 1 else 'it'} from every GitSync, so a GitSync would silently lose "
        f"{'them' if len(missing) > 1 else 'it'} (spec.kubeConfig lost: applied and pruned on this cluster instead "
        f"of its target); {FIX}"
    )


class SpecSchema:
    """The installed GitSync CRD as last read (`check`), asked by `admit` for each GitSync."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._crd: Manifest | None = None
        self._lock = threading.Lock()

    def check(self) -> None:
        """Read the CRD; CrdOutdated when it would prune a field every GitSync is read for (or may not be
        read: the check cannot be skipped). A CRD not found is left to the GitSync list (it says so)."""
        try:
            crd = self.client.request("GET", CRD_PATH)
        except ApiError as exc:
            if exc.status == 404:
                return
            if exc.status == 403:
                raise CrdOutdated(
                    f"may not get CustomResourceDefinition {CRD_NAME} ({exc}): the controller checks that it "
                    "declares every spec field it reads; grant get on it (deploy/kubernetes/fleet/rbac.yaml)"
                ) from None
            raise
        missing = pruned_fields(crd, gitsync.spec_fields())
        if missing:
            raise CrdOutdated(outdated_message(missing))
        with self._lock:
            self._crd = crd

    def admit(self, gs: GitSync) -> None:
        """FieldsPruned when the CRD as last read lacks a field this GitSync was read for."""
        with self._lock:
            crd = self._crd
        if crd is not None:
            admit(crd, gs)


def admit(crd: Manifest, gs: GitSync) -> None:
    """FieldsPruned when `crd` lacks a field this GitSync was read for."""
    missing = pruned_fields(crd, gs.fields)
    if missing:
        raise FieldsPruned(f"GitSync {gs.ref}: {outdated_message(missing)}")


__all__ = [
    "CRD_NAME",
    "CRD_PATH",
    "CrdOutdated",
    "FieldsPruned",
    "SpecSchema",
    "admit",
    "outdated_message",
    "pruned_fields",
]
