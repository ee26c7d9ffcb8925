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
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from gitops_sync import FIELD_MANAGER
from gitops_sync.apply.manager import ConflictPolicy, LiveMap
from gitops_sync.cluster.client import Client, is_dry_run
from gitops_sync.daemon.auth import KubernetesAuth
from gitops_sync.daemon.cache import EventType, WatchCache
from gitops_sync.daemon.conditions import ClusterProbe, Condition, iso_time
from gitops_sync.daemon.events import NORMAL, WARNING, EventRecorder, EventSpec
from gitops_sync.daemon.history import Fight, OwnershipHistory, is_secret, tracked_paths
from gitops_sync.daemon.http import Endpoints, HttpServer
from gitops_sync.daemon.leader import (
    ApiLeaseStore,
    LeaderConfig,
    LeaderElector,
    default_identity,
    lease_name,
)
from gitops_sync.daemon.metrics import Metrics, object_state
from gitops_sync.daemon.queue import WorkQueue
from gitops_sync.daemon.supervisor import Supervisor, describe_crash
from gitops_sync.daemon.triggers import Ticker, WebhookResult, verify_webhook, watch_local
from gitops_sync.daemon.yields import Yield, Yields
from gitops_sync.engine import Engine, PassOptions, SourceOptions, load
from gitops_sync.errors import ApiError, ClusterError, GitOpsError, SourceError
from gitops_sync.plan.autoscaler import Autoscaler, find_autoscaler, scaled_by_controller_manager
from gitops_sync.plan.changeset import Action, ChangeSet, Entry, FieldChange
from gitops_sync.plan.masking import Redactor, mask_literals
from gitops_sync.plan.planner import Target
from gitops_sync.resource import DesiredObject, Manifest, ObjectKey
from gitops_sync.source import Checkout, SourceIdentity, fetch, identify, mask_url, short_revision
from gitops_sync.source.checkout import is_remote
from gitops_sync.source.watch import Watch as LocalWatch

log = structlog.get_logger("gitops_sync.daemon")

FULL = "<full>"
SOURCE = "<source>"
QueueKey = ObjectKey | str


@dataclass
class DaemonOptions:
    source: SourceOptions
    pass_opts: PassOptions = field(default_factory=PassOptions)
    self_heal: bool = True
    interval: float = 60.0
    jitter: float = 0.1
    resync: float = 600.0
    debounce: float = 0.2
    http_addr: str = ":8080"
    http_auth: str = "none"  # none | kubernetes (auth.py)
    webhook_secret: bytes | None = None
    kubeconfig: Path | None = None
    context: str | None = None
    field_manager: str = FIELD_MANAGER
    concurrency: int = 8
    leader_elect: bool = False
    leader_namespace: str | None = None
    identity: str = field(default_factory=default_identity)
    leader: LeaderConfig = field(default_factory=LeaderConfig)
    shutdown_grace: float = 10.0
    max_backoff: float = 300.0  # cap of the retry delay of a failing pass or object (--max-backoff)
    watch_backoff_cap: float = 8.0
    probe_interval: float = 5.0  # GET /readyz of the API server this often (every second while failing)
    probe_timeout: float = 2.0
    fight_threshold: int = 3  # another manager taking a field this often within fight_window: yield it
    fight_window: float = 600.0
    autoscaler_wins: bool = True  # yield .spec.replicas to an HPA at once (--git-wins-over-autoscaler: no)

    @functools.cached_property
    def source_identity(self) -> SourceIdentity:
        """What `fetch` derives for every pass (see gitops_sync.source.identity), once, before any fetch."""
        return identify(self.source.repo, self.source.path)

    @property
    def inventory_name(self) -> str:
        return self.pass_opts.name or self.source_identity.inventory_name()

    @property
    def inventory_namespace(self) -> str:
        return self.pass_opts.inventory_namespace or self.pass_opts.namespace


class _FencedClient(Client):
    """A Client that refuses writes (anything but reads and dry runs) while `may_write()` is false."""

    def __init__(self, *args: Any, may_write: Callable[[], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.may_write = may_write

    def request_status(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        # `request` goes through here too: one fence for every write. A dry run may say so in the query
        # or (DELETE) in the body's DeleteOptions: both are reads.
        dry = is_dry_run(kwargs.get("query"), kwargs.get("body"))
        if method not in ("GET", "HEAD") and not dry and not self.may_write():
            raise ClusterError(f"not writing {method} {path}: this replica may not write now "
                               "(detect-only, not the leader, or shutting down)")
        return super().request_status(method, path, **kwargs)


@dataclass
class _Source:
    """The last good desired state: what every pass compares against."""

    checkout: Checkout
    targets: list[Target]
    digest: str
    by_key: dict[ObjectKey, Target]
    paths: dict[ObjectKey, list[str]]


class Daemon:
    def __init__(self, opts: DaemonOptions) -> None:
        self.opts = opts
        self.metrics = Metrics()
        self._stop = threading.Event()
        self._stopping = False
        self._abandon = False
        pool = max(opts.concurrency * 2, 10)
        self.client = _FencedClient(opts.kubeconfig, opts.context, pool_size=pool, may_write=self._may_write)
        self.aux = Client(opts.kubeconfig, opts.context, pool_size=4, timeout=10)
        self.watch_client = Client(opts.kubeconfig, opts.context, pool_size=64)
        self.engine = Engine(self.client, field_manager=opts.field_manager, concurrency=opts.concurrency)
        self.history = OwnershipHistory()
        self.yields = Yields(threshold=opts.fight_threshold, window=opts.fight_window,
                             autoscaler_wins=opts.autoscaler_wins, field_manager=opts.field_manager)
        self.queue: WorkQueue[QueueKey] = WorkQueue(backoff_cap=opts.max_backoff,
                                                   on_depth=self.metrics.queue_depth.set)
        self.cache = WatchCache(self.watch_client, on_event=self._on_watch, on_restart=self._on_watch_restart,
                                backoff_cap=opts.watch_backoff_cap)
        self.events = EventRecorder(self.aux, instance=opts.identity, on_drop=self.metrics.events_dropped.inc)
        self.leader: LeaderElector | None = None
        if opts.leader_elect:
            lease_ns = opts.leader_namespace or opts.inventory_namespace
            store = ApiLeaseStore(self.aux, lease_ns,
                                  lease_name(opts.inventory_name, opts.inventory_namespace, lease_ns))
            self.leader = LeaderElector(store, opts.identity, opts.leader,
                                        on_started=self._on_started_leading, on_stopped=self._on_stopped_leading)
        else:
            self.metrics.leader.set(1)
        # Reviews go through a client of their own: unfenced (a TokenReview writes nothing) and never
        # queued behind Lease renewals or Events.
        self.auth_client = Client(opts.kubeconfig, opts.context, pool_size=8, timeout=5)
        auth = KubernetesAuth(self.auth_client).check if opts.http_auth == "kubernetes" else None
        self.http = HttpServer(opts.http_addr, Endpoints(
            healthy=self.healthy, ready=self.ready, metrics=self._metrics, status=self.status,
            webhook=self._webhook,
        ), auth=auth)
        self.supervisor = Supervisor(on_restart=lambda name: self.metrics.thread_restarts.labels(name).inc())
        self.source_condition = Condition("source")
        self.cluster_condition = Condition("cluster")
        # Its own small client: a probe must not queue behind requests hanging on the main pool.
        self.probe_client = Client(opts.kubeconfig, opts.context, pool_size=1, timeout=opts.probe_timeout,
                                   probe_timeout=opts.probe_timeout)
        self.probe = ClusterProbe(self.probe_client, self.cluster_condition, interval=opts.probe_interval,
                                  on_change=self._on_cluster_change)
        self._state = threading.Lock()
        self._source: _Source | None = None
        self._source_error = ""  # fetch/render failed (masked), or a pass crashed on this source
        self._source_error_revision = ""
        self._crashed = ""  # a pass crashed unexpectedly on the current source (masked)
        self._cluster_was_down = False
        self._source_checked = 0.0
        # A local work tree is read while people write to it: a render is acted on (applied, pruned) only
        # once a second read, `debounce` later, gives the same digest. (digest, first seen) until then.
        self._candidate: tuple[str, float] | None = None
        self._live_tree = not is_remote(opts.source.repo) and (opts.source.revision or "HEAD").strip() == "HEAD"
        self._entries: dict[ObjectKey, Entry] = {}
        self._pass_errors: list[str] = []
        self._last_pass: dict[str, Any] = {}
        self._applied: tuple[str, str] | None = None  # (revision, source) of the last clean full pass
        self._first_sync = False
        self._reported: dict[ObjectKey, tuple[Any, ...]] = {}
        self._converged: dict[ObjectKey, str] = {}  # key -> digest it was last seen in sync at
        self._deleted: set[ObjectKey] = set()  # desired objects someone deleted (seen through the watch)
        self._added: set[ObjectKey] = set()  # desired objects the latest revision added (not in the one before)
        self._fingerprints: dict[ObjectKey, str] = {}
        self._local_watch: LocalWatch | None = None
        self._tickers: list[Ticker] = []

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.http.port

    def start(self) -> Daemon:
        self.http.start()
        sup = self.supervisor
        sup.spawn("reconciler", self._work)
        sup.spawn("cluster-probe", self.probe.run)
        self.queue.add(SOURCE)
        if self.leader is not None:
            sup.spawn("leader", self.leader.run)
        self._tickers = [
            Ticker("git-poll", self.opts.interval, lambda: self.queue.add(SOURCE), jitter=self.opts.jitter),
            Ticker("resync", self.opts.resync, lambda: self.queue.add(FULL), jitter=0.05),
        ]
        for ticker in self._tickers:
            if ticker.period > 0:
                sup.spawn(ticker.name, ticker.run)
        self._local_watch = self._watch_local()
        if self._local_watch is not None:
            sup.watch("file-watch", lambda: "" if self._local_watch is None or self._local_watch.alive()
                      else "watchdog observer stopped", revive=self._revive_local_watch)
        sup.watch("watches", self.cache.dead, revive=self.cache.revive)
        sup.watch("events", lambda: "" if self.events.alive() else "Event recorder stopped")
        log.info("daemon started", repo=mask_url(self.opts.source.repo), mode=self._mode,
                 http=f"{self.opts.http_addr} (port {self.port})", http_auth=self.opts.http_auth,
                 leader_elect=self.opts.leader_elect,
                 identity=self.opts.identity, inventory=f"{self.opts.inventory_namespace}/{self.opts.inventory_name}",
                 on_conflict=self.opts.pass_opts.policy.value, prune=self.opts.pass_opts.prune)
        return self

    def stop(self) -> None:
        """Finish the pass in flight (or abandon it after the grace period), release the Lease, stop.

        Every loop wakes on its stop event, so an idle daemon stops in well under a second. While the API
        server is unreachable nothing waits on it: the pass in flight is abandoned after 1 s (its writes
        are fenced), the Lease is left to expire and queued Events are dropped (else up to ~20 s)."""
        if self._stopping:
            return
        self._stopping = True
        reachable = self.cluster_condition.ok
        grace = self.opts.shutdown_grace if reachable else min(self.opts.shutdown_grace, 1.0)
        log.info("shutting down", grace=grace, cluster_reachable=reachable)
        self.supervisor.stop()
        for t in self._tickers:
            t.stop()
        self.probe.stop()
        if self._local_watch is not None:
            self._local_watch.stop()
        self.queue.shutdown()
        if not self.supervisor.join("reconciler", grace):
            log.warning("abandoning the pass in flight: further writes are refused")
            self._abandon = True
            self.supervisor.join("reconciler", 5 if reachable else 0)
        self._abandon = True
        if self.leader is not None:
            self.leader.stop()
            if reachable:
                self.leader.release()
            else:
                log.warning("not releasing the Lease: the API server is unreachable (it expires on its own)")
        self.cache.stop()
        self.events.stop(timeout=3 if reachable else 0)
        self.http.stop()
        for c in (self.client, self.aux, self.watch_client, self.auth_client, self.probe_client):
            c.close()
        self._stop.set()
        log.info("stopped")

    def _watch_local(self) -> LocalWatch | None:
        return watch_local(self.opts.source.repo, lambda: self.queue.add(SOURCE), self.opts.debounce)

    def _revive_local_watch(self) -> None:
        """The watchdog observer died: start a new one and look at the source (changes may be missed)."""
        old, self._local_watch = self._local_watch, None
        if old is not None:
            old.stop()
        self._local_watch = self._watch_local()
        self.queue.add(SOURCE)

    def wait(self, timeout: float | None = None) -> bool:
        return self._stop.wait(timeout)

    @property
    def _mode(self) -> str:
        return "self-heal" if self.opts.self_heal else "detect-only"

    @property
    def _forcing(self) -> bool:
        return self.opts.pass_opts.policy is ConflictPolicy.FORCE

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
        while not self.queue.is_shutdown:
            batch = self.queue.get_batch(timeout=0.5)
            if not batch:
                continue
            try:
                self._handle(set(batch))
            except Exception as exc:  # keep the loop alive; the keys are retried with backoff
                log.error("reconcile failed unexpectedly", error=describe_crash(exc))
                for key in batch:
                    self.queue.add_rate_limited(key)
            finally:
                self.queue.done(batch)

    def _handle(self, keys: set[QueueKey]) -> None:
        full = FULL in keys
        if SOURCE in keys:
            full = self._refresh_source() or full
        src = self._source
        if src is None or self._stopping:
            return
        if not self._active():
            return  # a follower keeps its source and caches warm, and waits
        if full:
            self._pass(src, None)
            return
        only = {k for k in keys if isinstance(k, ObjectKey) and k in src.by_key}
        if only:
            self._pass(src, only)

    def _refresh_source(self) -> bool:
        """Fetch and render; True when the desired state changed. On failure keep the last good one.

        Any exception of fetch or render marks the source failed (masked); an API server that cannot
        be reached while resolving the new revision is the cluster's condition, not the source's."""
        self._source_checked = time.time()
        try:
            checkout, objects = load(self.opts.source)
        except Exception as exc:
            self._load_failed(exc)
            return False
        digest = _digest(checkout.revision, objects)
        current = self._source
        if current is not None and current.digest == digest:
            self._candidate = None
            self._source_ok(checkout.revision)
            return False
        if not self._seen_twice(digest):
            return False
        try:
            self.engine.discovery.refresh()  # a new revision may bring CRDs, the cluster new kinds
            targets = self.engine.resolve(objects, self.opts.pass_opts)
        except ClusterError as exc:
            self._cluster_trouble(exc)
            self._set_source_health(checkout.revision, load_error="")  # Git is fine; keep SOURCE's backoff
            delay = self.queue.add_rate_limited(SOURCE)
            log.warning("cannot resolve the new revision: the API server failed; keeping the last good state",
                        revision=checkout.revision, error=mask_url(str(exc)), retry_in=round(delay, 2))
            return False
        except Exception as exc:
            self._source_failed(_masked(exc, Redactor(o.manifest for o in objects)), checkout.revision)
            return False
        new = _Source(
            checkout=checkout, targets=targets, digest=digest, by_key={t.key: t for t in targets},
            paths={t.key: tracked_paths(t.manifest) for t in targets},
        )
        old_keys = set(self._source.by_key) if self._source else set()
        self._source = new
        self._source_ok(checkout.revision)
        gone = old_keys - set(new.by_key)
        self._added = set(new.by_key) - old_keys if old_keys else set()
        self.history.forget(gone)
        self.yields.forget(gone)
        for y in self.yields.resume_changed(new.by_key):
            self._report_resume(y, "Git's value changed")
        for key in gone:
            self._reported.pop(key, None)
            self._converged.pop(key, None)
            self._fingerprints.pop(key, None)
            self._deleted.discard(key)
        self.cache.set_interest(targets)
        log.info("source loaded", revision=checkout.revision or "(plain directory)", objects=len(targets),
                 digest=digest[:12])
        return True

    def _seen_twice(self, digest: str) -> bool:
        """Whether a new render of a local work tree is stable: the same digest `debounce` apart.

        A file caught half-written renders fewer objects (or fewer fields); acting on it would prune or
        strip what the finished file still has. A commit of a remote (or a pinned --revision) is
        immutable and needs no second look.
        """
        if not self._live_tree:
            return True
        now, quiet = time.monotonic(), max(self.opts.debounce, 0.05)
        if self._candidate is not None and self._candidate[0] == digest:
            waited = now - self._candidate[1]
            if waited >= quiet:
                self._candidate = None
                return True
            self.queue.add_after(SOURCE, quiet - waited)
            return False
        self._candidate = (digest, now)
        self.queue.add_after(SOURCE, quiet)
        log.info("source changed; reading it again after the quiet period before acting on it",
                 digest=digest[:12], seconds=quiet)
        return False

    def _source_ok(self, revision: str) -> None:
        self.queue.forget(SOURCE)
        self._set_source_health(revision, load_error="")

    def _load_failed(self, exc: BaseException) -> None:
        revision = ""
        if not isinstance(exc, SourceError):  # the fetch worked (a render failed): name the broken commit
            with contextlib.suppress(Exception):
                revision = fetch(self.opts.source.repo, self.opts.source.revision, self.opts.source.path,
                                 cache_dir=self.opts.source.cache_dir).revision
        self._source_failed(_masked(exc, self._redactor()), revision)

    def _redactor(self) -> Redactor:
        """The Secret values of the last good state: a broken commit most likely keeps most of them."""
        return Redactor(t.manifest for t in self._source.targets) if self._source else Redactor()

    def _source_failed(self, error: str, revision: str) -> None:
        """Fetch, render or resolve failed: keep the last good state, retry with backoff, report once."""
        delay = self.queue.add_rate_limited(SOURCE)
        self.metrics.source_errors.inc()
        kept = self._source.checkout.revision if self._source else ""
        if error != self._source_error or revision != self._source_error_revision:
            log.error("source failed; keeping the last good state", error=error, revision=revision,
                      kept_revision=kept or None, retry_in=round(delay, 2))
        self._set_source_health(revision, load_error=error)

    def _set_source_health(self, revision: str, *, load_error: str) -> None:
        """One place decides the source condition: a fetch/render error, or a pass that crashed on it."""
        self._source_error = load_error
        self._source_error_revision = revision if load_error else ""
        error = load_error or self._crashed
        kept = self._source.checkout.revision if self._source else ""
        if error:
            rev = revision if load_error else kept
            self.metrics.source_ok.set(0)
            if self.source_condition.set(False, error, rev):
                keeping = f"; keeping {short_revision(kept)}" if kept else ""
                self._source_event("SourceFailed", WARNING,
                                   f"source failed at revision {short_revision(rev) or '(unknown)'}{keeping}: {error}")
            return
        was_failed = self.source_condition.state is False
        self.metrics.source_ok.set(1)
        if self.source_condition.set(True, revision=revision) and was_failed:
            log.info("source healthy again", revision=revision)
            self._source_event("SourceRecovered", NORMAL,
                               f"source healthy again at revision {short_revision(revision)}")

    def _source_event(self, reason: str, etype: str, message: str) -> None:
        """An Event on the inventory parent ConfigMap (it stands for the whole source); leader only."""
        if not self._active():
            return
        self.events.record(EventSpec(
            key=ObjectKey("", "ConfigMap", self.opts.inventory_namespace, self.opts.inventory_name),
            api_version="v1", reason=reason, message=message, type=etype, series=reason,
        ))

    def _cluster_trouble(self, exc: ClusterError) -> None:
        """A request failed: when the connection itself broke, let the probe look now, not in 5 s."""
        if not isinstance(exc, ApiError):
            self.probe.poke()

    def _on_cluster_change(self, ok: bool, error: str) -> None:
        self.metrics.cluster_ok.set(1 if ok else 0)
        if not ok:
            self._cluster_was_down = True
            log.error("API server unreachable; not counted as a source error", server=self.probe_client.server,
                      error=mask_url(error))
            return
        if self._cluster_was_down:
            self._cluster_was_down = False
            log.info("API server reachable again", server=self.probe_client.server)
            # What failed meanwhile failed because of the outage: look again now, from the base delay.
            for key in (SOURCE, FULL):
                self.queue.forget(key)
                self.queue.add(key)

    # -- passes -----------------------------------------------------------------------------

    def _pass(self, src: _Source, only: set[ObjectKey] | None) -> None:
        kind = "full" if only is None else "partial"
        opts = replace(self.opts.pass_opts)
        # Never prune on a partial picture: a failed render, a crashed plan, or a partial pass.
        opts.prune = opts.prune and only is None and not self._source_error and not self._crashed
        if only is None:
            self.cache.wait_synced(5.0)
        t0 = time.monotonic()
        try:
            targets = self._yielding(src, only)
            cs = self.engine.run(src.checkout, targets, opts, apply=self.opts.self_heal,
                                 live_of=self._live_of, only=only)
            for e in cs.entries:
                e.yielded = [y.to_field() for y in self.yields.of(e.key)]
        except GitOpsError as exc:
            if isinstance(exc, ClusterError):
                self._cluster_trouble(exc)
            self._pass_failed(kind, only, mask_url(str(exc)), time.monotonic() - t0)
            return
        except Exception as exc:  # a crash while planning this source: the source is failed, not the daemon
            self._crashed = _masked(exc, self._redactor())
            self._pass_failed(kind, only, self._crashed, time.monotonic() - t0)
            self._set_source_health(src.checkout.revision, load_error=self._source_error)
            return
        if self._crashed:
            self._crashed = ""
            self._set_source_health(src.checkout.revision, load_error=self._source_error)
        took = time.monotonic() - t0
        if self.opts.self_heal and not self._may_write():
            # Leadership was lost (or SIGTERM came) during the pass: its refused writes are not news,
            # and reporting them would make a follower record Events. The new leader starts afresh.
            self.metrics.passes.labels(kind, "abandoned").inc()
            log.warning("pass abandoned: this replica may no longer write", kind=kind)
            return
        result = "error" if cs.has_errors else "success"
        self.metrics.passes.labels(kind, result).inc()
        self.metrics.pass_duration.labels(kind).observe(took)
        retry_in = 0.0
        if only is None:
            if cs.errors:
                # Backoff grows until a clean pass: a permanent failure costs a few passes a minute.
                retry_in = self.queue.add_rate_limited(FULL)
            else:
                if not cs.has_errors:
                    self.queue.forget(FULL)
                self._first_sync = True
                self._applied = (cs.revision, cs.source)
                self.metrics.set_revision(cs.revision, cs.source)
                self.metrics.applied_at.set(time.time())
        # A full pass that is retried as a whole retries its failed objects too: one backoff, not two.
        self._absorb(src, cs, only is None, retry_objects=not retry_in, retry_in=retry_in)
        with self._state:
            self._last_pass = {"kind": kind, "result": result, "objects": len(cs.entries),
                               "finished": iso_time(time.time()), "durationSeconds": round(took, 4),
                               "summary": cs.summary()}
        level = log.info if (only is None or cs.has_changes or cs.has_errors) else log.debug
        level("pass", kind=kind, revision=cs.revision, seconds=round(took, 3),
              **{k: v for k, v in cs.summary().items() if v})

    def _yielding(self, src: _Source, only: set[ObjectKey] | None) -> list[Target]:
        """The targets of this pass with yielded fields left out (daemon/yields.py): end the yields that
        expired or whose HPA is gone, yield to autoscalers seen for the first time, then drop the fields."""
        for y in self.yields.expired():
            self._report_resume(y, f"{y.manager} has not written it for {self.opts.fight_window:g} s")
        scope = src.targets if only is None else [t for t in src.targets if t.key in only]
        hpas: dict[str, list[Manifest] | None] = {}
        autoscaled = self.yields.autoscaled_keys()
        for t in scope:
            live = self.cache.get(t.key)[1]
            if live is None or not self.opts.autoscaler_wins:
                continue
            if self.yields.suppressed(t.key):
                self.yields.settle(t.key, live)
            scaled = scaled_by_controller_manager(live)
            if t.key in autoscaled and (scaled or only is None):
                if only is None:  # a full pass checks the HPA is still there
                    known, hpa = self._autoscaler_of(t.key, hpas)
                    if known and hpa is None:
                        for y in self.yields.autoscaler_gone(t.key):
                            self._report_resume(y, "no HorizontalPodAutoscaler scales it any more")
                continue
            if not scaled:
                continue
            known, hpa = self._autoscaler_of(t.key, hpas)
            if hpa is None:
                continue  # no HPA (deleted, or not readable): an old owner entry is not a reason to yield
            for y in self.yields.for_autoscaler(t, live, hpa):
                self._report_yield(y, live)
        if not any(self.yields.has(t.key) for t in scope):
            return src.targets
        return [self.yields.body(t, self.cache.get(t.key)[1]) if (only is None or t.key in only) else t
                for t in src.targets]

    def _autoscaler_of(self, key: ObjectKey, hpas: dict[str, list[Manifest] | None]) -> tuple[bool, Autoscaler | None]:
        """(known, the HPA scaling `key`): the namespace's HPAs are listed once per pass; a refused or
        failed list is unknown (never a reason to yield, nor to resume)."""
        if key.namespace not in hpas:
            try:
                doc = self.aux.get(f"/apis/autoscaling/v2/namespaces/{key.namespace}/horizontalpodautoscalers")
                hpas[key.namespace] = list(doc.get("items") or [])
            except ClusterError as exc:
                log.info("cannot list HorizontalPodAutoscalers", namespace=key.namespace, error=str(exc))
                hpas[key.namespace] = None
        items = hpas[key.namespace]
        if items is None:
            return False, None
        return True, find_autoscaler(key, items)

    def _pass_failed(self, kind: str, only: set[ObjectKey] | None, error: str, took: float) -> None:
        self.metrics.passes.labels(kind, "error").inc()
        self.metrics.pass_duration.labels(kind).observe(took)
        retry = [FULL] if only is None else list(only)
        delays = [self.queue.add_rate_limited(k) for k in retry]
        log.error("pass failed", kind=kind, error=error, retry_in=round(min(delays), 2),
                  attempt=self.queue.failures(retry[0]))
        with self._state:
            self._last_pass = {"kind": kind, "result": "error", "error": error,
                               "finished": iso_time(time.time()), "durationSeconds": round(took, 4)}
            if only is None:
                self._pass_errors = [error]

    def _live_of(self, targets: Sequence[Target]) -> LiveMap:
        """Live state from the watch cache; what the cache calls absent is read again from the API.

        A lagging cache would plan an existing object as a create: it could not be told apart as a
        member of another ApplySet (`shared`), nor as existing before us (the apply's answer still marks
        it adopted). Absent objects are rare (new in Git, deleted out of band), so this costs little.
        """
        fresh: set[ObjectKey] = set()

        def read(ts: Sequence[Target]) -> LiveMap:
            fresh.update(t.key for t in ts)
            return self._read_live(ts)

        live = self.cache.live_of(targets, read)
        doubtful = [t for t in targets if live.get(t.key) is None and t.key not in fresh]
        if doubtful:
            live.update(self._read_live(doubtful))
        return live

    def _read_live(self, targets: Sequence[Target]) -> LiveMap:
        """API reads for what the cache cannot answer (a refused read plans that one object as absent)."""
        return self.engine.manager.fetch_live(targets)

    def _absorb(self, src: _Source, cs: ChangeSet, full: bool, *, retry_objects: bool, retry_in: float) -> None:
        with self._state:
            if full:
                self._entries = {e.key: e for e in cs.entries}
                self._pass_errors = list(cs.errors)
            else:
                self._entries.update((e.key, e) for e in cs.entries)
            entries = list(self._entries.values())
        for error in cs.errors:  # once per retry: the delay doubles each time
            log.error("pass error", error=error, retry_in=round(retry_in, 2), attempt=self.queue.failures(FULL))
        for e in cs.entries:
            self._report(src, e, applied=not cs.dry_run, retry=retry_objects)
        self.metrics.set_objects(entries, applied=not cs.dry_run, forcing=self._forcing)
        self.metrics.cache_objects.set(self.cache.objects())

    # -- reporting --------------------------------------------------------------------------

    def _report(self, src: _Source, e: Entry, *, applied: bool, retry: bool = True) -> None:
        key = e.key
        if e.action is Action.UNCHANGED:
            self._reported.pop(key, None)
            self._converged[key] = src.digest
            self._deleted.discard(key)
            self.queue.forget(key)
            return
        if e.action is Action.PRUNE:
            if applied:
                log.info("pruned", object=str(key), message=e.message)
            elif self._reported.get(key) != ("prune",):  # detect-only: say it once, not every full pass
                self._reported[key] = ("prune",)
                log.warning("would prune", object=str(key), message=e.message)
            return
        fields = list({c.path: c for c in e.drift + e.conflicts}.values())  # a conflict is also a drift
        sig = (e.action.value, e.message if e.action is Action.ERROR else "",
               tuple(sorted((c.path, json.dumps(c.live, default=str), c.manager) for c in fields)))
        if e.action is Action.ERROR:
            if retry:
                self.queue.add_rate_limited(key)
            if sig != self._reported.get(key):
                self._reported[key] = sig
                self.metrics.errors.inc()
                log.error("object failed", object=str(key), error=e.message)
                self._event(src, e, "SyncFailed", WARNING, e.message)
            return
        self.queue.forget(key)
        deleted = key in self._deleted
        foreign = any(c.manager and c.manager != self.opts.field_manager for c in fields)
        # Git moved on rather than the cluster: the object was in sync at an earlier revision (or is new in
        # this one) and nobody else owns what differs. Not drift, also in --detect-only.
        new_revision = not deleted and not foreign and (
            (key in self._converged and self._converged[key] != src.digest)
            or (e.action is Action.CREATE and key in self._added))
        out_of_band = (deleted or self._converged.get(key) == src.digest or foreign
                       or (not applied and not new_revision))
        if applied:
            self._converged[key] = src.digest
            self._deleted.discard(key)
        if sig == self._reported.get(key):
            return  # the same drift as already reported (detect-only, or a conflict left in place)
        self._reported[key] = sig
        detail = _describe(key, fields)
        log_fields = [_field_log(key, c) for c in fields]
        conflict = e.action is Action.CONFLICT or bool(e.conflicts)
        if e.action is Action.UPDATE and not fields:
            # Only our bookkeeping (membership label, intent hash) differed: not a field anyone drifted.
            log.info("ownership recorded" if applied else "ownership record would be restored (detect-only)",
                     object=str(key), revision=src.checkout.revision)
        elif conflict and not (self._forcing and not applied):
            self.metrics.conflicts.inc()
            log.warning("conflict", object=str(key), message=e.message, fields=log_fields)
            self._event(src, e, "Conflict", WARNING, f"{e.message}: {detail}")
        elif out_of_band:
            what = "deleted out of band; recreated" if deleted and applied else (
                "deleted out of band" if deleted else detail)
            if applied:
                self.metrics.drift.labels("corrected").inc()
                log.warning("drift corrected", object=str(key), fields=log_fields, deleted=deleted)
                self._event(src, e, "DriftCorrected", NORMAL, f"drift corrected to Git {_rev(src)}: {what}")
            else:
                self.metrics.drift.labels("detected").inc()
                log.warning("drift detected", object=str(key), fields=log_fields, missing=e.action is Action.CREATE)
                if e.action is Action.CREATE:
                    what = "missing from the cluster" if not deleted else what
                self._event(src, e, "DriftDetected", WARNING, f"differs from Git {_rev(src)} (not corrected: "
                            f"detect-only): {what}")
        elif not applied:
            log.info("new revision not applied (detect-only)", object=str(key), revision=src.checkout.revision,
                     missing=e.action is Action.CREATE, fields=log_fields)
        else:
            log.info("applied" if e.action is not Action.CREATE else "created", object=str(key),
                     revision=src.checkout.revision, fields=log_fields)
        if applied and not conflict:
            self._reported.pop(key, None)  # corrected: the next drift of the same field is news again

    def _event(self, src: _Source, e: Entry, reason: str, etype: str, message: str) -> None:
        _known, live = self.cache.get(e.key)
        meta = (live or {}).get("metadata") or {}
        self.events.record(EventSpec(
            key=e.key, api_version=e.api_version, reason=reason, message=message, type=etype,
            series=",".join(sorted(c.path for c in e.drift + e.conflicts)),
            uid=str(meta.get("uid") or ""), resource_version=str(meta.get("resourceVersion") or ""),
        ))

    def _report_fight(self, fight: Fight, live: Manifest) -> None:
        self.metrics.fights.inc()
        log.warning("field fight", object=str(fight.key), field=fight.path, managers=fight.managers,
                    changes=fight.changes, values=[{"manager": r.manager, "value": r.value,
                                                    "time": r.time} for r in fight.records[-10:]])
        meta = live.get("metadata") or {}
        self.events.record(EventSpec(
            key=fight.key, api_version=str(live.get("apiVersion", "")), reason="FieldFight",
            message=fight.message(), type=WARNING, series=fight.path, uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        ))

    def _report_yield(self, y: Yield, live: Manifest) -> None:
        self.metrics.yields.inc()
        log.warning("yielding field", object=str(y.key), field=y.path, reason=y.reason, manager=y.manager,
                    operation=y.operation, subresource=y.subresource,
                    autoscaler=y.autoscaler.to_dict() if y.autoscaler else None,
                    **({} if is_secret(y.key) else {"desired": y.desired, "live": y.live}), advice=y.advice())
        meta = live.get("metadata") or {}
        self.events.record(EventSpec(
            key=y.key, api_version=str(live.get("apiVersion", "")), reason="FieldYielded", message=y.message(),
            type=WARNING, series=y.path, uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        ))

    def _report_resume(self, y: Yield, why: str) -> None:
        log.info("resuming field", object=str(y.key), field=y.path, reason=y.reason, manager=y.manager, why=why)
        self.queue.add(y.key)
        if not self._active():
            return
        src = self._source
        target = src.by_key.get(y.key) if src else None
        if target is None:
            return
        _known, live = self.cache.get(y.key)
        meta = (live or {}).get("metadata") or {}
        self.events.record(EventSpec(
            key=y.key, api_version=target.info.api_version, reason="FieldResumed", type=NORMAL, series=y.path,
            message=f"correcting {y.path} again (was left to {y.actor}): {why}",
            uid=str(meta.get("uid") or ""), resource_version=str(meta.get("resourceVersion") or ""),
        ))

    # -- watch events -----------------------------------------------------------------------

    def _on_watch(self, etype: EventType, key: ObjectKey | None, obj: Manifest | None) -> None:
        if etype is EventType.RECOVERED:
            # Events may have been missed while the watch was down, and a source refresh may have
            # failed because the API server was: look at both again now rather than after a backoff.
            self.queue.add(SOURCE)
            self.queue.add(FULL)
            return
        src = self._source
        if key is None or src is None or key not in src.by_key:
            return
        if obj is not None:
            fights = self.history.observe(key, src.paths.get(key, ()), obj)
            if fights and self._active():
                for fight in fights:
                    self._report_fight(fight, obj)
            if self.yields.has(key):
                self.yields.noted_write(key, self.history.fields(key))
            for fight in fights:
                y = self.yields.after_fight(fight, src.by_key.get(key))
                if y is not None:
                    self.queue.add_after(key, self.opts.fight_window + 0.1)  # look again when it may expire
                    if self._active():
                        self._report_yield(y, obj)
        if etype is EventType.LISTED:
            self._fingerprints[key] = _fingerprint(obj)
            return
        if etype is EventType.DELETED:
            self._fingerprints.pop(key, None)
            self._deleted.add(key)
        else:
            fp = _fingerprint(obj)
            if self._fingerprints.get(key) == fp:
                return  # only status or bookkeeping changed: nothing we set can differ
            self._fingerprints[key] = fp
        self.queue.add(key)

    def _on_watch_restart(self, resource: str, reason: str) -> None:
        self.metrics.watch_restarts.labels(resource, reason).inc()
        if reason == "error":  # a broken watch is the first sign of an outage: probe now, not in 5 s
            self.probe.poke()

    # -- HTTP -------------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        """Liveness: fails only when a background loop is dead for good (a restart would help).

        An unreachable API server or a broken source is not a liveness failure: restarting the
        process fixes neither; /readyz reports those."""
        if self._stopping:
            return True, "ok (shutting down)"
        dead = self.supervisor.dead()
        if dead:
            return False, "dead: " + "; ".join(dead)
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Readiness, with each failing condition on a line of its own (cluster first: it explains the rest)."""
        if self._stopping:
            return False, "shutting down"
        problems = []
        if not self.cluster_condition.ok:
            problems.append(f"cluster unreachable: {self.cluster_condition.error}")
        if not self.source_condition.ok:
            kept = self._source.checkout.revision if self._source else ""
            rev = self.source_condition.to_dict()["revision"]
            problems.append(f"source failed: {self.source_condition.error}"
                            + (f" (revision {rev})" if rev else "")
                            + (f"; keeping revision {kept}" if kept else ""))
        elif self._source is None:
            problems.append("source not loaded yet")
        if problems:
            return False, "\n".join(problems)
        if not self.cache.is_synced():
            return False, "watch caches not synced yet"
        if self.leader is not None and not self.leader.is_leader:
            return True, f"standby: following {self.leader.holder or '(nobody yet)'}"
        if not self._first_sync:
            return False, "first sync not complete"
        return True, "ok"

    def _metrics(self) -> bytes:
        self.metrics.cache_objects.set(self.cache.objects())
        return self.metrics.exposition()

    def _webhook(self, headers: dict[str, str], body: bytes) -> WebhookResult:
        result = verify_webhook(headers, body, self.opts.webhook_secret)
        if result.ok:
            event = next((v for k, v in headers.items() if k.lower() in ("x-github-event", "x-gitlab-event")), "")
            log.info("webhook: checking the source", provider=result.provider, hook_event=event)
            self.queue.add(SOURCE)
        else:
            log.warning("webhook refused", reason=result.reason, provider=result.provider or None)
        return result

    def status(self, *, full_history: bool = False) -> dict[str, Any]:
        """The `diff -o json` document of the latest state of every object, plus history and fights.

        `history` lists the fields that changed at least once; `full_history` (GET /status?history=all)
        every field Git sets."""
        src = self._source
        with self._state:
            entries = list(self._entries.values())
            errors = list(self._pass_errors)
            last_pass = dict(self._last_pass)
        source = self.source_condition.to_dict()
        if not self.source_condition.ok:
            errors.insert(0, f"source: {source['error']}" + (f" (revision {source['revision']})"
                                                              if source["revision"] else ""))
        if not self.cluster_condition.ok:
            errors.insert(0, f"cluster: {self.cluster_condition.error}")
        cs = ChangeSet(
            revision=src.checkout.revision if src else "", source=self._applied[1] if self._applied else "",
            entries=entries, errors=errors, dry_run=not self.opts.self_heal,
            inventory=self.opts.inventory_name, inventory_namespace=self.opts.inventory_namespace,
            source_identity=self.opts.source_identity.text,
        )
        doc = cs.to_dict()
        applied = self.opts.self_heal
        for obj, e in zip(doc["objects"], cs.sorted_entries(), strict=True):
            obj["state"] = object_state(e, applied=applied, forcing=self._forcing)
        ready, why = self.ready()
        doc["history"] = self.history.to_dict(changed_only=not full_history)
        doc["fights"] = [f.to_dict() for f in self.history.fights()]
        doc["yields"] = [y.to_dict() for y in self.yields.all()]
        doc["daemon"] = {
            "mode": self._mode,
            "identity": self.opts.identity,
            "leader": self.leader.is_leader if self.leader else True,
            "leaseHolder": self.leader.holder if self.leader else self.opts.identity,
            "lease": self.leader.store.where if self.leader else "",
            "ready": ready,
            "readyReason": why,
            "appliedRevision": self._applied[0] if self._applied else "",
            "source": {
                "repo": mask_url(self.opts.source.repo),
                "revision": src.checkout.revision if src else "",
                "lastChecked": iso_time(self._source_checked) if self._source_checked else "",
                "error": source["error"],
                "errorRevision": source["revision"] if source["error"] else "",
            },
            "conditions": {"source": source, "cluster": self.cluster_condition.to_dict(with_revision=False)},
            "threads": self.supervisor.status(),
            "lastPass": last_pass,
            "queueDepth": len(self.queue),
            "watches": self.cache.status(),
            "requests": {"reads": self.client.stats.reads, "writes": self.client.stats.writes,
                         "dryRuns": self.client.stats.dry_runs},
        }
        return doc


# -- helpers -----------------------------------------------------------------------------------------


def _masked(exc: BaseException, redact: Redactor) -> str:
    """An error fit for /status, the log and Events, masked as the CLI masks its one-line error: known
    Secret values and URL credentials always; for a crash (not a message we wrote) every quoted literal
    too, and it says where it happened instead of a traceback."""
    text = mask_url(redact(str(exc)))
    if isinstance(exc, GitOpsError):
        return text
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"internal error: {describe_crash(exc)}" + (f": {mask_literals(first)}" if first else "")


def _digest(revision: str, objects: list[DesiredObject]) -> str:
    """Identity of a desired state: the revision and every rendered manifest (a dirty tree changes it)."""
    h = hashlib.sha256(revision.encode())
    for text in sorted(json.dumps(o.manifest, sort_keys=True, default=str) for o in objects):
        h.update(text.encode())
    return h.hexdigest()


def _fingerprint(obj: Manifest | None) -> str:
    """What a pass can care about: everything except status and the server's bookkeeping."""
    if obj is None:
        return ""
    body = {k: v for k, v in obj.items() if k != "status"}
    meta = copy.copy(body.get("metadata") or {})
    for k in ("resourceVersion", "managedFields", "generation"):
        meta.pop(k, None)
    body["metadata"] = meta
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _value(key: ObjectKey, value: Any) -> str:
    if is_secret(key):
        return "***"
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def _describe(key: ObjectKey, fields: list[FieldChange], limit: int = 5) -> str:
    """`.spec.replicas: 10 (kubectl, Update/scale) -> 3`; Secret values never included."""
    parts = []
    for c in fields[:limit]:
        owner = f" ({c.manager}, {c.operation}{'/' + c.subresource if c.subresource else ''})" if c.manager else ""
        if is_secret(key):
            parts.append(f"{c.path}{owner}")
        else:
            parts.append(f"{c.path}: {_value(key, c.live)}{owner} -> {_value(key, c.desired)}")
    if len(fields) > limit:
        parts.append(f"and {len(fields) - limit} more")
    return "; ".join(parts) or "no field differences"


def _field_log(key: ObjectKey, c: FieldChange) -> dict[str, Any]:
    out: dict[str, Any] = {"path": c.path, "manager": c.manager, "operation": c.operation,
                           "subresource": c.subresource}
    if not is_secret(key):
        out["live"], out["desired"] = c.live, c.desired
    return out


def _rev(src: _Source) -> str:
    return short_revision(src.checkout.revision) or "(plain directory)"


__all__ = ["FULL", "SOURCE", "ConflictPolicy", "Daemon", "DaemonOptions"]
