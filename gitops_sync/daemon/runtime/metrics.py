"""Prometheus metrics of the daemon, in a registry of its own (two daemons in one test process never clash)."""

from __future__ import annotations

import threading
from collections import Counter as _Tally
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gitops_sync.plan.changeset import LIVE_CHANGED, Action, Entry

CONTENT_TYPE = CONTENT_TYPE_LATEST
# `planned`: Git changed it and the daemon does not apply (detect-only); `drifted`: the cluster changed it.
OBJECT_STATES = ("synced", "drifted", "planned", "missing", "terminating", "conflict", "error")


class Metrics:
    """Every figure the daemon exports, by who sets it: passes and objects, the process, the fleet's sources."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._pass_metrics(self.registry)
        self._process_metrics(self.registry)
        self._fleet_metrics(self.registry)
        for state in OBJECT_STATES:
            self.objects.labels(state).set(0)
        self._revision_labels: tuple[str, str] | None = None
        self._source_revisions: dict[str, str] = {}
        self._exported: set[str] = set()
        self._source_lock = threading.Lock()

    def _pass_metrics(self, r: CollectorRegistry) -> None:
        """What passes did and found: their count and duration, objects by state, drift, conflicts, fights."""
        self.passes = Counter(
            "gitops_sync_passes", "Reconcile passes by kind (full|partial) and result.", ["kind", "result"], registry=r
        )
        self.pass_duration = Histogram(
            "gitops_sync_pass_duration_seconds",
            "Duration of reconcile passes.",
            ["kind"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.objects = Gauge(
            "gitops_sync_objects", "Desired objects by state after the last pass.", ["state"], registry=r
        )
        self.drift = Counter(
            "gitops_sync_drift",
            "Objects found drifted out of band, by outcome (corrected|detected).",
            ["outcome"],
            registry=r,
        )
        self.conflicts = Counter(
            "gitops_sync_conflicts", "Objects with fields owned by another manager with a different value.", registry=r
        )
        self.fights = Counter(
            "gitops_sync_field_fights", "Field ownership changes that continue a fight between managers.", registry=r
        )
        self.yields = Counter(
            "gitops_sync_field_yields",
            "Fields Git sets that the daemon stopped correcting "
            "(left to an autoscaler or to a manager that kept taking them).",
            registry=r,
        )
        self.errors = Counter("gitops_sync_object_errors", "Objects a pass failed to plan or apply.", registry=r)

    def _process_metrics(self, r: CollectorRegistry) -> None:
        """The process: source and cluster health, threads, the revision applied, watches, queue, leadership."""
        self.source_errors = Counter(
            "gitops_sync_source_errors", "Failed fetches or renders of the source.", registry=r
        )
        self.source_ok = Gauge(
            "gitops_sync_source_healthy",
            "1 when the last fetch and render succeeded "
            "(and no pass crashed on the result); an API server outage does not count.",
            registry=r,
        )
        self.cluster_ok = Gauge(
            "gitops_sync_cluster_reachable",
            "1 while the API server answers the daemon's "
            "periodic /readyz probe (every 5 s, 2 s timeout) with a status below 500.",
            registry=r,
        )
        self.thread_restarts = Counter(
            "gitops_sync_thread_restarts",
            "Background threads (leader election, watches, triggers, probe, reconciler) restarted after they died.",
            ["thread"],
            registry=r,
        )
        self.revision = Gauge(
            "gitops_sync_last_applied_revision_info",
            "The revision last applied (value 1; the revision is a label).",
            ["revision", "source"],
            registry=r,
        )
        self.applied_at = Gauge(
            "gitops_sync_last_applied_timestamp_seconds",
            "When the last full pass completed without pass-level errors.",
            registry=r,
        )
        self.watch_restarts = Counter(
            "gitops_sync_watch_restarts",
            "Watch loop restarts by resource and reason (closed|gone|error|forbidden).",
            ["resource", "reason"],
            registry=r,
        )
        self.cache_objects = Gauge("gitops_sync_cache_objects", "Objects held by the watch cache.", registry=r)
        self.queue_depth = Gauge("gitops_sync_queue_depth", "Keys waiting in the work queue.", registry=r)
        self.leader = Gauge(
            "gitops_sync_leader",
            "1 while this replica holds the leader Lease (or runs without leader election).",
            registry=r,
        )
        self.events_dropped = Counter(
            "gitops_sync_events_dropped", "Kubernetes Events not recorded (queue full or API refused).", registry=r
        )

    def _fleet_metrics(self, r: CollectorRegistry) -> None:
        """The fleet: one series set per GitSync (`source` = namespace/name), exported by the replica that
        holds its shard, removed when the GitSync is deleted or the shard lost (bounded cardinality: 10 series
        per source: 7 states, revision, healthy, ready)."""
        self.source_objects = Gauge(
            "gitops_sync_gitsync_objects",
            "Desired objects of a GitSync by state after its last pass.",
            ["source", "state"],
            registry=r,
        )
        self.source_revision = Gauge(
            "gitops_sync_gitsync_last_applied_revision_info",
            "The revision a GitSync last applied cleanly (value 1; the revision is a label).",
            ["source", "revision"],
            registry=r,
        )
        self.source_healthy = Gauge(
            "gitops_sync_gitsync_source_healthy",
            "1 when a GitSync's last fetch and render succeeded.",
            ["source"],
            registry=r,
        )
        self.source_ready = Gauge(
            "gitops_sync_gitsync_ready", "1 while a GitSync's Ready condition is True.", ["source"], registry=r
        )
        self.source_cluster = Gauge(
            "gitops_sync_gitsync_cluster_reachable",
            "1 while a GitSync's target cluster answered its last turn (`cluster`: its API server URL and "
            'kube-system UID; "" = the controller\'s own cluster).',
            ["source", "cluster"],
            registry=r,
        )
        self._source_clusters: dict[str, str] = {}

    def set_revision(self, revision: str, source: str) -> None:
        if self._revision_labels is not None:
            self.revision.remove(*self._revision_labels)
        self._revision_labels = (revision, source)
        self.revision.labels(revision, source).set(1)

    def set_objects(self, entries: list[Entry], *, applied: bool, forcing: bool) -> None:
        self.set_object_counts(
            _Tally(object_state(e, applied=applied, forcing=forcing) for e in entries if not e.left_git)
        )

    def set_object_counts(self, tally: Mapping[str, int]) -> None:
        """The objects gauge from counts by state kept elsewhere (a partial pass updates them for its objects)."""
        for state in OBJECT_STATES:
            self.objects.labels(state).set(tally.get(state, 0))

    def set_source(
        self,
        source: str,
        entries: list[Entry],
        *,
        applied: bool,
        forcing: bool,
        revision: str,
        healthy: bool,
        ready: bool,
    ) -> None:
        """One GitSync's figures (the fleet): objects by state, revision, source health, readiness."""
        tally = _Tally(object_state(e, applied=applied, forcing=forcing) for e in entries if not e.left_git)
        with self._source_lock:
            self._exported.add(source)
            for state in OBJECT_STATES:
                self.source_objects.labels(source, state).set(tally.get(state, 0))
            old = self._source_revisions.get(source)
            if old is not None and old != revision:
                self.source_revision.remove(source, old)
            if revision:
                self._source_revisions[source] = revision
                self.source_revision.labels(source, revision).set(1)
            else:
                self._source_revisions.pop(source, None)
            self.source_healthy.labels(source).set(1 if healthy else 0)
            self.source_ready.labels(source).set(1 if ready else 0)

    def set_source_cluster(self, source: str, cluster: str, *, reachable: bool) -> None:
        """One GitSync's target cluster (a label) and whether it answered (the fleet)."""
        with self._source_lock:
            old = self._source_clusters.get(source)
            if old is not None and old != cluster:
                self.source_cluster.remove(source, old)
            self._source_clusters[source] = cluster
            self.source_cluster.labels(source, cluster).set(1 if reachable else 0)

    def forget_source(self, source: str) -> None:
        """The GitSync is gone (or another replica now exports it): none of its series stays."""
        with self._source_lock:
            if source not in self._exported:
                return
            self._exported.discard(source)
            for state in OBJECT_STATES:
                self.source_objects.remove(source, state)
            old = self._source_revisions.pop(source, None)
            if old is not None:
                self.source_revision.remove(source, old)
            self.source_healthy.remove(source)
            self.source_ready.remove(source)
            cluster = self._source_clusters.pop(source, None)
            if cluster is not None:
                self.source_cluster.remove(source, cluster)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def object_state(entry: Entry, *, applied: bool, forcing: bool) -> str:
    """synced | drifted | planned | missing | terminating | conflict | error, as the objects gauge and /status
    count them.

    A field another manager took over is a conflict for a plan; when the policy is to force (what
    self-heal does), a plan that shows one is drift self-heal would correct, so it counts as drifted.
    Not applied (detect-only), an update is `drifted` when another manager changed a field (live-changed)
    and `planned` when every field it would change is Git's (git-changed, server-changed): the words of the
    report and the page (`plan.changeset.change_of`). An update that names no field stays `drifted`.
    `terminating`: being deleted (finalizers hold it): it will vanish, whatever a pass applies.
    """
    if entry.action is Action.ERROR:
        return "error"
    if entry.action is Action.TERMINATING:
        return "terminating"
    if entry.action is Action.CONFLICT or entry.conflicts:
        return "drifted" if forcing and not applied else "conflict"
    if applied or entry.action is Action.UNCHANGED:
        return "synced"
    if entry.action is Action.CREATE:
        return "missing"
    if entry.action is Action.UPDATE and entry.drift and all(c.reason != LIVE_CHANGED for c in entry.drift):
        return "planned"
    return "drifted"
