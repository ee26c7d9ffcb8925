"""The source condition of one source, derived from its typed faults (outcome.py `Health`) in one place.

A `SourceReconciler` (reconciler.py) reports what happened (a load failed, a pass crashed, a revision could
not be resolved, Git is fine again); `SourceHealth` decides the condition from the faults and emits what
changes of it people see: the Warning or Normal Event on the source's object, the `source_ok` gauge and
the log line. The condition goes on to /readyz, /status and the GitSync status (through the snapshot).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gitops_sync.daemon.reconcile.conditions import Condition
from gitops_sync.daemon.reconcile.outcome import Fault, FaultKind, Health
from gitops_sync.daemon.runtime.events import NORMAL, WARNING
from gitops_sync.daemon.runtime.metrics import Metrics
from gitops_sync.log import get_logger
from gitops_sync.source import short_revision

log = get_logger("gitops_sync.daemon")


class SourceHealth:
    """The faults and the condition of one source. Written by its pass thread only; `faults` and
    `condition` are read from any thread (a frozen value, and a thread-safe Condition)."""

    def __init__(
        self,
        metrics: Metrics | None,
        event: Callable[[str, str, str], None],
        kept: Callable[[], str],
        log_name: Callable[[], dict[str, str]],
    ) -> None:
        self.metrics = metrics  # None: the process's gauges are not this source's (the fleet)
        self._event = event  # (reason, type, message) on the source's object
        self._kept = kept  # the revision of the desired state held ("" = none)
        self._log_name = log_name
        self.faults = Health()
        self.condition = Condition("source")

    def loaded(self, revision: str) -> None:
        """Git's state is the one held (or just taken): no fault of loading, nothing unresolved."""
        self.faults = replace(self.faults, unresolved=None)
        self.set_load(revision, None)

    def unresolved(self, revision: str, error: str) -> None:
        """The new revision rendered but could not be resolved: prune is held; Git itself is fine."""
        self.faults = replace(self.faults, unresolved=Fault(FaultKind.UNRESOLVED, error, revision))
        self.set_load(revision, None)

    def crashed(self, revision: str, error: str) -> None:
        """A pass crashed on this source (`error`) or ran through again (`""`)."""
        self.faults = replace(self.faults, crash=Fault(FaultKind.CRASH, error, revision) if error else None)
        self.set_load(revision, self.faults.load)

    def set_load(self, revision: str, load: Fault | None) -> None:
        """One place derives the source condition, from the typed faults: a failed load, else a crash."""
        self.faults = replace(self.faults, load=load)
        fault = self.faults.failed
        kept = self._kept()
        if fault is not None:
            rev = fault.revision if fault.kind is FaultKind.LOAD else kept
            if self.metrics is not None:
                self.metrics.source_ok.set(0)
            if self.condition.set(False, fault.error, rev):
                keeping = f"; keeping {short_revision(kept)}" if kept else ""
                self._event(
                    fault.reason,
                    WARNING,
                    f"source failed at revision {short_revision(rev) or '(unknown)'}{keeping}: {fault.error}",
                )
            return
        was_failed = self.condition.state is False
        if self.metrics is not None:
            self.metrics.source_ok.set(1)
        if self.condition.set(True, revision=revision) and was_failed:
            log.info("source healthy again", revision=revision, **self._log_name())
            self._event("SourceRecovered", NORMAL, f"source healthy again at revision {short_revision(revision)}")


__all__ = ["SourceHealth"]
