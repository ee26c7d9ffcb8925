"""Which kinds the cluster serves, under which URL, and whether they are namespaced.

Aggregated discovery (apidiscovery.k8s.io/v2) answers for every group in two requests; the legacy
per-group walk is the fallback for older servers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from gitops_sync.cluster.client import Client, object_path
from gitops_sync.errors import ApiError
from gitops_sync.resource import Manifest, split_api_version

_AGGREGATED = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
)


@dataclass(frozen=True)
class ResourceInfo:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str] = frozenset()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def base(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        return object_path(self.base, namespace if self.namespaced else None, self.plural, name)


_CRD_VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})


def served_by_crd(spec: Manifest, verbs: frozenset[str]) -> list[tuple[ResourceInfo, bool]]:
    """What a CRD's spec serves before discovery lists it: the kind at each served version (spec order),
    and whether that version is the storage one."""
    names = spec.get("names") or {}
    return [
        (
            ResourceInfo(
                group=str(spec.get("group", "")),
                version=str(v.get("name", "")),
                kind=str(names.get("kind", "")),
                plural=str(names.get("plural", "")),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                verbs=verbs,
            ),
            bool(v.get("storage")),
        )
        for v in spec.get("versions") or []
        if v.get("served", True)
    ]


class Discovery:
    """A snapshot of the server's resources; CRDs about to be applied can be added before they exist.

    The snapshot is fetched by `refresh()` (two requests with aggregated discovery), and by `ensure_loaded()`
    when none was taken yet. The engine calls `ensure_loaded()` before planning; every lookup below also
    calls it, so a lookup on a Discovery nobody loaded does network I/O once — load it first where that
    matters (the planner is meant to be free of I/O).
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._by_gvk: dict[tuple[str, str, str], ResourceInfo] = {}
        self._preferred: dict[tuple[str, str], ResourceInfo] = {}
        self._unavailable: tuple[str, ...] = ()
        self._loaded = False

    def refresh(self) -> None:
        """Fetch the server's resources now (GET /api and /apis), replacing the snapshot."""
        by_gvk: dict[tuple[str, str, str], ResourceInfo] = {}
        preferred: dict[tuple[str, str], ResourceInfo] = {}
        unavailable: list[str] = []
        for path in ("/api", "/apis"):
            doc = self._client.request("GET", path, accept=_AGGREGATED)
            if doc.get("kind") == "APIGroupDiscoveryList":
                groups = _from_aggregated(doc, unavailable)
            else:
                groups = self._legacy(path, doc, unavailable)
            for info, is_preferred in groups:
                by_gvk.setdefault((info.group, info.version, info.kind), info)
                if is_preferred:
                    preferred.setdefault((info.group, info.kind), info)
        for (group, _version, kind), info in by_gvk.items():
            preferred.setdefault((group, kind), info)
        with self._lock:
            self._by_gvk, self._preferred, self._loaded = by_gvk, preferred, True
            self._unavailable = tuple(sorted(set(unavailable)))

    def ensure_loaded(self) -> None:
        """`refresh()` unless a snapshot was taken already: the first cluster access of a pass."""
        if not self._loaded:
            self.refresh()

    def lookup(self, api_version: str, kind: str) -> ResourceInfo | None:
        """Where `kind` of `api_version` is served, None when it is not (fetches once if never loaded)."""
        self.ensure_loaded()
        group, version = split_api_version(api_version)
        return self._by_gvk.get((group, version, kind))

    def preferred(self, group: str, kind: str) -> ResourceInfo | None:
        """The version to list a group-kind with (prune works on group-kinds, not versions)."""
        self.ensure_loaded()
        return self._preferred.get((group, kind))

    def namespaced_listable(self) -> list[ResourceInfo]:
        """One version of every namespaced kind that can be listed: what a namespace can hold."""
        self.ensure_loaded()
        with self._lock:
            infos = list(self._preferred.values())
        return sorted((i for i in infos if i.namespaced and "list" in i.verbs), key=lambda i: (i.group, i.kind))

    def unavailable(self) -> tuple[str, ...]:
        """Group-versions whose kinds could not be discovered (an aggregated API whose backend does not
        answer): what they serve is unknown, so nothing may be judged empty of them (the cascade guard)."""
        self.ensure_loaded()
        return self._unavailable

    def add_crd(self, crd: Manifest) -> list[ResourceInfo]:
        """Register the kinds a CRD in the desired set will serve, so its CRs can be planned."""
        self.ensure_loaded()
        added = []
        for info, storage in served_by_crd(crd.get("spec") or {}, _CRD_VERBS):
            with self._lock:
                self._by_gvk.setdefault((info.group, info.version, info.kind), info)
                if storage:
                    self._preferred[(info.group, info.kind)] = info
                else:
                    self._preferred.setdefault((info.group, info.kind), info)
            added.append(info)
        return added

    def _legacy(self, path: str, doc: dict[str, Any], unavailable: list[str]) -> list[tuple[ResourceInfo, bool]]:
        out: list[tuple[ResourceInfo, bool]] = []
        if path == "/api":
            versions = [("", v, True) for v in doc.get("versions", [])]
        else:
            versions = [
                (g["name"], gv["version"], gv["groupVersion"] == g.get("preferredVersion", {}).get("groupVersion"))
                for g in doc.get("groups", [])
                for gv in g.get("versions", [])
            ]
        for group, version, is_preferred in versions:
            base = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                rl = self._client.request("GET", base)
            except ApiError:
                unavailable.append(f"{group}/{version}" if group else version)
                continue  # an aggregated API that is down must not break planning of everything else
            for r in rl.get("resources", []):
                if "/" in r["name"]:
                    continue
                info = ResourceInfo(
                    group, version, r["kind"], r["name"], bool(r.get("namespaced")), frozenset(r.get("verbs", []))
                )
                out.append((info, is_preferred))
        return out


def _from_aggregated(doc: dict[str, Any], unavailable: list[str]) -> list[tuple[ResourceInfo, bool]]:
    """The kinds of an aggregated discovery document; `unavailable` hears of every group-version marked
    `Stale` (its aggregated API did not answer: the kinds listed, if any, are an old copy, maybe none)."""
    out: list[tuple[ResourceInfo, bool]] = []
    for g in doc.get("items", []):
        group = (g.get("metadata") or {}).get("name", "")
        for i, v in enumerate(g.get("versions", [])):  # versions are listed in preference order
            if v.get("freshness") == "Stale":
                unavailable.append(f"{group}/{v.get('version', '')}" if group else str(v.get("version", "")))
            for r in v.get("resources", []):
                kind = (r.get("responseKind") or {}).get("kind")
                if not kind:
                    continue
                info = ResourceInfo(
                    group,
                    v["version"],
                    kind,
                    r["resource"],
                    r.get("scope") == "Namespaced",
                    frozenset(r.get("verbs", [])),
                )
                out.append((info, i == 0))
    return out
