"""The fleet controller: `gitops-sync run` without --repo reconciles every GitSync object it can see.

One process, many sources. What they share: one watch cache per managed kind (interest is the union of
every source's objects), one work queue whose keys are (source, key) with per-key de-dup and backoff, a
pool of `--workers` threads (one pass per source at a time, so a slow or failing source never blocks
the others), Events, metrics, HTTP, discovery. What each source owns: a `SourceReconciler`, its Engine
and its API client (impersonating the GitSync's `serviceAccountName` when set), fenced on its shard.

The parts, each guarding its own state: `registry.py` (the GitSyncs known, rebuild rules, who wants which
object, dependsOn), `scheduler.py` (worker slots, the slow slots), `poller.py` (Git polls, resync),
`finalizer.py` (deletion), `writer.py` (the status subresource, once per pass, only on change),
`shards.py` (one Lease per shard), `documents.py` (/status and the field history). This module wires
them, watches GitSyncs and runs one source's turn (`_run_source`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.cluster.kubeconfig import context_namespace
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.clusters import KubeConfigError, RemoteClusters
from gitops_sync.daemon.fleet.documents import Documents, bytes_read_of, requests_of
from gitops_sync.daemon.fleet.finalizer import Finalizer
from gitops_sync.daemon.fleet.gitsync import GitSync, InvalidSpec
from gitops_sync.daemon.fleet.poller import Poller
from gitops_sync.daemon.fleet.registry import Registry, rebuild_needed
from gitops_sync.daemon.fleet.remote import RemoteSide
from gitops_sync.daemon.fleet.scheduler import Scheduler
from gitops_sync.daemon.fleet.shards import ShardSet, vacant_message
from gitops_sync.daemon.fleet.sources import FleetKey, Scoped, Source, SourceFactory, stub_of
from gitops_sync.daemon.fleet.watch import GitSyncWatch
from gitops_sync.daemon.fleet.writer import StatusWriter
from gitops_sync.daemon.process.controller import DaemonOptions, Process
from gitops_sync.daemon.reconcile.conditions import ClusterProbe
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, QueueKey
from gitops_sync.daemon.runtime.cache import EventType
from gitops_sync.daemon.runtime.events import WARNING, EventSpec
from gitops_sync.daemon.runtime.manager import Group, Request, Requests, reconcile_handler
from gitops_sync.daemon.serving.http import HttpServer
from gitops_sync.errors import RepositoryNotAllowed
from gitops_sync.log import get_logger
from gitops_sync.resource import Manifest, ObjectKey
from gitops_sync.source import mask_url
from gitops_sync.source.allow import LocalRepositories
from gitops_sync.source.checkout import cache_root

log = get_logger("gitops_sync.daemon")


class Fleet(Process[FleetKey]):
    """The controller of every GitSync in the cluster (or in `--watch-namespace`).

    Threads: the GitSync watch (registry writes; one event at a time under `_events`), the dispatcher
    (queue to scheduler), the workers (one source's turn each), the poller, the shards thread (Leases),
    the watch cache's threads (`_on_watch`), HTTP (documents.py) and the cluster probe."""

    page_tenants = (gitsync.GROUP, gitsync.PLURAL)  # the web page shows a reader the GitSyncs it may get

    def __init__(self, opts: DaemonOptions) -> None:
        super().__init__(opts, on_watch=self._on_watch)
        # Every source sends through this client's pool (SourceClient `share`): size it for all workers.
        self.client = Client(opts.kubeconfig, opts.context, pool_size=max(16, opts.workers * opts.concurrency))
        self.discovery = Discovery(self.client)
        self.probe = ClusterProbe(self.probe_client, self.cluster_condition, interval=opts.probe_interval)
        self.shared = self._shared(self.probe, gauges=False)
        # A GitSync's local path is a tenant's choice: refused unless allowed, never the clone cache.
        self.local_policy = LocalRepositories.of(opts.allow_local_repositories, cache_root(opts.source.cache_dir))
        self.shards = ShardSet(
            opts, self.aux, self._lease_namespace(), self._on_shard, self._requeue_shard, self._on_vacant
        )
        self.registry = Registry()
        # GitSyncs with spec.kubeConfig: one connection and watch cache per target cluster (clusters.py).
        self.remote = RemoteSide(self.registry, self.queue, self.shared.events)
        self.remotes = RemoteClusters(
            self.client, self.remote.on_event, on_change=self.remote.changed, backoff_cap=opts.watch_backoff_cap
        )
        # GitSync events are handled one at a time, in order: the watch's, and the poller's second look at
        # a refused repository (which must never bring back a GitSync the watch has just deleted).
        self._events = threading.Lock()
        self._reindexing = threading.Lock()  # one reindex at a time: a union computed earlier never lands last
        self._listed = threading.Event()
        self.gitsyncs = GitSyncWatch(
            self.client,
            self.watch_client,
            gitsync.collection_path(opts.watch_namespace),
            on_event=self._gitsync_event,
            known=self.registry.object_refs,
            on_listed=self._listed.set,
            on_fatal=self.fail,
        )
        self.factory = SourceFactory(
            opts,
            replace(opts.source, local_policy=self.local_policy),
            share=self.client,
            discovery=self.discovery,
            shared=self.shared,
            queue=self.queue,
            may_write=self._may_write,
            active=self.shards.can_write,
            on_loaded=self._reindex,
            remotes=self.remotes,
        )
        self.writer = StatusWriter(
            self.client, self.registry, self.metrics, field_manager=opts.field_manager, fence=self._shard_fence
        )
        self.finalizer = Finalizer(self.client, self.writer.write, self._shard_fence)
        self.scheduler = Scheduler(opts.workers, self._run_source, group=self.remote.cluster_of)
        self.poller = Poller(self.registry, self.queue.add, self._recheck, resync=opts.resync)
        self.http = self._serving()
        self._declare()

    def _serving(self) -> HttpServer:
        """/status and the field history from documents.py, the webhook, probes and metrics."""
        opts = self.opts
        self.documents = Documents(
            self.registry,
            self.shards,
            self.cluster_condition,
            identity=opts.identity,
            field_manager=opts.field_manager,
            ready=self.ready,
            process=self._process_doc,
        )
        return self._http_server(
            ready=self.ready,
            metrics=self.metrics.exposition,
            status=self.documents.status,
            history=self.documents.field_history,
            on_push=self._every_source_looks,
            tenant_resource=self.page_tenants,
        )

    def _lease_namespace(self) -> str:
        """The pod's namespace in a cluster (opts.leader_namespace), else the kubeconfig context's, as kubectl."""
        o = self.opts
        return o.leader_namespace or context_namespace(o.kubeconfig, o.context) or o.watch_namespace or "default"

    def _declare(self) -> None:
        """The components, in their groups: start order is the groups' (runtime/manager.py), stop the reverse."""
        m = self.manager
        self._components(
            self.http, self.probe, lambda: [self.client, *self.registry.clients()], events_timeout=lambda: 3
        )
        m.add(Group.CACHES, "remote-clusters", stop=self.remotes.stop)
        m.add(Group.ELECTION, "shard-leases", stop=self._release)
        m.spawn(Group.WORKERS, "dispatcher", self._dispatch, stop=self._drain)
        m.spawn(Group.TRIGGERS, "gitsync-watch", self.gitsyncs.run, stop=self.gitsyncs.stop)
        m.spawn(Group.TRIGGERS, "poller", self.poller.run, stop=self.poller.stop)
        m.spawn(Group.TRIGGERS, "remote-probe", self.remotes.run, stop=self.remotes.stop_probing)
        if self.shards.elect:  # renewals stop before the drain; the Leases are given up after it
            m.spawn(Group.TRIGGERS, "shards", self.shards.run, stop=self.shards.stop)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Fleet:
        self.manager.start()
        log.info(
            "fleet controller started",
            namespace=self.opts.watch_namespace or "(all)",
            shards=self.shards.count,
            max_shards=self.shards.limit,
            leader_elect=self.shards.elect,
            workers=self.opts.workers,
            identity=self.opts.identity,
            http=f"port {self.port}",
        )
        return self

    def stop(self) -> None:
        if self.manager.stop():
            log.info("stopped")

    def _drain(self) -> None:
        """No new pass; the passes in flight may finish within the grace period, then writes are refused."""
        self.queue.shutdown()
        self.scheduler.shutdown()
        self.scheduler.drain(self.opts.shutdown_grace)
        self._abandon = True

    def _release(self) -> None:
        if self.cluster_condition.ok:
            self.shards.release()

    # -- shards -----------------------------------------------------------------------------

    def _on_shard(self, shard: int, leading: bool) -> None:
        log.info("shard acquired" if leading else "shard lost", shard=shard, identity=self.opts.identity)
        if not leading:  # its holder now exports these sources' metrics
            for ref in self.registry.refs(shard):
                self.metrics.forget_source(ref)
            return
        for ref in self.registry.refs(shard):
            self._fresh(ref)
        self._requeue_shard(shard)

    def _on_vacant(self, shard: int) -> None:
        self.writer.vacant(shard, vacant_message(shard, self.shards.electors[shard].store.where))

    def _requeue_shard(self, shard: int) -> None:
        """A fetch and a full pass for every source of the shard (taken, or its fence open again)."""
        for ref in self.registry.refs(shard):
            self.queue.add((ref, SOURCE))
            self.queue.add((ref, FULL))

    def _fresh(self, ref: str) -> None:
        """A shard taken (back): forget what this replica knew of its sources. Their desired state is from
        before another replica ran them (Git may have moved, objects been pruned): correcting "drift"
        against it re-created objects that had left Git. A fresh reconciler fetches before it writes."""
        src = self.registry.get(ref)
        if src is None or src.reconciler is None or src.reconciler.current is None:
            return
        try:
            fresh = self.factory.build(src.gs, src.shard).carry(src)  # `written` not: the holder wrote since
        except KubeConfigError:
            return  # its kubeconfig went bad meanwhile: the GitSync's next event or poll says so
        self._close(src if self.registry.replace_if(ref, src, fresh) else fresh)

    def _shard_fence(self, shard: int) -> Callable[[], bool]:
        """What the controller's own writes for a shard's GitSync (status, finalizer) ask right up to the
        socket: the shard still held, its renewal not overdue, not abandoning."""
        return lambda: not self._abandon and self.shards.can_write(shard)

    def _may_write(self, ref: str, token: int, shard: int) -> bool:
        """The fence of a source's writes: the source as the controller knows it *now*. A pass in flight
        stops writing the moment its GitSync is suspended, switched to detect-only, changed (rebuilt) or
        deleted without prune."""
        s = self.registry.is_current(ref, token)
        return (
            not self._abandon and s is not None and s.gs.self_heal and not s.gs.suspend and self.shards.can_write(shard)
        )

    # -- GitSync objects ----------------------------------------------------------------------

    def _gitsync_event(self, etype: str, obj: Manifest) -> None:
        with self._events:
            self._handle_gitsync(etype, obj)

    def _recheck(self, ref: str) -> None:
        """A GitSync refused for where its repository leads, handled again as it now is (if it still is)."""
        with self._events:
            obj = self.registry.object(ref)
            if obj is not None:
                self._handle_gitsync("MODIFIED", obj)

    def _handle_gitsync(self, etype: str, obj: Manifest) -> None:
        meta = obj.get("metadata") or {}
        ref = f"{meta.get('namespace')}/{meta.get('name')}"
        if etype == "DELETED":
            self._deleted(ref)
            return
        self.registry.seen(ref, obj)
        self._requeue_dependents(ref)
        shard = gitsync.shard_of(str(meta.get("namespace")), str(meta.get("name")), self.shards.count)
        gs = self._admit(ref, obj, shard)
        if gs is None:
            return
        # Deleting, or prune switched on/off: the finalizer is the shard holder's work (_run_source).
        finalizing = gitsync.is_deleting(obj) or (gitsync.FINALIZER in gitsync.finalizers(obj)) != gs.wants_finalizer
        cur = self.registry.get(ref)
        if rebuild_needed(cur, gs):
            try:
                built = self.factory.build(gs, shard).carry(cur)
            except KubeConfigError as exc:  # its Secret unreadable as its ServiceAccount, or refused
                self._refuse(ref, gs, shard, str(exc), exc.reason)
                return
            self._close(self.registry.put(ref, built))
            log.info(
                "GitSync loaded",
                gitsync=ref,
                repo=mask_url(gs.repository),
                path=gs.path or "",
                shard=shard,
                generation=gs.generation,
                service_account=gs.service_account or None,
                cluster=built.cluster or None,
            )
        else:
            before = self.registry.set_gs(ref, gs)
            if finalizing:
                self.queue.add((ref, FULL))  # the work of the shard's holder (_run_source)
            if before is None or (
                gs.reconcile_requested == before.reconcile_requested and gs.suspend == before.suspend
            ):
                return
        self._reindex()
        if not gs.suspend:
            self.queue.add((ref, SOURCE))
            self.queue.add((ref, FULL))
        else:
            self.writer.write(ref)
            if finalizing:
                self.queue.add((ref, FULL))

    def _admit(self, ref: str, obj: Manifest, shard: int) -> GitSync | None:
        """The GitSync as the controller will act on it; None when refused (`_refuse` says why)."""
        try:
            gs = gitsync.parse(obj)
            self.gitsyncs.schema.admit(gs)  # a field inside an object that the installed CRD prunes
        except InvalidSpec as exc:
            self._refuse(ref, stub_of(obj), shard, str(exc), exc.reason)
            return None
        try:
            self.local_policy.check(gs.repository)
        except RepositoryNotAllowed as exc:
            self._refuse(ref, gs, shard, str(exc), exc.reason)
            return None
        return gs

    def _deleted(self, ref: str) -> None:
        old = self.registry.drop(ref)
        if old is not None:
            # Gone from the API: pruned before, through the finalizer, or left in place (prune off,
            # detect-only, suspended). Either way it is no longer reconciled.
            log.info("GitSync deleted: no longer reconciled", gitsync=ref)
            self.metrics.forget_source(ref)
            self._reindex()
            self._close(old)
        self._requeue_dependents(ref)

    def _refuse(self, ref: str, gs: GitSync, shard: int, why: str, reason: str) -> None:
        """A GitSync the controller will not act on (a spec it does not understand, a repository it may not
        read): kept without a reconciler, so nothing is fetched, applied or pruned for it; the shard's holder
        reports it (`_report_refused`), also after a failed status write (every event of it queues that)."""
        cur = self.registry.get(ref)
        if cur is None or cur.invalid != why or cur.gs.generation != gs.generation:
            self.registry.put(ref, self.factory.refused(gs, shard, why, reason).carry(cur))
            log.error("GitSync refused", gitsync=ref, reason=reason, error=why)
            if cur is not None and cur.reconciler is not None:  # it ran until now: drop its interest and client
                self._reindex()
                self._close(cur)
        self.queue.add((ref, FULL))  # its status (written only if it changed), an Event, the finalizer

    def _report_refused(self, ref: str, src: Source) -> None:
        """On the shard's holder: a refused GitSync being deleted only loses the finalizer (what the
        controller does not act on it never prunes); otherwise its status says why (Ready=False, reason
        `src.reason`) and, once per refusal, a Warning Event on the GitSync."""
        obj = self.registry.object(ref) or {}
        if gitsync.is_deleting(obj):
            self.finalizer.ensure(ref, obj, src.shard, present=False)
            return
        self.writer.write(ref)
        if not src.announced:
            src.announced = True
            self.shared.events.record(
                EventSpec(
                    key=src.gs.key,
                    api_version=gitsync.API_VERSION,
                    reason=src.reason,
                    message=src.invalid,
                    type=WARNING,
                    series=src.reason,
                    uid=src.gs.uid,
                )
            )

    def _reindex(self, changed: str | None = None) -> None:
        """Watch the union of what every source wants, on each cluster, routing events to the sources that
        want them. `changed`: a source that loaded a new desired state (the registry knows what it put)."""
        with self._reindexing:
            interest = self.registry.reindex(changed)
            self.cache.change_interest(interest.local.added, interest.local.removed)
            self.remotes.set_interest(interest.remote)

    def _close(self, src: Source | None) -> None:
        if src is not None:
            self.factory.release(src)

    def _requeue_dependents(self, ref: str) -> None:
        for r in self.registry.dependents_waiting(ref):
            self.queue.add((r, FULL))

    # -- the work ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand each source's keys to the scheduler; a source already running keeps its new keys until it ends."""
        while not self.queue.is_shutdown:
            batch = self.queue.get_batch(timeout=0.25 if self.scheduler.has_waiting else 0.5)
            self.scheduler.offer(batch)
            if batch:
                self.queue.done(batch)
            self.scheduler.start_waiting()

    def _run_source(self, ref: str, keys: set[QueueKey]) -> None:
        """One source's turn on a worker: the reconcile handler settles the queue from what it asked."""
        try:
            reconcile_handler(Scoped(self.queue, ref), keys, lambda: self._turn(ref, keys), gitsync=ref)
        finally:
            for key in self.scheduler.finish(ref):
                self.queue.add((ref, key))
            self.scheduler.start_waiting()  # a worker is free now

    def _turn(self, ref: str, keys: set[QueueKey]) -> tuple[Request[QueueKey], ...]:
        src = self.registry.get(ref)
        if src is None or self._stopping or not self.shards.can_write(src.shard):
            return ()  # gone, stopping, or another replica holds this shard
        if src.reconciler is None:
            self._report_refused(ref, src)
            return ()
        asks: Requests[QueueKey] = Requests(Scoped(self.queue, ref).failures, self.backoff.delay_for)
        obj = self.registry.object(ref) or {}
        if gitsync.is_deleting(obj):
            self.finalizer.finalize(ref, src, obj, asks)
            return asks.take()
        self.finalizer.ensure(ref, obj, src.shard, present=src.gs.wants_finalizer)
        if src.gs.suspend:
            return ()
        waiting = self.registry.dependency_waiting(src.gs)
        if waiting != src.waiting_for and not waiting:
            keys = keys | {SOURCE, FULL}  # what was put off while waiting, at once
        src.waiting_for = waiting
        if waiting:  # no pass at all, not even for one object, until every dependency is Ready
            self.writer.write(ref)  # written only if it changed (a new reconcile request is answered)
            asks.add_after(FULL, 5.0)
            return asks.take()
        if src.remote is not None and SOURCE in keys and self.factory.rotated(src):
            self._rebuild(ref, src)  # a rotated kubeconfig Secret: a new connection, looked at at once
            return ()
        if src.remote is not None and not self.remote.answers(ref, src, asks, self.writer.write):
            return asks.take()
        outcome = src.reconciler.handle(keys)
        if src.remote is not None and src.remote.conn.breaker.is_down:  # it stopped answering during the pass
            self.remote.answers(ref, src, asks, self.writer.write)
        # A pass, or a failed fetch/render: either may change the status (written only if it did). A work
        # tree read once and not yet confirmed (`settling`) answers no reconcile request: the pass after its
        # second look does, or `reconcile` would report the state from before the change.
        self.writer.write(ref, passed=bool(keys & {SOURCE, FULL}) and not outcome.settling)
        return outcome.requests

    def _rebuild(self, ref: str, src: Source) -> None:
        """Build a source again from its GitSync as it is (its kubeconfig Secret rotated: read again), or
        refuse it when the Secret cannot be used any more; then a fetch and a full pass."""
        with self._events:
            if self.registry.get(ref) is not src:
                return  # replaced or dropped meanwhile
            try:
                fresh = self.factory.build(src.gs, src.shard).carry(src)
            except KubeConfigError as exc:
                self._refuse(ref, src.gs, src.shard, str(exc), exc.reason)
                return
            log.info("kubeconfig Secret changed: reconnecting", gitsync=ref, cluster=fresh.cluster)
            self._close(src if self.registry.replace_if(ref, src, fresh) else fresh)
            self._reindex()
        self.queue.add((ref, SOURCE))
        self.queue.add((ref, FULL))

    # -- watch events, HTTP -----------------------------------------------------------------

    def _on_watch(self, etype: EventType, key: ObjectKey | None, obj: Manifest | None) -> None:
        if etype is EventType.RECOVERED:
            for ref in self.registry.refs():
                self.queue.add((ref, SOURCE))
                self.queue.add((ref, FULL))
            return
        if key is None:
            return
        for _ref, r in self.registry.wanting(key):
            r.on_watch(etype, key, obj)

    def _every_source_looks(self) -> None:
        """A Git push: which repository moved is not parsed; every source looks (cheap when unchanged)."""
        for ref in self.registry.refs():
            self.queue.add((ref, SOURCE))

    def ready(self) -> tuple[bool, str]:
        """Ready once GitSyncs are listed and the watches synced; one broken source does not unready it."""
        if self._stopping:
            return False, "shutting down"
        if not self.cluster_condition.ok:
            return False, f"cluster unreachable: {self.cluster_condition.error}"
        if not self._listed.is_set():
            return False, "GitSyncs not listed yet"
        if not self.cache.is_synced():
            return False, "watch caches not synced yet"
        problem = self.shards.problem()
        if problem:
            return False, problem
        return True, "ok"

    def _process_doc(self) -> dict[str, object]:
        return {
            "namespace": self.opts.watch_namespace or "",
            "queueDepth": len(self.queue),
            "threads": self.supervisor.status(),
            "watches": self.cache.status(),
            "requests": requests_of(clients := [self.client, self.aux, self.watch_client, *self.registry.clients()]),
            "bytesRead": bytes_read_of(clients),
            "clusters": self.remotes.status(),
        }


__all__ = ["Fleet"]
