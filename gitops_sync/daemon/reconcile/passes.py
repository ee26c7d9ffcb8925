"""The passes of one source: plan and apply against one picture of the cluster, then report.

`PassRunner` is the part of `SourceReconciler` (reconciler.py) that runs a pass (full, or for some
objects) and keeps what the pass found (`entries`, `pass_errors`, `last_pass` under `state`; `applied`,
`first_sync`, `attempted`); what it asks of the queue (backoff, forget, look again) goes to `requests`
and back to the controller in the handling's Outcome. Runs on the source's pass thread only.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gitops_sync.conventions import ConflictPolicy
from gitops_sync.daemon.reconcile.desired import DesiredSource, DesiredState, SourceSpec
from gitops_sync.daemon.reconcile.failures import RECONCILE_FAILED, Failures, failures_of
from gitops_sync.daemon.reconcile.health import SourceHealth
from gitops_sync.daemon.reconcile.live import LiveReads, PassYields, from_picture
from gitops_sync.daemon.reconcile.reporter import FULL, QueueKey, Reporter, masked
from gitops_sync.daemon.reconcile.yields import Yields
from gitops_sync.daemon.runtime.cache import WatchCache
from gitops_sync.daemon.runtime.events import NORMAL, WARNING
from gitops_sync.daemon.runtime.manager import Requests
from gitops_sync.daemon.runtime.metrics import Metrics, object_state
from gitops_sync.errors import ClusterError, GitOpsError
from gitops_sync.formatting import rfc3339
from gitops_sync.log import get_logger
from gitops_sync.plan.changeset import Action, ChangeSet, Entry
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey
from gitops_sync.source import mask_url, short_revision

log = get_logger("gitops_sync.daemon")

# A prune finalizers hold: nothing watches a member that left Git, so full passes look again, first after
# this many seconds, doubling while it stays, up to the cap.
PENDING_RECHECK = 1.0
PENDING_RECHECK_MAX = 60.0


class PassRunner(LiveReads):
    """Runs passes; the reconciler provides what is declared here."""

    spec: SourceSpec
    cache: WatchCache
    desired: DesiredSource
    health: SourceHealth
    requests: Requests[QueueKey]
    reporter: Reporter
    yields: Yields
    pass_yields: PassYields
    metrics: Metrics
    refused: dict[ObjectKey, str]
    state: threading.Lock
    entries: dict[ObjectKey, Entry]
    pass_errors: list[str]
    last_pass: dict[str, Any]
    last_hooks: dict[str, Any]
    applied: tuple[str, str] | None
    first_sync: bool
    failing: bool
    attempted: str
    recheck: float
    gauges: bool
    may_write: Callable[[], bool]
    active: Callable[[], bool]
    source_event: Callable[[str, str, str], None]
    cluster_trouble: Callable[[ClusterError], None]
    set_refused: Callable[[Sequence[Target], bool], None]
    log_name: Callable[[], dict[str, str]]

    def init_pass_state(self) -> None:
        self.state = threading.Lock()  # guards what `snapshot` copies: entries, pass_errors, last_pass
        self.entries = {}
        self.pass_errors = []
        self.last_pass = {}
        self.last_hooks = {}  # the Helm hooks the last pass that ran any ran, and its revision (/status)
        self.applied = None  # (revision, source) of the last clean full pass
        self.first_sync = False
        self.failing = False  # the last pass failed (its Warning Event was sent): the next clean one says so
        self.attempted = ""  # revision of the last pass that ran (clean or not)
        self.recheck = 0.0  # seconds until the next look at a pending deletion (0: none pending)
        self.states: Counter[str] = Counter()  # the entries by object state (`_count_states`), for the gauge
        self._counted_as: tuple[bool, bool] | None = None  # (applied, forcing) that `states` was counted under

    @property
    def forcing(self) -> bool:
        return self.spec.pass_opts.policy is ConflictPolicy.FORCE

    def run_pass(self, src: DesiredState, only: set[ObjectKey] | None) -> tuple[str, str]:
        """One pass over everything (`only` None) or some objects: (its result, why prune was held)."""
        kind = "full" if only is None else "partial"
        opts = replace(self.spec.pass_opts)
        # Never prune on a partial picture: a failed render, a crashed plan, a partial pass, or a state Git
        # has moved past (a new revision that could not be resolved).
        held = self.health.faults.prune_held if opts.prune and only is None else ""
        opts.prune = opts.prune and only is None and not held
        if only is None:
            self.cache.wait_synced(5.0)
        t0 = time.monotonic()
        self.attempted = src.checkout.revision
        try:
            cs = self._plan_and_apply(src, only, opts)
        except GitOpsError as exc:
            if isinstance(exc, ClusterError):
                self.cluster_trouble(exc)
            self._pass_failed(kind, only, mask_url(str(exc)), time.monotonic() - t0)
            return "error", held
        except Exception as exc:  # a crash while planning this source: the source is failed, not the daemon
            crashed = masked(exc, self.desired.redactor())
            self._pass_failed(kind, only, crashed, time.monotonic() - t0)
            self.health.crashed(src.checkout.revision, crashed)
            return "error", held
        if self.health.faults.crash is not None:
            self.health.crashed(src.checkout.revision, "")
        took = time.monotonic() - t0
        if self.spec.self_heal and not self.may_write():
            # Leadership was lost (or SIGTERM came) during the pass: its refused writes are not news,
            # and reporting them would make a follower record Events. The new leader starts afresh.
            self.metrics.passes.labels(kind, "abandoned").inc()
            log.warning("pass abandoned: this replica may no longer write", kind=kind, **self.log_name())
            return "abandoned", held
        return self._passed(src, cs, only, took), held

    def _plan_and_apply(self, src: DesiredState, only: set[ObjectKey] | None, opts: Any) -> ChangeSet:
        scope = src.scope(only)
        self.set_refused(scope, only is None)
        # One picture of the cluster for the whole pass: the yield check and the plan read the same live
        # objects. Read twice, an HPA's scale landing between the two reads was corrected (the plan saw
        # it) without being yielded to (the check had not): one fight with the autoscaler.
        live = self._live_of([t for t in scope if t.key not in self.refused])
        targets = self.pass_yields.targets(src, only, live)
        cs = self.engine.run(
            src.checkout,
            targets,
            opts,
            apply=self.spec.self_heal,
            live_of=lambda ts: from_picture(live, ts, self._live_of),
            only=only,
            refused=self.refused,
        )
        for e in cs.entries:
            e.yielded = [y.to_field() for y in self.yields.of(e.key)]
            self.pass_yields.since_from_history(e)
        return cs

    def _passed(self, src: DesiredState, cs: ChangeSet, only: set[ObjectKey] | None, took: float) -> str:
        """A pass that ran through: its Event, metrics, backoff (a full pass's errors retry it as a whole,
        a clean one resets it), the report of every object, and its line in the log."""
        kind = "full" if only is None else "partial"
        self._pass_event(failures_of(cs.entries, cs.errors, src.by_key), cs.revision, clean=only is None)
        result = "error" if cs.has_errors else "success"
        self.metrics.passes.labels(kind, result).inc()
        self.metrics.pass_duration.labels(kind).observe(took)
        retry_in = 0.0
        if only is None:
            if cs.errors:
                # Backoff grows until a clean pass: a permanent failure costs a few passes a minute.
                retry_in = self.requests.add_rate_limited(FULL)
            else:
                if not cs.has_errors:
                    self.requests.forget(FULL)
                self.first_sync = True
                self.applied = (cs.revision, cs.source)
                if self.gauges:
                    self.metrics.set_revision(cs.revision, cs.source)
                    self.metrics.applied_at.set(time.time())
        # A full pass that is retried as a whole retries its failed objects too: one backoff, not two.
        self._absorb(src, cs, only is None, retry_objects=not retry_in, retry_in=retry_in)
        if only is None:
            self._recheck_pending(cs)
        with self.state:
            if cs.hooks:
                self.last_hooks = {"revision": cs.revision, "finished": rfc3339(time.time()), "hooks": list(cs.hooks)}
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
            **self.log_name(),
        )
        return result

    def _recheck_pending(self, cs: ChangeSet) -> None:
        """Members that left Git but are held by finalizers: a full pass looks again until they are gone
        (the report says "deletion pending" meanwhile, never "deleted"). Desired ones need nothing: the
        watch sees them vanish, and the pass that follows re-creates them."""
        if any(e.action is Action.TERMINATING and e.left_git for e in cs.entries):
            self.recheck = min(self.recheck * 2, PENDING_RECHECK_MAX) if self.recheck else PENDING_RECHECK
            self.requests.add_after(FULL, self.recheck)
        else:
            self.recheck = 0.0

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
        delays = [self.requests.add_rate_limited(k) for k in retry]
        log.error(
            "pass failed",
            kind=kind,
            error=error,
            retry_in=round(min(delays), 2),
            attempt=self.requests.failures(retry[0]),
            **self.log_name(),
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

    def _absorb(self, src: DesiredState, cs: ChangeSet, full: bool, *, retry_objects: bool, retry_in: float) -> None:
        unresolved = self.health.faults.unresolved
        new = {e.key: e for e in cs.entries}
        with self.state:
            replaced = {} if full else {k: self.entries.get(k) for k in new}
            if full:
                self.entries = new
                self.pass_errors = list(cs.errors) + ([unresolved.error] if unresolved else [])
            else:
                self.entries.update(new)
        for error in cs.errors:  # once per retry: the delay doubles each time
            log.error(
                "pass error",
                error=error,
                retry_in=round(retry_in, 2),
                attempt=self.requests.failures(FULL),
                **self.log_name(),
            )
        for e in cs.entries:
            self.reporter.report(src.digest, src.checkout.revision, e, applied=not cs.dry_run, retry=retry_objects)
            if self.active():
                self.reporter.foreign(e)
        if self.gauges:
            self._count_states(new, replaced, full, applied=not cs.dry_run)
            self.metrics.cache_objects.set(self.cache.objects())

    def _count_states(
        self, new: dict[ObjectKey, Entry], replaced: dict[ObjectKey, Entry | None], full: bool, *, applied: bool
    ) -> None:
        """The objects gauge: counted afresh by a full pass, moved by a partial one for its own objects only.
        A recount of every entry at each partial pass made the watch's second looks quadratic: at 20,000
        objects each of ~1,600 partial passes counted all 20,000 (a third of their time, py-spy). A state
        depends on the pass (applied or dry-run, forcing) too: a partial pass of another kind than the last
        count recounts every entry, so an entry is never taken off a count it was not put on."""
        flags = (applied, self.forcing)

        def state(e: Entry) -> str:
            return object_state(e, applied=applied, forcing=flags[1])

        if full:
            self.states = Counter(state(e) for e in new.values() if not e.left_git)
        elif flags != self._counted_as:
            with self.state:
                held = list(self.entries.values())
            self.states = Counter(state(e) for e in held if not e.left_git)
        else:
            for key, e in new.items():
                old = replaced.get(key)
                if old is not None and not old.left_git:
                    self.states[state(old)] -= 1
                if not e.left_git:
                    self.states[state(e)] += 1
        self._counted_as = flags
        self.metrics.set_object_counts(self.states)


__all__ = ["PENDING_RECHECK", "PENDING_RECHECK_MAX", "PassRunner"]
