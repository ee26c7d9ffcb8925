"""The Reconciler: a level-triggered loop that keeps the cluster equal to the current Git revision.

Triggers (watch events, Git polls, file events, webhooks, the resync timer, leadership) only put keys
into the work queue: an object key ("look at this object"), SOURCE ("look at Git") or FULL ("look at
everything"). One worker takes whatever is queued and recomputes desired vs live for those objects
from the watch cache and the current revision, so a missed event, a restart or a disconnect is healed
by the next pass for the key or by the periodic full resync. Only one pass runs at a time.

Writes go through a fenced client: it refuses every non-dry-run request unless this replica may write
(self-heal mode, leader, not shutting down), so even a pass that started while leading cannot write
once leadership is lost.

Failures are kept apart and visible: a broken source (fetch, render, or a crash while planning it) and an
unreachable API server are two conditions (`conditions.py`), each on /readyz, /status and /metrics. A key
that keeps failing is retried with a delay that doubles up to `--max-backoff` and is reset only by a
clean pass. Every background loop runs under a `Supervisor`: restarted when it dies, or on /healthz.

The daemon owns what a source does not: the watch cache, the queue, the Lease, HTTP, Events. The source
itself (its render, passes, health and report) is a `SourceReconciler` (reconciler.py), the same object
the fleet controller (fleet/) keeps one of per GitSync.
"""

from __future__ import annotations

import functools
from typing import Any

from gitops_sync.cluster.lease import (
    ApiLeaseStore,
    LeaderElector,
    lease_name,
)
from gitops_sync.daemon.process.controller import DaemonOptions, FencedClient, Process
from gitops_sync.daemon.reconcile import views
from gitops_sync.daemon.reconcile.conditions import ClusterProbe
from gitops_sync.daemon.reconcile.reconciler import SourceReconciler, SourceSpec
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, QueueKey
from gitops_sync.daemon.reconcile.triggers import Ticker, watch_local
from gitops_sync.daemon.runtime.cache import EventType
from gitops_sync.daemon.runtime.manager import Group, Request, reconcile_handler
from gitops_sync.engine import Engine
from gitops_sync.log import get_logger
from gitops_sync.resource import Manifest, ObjectKey
from gitops_sync.source import mask_url
from gitops_sync.source.watch import Watch as LocalWatch

log = get_logger("gitops_sync.daemon")


class Daemon(Process[QueueKey]):
    """`run --repo`: one source, its worker, its Git poll and resync tickers, its file watch, its Lease."""

    def __init__(self, opts: DaemonOptions) -> None:
        super().__init__(opts, on_watch=self._on_watch)
        pool = max(opts.concurrency * 2, 10)
        self.client = FencedClient(opts.kubeconfig, opts.context, pool_size=pool, may_write=self._may_write)
        self.engine = Engine(self.client, field_manager=opts.field_manager, concurrency=opts.concurrency)
        self.probe = ClusterProbe(
            self.probe_client, self.cluster_condition, interval=opts.probe_interval, on_change=self._on_cluster_change
        )
        self._cluster_was_down = False
        self._reachable = True  # the API server answered when the stop began: wait for it, release the Lease
        self.shared = self._shared(self.probe, gauges=True)
        self.source = SourceReconciler(
            SourceSpec(
                opts.source,
                opts.pass_opts,
                opts.self_heal,
                opts.debounce,
                opts.fight_threshold,
                opts.fight_window,
                opts.autoscaler_wins,
            ),
            engine=self.engine,
            queue=self.queue,
            shared=self.shared,
            active=self._active,
            may_write=self._may_write,
            field_manager=opts.field_manager,
        )
        self.leader = self._elector() if opts.leader_elect else None
        if self.leader is None:
            self.metrics.leader.set(1)
        self.http = self._http_server(
            ready=self.ready,
            metrics=self._metrics,
            status=self.status,
            history=self._field_history,
            on_push=lambda: self.queue.add(SOURCE),
        )
        self._local_watch: LocalWatch | None = None
        self._tickers = [
            Ticker("git-poll", opts.interval, lambda: self.queue.add(SOURCE), jitter=opts.jitter),
            Ticker("resync", opts.resync, lambda: self.queue.add(FULL), jitter=0.05),
        ]
        self._declare()

    def _elector(self) -> LeaderElector:
        """The Lease of this source's inventory: one replica writes, the others stand by."""
        opts, src = self.opts, self.source
        lease_ns = opts.leader_namespace or src.inventory_namespace
        store = ApiLeaseStore(self.aux, lease_ns, lease_name(src.inventory_name, src.inventory_namespace, lease_ns))
        return LeaderElector(
            store,
            opts.identity,
            opts.leader,
            on_started=self._on_started_leading,
            on_stopped=self._on_stopped_leading,
        )

    def _declare(self) -> None:
        """The components, in their groups: start order is the groups' (runtime/manager.py), stop the reverse."""
        m = self.manager
        self._components(
            self.http, self.probe, lambda: [self.client], events_timeout=lambda: 3 if self._reachable else 0
        )
        if self.leader is not None:
            m.spawn(Group.ELECTION, "leader", self.leader.run, stop=self._release)
        m.spawn(Group.WORKERS, "reconciler", self._work, stop=self._drain)
        m.add(Group.WORKERS, "first-look", start=lambda: self.queue.add(SOURCE))
        for ticker in self._tickers:
            if ticker.period > 0:
                m.spawn(Group.TRIGGERS, ticker.name, ticker.run, stop=ticker.stop)
        m.add(Group.TRIGGERS, "file-watch", start=self._start_local_watch, stop=self._stop_local_watch)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Daemon:
        self.manager.start()
        log.info(
            "daemon started",
            repo=mask_url(self.opts.source.repo),
            mode=self._mode,
            http=f"{self.opts.http_addr} (port {self.port})",
            http_auth=self.opts.http_auth,
            leader_elect=self.opts.leader_elect,
            identity=self.opts.identity,
            inventory=f"{self.source.inventory_namespace}/{self.source.inventory_name}",
            on_conflict=self.opts.pass_opts.policy.value,
            prune=self.opts.pass_opts.prune,
        )
        return self

    def stop(self) -> None:
        """Finish the pass in flight (or abandon it after the grace period), release the Lease, stop.

        Every loop wakes on its stop event, so an idle daemon stops in well under a second. While the API
        server is unreachable nothing waits on it: the pass in flight is abandoned after 1 s (its writes
        are fenced), the Lease is left to expire and queued Events are dropped (else up to ~20 s)."""
        if self._stopping:
            return
        self._reachable = self.cluster_condition.ok
        log.info("shutting down", grace=self._grace(), cluster_reachable=self._reachable)
        if self.manager.stop():
            log.info("stopped")

    def _grace(self) -> float:
        return self.opts.shutdown_grace if self._reachable else min(self.opts.shutdown_grace, 1.0)

    def _drain(self) -> None:
        """No new pass; the one in flight may finish within the grace period, else its writes are refused."""
        self.queue.shutdown()
        if not self.supervisor.join("reconciler", self._grace()):
            log.warning("abandoning the pass in flight: further writes are refused")
            self._abandon = True
            self.supervisor.join("reconciler", 5 if self._reachable else 0)
        self._abandon = True

    def _release(self) -> None:
        assert self.leader is not None
        self.leader.stop()
        if self._reachable:
            self.leader.release()
        else:
            log.warning("not releasing the Lease: the API server is unreachable (it expires on its own)")

    def _start_local_watch(self) -> None:
        self._local_watch = self._watch_local()
        if self._local_watch is not None:
            self.supervisor.watch(
                "file-watch",
                lambda: "" if self._local_watch is None or self._local_watch.alive() else "watchdog observer stopped",
                revive=self._revive_local_watch,
            )

    def _stop_local_watch(self) -> None:
        if self._local_watch is not None:
            self._local_watch.stop()

    def _watch_local(self) -> LocalWatch | None:
        return watch_local(self.opts.source.repo, lambda: self.queue.add(SOURCE), self.opts.debounce)

    def _revive_local_watch(self) -> None:
        """The watchdog observer died: start a new one and look at the source (changes may be missed)."""
        old, self._local_watch = self._local_watch, None
        if old is not None:
            old.stop()
        self._local_watch = self._watch_local()
        self.queue.add(SOURCE)

    @property
    def _mode(self) -> str:
        return "self-heal" if self.opts.self_heal else "detect-only"

    def _may_write(self) -> bool:
        if self._abandon or not self.opts.self_heal:
            return False
        return self.leader is None or self.leader.can_write()

    def _active(self) -> bool:
        """Whether this replica runs passes: always without leader election, else only while leading."""
        return not self._stopping and (self.leader is None or self.leader.can_write())

    def _on_started_leading(self) -> None:
        log.info("became the leader", identity=self.opts.identity)
        self.metrics.leader.set(1)
        self.queue.add(SOURCE)
        self.queue.add(FULL)

    def _on_stopped_leading(self) -> None:
        log.warning("no longer the leader: not writing", identity=self.opts.identity)
        self.metrics.leader.set(0)

    # -- the worker -------------------------------------------------------------------------

    def _work(self) -> None:
        """The one worker: each batch of keys is one handling (runtime/manager.py `reconcile_handler`)."""
        while not self.queue.is_shutdown:
            batch = self.queue.get_batch(timeout=0.5)
            if not batch:
                continue
            try:
                reconcile_handler(self.queue, batch, functools.partial(self._handle, batch))
            finally:
                self.queue.done(batch)

    def _handle(self, batch: list[QueueKey]) -> tuple[Request[QueueKey], ...]:
        return self.source.handle(set(batch)).requests

    def _on_cluster_change(self, ok: bool, error: str) -> None:
        self.metrics.cluster_ok.set(1 if ok else 0)
        if not ok:
            self._cluster_was_down = True
            log.error(
                "API server unreachable; not counted as a source error",
                server=self.probe_client.server,
                error=mask_url(error),
            )
            return
        if self._cluster_was_down:
            self._cluster_was_down = False
            log.info("API server reachable again", server=self.probe_client.server)
            # What failed meanwhile failed because of the outage: look again now, from the base delay.
            for key in (SOURCE, FULL):
                self.queue.forget(key)
                self.queue.add(key)

    # -- watch events -----------------------------------------------------------------------

    def _on_watch(self, etype: EventType, key: ObjectKey | None, obj: Manifest | None) -> None:
        if etype is EventType.RECOVERED:
            # Events may have been missed while the watch was down, and a source refresh may have
            # failed because the API server was: look at both again now rather than after a backoff.
            self.queue.add(SOURCE)
            self.queue.add(FULL)
            return
        if key is not None:
            self.source.on_watch(etype, key, obj)

    # -- HTTP -------------------------------------------------------------------------------

    def ready(self) -> tuple[bool, str]:
        """Readiness, with each failing condition on a line of its own (cluster first: it explains the rest)."""
        if self._stopping:
            return False, "shutting down"
        problems = []
        if not self.cluster_condition.ok:
            problems.append(f"cluster unreachable: {self.cluster_condition.error}")
        snap = self.source.snapshot(objects=False)
        problems += views.problems(snap)
        if problems:
            return False, "\n".join(problems)
        if not self.cache.is_synced():
            return False, "watch caches not synced yet"
        if self.leader is not None and not self.leader.is_leader:
            return True, f"standby: following {self.leader.holder or '(nobody yet)'}"
        if not snap.first_sync:
            return False, "first sync not complete"
        return True, "ok"

    def _metrics(self) -> bytes:
        self.metrics.cache_objects.set(self.cache.objects())
        return self.metrics.exposition()

    def _field_history(self, group: str, kind: str, namespace: str, name: str) -> dict[str, list[dict[str, Any]]]:
        """Every field Git sets on one object, with its recorded values and owners (the web page's object view)."""
        fields = self.source.history.fields(ObjectKey(group, kind, namespace, name))
        return {path: [r.to_dict() for r in records] for path, records in fields.items()}

    def status(self, *, full_history: bool = False) -> dict[str, Any]:
        """The `diff -o json` document of the latest state of every object, plus history and fights.

        `history` lists the fields that changed at least once; `full_history` (GET /status?history=all)
        every field Git sets."""
        snap = self.source.snapshot()
        doc = views.changeset_doc(
            snap, self.source.history, self.source.yields, self.cluster_condition, full_history=full_history
        )
        ready, why = self.ready()
        doc["daemon"] = {
            **views.daemon_doc(
                snap,
                self.cluster_condition,
                identity=self.opts.identity,
                field_manager=self.opts.field_manager,
                ready=ready,
                why=why,
            ),
            "leader": self.leader.is_leader if self.leader else True,
            "leaseHolder": self.leader.holder if self.leader else self.opts.identity,
            "lease": self.leader.store.where if self.leader else "",
            "threads": self.supervisor.status(),
            "queueDepth": len(self.queue),
            "watches": self.cache.status(),
            "requests": {
                "reads": self.client.stats.reads,
                "writes": self.client.stats.writes,
                "dryRuns": self.client.stats.dry_runs,
                "throttled": self.client.stats.throttled,
            },
            # the bodies of every answer (watch streams aside): not a request count, so beside `requests`
            "bytesRead": self.client.stats.bytes_read,
        }
        return doc


__all__ = ["Daemon"]
