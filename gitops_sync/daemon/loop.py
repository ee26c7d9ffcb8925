"""The Reconciler: a level-triggered loop that keeps the cluster equal to the current Git revision.

Triggers (watch events, Git polls, file events, webhooks, the resync timer, leadership) only put keys
into the work queue: an object key ("look at this object"), SOURCE ("look at Git") or FULL ("look at
everything"). One worker takes whatever is queued and recomputes desired vs live for those objects
from the watch cache and the current revision, so a missed event, a restart or a disconnect is healed
by the next pass for the key or by the periodic full resync. Only one pass runs at a time.

Writes go through a fenced client: it refuses every non-dry-run request unless this replica may write
(self-heal mode, leader, not shutting down), so even a pass that started while leading cannot write
once leadership is lost.
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
from gitops_sync.cluster.client import Client
from gitops_sync.daemon.auth import KubernetesAuth
from gitops_sync.daemon.cache import EventType, WatchCache
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
from gitops_sync.daemon.triggers import Ticker, WebhookResult, verify_webhook, watch_local
from gitops_sync.engine import Engine, PassOptions, SourceOptions, load
from gitops_sync.errors import ClusterError, GitOpsError, RenderError
from gitops_sync.plan.changeset import Action, ChangeSet, Entry, FieldChange
from gitops_sync.plan.planner import Target
from gitops_sync.resource import DesiredObject, Manifest, ObjectKey
from gitops_sync.source import Checkout, SourceIdentity, fetch, identify, mask_url, short_revision
from gitops_sync.source.checkout import is_remote

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
    queue_backoff_cap: float = 60.0
    watch_backoff_cap: float = 8.0

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
        # `request` goes through here too: one fence for every write.
        query = kwargs.get("query") or {}
        if method not in ("GET", "HEAD") and not query.get("dryRun") and not self.may_write():
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
        self.queue: WorkQueue[QueueKey] = WorkQueue(backoff_cap=opts.queue_backoff_cap,
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
        self._state = threading.Lock()
        self._source: _Source | None = None
        self._source_error = ""
        self._source_error_revision = ""
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
        self._tickers: list[Ticker] = []
        self._unwatch: Callable[[], None] | None = None
        self._worker = threading.Thread(target=self._work, name="reconciler", daemon=True)
        self._leader_thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.http.port

    def start(self) -> Daemon:
        self.http.start()
        self._worker.start()
        self.queue.add(SOURCE)
        if self.leader is not None:
            self._leader_thread = threading.Thread(target=self.leader.run, name="leader", daemon=True)
            self._leader_thread.start()
        self._tickers = [
            Ticker("git-poll", self.opts.interval, lambda: self.queue.add(SOURCE), jitter=self.opts.jitter).start(),
            Ticker("resync", self.opts.resync, lambda: self.queue.add(FULL), jitter=0.05).start(),
        ]
        self._unwatch = watch_local(self.opts.source.repo, lambda: self.queue.add(SOURCE), self.opts.debounce)
        log.info("daemon started", repo=mask_url(self.opts.source.repo), mode=self._mode,
                 http=f"{self.opts.http_addr} (port {self.port})", http_auth=self.opts.http_auth,
                 leader_elect=self.opts.leader_elect,
                 identity=self.opts.identity, inventory=f"{self.opts.inventory_namespace}/{self.opts.inventory_name}",
                 on_conflict=self.opts.pass_opts.policy.value, prune=self.opts.pass_opts.prune)
        return self

    def stop(self) -> None:
        """Finish the pass in flight (or abandon it after the grace period), release the Lease, stop."""
        if self._stopping:
            return
        self._stopping = True
        log.info("shutting down", grace=self.opts.shutdown_grace)
        for t in self._tickers:
            t.stop()
        if self._unwatch is not None:
            self._unwatch()
        self.queue.shutdown()
        self._worker.join(self.opts.shutdown_grace)
        if self._worker.is_alive():
            log.warning("abandoning the pass in flight: further writes are refused")
            self._abandon = True
            self._worker.join(5)
        self._abandon = True
        if self.leader is not None:
            self.leader.stop()
            self.leader.release()
        self.cache.stop()
        self.events.stop(timeout=3)
        self.http.stop()
        for c in (self.client, self.aux, self.watch_client, self.auth_client):
            c.close()
        self._stop.set()
        log.info("stopped")

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
            except Exception:  # keep the loop alive; the keys are retried with backoff
                log.exception("reconcile failed unexpectedly")
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
        """Fetch and render; True when the desired state changed. On failure keep the last good one."""
        self._source_checked = time.time()
        try:
            checkout, objects = load(self.opts.source)
            digest = _digest(checkout.revision, objects)
            current = self._source
            if current is not None and current.digest == digest:
                self._candidate = None
                self._source_ok()
                return False
            if not self._seen_twice(digest):
                return False
            self.engine.discovery.refresh()  # a new revision may bring CRDs, the cluster new kinds
            targets = self.engine.resolve(objects, self.opts.pass_opts)
        except GitOpsError as exc:
            self._source_failed(exc)
            return False
        new = _Source(
            checkout=checkout, targets=targets, digest=digest, by_key={t.key: t for t in targets},
            paths={t.key: tracked_paths(t.manifest) for t in targets},
        )
        old_keys = set(self._source.by_key) if self._source else set()
        self._source = new
        self._source_ok()
        gone = old_keys - set(new.by_key)
        self._added = set(new.by_key) - old_keys if old_keys else set()
        self.history.forget(gone)
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

    def _source_ok(self) -> None:
        self.queue.forget(SOURCE)
        if self._source_error:
            log.info("source healthy again", revision=self._source.checkout.revision if self._source else "")
        self._source_error = ""
        self._source_error_revision = ""
        self.metrics.source_ok.set(1)

    def _source_failed(self, exc: GitOpsError) -> None:
        revision = ""
        if isinstance(exc, RenderError):  # the fetch worked: name the broken commit
            with contextlib.suppress(GitOpsError):
                revision = fetch(self.opts.source.repo, self.opts.source.revision, self.opts.source.path,
                                 cache_dir=self.opts.source.cache_dir).revision
        delay = self.queue.add_rate_limited(SOURCE)
        self.metrics.source_errors.inc()
        self.metrics.source_ok.set(0)
        kept = self._source.checkout.revision if self._source else ""
        if str(exc) != self._source_error or revision != self._source_error_revision:
            log.error("source failed; keeping the last good state", error=mask_url(str(exc)),
                      revision=revision, kept_revision=kept or None, retry_in=round(delay, 2))
        self._source_error = mask_url(str(exc))
        self._source_error_revision = revision

    # -- passes -----------------------------------------------------------------------------

    def _pass(self, src: _Source, only: set[ObjectKey] | None) -> None:
        kind = "full" if only is None else "partial"
        opts = replace(self.opts.pass_opts)
        # Never prune on a partial picture: a failed render, or a partial pass.
        opts.prune = opts.prune and only is None and not self._source_error
        if only is None:
            self.cache.wait_synced(5.0)
        t0 = time.monotonic()
        try:
            cs = self.engine.run(src.checkout, src.targets, opts, apply=self.opts.self_heal,
                                 live_of=self._live_of, only=only)
        except GitOpsError as exc:
            took = time.monotonic() - t0
            self.metrics.passes.labels(kind, "error").inc()
            self.metrics.pass_duration.labels(kind).observe(took)
            retry = [FULL] if only is None else list(only)
            delays = [self.queue.add_rate_limited(k) for k in retry]
            log.error("pass failed", kind=kind, error=str(exc), retry_in=round(min(delays), 2))
            with self._state:
                self._last_pass = {"kind": kind, "result": "error", "error": str(exc),
                                   "finished": _iso(time.time()), "durationSeconds": round(took, 4)}
                if only is None:
                    self._pass_errors = [str(exc)]
            return
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
        self._absorb(src, cs, only is None)
        if only is None:
            self.queue.forget(FULL)
            if cs.errors:
                self.queue.add_rate_limited(FULL)
            else:
                self._first_sync = True
                self._applied = (cs.revision, cs.source)
                self.metrics.set_revision(cs.revision, cs.source)
                self.metrics.applied_at.set(time.time())
        with self._state:
            self._last_pass = {"kind": kind, "result": result, "objects": len(cs.entries),
                               "finished": _iso(time.time()), "durationSeconds": round(took, 4),
                               "summary": cs.summary()}
        level = log.info if (only is None or cs.has_changes or cs.has_errors) else log.debug
        level("pass", kind=kind, revision=cs.revision, seconds=round(took, 3),
              **{k: v for k, v in cs.summary().items() if v})

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

    def _absorb(self, src: _Source, cs: ChangeSet, full: bool) -> None:
        with self._state:
            if full:
                self._entries = {e.key: e for e in cs.entries}
                self._pass_errors = list(cs.errors)
            else:
                self._entries.update((e.key, e) for e in cs.entries)
            entries = list(self._entries.values())
        for error in cs.errors:
            log.error("pass error", error=error)
        for e in cs.entries:
            self._report(src, e, applied=not cs.dry_run)
        self.metrics.set_objects(entries, applied=not cs.dry_run, forcing=self._forcing)
        self.metrics.cache_objects.set(self.cache.objects())

    # -- reporting --------------------------------------------------------------------------

    def _report(self, src: _Source, e: Entry, *, applied: bool) -> None:
        key = e.key
        if e.action is Action.UNCHANGED:
            self._reported.pop(key, None)
            self._converged[key] = src.digest
            self._deleted.discard(key)
            self.queue.forget(key)
            return
        if e.action is Action.PRUNE:
            log.info("pruned" if applied else "would prune", object=str(key), message=e.message)
            return
        fields = list({c.path: c for c in e.drift + e.conflicts}.values())  # a conflict is also a drift
        sig = (e.action.value, e.message if e.action is Action.ERROR else "",
               tuple(sorted((c.path, json.dumps(c.live, default=str), c.manager) for c in fields)))
        if e.action is Action.ERROR:
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

    # -- HTTP -------------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        if not self._worker.is_alive() and not self._stopping:
            return False, "reconciler thread is not running"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if self._stopping:
            return False, "shutting down"
        if self._source is None:
            return False, f"source not loaded yet{': ' + self._source_error if self._source_error else ''}"
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
        if self._source_error:
            errors.insert(0, f"source: {self._source_error}"
                             + (f" (revision {self._source_error_revision})" if self._source_error_revision else ""))
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
                "lastChecked": _iso(self._source_checked) if self._source_checked else "",
                "error": self._source_error,
                "errorRevision": self._source_error_revision,
            },
            "lastPass": last_pass,
            "queueDepth": len(self.queue),
            "watches": self.cache.status(),
            "requests": {"reads": self.client.stats.reads, "writes": self.client.stats.writes,
                         "dryRuns": self.client.stats.dry_runs},
        }
        return doc


# -- helpers -----------------------------------------------------------------------------------------


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


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


__all__ = ["FULL", "SOURCE", "ConflictPolicy", "Daemon", "DaemonOptions"]
