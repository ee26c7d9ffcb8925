"""One source as an object the controller owns: its desired state, its passes, its health and its report.

The process (`loop.Daemon` for `run --repo`, `fleet.Fleet` for GitSync objects) owns what many sources
share: the watch cache, the work queue, the leader/shard fences, Events, metrics and HTTP. It hands a
`SourceReconciler` the queue keys of that source (`handle`) and the watch events of its objects
(`on_watch`); the reconciler runs the pass through its `Engine` and reports through its `Reporter`.
What it found goes to /status (`status_doc`) and, in the fleet, to the GitSync's status subresource.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gitops_sync.apply.manager import LiveMap
from gitops_sync.conventions import ConflictPolicy
from gitops_sync.daemon.reconcile.access import ReadAccess
from gitops_sync.daemon.reconcile.conditions import ClusterProbe, Condition
from gitops_sync.daemon.reconcile.desired import DesiredSource, DesiredState, digest
from gitops_sync.daemon.reconcile.failures import RECONCILE_FAILED, Failures, failures_of
from gitops_sync.daemon.reconcile.history import OwnershipHistory, tracked_paths
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, KeyQueue, QueueKey, Reporter, fingerprint, masked
from gitops_sync.daemon.reconcile.yields import Yields
from gitops_sync.daemon.runtime.cache import EventType, WatchCache
from gitops_sync.daemon.runtime.events import NORMAL, WARNING, EventRecorder, EventSpec
from gitops_sync.daemon.runtime.metrics import Metrics, object_state
from gitops_sync.engine import Engine, PassOptions, SourceOptions
from gitops_sync.errors import ApiError, ClusterError, GitOpsError, RepositoryNotAllowed
from gitops_sync.formatting import rfc3339
from gitops_sync.log import get_logger
from gitops_sync.plan.autoscaler import Autoscaler, find_autoscaler, scaled_by_controller_manager
from gitops_sync.plan.changeset import LIVE_CHANGED, Action, ChangeSet, Entry
from gitops_sync.plan.masking import Redactor
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey
from gitops_sync.source import mask_url, short_revision

log = get_logger("gitops_sync.daemon")

# A prune finalizers hold: nothing watches a member that left Git, so full passes look again, first after
# this many seconds, doubling while it stays, up to the cap.
PENDING_RECHECK = 1.0
PENDING_RECHECK_MAX = 60.0

SOURCE_FAILED = "SourceFailed"  # the reason of a failed fetch or render (RepositoryNotAllowed has its own)


@dataclass
class Shared:
    """What every source of a process uses and none owns."""

    cache: WatchCache
    events: EventRecorder
    metrics: Metrics
    probe: ClusterProbe
    stopping: Callable[[], bool]
    gauges: bool = True  # this source's figures are the process's gauges (one source per process)


@dataclass
class SourceSpec:
    """What a source is: where desired state comes from and how passes treat it."""

    source: SourceOptions
    pass_opts: PassOptions
    self_heal: bool = True
    debounce: float = 0.2
    fight_threshold: int = 3  # another manager taking a field this often within fight_window: yield it
    fight_window: float = 600.0
    autoscaler_wins: bool = True  # yield .spec.replicas to an HPA at once (--git-wins-over-autoscaler: no)


class SourceReconciler:
    """The desired-state source, the passes and the reporter of one source."""

    def __init__(
        self,
        spec: SourceSpec,
        *,
        engine: Engine,
        queue: KeyQueue,
        shared: Shared,
        active: Callable[[], bool],
        may_write: Callable[[], bool],
        field_manager: str,
        subject: tuple[ObjectKey, str] | None = None,
        read_access: ReadAccess | None = None,
    ) -> None:
        self.spec = spec
        # A tenant's source (impersonating): what its ServiceAccount may not read, with the refusal. The
        # shared cache reads with the controller's rights, so nothing of these objects is used or reported.
        self.read_access = read_access
        self.refused: dict[ObjectKey, str] = {}
        self.engine = engine
        self.queue = queue
        self.shared = shared
        self.cache = shared.cache
        self.metrics = shared.metrics
        self._active = active
        self.may_write = may_write
        self.desired = DesiredSource(spec.source, spec.debounce)
        self.history = OwnershipHistory()
        self.yields = Yields(
            threshold=spec.fight_threshold,
            window=spec.fight_window,
            autoscaler_wins=spec.autoscaler_wins,
            field_manager=field_manager,
        )
        self.reporter = Reporter(
            events=shared.events,
            metrics=shared.metrics,
            queue=queue,
            field_manager=field_manager,
            forcing=self.forcing,
            live=lambda k: None if k in self.refused else shared.cache.get(k)[1],
        )
        # Events about the whole source: on the GitSync, or (run --repo) the inventory parent ConfigMap.
        self.subject = subject or (ObjectKey("", "ConfigMap", self.inventory_namespace, self.inventory_name), "v1")
        self.condition = Condition("source")
        self.state = threading.Lock()
        self.lock = threading.Lock()  # held while a pass of this source runs: one pass at a time
        self.load_error = ""  # fetch/render failed (masked), or a pass crashed on this source
        self.load_error_revision = ""
        self.load_error_reason = SOURCE_FAILED  # of the last load_error: its condition and Event reason
        self.crashed = ""  # a pass crashed unexpectedly on the current source (masked)
        self.unresolved = ""  # why the newest render could not be resolved (an API error), while the old is kept
        self.entries: dict[ObjectKey, Entry] = {}
        self.pass_errors: list[str] = []
        self.last_pass: dict[str, Any] = {}
        self.applied: tuple[str, str] | None = None  # (revision, source) of the last clean full pass
        self.first_sync = False
        self.failing = False  # the last pass failed (its Warning Event was sent): the next clean one says so
        self.attempted = ""  # revision of the last pass that ran (clean or not)
        self.fingerprints: dict[ObjectKey, str] = {}
        self.recheck = 0.0  # seconds until the next look at a pending deletion (0: none pending)
        self.on_loaded: Callable[[SourceReconciler], None] | None = None  # the fleet re-indexes interest
        self.on_passed: Callable[[SourceReconciler], None] | None = None  # the fleet writes status

    # -- identity ---------------------------------------------------------------------------

    @property
    def inventory_name(self) -> str:
        return self.spec.pass_opts.name or self.desired.identity.inventory_name()

    @property
    def inventory_namespace(self) -> str:
        return self.spec.pass_opts.inventory_namespace or self.spec.pass_opts.namespace

    @property
    def forcing(self) -> bool:
        return self.spec.pass_opts.policy is ConflictPolicy.FORCE

    @property
    def mode(self) -> str:
        return "self-heal" if self.spec.self_heal else "detect-only"

    @property
    def current(self) -> DesiredState | None:
        return self.desired.state

    def active(self) -> bool:
        return not self.shared.stopping() and self._active()

    # -- the work ---------------------------------------------------------------------------

    def handle(self, keys: set[QueueKey]) -> None:
        full = FULL in keys
        if SOURCE in keys:
            full = self.refresh() or full
        src = self.desired.state
        if src is None or self.shared.stopping():
            return
        if not self.active():
            return  # a follower keeps its source and caches warm, and waits
        if full:
            self.run_pass(src, None)
            return
        only = {k for k in keys if isinstance(k, ObjectKey) and k in src.by_key}
        if only:
            self.run_pass(src, only)

    def refresh(self) -> bool:
        """Fetch and render; True when the desired state changed. On failure keep the last good one.

        Any exception of fetch or render marks the source failed (masked); an API server that cannot
        be reached while resolving the new revision is the cluster's condition, not the source's."""
        try:
            checkout, objects = self.desired.load()
        except Exception as exc:
            reason = exc.reason if isinstance(exc, RepositoryNotAllowed) else SOURCE_FAILED
            self._source_failed(masked(exc, self.desired.redactor()), self.desired.failed_revision(exc), reason)
            return False
        new_digest = digest(checkout.revision, objects)
        if self.desired.unchanged(new_digest):
            self.unresolved = ""  # Git is back at the state held: passes act on what Git wants again
            self._source_ok(checkout.revision)
            return False
        wait = self.desired.wait_before_acting(new_digest)
        if wait > 0:
            self.queue.add_after(SOURCE, wait)
            return False
        try:
            self.engine.discovery.refresh()  # a new revision may bring CRDs, the cluster new kinds
            targets = self.engine.resolve(objects, self.spec.pass_opts)
            # Known before the cache is asked to watch them: on_watch never observes a refused object.
            self._set_refused(targets, full=True)
        except ClusterError as exc:
            self.cluster_trouble(exc)
            self.set_source_health(checkout.revision, load_error="")  # Git is fine; keep SOURCE's backoff
            # The state held is no longer what Git wants: a member only the new revision has would be
            # pruned against it. Passes go on applying it; prune waits until the new revision resolves.
            self.unresolved = (
                f"revision {short_revision(checkout.revision) or '(work tree)'} not resolved against the cluster "
                f"({mask_url(str(exc))}); passes keep the previous revision, without prune, until it resolves"
            )
            delay = self.queue.add_rate_limited(SOURCE)
            log.warning(
                "cannot resolve the new revision: the API server failed; keeping the last good state",
                revision=checkout.revision,
                error=mask_url(str(exc)),
                retry_in=round(delay, 2),
            )
            return False
        except Exception as exc:
            self._source_failed(masked(exc, Redactor(o.manifest for o in objects)), checkout.revision)
            return False
        new = DesiredState(
            checkout=checkout,
            targets=targets,
            digest=new_digest,
            by_key={t.key: t for t in targets},
            paths={t.key: tracked_paths(t.manifest) for t in targets},
        )
        old_keys = set(self.desired.state.by_key) if self.desired.state else set()
        self.desired.state = new
        self.unresolved = ""
        self._source_ok(checkout.revision)
        gone = old_keys - set(new.by_key)
        self.reporter.added = set(new.by_key) - old_keys if old_keys else set()
        self.history.forget(gone)
        self.yields.forget(gone)
        for y in self.yields.resume_changed(new.by_key):
            self.reporter.resumed(y, "Git's value changed", new.by_key[y.key].info.api_version, self.active())
        self.reporter.forget(gone)
        for key in gone:
            self.fingerprints.pop(key, None)
        if self.on_loaded is not None:
            self.on_loaded(self)
        else:
            self.cache.set_interest(targets)
        log.info(
            "source loaded",
            revision=checkout.revision or "(plain directory)",
            objects=len(targets),
            digest=new_digest[:12],
            **self._log_name(),
        )
        return True

    def _log_name(self) -> dict[str, str]:
        """The fleet names the source on every line; `run --repo` has one, and its log stays as it was."""
        return {} if self.shared.gauges else {"gitsync": f"{self.subject[0].namespace}/{self.subject[0].name}"}

    def _source_ok(self, revision: str) -> None:
        self.queue.forget(SOURCE)
        self.set_source_health(revision, load_error="")

    def _source_failed(self, error: str, revision: str, reason: str = "") -> None:
        """Fetch, render or resolve failed: keep the last good state, retry with backoff, report once."""
        self.load_error_reason = reason or SOURCE_FAILED
        delay = self.queue.add_rate_limited(SOURCE)
        self.metrics.source_errors.inc()
        kept = self.desired.state.checkout.revision if self.desired.state else ""
        if error != self.load_error or revision != self.load_error_revision:
            log.error(
                "source failed; keeping the last good state",
                error=error,
                revision=revision,
                kept_revision=kept or None,
                retry_in=round(delay, 2),
                **self._log_name(),
            )
        self.set_source_health(revision, load_error=error)

    def set_source_health(self, revision: str, *, load_error: str) -> None:
        """One place decides the source condition: a fetch/render error, or a pass that crashed on it."""
        self.load_error = load_error
        self.load_error_revision = revision if load_error else ""
        error = load_error or self.crashed
        kept = self.desired.state.checkout.revision if self.desired.state else ""
        if error:
            rev = revision if load_error else kept
            if self.shared.gauges:
                self.metrics.source_ok.set(0)
            if self.condition.set(False, error, rev):
                keeping = f"; keeping {short_revision(kept)}" if kept else ""
                self.source_event(
                    self.load_error_reason if load_error else SOURCE_FAILED,
                    WARNING,
                    f"source failed at revision {short_revision(rev) or '(unknown)'}{keeping}: {error}",
                )
            return
        was_failed = self.condition.state is False
        if self.shared.gauges:
            self.metrics.source_ok.set(1)
        if self.condition.set(True, revision=revision) and was_failed:
            log.info("source healthy again", revision=revision, **self._log_name())
            self.source_event("SourceRecovered", NORMAL, f"source healthy again at revision {short_revision(revision)}")

    def source_event(self, reason: str, etype: str, message: str) -> None:
        """An Event on the object that stands for the whole source; only where passes run."""
        if not self.active():
            return
        key, api_version = self.subject
        self.shared.events.record(
            EventSpec(key=key, api_version=api_version, reason=reason, message=message, type=etype, series=reason)
        )

    def cluster_trouble(self, exc: ClusterError) -> None:
        """A request failed: when the connection itself broke, let the probe look now, not in 5 s."""
        if not isinstance(exc, ApiError):
            self.shared.probe.poke()

    # -- tenant read access -----------------------------------------------------------------

    def _set_refused(self, targets: Sequence[Target], *, full: bool) -> None:
        """Ask again (answers are cached for seconds); forget all that was observed of a newly refused object."""
        if self.read_access is None:
            return
        asked = {t.key for t in targets}
        desired = self.desired.state.by_key if self.desired.state and not full else asked
        refused = {k: v for k, v in self.refused.items() if k not in asked and k in desired}
        refused.update(self.read_access.refused(targets))
        newly = set(refused) - set(self.refused)
        self.refused = refused
        if newly:
            log.info("objects this source may not read: planned as forbidden", objects=len(newly), **self._log_name())
            self.history.forget(newly)
            self.yields.forget(newly)
            self.reporter.forget(newly)
            for key in newly:
                self.fingerprints.pop(key, None)

    # -- passes -----------------------------------------------------------------------------

    def run_pass(self, src: DesiredState, only: set[ObjectKey] | None) -> None:
        kind = "full" if only is None else "partial"
        opts = replace(self.spec.pass_opts)
        # Never prune on a partial picture: a failed render, a crashed plan, a partial pass, or a state Git
        # has moved past (a new revision that could not be resolved).
        opts.prune = opts.prune and only is None and not self.load_error and not self.crashed and not self.unresolved
        if only is None:
            self.cache.wait_synced(5.0)
        t0 = time.monotonic()
        self.attempted = src.checkout.revision
        try:
            scope = src.targets if only is None else [t for t in src.targets if t.key in only]
            self._set_refused(scope, full=only is None)
            # One picture of the cluster for the whole pass: the yield check and the plan read the same live
            # objects. Read twice, an HPA's scale landing between the two reads was corrected (the plan saw
            # it) without being yielded to (the check had not): one fight with the autoscaler.
            live = self._live_of([t for t in scope if t.key not in self.refused])
            targets = self._yielding(src, only, live)
            cs = self.engine.run(
                src.checkout,
                targets,
                opts,
                apply=self.spec.self_heal,
                live_of=lambda ts: _from_picture(live, ts, self._live_of),
                only=only,
                refused=self.refused,
            )
            for e in cs.entries:
                e.yielded = [y.to_field() for y in self.yields.of(e.key)]
                self._since_from_history(e)
        except GitOpsError as exc:
            if isinstance(exc, ClusterError):
                self.cluster_trouble(exc)
            self._pass_failed(kind, only, mask_url(str(exc)), time.monotonic() - t0)
            return
        except Exception as exc:  # a crash while planning this source: the source is failed, not the daemon
            self.crashed = masked(exc, self.desired.redactor())
            self._pass_failed(kind, only, self.crashed, time.monotonic() - t0)
            self.set_source_health(src.checkout.revision, load_error=self.load_error)
            return
        if self.crashed:
            self.crashed = ""
            self.set_source_health(src.checkout.revision, load_error=self.load_error)
        took = time.monotonic() - t0
        if self.spec.self_heal and not self.may_write():
            # Leadership was lost (or SIGTERM came) during the pass: its refused writes are not news,
            # and reporting them would make a follower record Events. The new leader starts afresh.
            self.metrics.passes.labels(kind, "abandoned").inc()
            log.warning("pass abandoned: this replica may no longer write", kind=kind, **self._log_name())
            return
        self._pass_event(failures_of(cs.entries, cs.errors, src.by_key), cs.revision, clean=only is None)
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
                self.first_sync = True
                self.applied = (cs.revision, cs.source)
                if self.shared.gauges:
                    self.metrics.set_revision(cs.revision, cs.source)
                    self.metrics.applied_at.set(time.time())
        # A full pass that is retried as a whole retries its failed objects too: one backoff, not two.
        self._absorb(src, cs, only is None, retry_objects=not retry_in, retry_in=retry_in)
        if only is None:
            self._recheck_pending(cs)
        with self.state:
            self.last_pass = {
                "kind": kind,
                "result": result,
                "objects": len(cs.entries),
                "finished": rfc3339(time.time()),
                "durationSeconds": round(took, 4),
                "summary": cs.summary(),
            }
        level = log.info if (only is None or cs.has_changes or cs.has_errors) else log.debug
        level(
            "pass",
            kind=kind,
            revision=cs.revision,
            seconds=round(took, 3),
            **{k: v for k, v in cs.summary().items() if v},
            **self._log_name(),
        )
        if self.on_passed is not None:
            self.on_passed(self)

    def _recheck_pending(self, cs: ChangeSet) -> None:
        """Members that left Git but are held by finalizers: a full pass looks again until they are gone
        (the report says "deletion pending" meanwhile, never "deleted"). Desired ones need nothing: the
        watch sees them vanish, and the pass that follows re-creates them."""
        if any(e.action is Action.TERMINATING and e.left_git for e in cs.entries):
            self.recheck = min(self.recheck * 2, PENDING_RECHECK_MAX) if self.recheck else PENDING_RECHECK
            self.queue.add_after(FULL, self.recheck)
        else:
            self.recheck = 0.0

    def _yielding(self, src: DesiredState, only: set[ObjectKey] | None, live_map: LiveMap) -> list[Target]:
        """The targets of this pass with yielded fields left out (daemon/yields.py): end the yields that
        expired or whose HPA is gone, yield to autoscalers seen for the first time, then drop the fields."""
        for y in self.yields.expired():
            self.reporter.resumed(
                y,
                f"{y.manager} has not written it for {self.spec.fight_window:g} s",
                src.by_key[y.key].info.api_version,
                self.active(),
            )
        scope = src.targets if only is None else [t for t in src.targets if t.key in only]
        hpas: dict[str, list[Manifest] | None] = {}
        autoscaled = self.yields.autoscaled_keys()
        for t in scope:
            live = None if t.key in self.refused else live_map.get(t.key)
            if live is None or not self.spec.autoscaler_wins:
                continue
            if self.yields.suppressed(t.key):
                self.yields.settle(t.key, live)
            scaled = scaled_by_controller_manager(live)
            if t.key in autoscaled:
                if only is None:  # a full pass checks the HPA is still there
                    known, hpa = self._autoscaler_of(t.key, hpas)
                    if known and hpa is None:
                        for y in self.yields.autoscaler_gone(t.key):
                            self.reporter.resumed(
                                y, "no HorizontalPodAutoscaler scales it any more", t.info.api_version, self.active()
                            )
                continue
            if not scaled:
                continue
            _known, hpa = self._autoscaler_of(t.key, hpas)
            if hpa is None:
                continue  # no HPA (deleted, or not readable): an old owner entry is not a reason to yield
            for y in self.yields.for_autoscaler(t, live, hpa):
                if self.active():
                    self.reporter.yielded(y, live)
        if not any(self.yields.has(t.key) for t in scope):
            return src.targets
        return [self.yields.body(t, live_map.get(t.key)) if (only is None or t.key in only) else t for t in src.targets]

    def _since_from_history(self, e: Entry) -> None:
        """A live-changed field whose writer's managedFields entry has no time (the scale subresource records
        none): when the watch saw that manager write it (the ownership history)."""
        missing = [c for c in e.drift + e.conflicts if c.reason == LIVE_CHANGED and not c.since]
        if not missing:
            return
        records = self.history.fields(e.key)
        for c in missing:
            seen = [r for r in records.get(c.path, ()) if r.manager == c.manager]
            if seen:
                c.since = rfc3339(seen[-1].observed)

    def _autoscaler_of(self, key: ObjectKey, hpas: dict[str, list[Manifest] | None]) -> tuple[bool, Autoscaler | None]:
        """(known, the HPA scaling `key`): the namespace's HPAs are listed once per pass; a refused or
        failed list is unknown (never a reason to yield, nor to resume)."""
        if key.namespace not in hpas:
            try:
                path = f"/apis/autoscaling/v2/namespaces/{key.namespace}/horizontalpodautoscalers"
                doc = self.engine.client.get(path)
                hpas[key.namespace] = list(doc.get("items") or [])
            except ClusterError as exc:
                log.info("cannot list HorizontalPodAutoscalers", namespace=key.namespace, error=str(exc))
                hpas[key.namespace] = None
        items = hpas[key.namespace]
        if items is None:
            return False, None
        return True, find_autoscaler(key, items)

    def _pass_event(self, failures: Failures, revision: str, *, clean: bool) -> None:
        """A Warning Event on the source's own object (the GitSync: `kubectl describe gitsync` shows it) for
        every failed pass, with its first error; a Normal one when a full pass (`clean`) succeeds again. The
        recorder folds repeats of one reason into one Event's count, as client-go's does."""
        rev = short_revision(revision) or "(plain directory)"
        if failures:
            self.failing = True
            self.source_event(failures.reason, WARNING, f"revision {rev}: {failures.summary()}")
        elif clean and self.failing:
            self.failing = False
            self.source_event("ReconciliationSucceeded", NORMAL, f"applied revision {rev} after failed passes")

    def _pass_failed(self, kind: str, only: set[ObjectKey] | None, error: str, took: float) -> None:
        self._pass_event(Failures(errors=[error], count=1, reason=RECONCILE_FAILED), self.attempted, clean=False)
        self.metrics.passes.labels(kind, "error").inc()
        self.metrics.pass_duration.labels(kind).observe(took)
        retry: list[QueueKey] = [FULL] if only is None else list(only)
        delays = [self.queue.add_rate_limited(k) for k in retry]
        log.error(
            "pass failed",
            kind=kind,
            error=error,
            retry_in=round(min(delays), 2),
            attempt=self.queue.failures(retry[0]),
            **self._log_name(),
        )
        with self.state:
            self.last_pass = {
                "kind": kind,
                "result": "error",
                "error": error,
                "finished": rfc3339(time.time()),
                "durationSeconds": round(took, 4),
            }
            if only is None:
                self.pass_errors = [error]
        if self.on_passed is not None:
            self.on_passed(self)

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

    def _absorb(self, src: DesiredState, cs: ChangeSet, full: bool, *, retry_objects: bool, retry_in: float) -> None:
        with self.state:
            if full:
                self.entries = {e.key: e for e in cs.entries}
                self.pass_errors = list(cs.errors) + ([self.unresolved] if self.unresolved else [])
            else:
                self.entries.update((e.key, e) for e in cs.entries)
            entries = list(self.entries.values())
        for error in cs.errors:  # once per retry: the delay doubles each time
            log.error(
                "pass error",
                error=error,
                retry_in=round(retry_in, 2),
                attempt=self.queue.failures(FULL),
                **self._log_name(),
            )
        for e in cs.entries:
            self.reporter.report(src.digest, src.checkout.revision, e, applied=not cs.dry_run, retry=retry_objects)
            if self.active():
                self.reporter.foreign(e)
        if self.shared.gauges:
            self.metrics.set_objects(entries, applied=not cs.dry_run, forcing=self.forcing)
            self.metrics.cache_objects.set(self.cache.objects())

    # -- watch events -----------------------------------------------------------------------

    def on_watch(self, etype: EventType, key: ObjectKey, obj: Manifest | None) -> None:
        """An object this source wants changed (on a cache thread: only bookkeeping and queueing)."""
        src = self.desired.state
        if src is None or key not in src.by_key or key in self.refused:
            return  # a refused object: not observed, not queued (each full pass asks again)
        if obj is not None:
            fights = self.history.observe(key, src.paths.get(key, ()), obj)
            if fights and self.active():
                for fight in fights:
                    self.reporter.fight(fight, obj)
            if self.yields.has(key):
                self.yields.noted_write(key, self.history.fields(key))
            for fight in fights:
                y = self.yields.after_fight(fight, src.by_key.get(key))
                if y is not None:
                    self.queue.add_after(key, self.spec.fight_window + 0.1)  # look again when it may expire
                    if self.active():
                        self.reporter.yielded(y, obj)
        if etype is EventType.LISTED:
            self.fingerprints[key] = fingerprint(obj)
            return
        if etype is EventType.DELETED:
            self.fingerprints.pop(key, None)
            self.reporter.deleted.add(key)
        else:
            fp = fingerprint(obj)
            if self.fingerprints.get(key) == fp:
                return  # only status or bookkeeping changed: nothing we set can differ
            self.fingerprints[key] = fp
        self.queue.add(key)

    # -- reports ----------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Why this source is not ready on its own account (source failed, or not loaded yet)."""
        if not self.condition.ok:
            kept = self.desired.state.checkout.revision if self.desired.state else ""
            rev = self.condition.to_dict()["revision"]
            return [
                f"source failed: {self.condition.error}"
                + (f" (revision {rev})" if rev else "")
                + (f"; keeping revision {kept}" if kept else "")
            ]
        if self.desired.state is None:
            return ["source not loaded yet"]
        return []

    def changeset_doc(self, cluster: Condition, *, full_history: bool = False) -> dict[str, Any]:
        """The `diff -o json` document of the latest state of every object, plus history and fights."""
        src = self.desired.state
        with self.state:
            entries = list(self.entries.values())
            errors = list(self.pass_errors)
        source = self.condition.to_dict()
        if not self.condition.ok:
            errors.insert(
                0, f"source: {source['error']}" + (f" (revision {source['revision']})" if source["revision"] else "")
            )
        if not cluster.ok:
            errors.insert(0, f"cluster: {cluster.error}")
        cs = ChangeSet(
            revision=src.checkout.revision if src else "",
            source=self.applied[1] if self.applied else "",
            entries=entries,
            errors=errors,
            dry_run=not self.spec.self_heal,
            inventory=self.inventory_name,
            inventory_namespace=self.inventory_namespace,
            source_identity=self.desired.identity.text,
        )
        doc = cs.to_dict()
        for obj, e in zip(doc["objects"], cs.sorted_entries(), strict=True):
            obj["state"] = object_state(e, applied=self.spec.self_heal, forcing=self.forcing)
        doc["history"] = self.history.to_dict(changed_only=not full_history)
        doc["fights"] = [f.to_dict() for f in self.history.fights()]
        doc["yields"] = [y.to_dict() for y in self.yields.all()]
        return doc

    def source_doc(self) -> dict[str, Any]:
        src = self.desired.state
        source = self.condition.to_dict()
        return {
            "repo": mask_url(self.spec.source.repo),
            "revision": src.checkout.revision if src else "",
            "lastChecked": rfc3339(self.desired.checked) if self.desired.checked else "",
            "error": source["error"],
            "errorRevision": source["revision"] if source["error"] else "",
        }


__all__ = ["FULL", "SOURCE", "QueueKey", "Shared", "SourceReconciler", "SourceSpec"]


def _from_picture(picture: LiveMap, targets: Sequence[Target], read: Callable[[Sequence[Target]], LiveMap]) -> LiveMap:
    """The pass's live objects from its one picture (`read` for any target the picture lacks)."""
    out = {t.key: picture[t.key] for t in targets if t.key in picture}
    rest = [t for t in targets if t.key not in picture]
    if rest:
        out.update(read(rest))
    return out
