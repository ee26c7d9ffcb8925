"""What a source's reconciler hands out: the outcome of `handle(keys)` and the `snapshot()` others read.

A `SourceReconciler` (reconciler.py) never lets the controllers, `/status` or the GitSync status read its
attributes: they read a frozen `SourceSnapshot`. What a handling asks of the work queue (retry with
backoff, look again later, forget a key's failures) is recorded (runtime/manager.py `Requests`) and
returned in the `Outcome`; the controller's reconcile handler (runtime/manager.py `reconcile_handler`) is the one place
that applies it to the queue, as controller-runtime's reconcileHandler does with a Result.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitops_sync.daemon.reconcile.reporter import QueueKey
from gitops_sync.daemon.runtime.manager import Op, Request
from gitops_sync.plan.changeset import Entry
from gitops_sync.resource import ObjectKey

SOURCE_FAILED = "SourceFailed"  # the reason of a failed fetch or render (RepositoryNotAllowed has its own)


class FaultKind(enum.Enum):
    LOAD = "load"  # fetch or render failed: the last good desired state is kept
    CRASH = "crash"  # a pass crashed while planning this source
    UNRESOLVED = "unresolved"  # a new revision could not be resolved against the cluster (an API error)


@dataclass(frozen=True)
class Fault:
    """One reason the source is not what Git wants: its text (masked), the revision and its reason."""

    kind: FaultKind
    error: str
    revision: str = ""
    reason: str = SOURCE_FAILED


@dataclass(frozen=True)
class Health:
    """The source's faults, one slot per kind: the source condition and the prune hold derive from these."""

    load: Fault | None = None
    crash: Fault | None = None
    unresolved: Fault | None = None

    @property
    def failed(self) -> Fault | None:
        """What makes the source condition False: a failed load first (it explains a crash), else a crash.
        An unresolved revision is the cluster's trouble, not the source's: it only holds prune."""
        return self.load or self.crash

    @property
    def prune_held(self) -> str:
        """Why no pass may prune now ("" = none): a partial picture of what Git wants."""
        fault = self.load or self.crash or self.unresolved
        return f"{fault.kind.value}: {fault.error}" if fault else ""


@dataclass(frozen=True)
class SourceSnapshot:
    """One consistent copy of what a source knows, taken under its state lock: the only thing the
    controllers, `/status` and the GitSync status read of a reconciler."""

    entries: tuple[Entry, ...] = ()
    pass_errors: tuple[str, ...] = ()
    desired: frozenset[ObjectKey] = frozenset()
    revision: str = ""  # of the desired state held ("" = none loaded, or a plain directory)
    loaded: bool = False  # a desired state is held
    applied: tuple[str, str] | None = None  # (revision, source) of the last clean full pass
    attempted: str = ""  # revision of the last pass that ran
    first_sync: bool = False
    self_heal: bool = True
    forcing: bool = False
    inventory_name: str = ""
    inventory_namespace: str = ""
    health: Health = field(default_factory=Health)
    healthy: bool = True  # the source condition (unknown counts as healthy)
    condition: Mapping[str, Any] = field(default_factory=dict)  # the source condition as /status shows it
    repo: str = ""  # masked
    checked: float = 0.0  # wall time of the last look at Git
    identity: str = ""  # the source identity the inventory records
    last_pass: Mapping[str, Any] = field(default_factory=dict)
    settling: bool = False  # a new render waits for its second look: what is held is not Git's yet
    charts: tuple[dict[str, str], ...] = ()  # pulled from repositories for the state held (Checkout.charts)
    signer: str = ""  # who signed the revision held (spec.verify, --verify-commits/--verify-tag)
    last_hooks: Mapping[str, Any] = field(default_factory=dict)  # the Helm hooks the last pass running any ran

    @property
    def mode(self) -> str:
        return "self-heal" if self.self_heal else "detect-only"

    @property
    def source_error(self) -> str:
        fault = self.health.failed
        return fault.error if fault else ""

    @property
    def source_reason(self) -> str:
        fault = self.health.failed
        return fault.reason if fault else ""


@dataclass(frozen=True)
class Outcome:
    """What one `handle(keys)` did and what it asks of the queue (applied by the reconcile handler)."""

    loaded: bool = False  # a new desired state was taken
    ran: str = ""  # "full" | "partial" | "" (no pass)
    result: str = ""  # "success" | "error" | "abandoned" | "" (no pass)
    prune_held: str = ""  # why the full pass did not prune although the source prunes ("" = it could)
    settling: bool = False  # see SourceSnapshot.settling
    requests: tuple[Request[QueueKey], ...] = ()

    def asked(self, op: Op) -> list[QueueKey]:
        return [r.key for r in self.requests if r.op is op]


__all__ = [
    "SOURCE_FAILED",
    "Fault",
    "FaultKind",
    "Health",
    "Outcome",
    "SourceSnapshot",
]
