"""The GitSync status subresource: written once per pass, only when it changed, only by the shard's holder.

A worker calls `write` after a source's pass (or after deciding there is none: a dependency not Ready, a
refused GitSync); the GitSync watch thread after a suspend. The document is status.py's, from the
source's snapshot; server-side apply, fenced on the shard. `vacant` is the one write for shards this
replica does NOT hold: a merge patch guarded by the resourceVersion it saw. The per-GitSync metrics are
exported from the same document (only the shard's holder exports).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gitops_sync.cluster.client import APPLY_PATCH, Client
from gitops_sync.daemon.fleet import gitsync, status
from gitops_sync.daemon.fleet.registry import Registry
from gitops_sync.daemon.fleet.sources import Source
from gitops_sync.daemon.runtime.metrics import Metrics
from gitops_sync.errors import ApiError, ClusterError
from gitops_sync.log import get_logger
from gitops_sync.source import mask_url

log = get_logger("gitops_sync.daemon")


def status_doc(src: Source, last: dict[str, Any], handled: str = "") -> dict[str, Any]:
    """The status of one source as the controller knows it: what is written, and what /status shows."""
    doc = status.status_of(
        src.gs,
        src.reconciler.snapshot() if src.reconciler is not None else None,
        waiting_for=src.waiting_for,
        invalid=src.invalid,
        invalid_reason=src.reason,
        handled=handled,
        shard=src.shard,
        last=last,
        deletion=src.deletion,
    )
    return status.with_cluster(doc, src.cluster, src.unreachable)


class StatusWriter:
    """Threads: workers (after a pass), the GitSync watch (a suspend), the shard thread (vacancy). A
    source's `written`/`conditions`/`handled` are written here by whichever of those runs it: never two at
    once for one source (its pass, or the watch while the scheduler does not run it)."""

    def __init__(
        self,
        client: Client,
        registry: Registry,
        metrics: Metrics,
        *,
        field_manager: str,
        fence: Callable[[int], Callable[[], bool]],
    ) -> None:
        self.client = client
        self.registry = registry
        self.metrics = metrics
        self.field_manager = field_manager
        self.fence = fence  # of a shard: held, its renewal not overdue, not abandoning

    def write(self, ref: str, *, passed: bool = False) -> bool:
        """Server-side apply of the status subresource, only when it differs from what was written; True
        when it was sent."""
        src = self.registry.get(ref)
        if src is None or not self.fence(src.shard)():
            return False
        gs = src.gs
        # A pass that ran after a `gitops-sync reconcile` request answers it; so does a source held back by
        # a dependency (its status says which one: `reconcile` tells the user at once instead of timing out).
        answered = passed or bool(src.waiting_for) or src.reconciler is None
        handled = gs.reconcile_requested if answered else src.handled
        last = self.registry.last_status(ref)
        doc = status_doc(src, last, handled)
        self.export(ref, src, doc)
        compare = {**doc, "conditions": gitsync.without_times(doc["conditions"])}
        if compare == src.written:
            return False
        gitsync.with_transition_times(doc, src.conditions or list(last.get("conditions") or []))
        try:
            self._apply(src, doc)
        except ClusterError as exc:
            log.warning("cannot write GitSync status", gitsync=ref, error=mask_url(str(exc)))
            return False
        src.written, src.conditions, src.handled = compare, doc["conditions"], handled
        return True

    def _apply(self, src: Source, doc: dict[str, Any]) -> None:
        gs = src.gs
        body = {
            "apiVersion": gitsync.API_VERSION,
            "kind": gitsync.KIND,
            "metadata": {"name": gs.name, "namespace": gs.namespace},
            "status": doc,
        }
        path = gitsync.object_path(gs.namespace, gs.name, "status")
        query: dict[str, str | int | bool | None] = {"fieldManager": self.field_manager, "force": True}
        fence = self.fence(src.shard)
        try:
            self.client.request("PATCH", path, body=body, query=query, content_type=APPLY_PATCH, fence=fence)
        except ApiError as exc:
            unknown = status.undeclared_status_fields(str(exc))
            if not unknown:
                raise
            # The CRD installed is older than this controller: say so, and write what it declares.
            log.warning(
                "the GitSync CRD lacks status fields this controller writes; apply deploy/kubernetes/crd",
                gitsync=gs.ref,
                fields=sorted(unknown),
            )
            body["status"] = {k: v for k, v in doc.items() if k not in unknown}
            self.client.request("PATCH", path, body=body, query=query, content_type=APPLY_PATCH, fence=fence)

    def export(self, ref: str, src: Source, doc: dict[str, Any]) -> None:
        """The per-GitSync metrics, from the status just computed (only the shard's holder exports)."""
        snap = src.reconciler.snapshot() if src.reconciler is not None else None
        self.metrics.set_source(
            ref,
            list(snap.entries) if snap else [],
            applied=snap is not None and snap.self_heal,
            forcing=snap is not None and snap.forcing,
            revision=str(doc.get("lastAppliedRevision") or ""),
            healthy=snap is not None and snap.healthy,
            ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in doc.get("conditions") or []),
        )
        self.metrics.set_source_cluster(ref, src.cluster, reachable=not src.unreachable)

    def vacant(self, shard: int, message: str) -> None:
        """Say so in the status of every GitSync of a shard nobody holds, once. A merge patch guarded by the
        resourceVersion this replica saw: a replica that took the shard and wrote since wins (409 here).

        Deliberately not fenced: it is written for shards this replica does NOT hold, so their Lease cannot
        gate it; the resourceVersion precondition is what keeps it from overwriting the status of a holder
        that has written since."""
        for ref in self.registry.refs(shard):
            obj = self.registry.object(ref) or {}
            meta, last = obj.get("metadata") or {}, obj.get("status") or {}
            ready: dict[str, Any] = next((c for c in last.get("conditions") or [] if c.get("type") == "Ready"), {})
            if not meta.get("resourceVersion") or ready.get("message") == message:
                continue
            ns, name = ref.split("/", 1)
            body = {
                "metadata": {"resourceVersion": meta["resourceVersion"]},
                "status": status.vacant_status(int(meta.get("generation") or 0), shard, message),
            }
            try:
                self.client.request(
                    "PATCH",
                    gitsync.object_path(ns, name, "status"),
                    body=body,
                    query={"fieldManager": self.field_manager},
                    content_type="application/merge-patch+json",
                )
            except ClusterError as exc:  # 409: changed meanwhile (its holder wrote); looked at again next round
                log.debug("shard vacancy not written", gitsync=ref, error=str(exc))


__all__ = ["StatusWriter", "status_doc"]
