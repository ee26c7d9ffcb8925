"""What the fleet's HTTP endpoints answer: `/status` (a row per GitSync and one single-source document
each, built from the sources' snapshots), and the field history of one object for the web page.

Runs on HTTP threads; reads the registry and each reconciler's snapshot, never a reconciler's attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.daemon.fleet.gitsync import GitSync
from gitops_sync.daemon.fleet.registry import Registry
from gitops_sync.daemon.fleet.shards import ShardSet
from gitops_sync.daemon.fleet.sources import Source
from gitops_sync.daemon.fleet.writer import status_doc
from gitops_sync.daemon.reconcile import views
from gitops_sync.daemon.reconcile.conditions import Condition
from gitops_sync.daemon.reconcile.history import FieldRecord
from gitops_sync.resource import ObjectKey
from gitops_sync.source import mask_url


class Documents:
    def __init__(
        self,
        registry: Registry,
        shards: ShardSet,
        cluster: Condition,
        *,
        identity: str,
        field_manager: str,
        ready: Callable[[], tuple[bool, str]],
        process: Callable[[], dict[str, Any]],
    ) -> None:
        self.registry = registry
        self.shards = shards
        self.cluster = cluster
        self.identity = identity
        self.field_manager = field_manager
        self.ready = ready
        self.process = process  # this replica's own block: queue, threads, watches, requests

    def rows(self) -> list[dict[str, Any]]:
        """One row per source, for /status and a web page: name, shard, ready, revision, counts, error."""
        rows = []
        unreachable = "" if self.cluster.ok else f"API server unreachable: {self.cluster.error}"
        for ref, s in self.registry.items():
            doc = status_doc(s, self.registry.last_status(ref))
            ready: dict[str, Any] = next((c for c in doc["conditions"] if c["type"] == "Ready"), {})
            if unreachable and not s.gs.suspend:  # its written status cannot change now: do not echo it
                ready = {"status": "Unknown", "reason": "ClusterUnreachable", "message": unreachable}
            rows.append(
                {
                    "name": ref,
                    "shard": s.shard,
                    "held": self.shards.can_write(s.shard),
                    "suspended": s.gs.suspend,
                    "ready": ready.get("status", "Unknown"),
                    "reason": ready.get("reason", ""),
                    "message": ready.get("message", ""),
                    "revision": doc.get("lastAppliedRevision", ""),
                    "counts": doc.get("counts", {}),
                    "lastError": doc.get("lastError", ""),
                    "cluster": s.cluster,
                }
            )
        return rows

    def source(
        self, ref: str, *, full_history: bool = False, row: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """One source as the single-source daemon's /status document (what the web page reads), with
        `daemon.gitsync` (its row of `rows`)."""
        s = self.registry.get(ref)
        if s is None:
            return None
        if row is None:
            row = next((r for r in self.rows() if r["name"] == ref), {})
        r = s.reconciler
        if r is None:
            return _refused_doc(s, row)
        snap = r.snapshot()
        doc = views.changeset_doc(snap, r.history, r.yields, self.cluster, full_history=full_history)
        doc["daemon"] = {
            **views.daemon_doc(
                snap,
                self.cluster,
                identity=self.identity,
                field_manager=self.field_manager,
                ready=row.get("ready") == "True",
                why=row.get("message", ""),
            ),
            "gitsync": row,
            "spec": _spec(s.gs),
        }
        return doc

    def status(self, *, full_history: bool = False) -> dict[str, Any]:
        """`fleet`: this replica (shards, queue, watches, a summary row per source); `sources`: one
        single-source /status document per GitSync, in the order of `fleet.sources`."""
        ready, why = self.ready()
        rows = self.rows()
        docs = [self.source(row["name"], full_history=full_history, row=row) for row in rows]
        return {
            "fleet": {
                "identity": self.identity,
                "ready": ready,
                "readyReason": why,
                **self.process(),
                "shards": self.shards.status(),
                "sources": rows,
            },
            "sources": [d for d in docs if d is not None],
        }

    def field_history(self, group: str, kind: str, namespace: str, name: str) -> dict[str, list[dict[str, Any]]]:
        """The ownership history of one object's fields, from every source that wants it: each records the
        fields its own Git sets, so an object two sources share has some fields in one history only. A
        record seen by two sources (the same write) is listed once; each field's records oldest first."""
        key = ObjectKey(group, kind, namespace, name)
        merged: dict[str, dict[tuple[str, ...], FieldRecord]] = {}
        for _ref, r in self.registry.wanting(key):
            for path, records in r.history.fields(key).items():
                seen = merged.setdefault(path, {})
                for rec in records:
                    seen.setdefault(_identity(rec), rec)
        return {
            path: [rec.to_dict() for rec in sorted(recs.values(), key=lambda x: x.observed)]
            for path, recs in sorted(merged.items())
        }


def requests_of(clients: list[Client]) -> dict[str, int]:
    return {
        "reads": sum(c.stats.reads for c in clients),
        "writes": sum(c.stats.writes for c in clients),
        "dryRuns": sum(c.stats.dry_runs for c in clients),
        "throttled": sum(c.stats.throttled for c in clients),
    }


def bytes_read_of(clients: list[Client]) -> int:
    """The bodies of every answer the clients read (watch streams aside): what listing costs in decoding."""
    return sum(c.stats.bytes_read for c in clients)


def _identity(rec: FieldRecord) -> tuple[str, ...]:
    """One write as every source's history records it (each notes its own `observed` time)."""
    return (rec.resource_version, rec.manager, rec.operation, rec.subresource, rec.time, repr(rec.value))


def _refused_doc(s: Source, row: dict[str, Any]) -> dict[str, Any]:
    return {
        "objects": [],
        "errors": [s.invalid],
        "source": s.gs.repository,
        "inventory": {"name": f"gitsync-{s.gs.name}", "namespace": s.gs.namespace},
        "daemon": {"mode": "", "ready": False, "readyReason": s.invalid, "gitsync": row, "spec": _spec(s.gs)},
    }


def _spec(gs: GitSync) -> dict[str, Any]:
    """What the web page shows of a GitSync's spec: where its objects come from and what it waits for."""
    return {
        "repository": mask_url(gs.repository),
        "revision": gs.revision or "",
        "path": gs.path or "",
        "dependsOn": [f"{ns}/{name}" for ns, name in gs.depends_on],
        "suspend": gs.suspend,
    }


__all__ = ["Documents", "bytes_read_of", "requests_of"]
