"""One source as an object the controller owns: its desired state, its passes, its health and its report.

The controller (`single/` for `run --repo`, `fleet/` for GitSync objects) owns what many sources share:
the watch cache, the work queue, the leader/shard fences, Events, metrics and HTTP. It hands a
`SourceReconciler` the queue keys of that source (`handle(keys) -> Outcome`, on one worker thread at a
time) and the watch events of its objects (`on_watch`, on a cache thread); the reconciler runs the pass
through its `Engine` and reports through its `Reporter`. What the handling asks of the queue comes back in
the `Outcome` (the controller's reconcile handler applies it); what others may read of the source is
`snapshot()` (outcome.py), from which the GitSync status, `/status` and the metrics are built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gitops_sync.daemon.reconcile import views
from gitops_sync.daemon.reconcile.access import ReadAccess
from gitops_sync.daemon.reconcile.conditions import ClusterProbe, Condition
from gitops_sync.daemon.reconcile.desired import DesiredSource, DesiredState, SourceSpec, TrackedPaths
from gitops_sync.daemon.reconcile.health import SourceHealth
from gitops_sync.daemon.reconcile.history import OwnershipHistory
from gitops_sync.daemon.reconcile.live import PassYields
from gitops_sync.daemon.reconcile.outcome import SOURCE_FAILED, Fault, FaultKind, Outcome, SourceSnapshot
from gitops_sync.daemon.reconcile.passes import PassRunner
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, KeyQueue, QueueKey, Reporter, fingerprint, masked
from gitops_sync.daemon.reconcile.yields import Yields
from gitops_sync.daemon.runtime import kept
from gitops_sync.daemon.runtime.cache import EventType, WatchCache
from gitops_sync.daemon.runtime.events import EventRecorder, EventSpec
from gitops_sync.daemon.runtime.manager import Requests
from gitops_sync.daemon.runtime.metrics import Metrics
from gitops_sync.engine import Engine
from gitops_sync.errors import (
    ApiError,
    ChartRepositoryNotAllowed,
    ClusterError,
    CredentialsUnavailable,
    DecryptionFailed,
    RepositoryNotAllowed,
)
from gitops_sync.log import get_logger
from gitops_sync.plan.changeset import ChangeSet
from gitops_sync.plan.masking import Redactor
from gitops_sync.plan.planner import Target
from gitops_sync.resource import Manifest, ObjectKey
from gitops_sync.source import mask_url, short_revision
from gitops_sync.source.verify import VerificationFailed

log = get_logger("gitops_sync.daemon")

# A prune finalizers hold: nothing watches a member that left Git, so full passes look again, first after
# this many seconds, doubling while it stays, up to the cap.
PENDING_RECHECK = 1.0
PENDING_RECHECK_MAX = 60.0


@dataclass
class Shared:
    """What every source of a process uses and none owns."""

    cache: WatchCache
    events: EventRecorder
    metrics: Metrics
    probe: ClusterProbe
    stopping: Callable[[], bool]
    delay_for: Callable[[int], float]  # the work queue's backoff: the delay after n failures of a key
    gauges: bool = True  # this source's figures are the process's gauges (one source per process)


class SourceReconciler(PassRunner):
    """The desired-state source, the passes and the reporter of one source.

    Threads: `handle` on one worker at a time (the controller never runs two passes of a source at once);
    `on_watch` on the watch cache's threads (bookkeeping and queueing only); `snapshot` on any thread
    (HTTP, the fleet's status writer). What `snapshot` copies is guarded by `state`."""

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
        on_loaded: Callable[[], None] | None = None,
    ) -> None:
        self.spec = spec
        # A tenant's source (impersonating): what its ServiceAccount may not read, with the refusal. The
        # shared cache reads with the controller's rights, so nothing of these objects is used or reported.
        self.read_access = read_access
        self.refused: dict[ObjectKey, str] = {}
        self.engine = engine
        self.queue = queue  # for watch events only; a handling's requests go back in its Outcome
        self.requests: Requests[QueueKey] = Requests(queue.failures, shared.delay_for)
        self.shared = shared
        self.cache = shared.cache
        self.metrics = shared.metrics
        self.gauges = shared.gauges
        self._active = active
        self.may_write = may_write
        self.on_loaded = on_loaded  # the fleet re-indexes its interest; else the cache watches `targets`
        self.desired = DesiredSource(spec.source, spec.debounce)
        self._reporting(field_manager)
        # Events about the whole source: on the GitSync, or (run --repo) the inventory parent ConfigMap.
        self.subject = subject or (ObjectKey("", "ConfigMap", self.inventory_namespace, self.inventory_name), "v1")
        self.health = SourceHealth(
            shared.metrics if shared.gauges else None, self.source_event, self._kept, self.log_name
        )
        self.condition = self.health.condition
        self.fingerprints: dict[ObjectKey, str] = {}
        self.init_pass_state()

    def _reporting(self, field_manager: str) -> None:
        """The source's ownership history, yields and reporter (what it tells people of each object)."""
        self.history = OwnershipHistory(paths_of=self._tracked_paths)
        self.yields = Yields(
            threshold=self.spec.fight_threshold,
            window=self.spec.fight_window,
            autoscaler_wins=self.spec.autoscaler_wins,
            field_manager=field_manager,
        )
        self.reporter = Reporter(
            events=self.shared.events,
            metrics=self.metrics,
            queue=self.requests,
            field_manager=field_manager,
            forcing=self.forcing,
            live=lambda k: None if k in self.refused else self.cache.get(k)[1],
        )
        self.pass_yields = PassYields(
            self.spec,
            self.yields,
            self.history,
            self.reporter,
            refused=lambda: self.refused,
            active=self.active,
            api=self.engine.client,
        )

    def _tracked_paths(self, key: ObjectKey) -> list[str]:
        """The fields of `key` whose history is kept, under the desired state held now ([] when none wants it)."""
        src = self.desired.state
        return src.paths.get(key) if src is not None else []

    # -- identity ---------------------------------------------------------------------------

    @property
    def inventory_name(self) -> str:
        return self.spec.pass_opts.name or self.desired.identity.inventory_name()

    @property
    def inventory_namespace(self) -> str:
        return self.spec.pass_opts.inventory_namespace or self.spec.pass_opts.namespace

    @property
    def mode(self) -> str:
        return "self-heal" if self.spec.self_heal else "detect-only"

    @property
    def current(self) -> DesiredState | None:
        return self.desired.state

    def active(self) -> bool:
        return not self.shared.stopping() and self._active()

    # -- what others read -------------------------------------------------------------------

    def snapshot(self, *, objects: bool = True) -> SourceSnapshot:
        """The only thing controllers, /status and the GitSync status read of this source.

        `objects` False: without the entries and the desired keys (empty), for readiness, which reads neither:
        /readyz copied every entry and hashed every desired key at each probe (the bench probes every 0.2 s
        during a cold apply, competing with the applies for the GIL)."""
        src = self.desired.state
        with self.state:
            entries = tuple(self.entries.values()) if objects else ()
            errors, last_pass, last_hooks = tuple(self.pass_errors), dict(self.last_pass), dict(self.last_hooks)
        return SourceSnapshot(
            entries=entries,
            pass_errors=errors,
            desired=frozenset(src.by_key) if src and objects else frozenset(),
            revision=src.checkout.revision if src else "",
            loaded=src is not None,
            applied=self.applied,
            attempted=self.attempted,
            first_sync=self.first_sync,
            self_heal=self.spec.self_heal,
            forcing=self.forcing,
            inventory_name=self.inventory_name,
            inventory_namespace=self.inventory_namespace,
            health=self.health.faults,
            healthy=self.condition.ok,
            condition=self.condition.to_dict(),
            repo=mask_url(self.spec.source.repo),
            checked=self.desired.checked,
            identity=self.desired.identity.text,
            last_pass=last_pass,
            last_hooks=last_hooks,
            settling=self.desired.settling,
            charts=src.checkout.charts if src else (),
            signer=src.checkout.signer if src else "",
        )

    # -- the work ---------------------------------------------------------------------------

    def handle(self, keys: set[QueueKey]) -> Outcome:
        """Look at Git (SOURCE), at everything (FULL) or at some objects; what it asks of the queue is in
        the Outcome, for the controller's reconcile handler to apply."""
        self.requests.take()  # nothing left over from a handling that raised
        loaded, ran, result, held = self._handle(keys)
        return Outcome(
            loaded=loaded,
            ran=ran,
            result=result,
            prune_held=held,
            settling=self.desired.settling,
            requests=self.requests.take(),
        )

    def _handle(self, keys: set[QueueKey]) -> tuple[bool, str, str, str]:
        """(loaded, pass kind, its result, why prune was held) of one handling."""
        loaded = SOURCE in keys and self.refresh()
        src = self.desired.state
        if src is None or self.shared.stopping() or not self.active():
            return loaded, "", "", ""  # a follower keeps its source and caches warm, and waits
        if FULL in keys or loaded:
            result, held = self.run_pass(src, None)
            return loaded, "full", result, held
        only = {k for k in keys if isinstance(k, ObjectKey) and k in src.by_key}
        if not only:
            return loaded, "", "", ""
        result, _ = self.run_pass(src, only)
        return loaded, "partial", result, ""

    def refresh(self) -> bool:
        """Fetch and render; True when the desired state changed. On failure keep the last good one.

        Any exception of fetch or render marks the source failed (masked); an API server that cannot
        be reached while resolving the new revision is the cluster's condition, not the source's."""
        try:
            loaded = self.desired.load()
        except Exception as exc:
            reasoned = (
                RepositoryNotAllowed,
                CredentialsUnavailable,
                ChartRepositoryNotAllowed,
                DecryptionFailed,
                VerificationFailed,
            )
            reason = exc.reason if isinstance(exc, reasoned) else SOURCE_FAILED
            self._source_failed(masked(exc, self.desired.redactor()), self.desired.failed_revision(exc), reason)
            return False
        if loaded is None:  # Git is (back) at the state held: passes act on what Git wants
            self._resolved(self._kept())
            return False
        checkout, objects, new_digest = loaded
        wait = self.desired.wait_before_acting(new_digest)
        if wait > 0:
            self.requests.add_after(SOURCE, wait)
            return False
        try:
            self.engine.discovery.refresh()  # a new revision may bring CRDs, the cluster new kinds
            targets = self.engine.resolve(objects, self.spec.pass_opts)
            # Known before the cache is asked to watch them: on_watch never observes a refused object.
            self.set_refused(targets, True)
        except ClusterError as exc:
            self._unresolved(checkout.revision, exc)
            return False
        except Exception as exc:
            self._source_failed(masked(exc, Redactor(o.manifest for o in objects)), checkout.revision)
            return False
        for t in targets:  # held until the next revision: shared parts, interned strings (runtime/kept.py)
            kept.compact_desired(t.manifest)
        by_key = {t.key: t for t in targets}
        self._take(
            DesiredState(
                checkout=checkout, targets=targets, digest=new_digest, by_key=by_key, paths=TrackedPaths(by_key)
            )
        )
        return True

    def _take(self, new: DesiredState) -> None:
        """A new desired state resolved: forget what was known of the objects that left it, then watch it."""
        old_keys = set(self.desired.state.by_key) if self.desired.state else set()
        self.desired.state = new
        self._resolved(new.checkout.revision)
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
            self.on_loaded()
        else:
            self.cache.set_interest(new.targets)
        log.info(
            "source loaded",
            revision=new.checkout.revision or "(plain directory)",
            objects=len(new.targets),
            digest=new.digest[:12],
            **self.log_name(),
        )

    def _unresolved(self, revision: str, exc: ClusterError) -> None:
        """The new revision rendered but the API server failed resolving it: the cluster's trouble, not the
        source's. Passes go on applying the state held; prune waits until the new revision resolves (a
        member only the new revision has would be pruned against the old one)."""
        self.cluster_trouble(exc)
        self.health.unresolved(
            revision,
            f"revision {short_revision(revision) or '(work tree)'} not resolved against the cluster "
            f"({mask_url(str(exc))}); passes keep the previous revision, without prune, until it resolves",
        )  # Git is fine; keep SOURCE's backoff
        delay = self.requests.add_rate_limited(SOURCE)
        log.warning(
            "cannot resolve the new revision: the API server failed; keeping the last good state",
            revision=revision,
            error=mask_url(str(exc)),
            retry_in=round(delay, 2),
        )

    def log_name(self) -> dict[str, str]:
        """The fleet names the source on every line; `run --repo` has one, and its log stays as it was."""
        return {} if self.shared.gauges else {"gitsync": f"{self.subject[0].namespace}/{self.subject[0].name}"}

    def _resolved(self, revision: str) -> None:
        self.requests.forget(SOURCE)
        self.health.loaded(revision)

    def _source_failed(self, error: str, revision: str, reason: str = SOURCE_FAILED) -> None:
        """Fetch, render or resolve failed: keep the last good state, retry with backoff, report once."""
        delay = self.requests.add_rate_limited(SOURCE)
        self.metrics.source_errors.inc()
        before = self.health.faults.load
        if before is None or error != before.error or revision != before.revision:
            log.error(
                "source failed; keeping the last good state",
                error=error,
                revision=revision,
                kept_revision=self._kept() or None,
                retry_in=round(delay, 2),
                **self.log_name(),
            )
        self.health.set_load(revision, Fault(FaultKind.LOAD, error, revision, reason))

    def _kept(self) -> str:
        return self.desired.state.checkout.revision if self.desired.state else ""

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

    def set_refused(self, targets: Sequence[Target], full: bool) -> None:
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
            log.info("objects this source may not read: planned as forbidden", objects=len(newly), **self.log_name())
            self.history.forget(newly)
            self.yields.forget(newly)
            self.reporter.forget(newly)
            for key in newly:
                self.fingerprints.pop(key, None)

    # -- watch events -----------------------------------------------------------------------

    def on_watch(self, etype: EventType, key: ObjectKey, obj: Manifest | None) -> None:
        """An object this source wants changed (on a cache thread: only bookkeeping and queueing)."""
        src = self.desired.state
        if src is None or key not in src.by_key or key in self.refused:
            return  # a refused object: not observed, not queued (each full pass asks again)
        if obj is not None:
            fights = self.history.observe(key, None, obj)  # its paths are worked out when a value is read
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

    # -- deletion ---------------------------------------------------------------------------

    def collect(self, *, keep_parent: bool = False, pending_done: bool = False) -> tuple[ChangeSet, bool]:
        """Its source deleted: prune every member of its inventory, then (unless `keep_parent`) the parent;
        (the change set, whether the collection is due). See Engine.collect."""
        opts = self.spec.pass_opts
        return self.engine.collect(
            self.inventory_name,
            self.inventory_namespace,
            self.desired.identity.text,
            prune_cascade=opts.prune_cascade,
            advice=opts.cascade_advice,
            keep_parent=keep_parent,
            pending_done=pending_done,
            timeout=opts.timeout,
        )

    def remaining(self) -> list[ObjectKey]:
        """The members of its inventory still in the API (what WaitForTermination waits for)."""
        return self.engine.remaining(self.inventory_name, self.inventory_namespace, self.desired.identity.text)

    # -- reports ----------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Why this source is not ready on its own account (source failed, or not loaded yet)."""
        return views.problems(self.snapshot(objects=False))

    def changeset_doc(self, cluster: Condition, *, full_history: bool = False) -> dict[str, Any]:
        """The `diff -o json` document of the latest state of every object, plus history and fights."""
        return views.changeset_doc(self.snapshot(), self.history, self.yields, cluster, full_history=full_history)


__all__ = ["FULL", "SOURCE", "Outcome", "QueueKey", "Shared", "SourceReconciler", "SourceSnapshot", "SourceSpec"]
