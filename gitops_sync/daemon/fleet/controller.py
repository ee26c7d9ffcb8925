"""The fleet controller: `gitops-sync run` without --repo reconciles every GitSync object it can see.

One process, many sources. What they share: one watch cache per managed kind (interest is the union of
every source's objects), one work queue whose keys are (source, key) with per-key de-dup and backoff, a
pool of `--workers` threads (one pass per source at a time, so a slow or failing source never blocks
the others), Events, metrics, HTTP, discovery. What each source owns: a `SourceReconciler`, its Engine
and its API client (impersonating the GitSync's `serviceAccountName` when set), fenced on its shard.

Sharding: sources map to one of `--shards` shards by a stable hash of namespace/name; each shard is a
`coordination.k8s.io` Lease (`gitops-sync-shard-<i>`). A replica runs the passes of the shards it holds
(at most `--max-shards`), and only while it holds a shard may that shard's sources write: when a
replica dies, another takes its Leases after the lease duration. Status goes to the GitSync's status
subresource with server-side apply, only when it changed, only from the shard's holder.
"""

from __future__ import annotations

import calendar
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, cast

from gitops_sync.cluster.client import APPLY_PATCH, Client
from gitops_sync.cluster.discovery import Discovery
from gitops_sync.cluster.kubeconfig import context_namespace
from gitops_sync.cluster.lease import ApiLeaseStore, LeaderElector
from gitops_sync.conventions import ConflictPolicy
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.gitsync import GitSync, InvalidSpec
from gitops_sync.daemon.process.controller import Controller, DaemonOptions, FencedClient
from gitops_sync.daemon.reconcile.access import ReadAccess
from gitops_sync.daemon.reconcile.conditions import ClusterProbe
from gitops_sync.daemon.reconcile.failures import PRUNE_FAILED, Failures, failures_of
from gitops_sync.daemon.reconcile.reconciler import SourceReconciler
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, QueueKey
from gitops_sync.daemon.reconcile.triggers import WebhookResult, verify_webhook
from gitops_sync.daemon.runtime.cache import EventType
from gitops_sync.daemon.runtime.events import WARNING, EventSpec
from gitops_sync.daemon.runtime.queue import Backoff, WorkQueue
from gitops_sync.daemon.runtime.supervisor import describe_crash
from gitops_sync.engine import Engine
from gitops_sync.errors import ApiError, ClusterError, GitOpsError, RepositoryNotAllowed
from gitops_sync.log import get_logger
from gitops_sync.plan.changeset import Action, Entry
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey
from gitops_sync.source import mask_url
from gitops_sync.source.allow import LocalRepositories
from gitops_sync.source.checkout import cache_root

log = get_logger("gitops_sync.daemon")

FleetKey = tuple[str, QueueKey]  # (namespace/name of the GitSync, its key)
SHARD_LEASE_PREFIX = "gitops-sync-shard-"
# A pass running longer than this (a Git server that accepts and never answers holds a worker for the
# whole git timeout, 60 s a command) stops counting against --workers: another source may start. Up to
# SLOW_SLOTS (or --workers, if more) such slow passes run beside the --workers ordinary ones.
SLOW_PASS = 10.0
SLOW_SLOTS = 8


class SourceClient(FencedClient):
    """A source's API client: writes fenced on its shard, every request as its ServiceAccount when set.

    With `share`, it sends through that client's connection pool and breaker (one pool for every source:
    a pool each kept ~8 idle TLS connections per source, 1.2 MB of RSS per source at 200 sources) and
    keeps only its fence, its impersonation and its request counters."""

    def __init__(self, *args: Any, impersonate: str = "", share: Client | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.impersonate = impersonate
        self._shared = share is not None
        if share is not None:
            super().close()  # the pool just made is not used
            self._conn, self.breaker = share._conn, share.breaker

    def close(self) -> None:
        if not self._shared:
            super().close()

    def _prepare(
        self, method: str, path: str, query: Any, content_type: str | None, accept: str | None
    ) -> tuple[str, dict[str, str]]:
        url, headers = super()._prepare(method, path, query, content_type, accept)
        if self.impersonate:
            headers["Impersonate-User"] = self.impersonate
        return url, headers


class _Scoped:
    """One source's view of the shared queue: its keys, wrapped as (source, key)."""

    def __init__(self, queue: WorkQueue[FleetKey], ref: str) -> None:
        self.q = queue
        self.ref = ref

    def add(self, key: QueueKey) -> None:
        self.q.add((self.ref, key))

    def add_after(self, key: QueueKey, delay: float) -> None:
        self.q.add_after((self.ref, key), delay)

    def add_rate_limited(self, key: QueueKey) -> float:
        return self.q.add_rate_limited((self.ref, key))

    def forget(self, key: QueueKey) -> None:
        self.q.forget((self.ref, key))

    def failures(self, key: QueueKey) -> int:
        return self.q.failures((self.ref, key))


@dataclass
class _Source:
    gs: GitSync
    shard: int
    reconciler: SourceReconciler | None
    client: SourceClient | None
    invalid: str = ""  # why the controller will not act on it (then it has no reconciler)
    reason: str = InvalidSpec.reason  # of `invalid`: InvalidSpec or RepositoryNotAllowed
    announced: bool = False  # the Warning Event saying `invalid` was recorded
    written: dict[str, Any] = field(default_factory=dict)  # the status last written (without times)
    conditions: list[dict[str, Any]] = field(default_factory=list)  # as last written (with times)
    handled: str = ""  # the reconcile request answered in lastHandledReconcileAt
    waiting_for: str = ""
    next_poll: float = 0.0
    deletion: gitsync.Deletion | None = None  # being deleted, and its objects are not all gone yet


class ShardSet:
    """One LeaderElector per shard, stepped by one thread; a replica holds at most `limit` shards."""

    def __init__(
        self,
        opts: DaemonOptions,
        client: Client,
        namespace: str,
        on_change: Callable[[int, bool], None],
        on_reopen: Callable[[int], None] = lambda shard: None,
        on_vacant: Callable[[int], None] = lambda shard: None,
    ) -> None:
        self.on_reopen = on_reopen
        self.on_vacant = on_vacant  # a shard nobody holds, seen by a replica that will not take it
        self._fenced: set[int] = set()  # shards held whose renewal is overdue: nothing of theirs is written
        self.count = max(opts.shards, 1)
        self.limit = opts.max_shards or self.count
        self.elect = opts.leader_elect
        self.retry = opts.leader.retry_period
        self.electors: list[LeaderElector] = []
        self._stop = threading.Event()
        if self.elect:
            for i in range(self.count):
                store = ApiLeaseStore(client, namespace, f"{SHARD_LEASE_PREFIX}{i}")
                self.electors.append(
                    LeaderElector(
                        store,
                        opts.identity,
                        opts.leader,
                        on_started=lambda i=i: on_change(i, True),  # type: ignore[misc]
                        on_stopped=lambda i=i: on_change(i, False),  # type: ignore[misc]
                    )
                )

    def can_write(self, shard: int) -> bool:
        return not self.elect or self.electors[shard].can_write()

    def held(self) -> list[int]:
        if not self.elect:
            return list(range(self.count))
        return [i for i, e in enumerate(self.electors) if e.is_leader]

    def run(self) -> None:
        """Renew what is held; try for free shards only while holding fewer than the limit. A shard still
        held whose fence closed (renewal overdue: its passes were skipped) and opened again is reported
        to `on_reopen`: no Lease changed hands, so no on_change says its sources need a pass."""
        while not self._stop.is_set():
            held = len(self.held())
            for i, e in enumerate(self.electors):
                if e.is_leader and not e.can_write():  # before its step: only this thread renews it
                    self._fenced.add(i)
                if e.is_leader:
                    e.step()
                elif held < self.limit and e.step():
                    held += 1
                elif held >= self.limit:  # at the limit: look only, so a shard nobody holds is named
                    e.look()
                if e.vacant() and held >= self.limit:
                    self.on_vacant(i)
                if e.is_leader and not e.can_write():
                    self._fenced.add(i)
                elif i in self._fenced:
                    self._fenced.discard(i)
                    if e.is_leader:
                        self.on_reopen(i)
            self._stop.wait(self.retry)

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> None:
        for e in self.electors:
            e.release()

    def vacant(self) -> list[int]:
        """Shards no replica holds, as this one last saw their Leases."""
        return [i for i, e in enumerate(self.electors) if e.vacant()]

    def problem(self) -> str:
        """Why this replica is not doing its part ("" = it is): a Lease it cannot read or write, or a free
        shard it could take and has not (yet)."""
        for e in self.electors:
            if e.error:
                return f"cannot write Lease {e.store.where}: {e.error}"
        vacant = self.vacant()
        if vacant and len(self.held()) < self.limit:
            return f"shard {vacant[0]} is held by no replica and not taken yet"
        return ""

    def status(self) -> list[dict[str, Any]]:
        if not self.elect:
            return [{"shard": i, "held": True, "holder": "", "lease": ""} for i in range(self.count)]
        return [
            {
                "shard": i,
                "held": e.is_leader,
                "holder": e.holder,
                "lease": e.store.where,
                "vacant": e.vacant(),
                **({"error": e.error} if e.error else {}),
            }
            for i, e in enumerate(self.electors)
        ]


def vacant_message(shard: int, lease: str) -> str:
    """What a GitSync of a shard nobody holds says instead of "first sync in progress" for ever."""
    return (
        f"no replica holds shard {shard} (Lease {lease} free or expired): start another replica "
        "or raise --max-shards so that every shard is held"
    )


class Fleet(Controller[FleetKey]):
    """The controller of every GitSync in the cluster (or in `--watch-namespace`)."""

    page_tenants = (gitsync.GROUP, gitsync.PLURAL)  # the web page shows a reader the GitSyncs it may get

    def __init__(self, opts: DaemonOptions) -> None:
        super().__init__(opts)
        # Every source sends through this client's pool (SourceClient `share`): size it for all workers.
        self.client = Client(opts.kubeconfig, opts.context, pool_size=max(16, opts.workers * opts.concurrency))
        self.discovery = Discovery(self.client)
        self.probe = ClusterProbe(self.probe_client, self.cluster_condition, interval=opts.probe_interval)
        self.shared = self._shared(gauges=False)
        # A GitSync's local path is a tenant's choice: refused unless allowed, never the clone cache.
        self.local_policy = LocalRepositories.of(opts.allow_local_repositories, cache_root(opts.source.cache_dir))
        self.source_options = replace(opts.source, local_policy=self.local_policy)
        # The pod's namespace in a cluster (opts.leader_namespace), else the kubeconfig context's, as kubectl.
        lease_ns = (
            opts.leader_namespace
            or context_namespace(opts.kubeconfig, opts.context)
            or opts.watch_namespace
            or "default"
        )
        self.shards = ShardSet(opts, self.aux, lease_ns, self._on_shard, self._requeue_shard, self._on_vacant)
        self.http = self._http_server(self.metrics.exposition)
        self._lock = threading.RLock()
        # GitSync events are handled one at a time, in order: the watch's, and the poller's second look at
        # a refused repository (which must never bring back a GitSync the watch has just deleted).
        self._events = threading.Lock()
        self.sources: dict[str, _Source] = {}
        self.objects: dict[str, Manifest] = {}  # every GitSync as last seen (dependsOn reads their status)
        self._wanted_by: dict[ObjectKey, set[str]] = {}
        self._busy: dict[str, float] = {}  # source -> when its pass started (monotonic)
        self._held: dict[str, set[QueueKey]] = {}
        self._waiting: dict[str, set[QueueKey]] = {}  # sources due, in arrival order, until a worker is free
        self._listed = threading.Event()
        self.workers = max(opts.workers, 1)
        self.pool_size = self.workers + max(self.workers, SLOW_SLOTS)
        self.pool = ThreadPoolExecutor(max_workers=self.pool_size, thread_name_prefix="source")

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Fleet:
        self.http.start()
        sup = self.supervisor
        sup.spawn("dispatcher", self._dispatch)
        sup.spawn("gitsync-watch", self._watch_gitsyncs)
        sup.spawn("cluster-probe", self.probe.run)
        sup.spawn("poller", self._poll)
        if self.shards.elect:
            sup.spawn("shards", self.shards.run)
        self._watch_shared()
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
        if self._stopping:
            return
        self._stopping = True
        self.supervisor.stop()
        self.shards.stop()
        self.probe.stop()
        self.queue.shutdown()
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + self.opts.shutdown_grace
        while self._busy and time.monotonic() < deadline:
            time.sleep(0.05)
        self._abandon = True
        if self.cluster_condition.ok:
            self.shards.release()
        self.cache.stop()
        self.events.stop(timeout=3)
        self.http.stop()
        with self._lock:
            clients = [s.client for s in self.sources.values() if s.client is not None]
        self._close_clients(self.client, *clients)
        self._stop.set()
        log.info("stopped")

    def _on_shard(self, shard: int, leading: bool) -> None:
        log.info("shard acquired" if leading else "shard lost", shard=shard, identity=self.opts.identity)
        if not leading:  # its holder now exports these sources' metrics
            with self._lock:
                lost = [ref for ref, s in self.sources.items() if s.shard == shard]
            for ref in lost:
                self.metrics.forget_source(ref)
        if leading:
            with self._lock:
                for ref in [ref for ref, s in self.sources.items() if s.shard == shard]:  # see _fresh
                    self._fresh(ref)
            self._requeue_shard(shard)

    def _on_vacant(self, shard: int) -> None:
        """Say so in the status of every GitSync of a shard nobody holds, once. A merge patch guarded by the
        resourceVersion this replica saw: a replica that took the shard and wrote since wins (409 here).

        Deliberately not fenced (`_shard_fence`): it is written for shards this replica does NOT hold, so
        their Lease cannot gate it; the resourceVersion precondition is what keeps it from overwriting the
        status of a holder that has written since."""
        message = vacant_message(shard, self.shards.electors[shard].store.where)
        with self._lock:
            refs = [ref for ref, s in self.sources.items() if s.shard == shard]
            objs = {ref: self.objects.get(ref) or {} for ref in refs}
        for ref, obj in objs.items():
            meta, status = obj.get("metadata") or {}, obj.get("status") or {}
            ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
            if not meta.get("resourceVersion") or ready.get("message") == message:
                continue
            ns, name = ref.split("/", 1)
            body = {
                "metadata": {"resourceVersion": meta["resourceVersion"]},
                "status": gitsync.vacant_status(int(meta.get("generation") or 0), shard, message),
            }
            try:
                self.client.request(
                    "PATCH",
                    gitsync.object_path(ns, name, "status"),
                    body=body,
                    query={"fieldManager": self.opts.field_manager},
                    content_type="application/merge-patch+json",
                )
            except ClusterError as exc:  # 409: changed meanwhile (its holder wrote); looked at again next round
                log.debug("shard vacancy not written", gitsync=ref, error=str(exc))

    def _requeue_shard(self, shard: int) -> None:
        """A fetch and a full pass for every source of the shard (taken, or its fence open again)."""
        with self._lock:
            refs = [ref for ref, s in self.sources.items() if s.shard == shard]
        for ref in refs:
            self.queue.add((ref, SOURCE))
            self.queue.add((ref, FULL))

    def _fresh(self, ref: str) -> None:
        """A shard taken (back): forget what this replica knew of its sources. Their desired state is from
        before another replica ran them (Git may have moved, objects been pruned): correcting "drift"
        against it re-created objects that had left Git. A fresh reconciler fetches before it writes."""
        src = self.sources.get(ref)
        if src is None or src.reconciler is None or src.reconciler.current is None:
            return
        fresh = self._build(src.gs, src.shard)
        fresh.handled, fresh.conditions = src.handled, src.conditions  # `written` not: the holder wrote since
        if src.client is not None:
            src.client.close()
        self.sources[ref] = fresh

    # -- GitSync objects ----------------------------------------------------------------------

    def _watch_gitsyncs(self) -> None:
        """List, then watch GitSyncs; relist after a 410 or a broken watch."""
        path = gitsync.collection_path(self.opts.watch_namespace)
        backoff = Backoff(0.5, 8.0, jitter=0.2)
        rv = ""
        while not self._stopping:
            try:
                if not rv:
                    doc = self.client.request("GET", path, timeout=60)
                    rv = str((doc.get("metadata") or {}).get("resourceVersion") or "")
                    self._replace(doc.get("items") or [])
                    backoff.reset()
                query: dict[str, str | int | bool | None] = {
                    "watch": True,
                    "resourceVersion": rv,
                    "allowWatchBookmarks": True,
                    "timeoutSeconds": 300,
                }
                for line in self.watch_client.stream_lines(path, query=query, timeout=330):
                    if self._stopping:
                        return
                    event = json.loads(line)
                    etype, obj = str(event.get("type", "")), event.get("object") or {}
                    if etype == "ERROR":  # 410 Gone (resourceVersion too old) or another watch error
                        log.warning("GitSync watch expired; relisting", error=mask_url(str(obj.get("message", ""))))
                        rv = ""
                        break
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or "") or rv
                    if etype != "BOOKMARK":
                        self._gitsync_event(etype, obj)
            except ClusterError as exc:
                if isinstance(exc, ApiError) and exc.status == 404:
                    log.error("the GitSync CRD is not installed (kubectl apply -k deploy/kubernetes/crd/)")
                else:
                    log.warning("GitSync watch failed; relisting", error=mask_url(str(exc)))
                rv = ""
                self._stop.wait(backoff.next())

    def _replace(self, items: list[Manifest]) -> None:
        seen = set()
        for obj in items:
            meta = obj.get("metadata") or {}
            seen.add(f"{meta.get('namespace')}/{meta.get('name')}")
            self._gitsync_event("ADDED", obj)
        with self._lock:
            gone = [ref for ref in self.objects if ref not in seen]
        for ref in gone:
            ns, name = ref.split("/", 1)
            self._gitsync_event("DELETED", {"metadata": {"namespace": ns, "name": name}})
        self._listed.set()

    def _gitsync_event(self, etype: str, obj: Manifest) -> None:
        with self._events:
            self._handle_gitsync(etype, obj)

    def _recheck(self, ref: str) -> None:
        """A GitSync refused for where its repository leads, handled again as it now is (if it still is)."""
        with self._events:
            with self._lock:
                obj = self.objects.get(ref)
            if obj is not None:
                self._handle_gitsync("MODIFIED", obj)

    def _handle_gitsync(self, etype: str, obj: Manifest) -> None:
        meta = obj.get("metadata") or {}
        ref = f"{meta.get('namespace')}/{meta.get('name')}"
        if etype == "DELETED":
            with self._lock:
                self.objects.pop(ref, None)
                old = self.sources.pop(ref, None)
            if old is not None:
                # Gone from the API: pruned before, through the finalizer, or left in place (prune off,
                # detect-only, suspended). Either way it is no longer reconciled.
                log.info("GitSync deleted: no longer reconciled", gitsync=ref)
                self.metrics.forget_source(ref)
                self._reindex()
                if old.client is not None:
                    old.client.close()
            self._requeue_dependents(ref)
            return
        with self._lock:
            self.objects[ref] = obj
        self._requeue_dependents(ref)
        shard = gitsync.shard_of(str(meta.get("namespace")), str(meta.get("name")), self.shards.count)
        try:
            gs = gitsync.parse(obj)
        except InvalidSpec as exc:
            self._refuse(ref, obj, _stub(obj), shard, str(exc), exc.reason)
            return
        try:
            self.local_policy.check(gs.repository)
        except RepositoryNotAllowed as exc:
            self._refuse(ref, obj, gs, shard, str(exc), exc.reason)
            return
        # Deleting, or prune switched on/off: the finalizer is the shard holder's work (_run_source).
        finalizing = gitsync.is_deleting(obj) or (gitsync.FINALIZER in gitsync.finalizers(obj)) != gs.wants_finalizer
        with self._lock:
            cur = self.sources.get(ref)
            rebuild = cur is None or cur.invalid or cur.gs.spec_doc != gs.spec_doc or cur.gs.uid != gs.uid
            if rebuild:
                src = self._build(gs, shard)
                if cur is not None:
                    src.handled = cur.handled
                    src.conditions = cur.conditions
                    if cur.client is not None:
                        cur.client.close()
                self.sources[ref] = src
            else:
                src = cast(_Source, cur)
                requested = gs.reconcile_requested != src.gs.reconcile_requested
                suspend_changed = gs.suspend != src.gs.suspend
                src.gs = gs
                if finalizing:
                    self.queue.add((ref, FULL))  # the work of the shard's holder (_run_source)
                if not (requested or suspend_changed):
                    return
        if rebuild:
            log.info(
                "GitSync loaded",
                gitsync=ref,
                repo=mask_url(gs.repository),
                path=gs.path or "",
                shard=shard,
                generation=gs.generation,
                service_account=gs.service_account or None,
            )
        self._reindex()
        if not gs.suspend:
            self.queue.add((ref, SOURCE))
            self.queue.add((ref, FULL))
        else:
            self._write_status(ref)
            if finalizing:
                self.queue.add((ref, FULL))

    def _refuse(self, ref: str, obj: Manifest, gs: GitSync, shard: int, why: str, reason: str) -> None:
        """A GitSync the controller will not act on (a spec it does not understand, a repository it may not
        read): kept without a reconciler, so nothing is fetched, applied or pruned for it; the shard's holder
        reports it (`_report_refused`), also after a failed status write (every event of it queues that)."""
        with self._lock:
            cur = self.sources.get(ref)
            changed = cur is None or cur.invalid != why or cur.gs.generation != gs.generation
            if changed:
                src = _Source(gs=gs, shard=shard, reconciler=None, client=None, invalid=why, reason=reason)
                src.next_poll = time.monotonic() + gs.interval
                if cur is not None:
                    src.handled, src.conditions = cur.handled, cur.conditions
                self.sources[ref] = src
        if changed:
            log.error("GitSync refused", gitsync=ref, reason=reason, error=why)
            if cur is not None and cur.reconciler is not None:  # it ran until now: drop its interest and client
                self._reindex()
                if cur.client is not None:
                    cur.client.close()
        self.queue.add((ref, FULL))  # its status (written only if it changed), an Event, the finalizer

    def _report_refused(self, ref: str, src: _Source) -> None:
        """On the shard's holder: a refused GitSync being deleted only loses the finalizer (what the
        controller does not act on it never prunes); otherwise its status says why (Ready=False, reason
        `src.reason`) and, once per refusal, a Warning Event on the GitSync."""
        with self._lock:
            obj = self.objects.get(ref) or {}
        if gitsync.is_deleting(obj):
            self._set_finalizer(ref, obj, src.shard, present=False)
            return
        self._write_status(ref)
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

    def _build(self, gs: GitSync, shard: int) -> _Source:
        opts = self.opts
        holder: dict[str, _Source] = {}

        def may_write() -> bool:
            # The source as the controller knows it *now*: a pass in flight stops writing the moment its
            # GitSync is suspended, switched to detect-only, changed (rebuilt) or deleted without prune.
            s = holder.get("s")
            with self._lock:
                current = self.sources.get(gs.ref) is s
            return (
                not self._abandon
                and s is not None
                and current
                and s.gs.self_heal
                and not s.gs.suspend
                and self.shards.can_write(shard)
            )

        # No Impersonate-Group: for a ServiceAccount user the API server adds its groups itself, and the
        # controller then needs `impersonate` on serviceaccounts only (never on groups: system:masters).
        client = SourceClient(
            opts.kubeconfig,
            opts.context,
            pool_size=1,
            may_write=may_write,
            impersonate=gs.impersonate,
            share=self.client,
        )
        engine = Engine(
            client, field_manager=opts.field_manager, concurrency=opts.concurrency, discovery=self.discovery
        )
        access = None
        if gs.impersonate:  # its reads of the shared cache are checked as its ServiceAccount (access.py)
            reviewer = SourceClient(
                opts.kubeconfig,
                opts.context,
                pool_size=1,
                may_write=lambda: True,  # an access review changes nothing
                impersonate=gs.impersonate,
                share=self.client,
            )
            access = ReadAccess(reviewer, gs.impersonate)
        r = SourceReconciler(
            gs.source_spec(self.source_options, debounce=opts.debounce),
            engine=engine,
            queue=_Scoped(self.queue, gs.ref),
            shared=self.shared,
            active=lambda: self.shards.can_write(shard),
            may_write=may_write,
            field_manager=opts.field_manager,
            subject=(gs.key, gitsync.API_VERSION),
            read_access=access,
        )
        r.on_loaded = lambda _r: self._reindex()
        src = _Source(gs=gs, shard=shard, reconciler=r, client=client, next_poll=time.monotonic() + gs.interval)
        holder["s"] = src
        return src

    def _reindex(self) -> None:
        """Watch the union of what every source wants; route each object's events to its sources."""
        wanted: dict[ObjectKey, set[str]] = {}
        targets: dict[ObjectKey, Target] = {}
        with self._lock:
            for ref, s in self.sources.items():
                state = s.reconciler.current if s.reconciler else None
                if state is None:
                    continue
                for t in state.targets:
                    wanted.setdefault(t.key, set()).add(ref)
                    targets.setdefault(t.key, t)
            self._wanted_by = wanted
        self.cache.set_interest(list(targets.values()))

    def _requeue_dependents(self, ref: str) -> None:
        with self._lock:
            waiting = [
                r
                for r, s in self.sources.items()
                if s.waiting_for and any(f"{ns}/{name}" == ref for ns, name in s.gs.depends_on)
            ]
        for r in waiting:
            self.queue.add((r, FULL))

    def _poll(self) -> None:
        """Git polls per source at its own interval, and the periodic full resync of every source. A
        repository refused for where it leads is looked at again at its interval too: the file system may
        have changed (a symlink removed), not the GitSync, so no event of it would load it again."""
        last_resync = time.monotonic()
        while not self._stop.wait(0.5):
            now = time.monotonic()
            resync = self.opts.resync > 0 and now - last_resync >= self.opts.resync
            if resync:
                last_resync = now
            with self._lock:
                due: list[FleetKey] = []
                again: list[str] = []
                for ref, s in self.sources.items():
                    poll = s.gs.interval > 0 and now >= s.next_poll and not s.gs.suspend
                    if poll:
                        s.next_poll = now + s.gs.interval
                    if s.reconciler is None:
                        if poll and s.reason == RepositoryNotAllowed.reason:
                            again.append(ref)
                        continue
                    if poll:
                        due.append((ref, SOURCE))
                    if resync and not s.gs.suspend:
                        due.append((ref, FULL))
            for key in due:
                self.queue.add(key)
            for ref in again:
                self._recheck(ref)

    # -- the work ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand each source's keys to the pool; a source already running keeps its new keys until it ends."""
        while not self.queue.is_shutdown:
            batch = self.queue.get_batch(timeout=0.25 if self._waiting else 0.5)
            with self._lock:
                for ref, key in batch:
                    self._waiting.setdefault(ref, set()).add(key)
            if batch:
                self.queue.done(batch)
            self._start_waiting()

    def _start_waiting(self) -> None:
        """Start the sources due, oldest first, while fewer than --workers passes are running that are not
        slow (see SLOW_PASS): sources stuck on a hung Git server never starve the others."""
        with self._lock:
            now = time.monotonic()
            running = sum(1 for t in self._busy.values() if now - t < SLOW_PASS)
            for ref in list(self._waiting):
                if ref in self._busy:
                    self._held.setdefault(ref, set()).update(self._waiting.pop(ref))
                    continue
                if running >= self.workers or len(self._busy) >= self.pool_size:
                    return
                keys = self._waiting.pop(ref)
                self._busy[ref] = now
                try:
                    self.pool.submit(self._run_source, ref, keys)
                except RuntimeError:  # shutting down
                    self._busy.pop(ref, None)
                    return
                running += 1

    def _run_source(self, ref: str, keys: set[QueueKey]) -> None:
        try:
            with self._lock:
                src = self.sources.get(ref)
            if src is None or self._stopping:
                return
            if not self.shards.can_write(src.shard):
                return  # another replica holds this shard
            if src.reconciler is None:
                self._report_refused(ref, src)
                return
            with self._lock:
                obj = self.objects.get(ref) or {}
            if gitsync.is_deleting(obj):
                self._finalize(ref, src, obj)
                return
            self._set_finalizer(ref, obj, src.shard, present=src.gs.wants_finalizer)
            if src.gs.suspend:
                return
            r = src.reconciler
            waiting = self._dependencies_waiting(src)
            if waiting != src.waiting_for and not waiting:
                keys = keys | {SOURCE, FULL}  # what was put off while waiting, at once
            src.waiting_for = waiting
            if waiting:  # no pass at all, not even for one object, until every dependency is Ready
                self._write_status(ref)  # written only if it changed (a new reconcile request is answered)
                self.queue.add_after((ref, FULL), 5.0)
                return
            r.handle(keys)
            # A pass, or a failed fetch/render: either may change the status (written only if it did). A work
            # tree read once and not yet confirmed (desired.settling) answers no reconcile request: the pass
            # after its second look does, or `reconcile` would report the state from before the change.
            self._write_status(ref, passed=bool(keys & {SOURCE, FULL}) and not r.desired.settling)
        except Exception as exc:  # keep the worker alive; the keys are retried with backoff
            log.error("reconcile failed unexpectedly", gitsync=ref, error=describe_crash(exc))
            for key in keys:
                self.queue.add_rate_limited((ref, key))
        finally:
            with self._lock:
                self._busy.pop(ref, None)
                held = self._held.pop(ref, set())
            for key in held:
                self.queue.add((ref, key))
            self._start_waiting()  # a worker is free now

    # -- deletion -------------------------------------------------------------------------------

    def _shard_fence(self, shard: int) -> Callable[[], bool]:
        """What the controller's own writes for a shard's GitSync (status, finalizer) ask right up to the
        socket: the shard still held, its renewal not overdue, not abandoning."""
        return lambda: not self._abandon and self.shards.can_write(shard)

    def _set_finalizer(self, ref: str, obj: Manifest, shard: int, *, present: bool) -> None:
        patch = gitsync.finalizer_patch(obj, present=present)
        if patch is None:
            return
        ns, name = ref.split("/", 1)
        try:
            self.client.request(
                "PATCH",
                gitsync.object_path(ns, name),
                body=patch,
                content_type="application/merge-patch+json",
                fence=self._shard_fence(shard),
            )
        except ClusterError as exc:  # changed meanwhile (409) or gone: its next event tries again
            log.info("cannot update the GitSync's finalizer", gitsync=ref, error=mask_url(str(exc)))

    def _finalize(self, ref: str, src: _Source, obj: Manifest) -> None:
        """A GitSync being deleted: prune what it applied (its deletion policy deletes, self-heal, not
        suspended), then let it go. A prune that fails or is refused keeps the finalizer, is retried with
        backoff and is what its status says (Ready=False, reason PruneRefused or PruneFailed, the first
        object): never the Ready of its last pass. WaitForTermination keeps it until the objects are gone."""
        if gitsync.FINALIZER not in gitsync.finalizers(obj):
            return
        gs, r = src.gs, cast(SourceReconciler, src.reconciler)
        if gs.wants_finalizer and not gs.suspend:
            waits = gs.deletion_policy == gitsync.WAIT_FOR_TERMINATION
            identity = r.desired.identity.text
            entries: list[Entry] = []
            try:
                cs, due = r.engine.collect(
                    r.inventory_name,
                    r.inventory_namespace,
                    identity,
                    prune_cascade=gs.prune_cascade,
                    advice=gs.cascade_advice,
                    keep_parent=waits,
                    pending_done=not waits,  # Delete, MirrorPrune: a deletion the API server accepted is done
                )
                entries = cs.entries
                failures = failures_of(entries, cs.errors, ())
                left = r.engine.remaining(r.inventory_name, r.inventory_namespace, identity) if waits and due else []
            except GitOpsError as exc:
                due, left = True, []
                failures = Failures(errors=[mask_url(str(exc))], count=1, reason=PRUNE_FAILED)
            if failures:
                delay = self.queue.add_rate_limited((ref, FULL))
                log.error(
                    "GitSync deleted: prune failed; keeping it until it succeeds",
                    gitsync=ref,
                    errors=[f.text() for f in failures.objects[:5]] + failures.errors[:5],
                    retry_in=round(delay, 2),
                )
                r.source_event(
                    failures.reason, WARNING, f"deleting: objects not pruned, retrying: {failures.summary()}"
                )
                src.deletion = gitsync.Deletion(failures)
                self._write_status(ref)
                return
            if left and not self._waited_out(gs, obj):
                named = ", ".join(str(k) for k in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
                src.deletion = gitsync.Deletion(
                    Failures(), waiting=f"waiting for {len(left)} object(s) to be gone: {named}"
                )
                self._write_status(ref)
                self.queue.add_after((ref, FULL), 2.0)
                return
            if left:
                r.source_event(
                    "TerminationTimeout",
                    WARNING,
                    f"deleting: {len(left)} object(s) still there after spec.timeout ({gs.timeout:g}s); letting the "
                    f"GitSync go: {', '.join(str(k) for k in left[:5])}",
                )
            if waits and due:  # every member gone (or waited out): now the parent goes too
                r.engine.collect(
                    r.inventory_name,
                    r.inventory_namespace,
                    identity,
                    prune_cascade=gs.prune_cascade,
                    advice=gs.cascade_advice,
                    pending_done=True,  # waited out: what is still held is left to its finalizers
                )
            log.info(
                "GitSync deleted: its objects were pruned"
                if due
                else "GitSync deleted: nothing applied cleanly, nothing pruned",
                gitsync=ref,
                pruned=sum(1 for e in entries if e.action is Action.PRUNE and "release" not in e.message),
                released=sum(1 for e in entries if "release" in e.message),
                pending=sum(1 for e in entries if e.action is Action.TERMINATING),
                kept=sum(1 for e in entries if e.action not in (Action.PRUNE, Action.TERMINATING)),
                policy=gs.deletion_policy,
            )
        else:
            why = (
                "suspended"
                if gs.suspend
                else "detect-only"
                if not gs.self_heal
                else f"deletionPolicy {gs.deletion_policy}"
                if gs.deletion_policy == gitsync.ORPHAN
                else "prune is off"
            )
            log.info("GitSync deleted: its objects are left in place", gitsync=ref, reason=why)
        self.queue.forget((ref, FULL))
        self._set_finalizer(ref, obj, src.shard, present=False)

    @staticmethod
    def _waited_out(gs: GitSync, obj: Manifest) -> bool:
        """WaitForTermination gives up after spec.timeout since the deletion was asked for."""
        stamp = str((obj.get("metadata") or {}).get("deletionTimestamp") or "")
        try:
            since = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            return False
        return time.time() - since > gs.timeout

    def _dependencies_waiting(self, src: _Source) -> str:
        """The first dependency that is not Ready (as its status says), or ""."""
        with self._lock:
            for ns, name in src.gs.depends_on:
                obj = self.objects.get(f"{ns}/{name}")
                if obj is None or not gitsync.is_ready(obj):
                    return f"{ns}/{name}"
        return ""

    def _write_status(self, ref: str, *, passed: bool = False) -> None:
        """Server-side apply of the status subresource, only when it differs from what was written."""
        with self._lock:
            src = self.sources.get(ref)
        if src is None or self._abandon or not self.shards.can_write(src.shard):
            return
        gs = src.gs
        # A pass that ran after a `gitops-sync reconcile` request answers it; so does a source held back by
        # a dependency (its status says which one: `reconcile` tells the user at once instead of timing out).
        answered = passed or bool(src.waiting_for) or src.reconciler is None
        handled = gs.reconcile_requested if answered else src.handled
        last = self._last_status(ref)
        doc = self._status_doc(src, last, handled)
        self._export(ref, src, doc)
        compare = {**doc, "conditions": gitsync.without_times(doc["conditions"])}
        if compare == src.written:
            return
        gitsync.with_transition_times(doc, src.conditions or list(last.get("conditions") or []))
        body = {
            "apiVersion": gitsync.API_VERSION,
            "kind": gitsync.KIND,
            "metadata": {"name": gs.name, "namespace": gs.namespace},
            "status": doc,
        }
        path = gitsync.object_path(gs.namespace, gs.name, "status")
        query: dict[str, str | int | bool | None] = {"fieldManager": self.opts.field_manager, "force": True}
        try:
            fence = self._shard_fence(src.shard)
            try:
                self.client.request("PATCH", path, body=body, query=query, content_type=APPLY_PATCH, fence=fence)
            except ApiError as exc:
                unknown = gitsync.undeclared_status_fields(str(exc))
                if not unknown:
                    raise
                # The CRD installed is older than this controller: say so, and write what it declares.
                log.warning(
                    "the GitSync CRD lacks status fields this controller writes; apply deploy/kubernetes/crd",
                    gitsync=ref,
                    fields=sorted(unknown),
                )
                body["status"] = {k: v for k, v in doc.items() if k not in unknown}
                self.client.request("PATCH", path, body=body, query=query, content_type=APPLY_PATCH, fence=fence)
        except ClusterError as exc:
            log.warning("cannot write GitSync status", gitsync=ref, error=mask_url(str(exc)))
            return
        src.written, src.conditions, src.handled = compare, doc["conditions"], handled

    @staticmethod
    def _status_doc(src: _Source, last: dict[str, Any], handled: str = "") -> dict[str, Any]:
        """The status of one source as the controller knows it: what is written, and what /status shows."""
        return gitsync.status_of(
            src.gs,
            src.reconciler,
            waiting_for=src.waiting_for,
            invalid=src.invalid,
            invalid_reason=src.reason,
            handled=handled,
            shard=src.shard,
            last=last,
            deletion=src.deletion,
        )

    def _last_status(self, ref: str) -> dict[str, Any]:
        """The status the GitSync object holds now (as last seen by the watch): what a suspended one keeps."""
        with self._lock:
            status = (self.objects.get(ref) or {}).get("status")
        return dict(status) if isinstance(status, dict) else {}

    def _export(self, ref: str, src: _Source, doc: dict[str, Any]) -> None:
        """The per-GitSync metrics, from the status just computed (only the shard's holder exports)."""
        r = src.reconciler
        entries: list[Entry] = []
        if r is not None:
            with r.state:
                entries = list(r.entries.values())
        self.metrics.set_source(
            ref,
            entries,
            applied=r is not None and r.spec.self_heal,
            forcing=r is not None and r.forcing,
            revision=str(doc.get("lastAppliedRevision") or ""),
            healthy=r is not None and r.condition.ok,
            ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in doc.get("conditions") or []),
        )

    # -- watch events -----------------------------------------------------------------------

    def _on_watch(self, etype: EventType, key: ObjectKey | None, obj: Manifest | None) -> None:
        if etype is EventType.RECOVERED:
            with self._lock:
                refs = list(self.sources)
            for ref in refs:
                self.queue.add((ref, SOURCE))
                self.queue.add((ref, FULL))
            return
        if key is None:
            return
        with self._lock:
            refs = list(self._wanted_by.get(key, ()))
            recs = [s.reconciler for r in refs if (s := self.sources.get(r)) and s.reconciler]
        for r in recs:
            r.on_watch(etype, key, obj)

    # -- HTTP -------------------------------------------------------------------------------

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

    def _webhook(self, headers: dict[str, str], body: bytes) -> WebhookResult:
        result = verify_webhook(headers, body, self.opts.webhook_secret)
        if result.ok:
            with self._lock:
                refs = list(self.sources)
            for ref in refs:  # which repository moved is not parsed: every source looks (cheap when unchanged)
                self.queue.add((ref, SOURCE))
        return result

    def source_list(self) -> list[dict[str, Any]]:
        """One row per source, for /status and a web page: name, shard, ready, revision, counts, error."""
        rows = []
        unreachable = "" if self.cluster_condition.ok else f"API server unreachable: {self.cluster_condition.error}"
        with self._lock:
            items = sorted(self.sources.items())
        for ref, s in items:
            doc = self._status_doc(s, self._last_status(ref))
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
                }
            )
        return rows

    def source_doc(
        self, ref: str, *, full_history: bool = False, row: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """One source as the single-source daemon's /status document (what the web page reads), with
        `daemon.gitsync` (its row of `source_list`)."""
        with self._lock:
            s = self.sources.get(ref)
        if s is None:
            return None
        if row is None:
            row = next((r for r in self.source_list() if r["name"] == ref), {})
        r = s.reconciler
        if r is None:
            return {
                "objects": [],
                "errors": [s.invalid],
                "source": s.gs.repository,
                "inventory": {"name": f"gitsync-{s.gs.name}", "namespace": s.gs.namespace},
                "daemon": {"mode": "", "ready": False, "readyReason": s.invalid, "gitsync": row, "spec": _spec(s.gs)},
            }
        doc = r.changeset_doc(self.cluster_condition, full_history=full_history)
        with r.state:
            last_pass = dict(r.last_pass)
        doc["daemon"] = {
            "mode": r.mode,
            "identity": self.opts.identity,
            "fieldManager": self.opts.field_manager,
            "ready": row.get("ready") == "True",
            "readyReason": row.get("message", ""),
            "appliedRevision": r.applied[0] if r.applied else "",
            "source": r.source_doc(),
            "conditions": {
                "source": r.condition.to_dict(),
                "cluster": self.cluster_condition.to_dict(with_revision=False),
            },
            "lastPass": last_pass,
            "gitsync": row,
            "spec": _spec(s.gs),
        }
        return doc

    def status(self, *, full_history: bool = False) -> dict[str, Any]:
        """`fleet`: this replica (shards, queue, watches, a summary row per source); `sources`: one
        single-source /status document per GitSync, in the order of `fleet.sources`."""
        ready, why = self.ready()
        rows = self.source_list()
        docs = [self.source_doc(row["name"], full_history=full_history, row=row) for row in rows]
        return {
            "fleet": {
                "identity": self.opts.identity,
                "ready": ready,
                "readyReason": why,
                "namespace": self.opts.watch_namespace or "",
                "shards": self.shards.status(),
                "queueDepth": len(self.queue),
                "threads": self.supervisor.status(),
                "watches": self.cache.status(),
                "requests": self._requests(),
                "sources": rows,
            },
            "sources": [d for d in docs if d is not None],
        }

    def _field_history(self, group: str, kind: str, namespace: str, name: str) -> dict[str, list[dict[str, Any]]]:
        """The ownership history of one object's fields, from the first source that wants it."""
        key = ObjectKey(group, kind, namespace, name)
        with self._lock:
            refs = sorted(self._wanted_by.get(key, ()))
            recs = [s.reconciler for ref in refs if (s := self.sources.get(ref)) and s.reconciler]
        for r in recs:
            fields = r.history.fields(key)
            if fields:
                return {path: [rec.to_dict() for rec in records] for path, records in fields.items()}
        return {}

    def _requests(self) -> dict[str, int]:
        with self._lock:
            clients = [self.client, self.aux, self.watch_client] + [
                s.client for s in self.sources.values() if s.client is not None
            ]
        return {
            "reads": sum(c.stats.reads for c in clients),
            "writes": sum(c.stats.writes for c in clients),
            "dryRuns": sum(c.stats.dry_runs for c in clients),
            "throttled": sum(c.stats.throttled for c in clients),
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


def _stub(obj: Manifest) -> GitSync:
    """A GitSync that could not be parsed, kept to report why in its status."""
    meta = obj.get("metadata") or {}
    ns = str(meta.get("namespace") or "")
    return GitSync(
        namespace=ns,
        name=str(meta.get("name") or ""),
        generation=int(meta.get("generation") or 0),
        uid=str(meta.get("uid") or ""),
        repository="",
        revision=None,
        path=None,
        interval=0.0,
        prune=False,
        self_heal=False,
        policy=ConflictPolicy.REPORT,
        target_namespace=ns,
        service_account="",
        suspend=False,
        depends_on=(),
        wait=False,
        timeout=0.0,
    )


__all__ = ["Fleet", "ShardSet", "SourceClient"]
