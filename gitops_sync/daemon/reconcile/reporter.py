"""What one source tells people: the log, Kubernetes Events and metrics for each object a pass looked at.

A `SourceReconciler` hands every entry of a pass to `Reporter.report`, which decides whether it is news
(drift out of band, a conflict, a new revision, an error) or the same thing again (said once). Events go
to the process's `EventRecorder`, figures to its `Metrics`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from gitops_sync.conventions import MASK
from gitops_sync.daemon.reconcile.history import Fight
from gitops_sync.daemon.reconcile.yields import Yield
from gitops_sync.daemon.runtime.events import NORMAL, WARNING, EventRecorder, EventSpec
from gitops_sync.daemon.runtime.metrics import Metrics
from gitops_sync.daemon.runtime.supervisor import describe_crash
from gitops_sync.errors import GitOpsError
from gitops_sync.formatting import truncate
from gitops_sync.log import get_logger
from gitops_sync.plan.changeset import Action, Entry, FieldChange
from gitops_sync.plan.masking import Redactor, mask_literals
from gitops_sync.resource import Manifest, ObjectKey, is_secret, resource_version
from gitops_sync.source import mask_url, short_revision

log = get_logger("gitops_sync.daemon")

FULL = "<full>"
SOURCE = "<source>"
QueueKey = ObjectKey | str


class KeyQueue(Protocol):
    """The part of the work queue one source uses, with its own keys (SOURCE, FULL, object keys)."""

    def add(self, key: QueueKey) -> None: ...

    def add_after(self, key: QueueKey, delay: float) -> None: ...

    def add_rate_limited(self, key: QueueKey) -> float: ...

    def forget(self, key: QueueKey) -> None: ...

    def failures(self, key: QueueKey) -> int: ...


class Reporter:
    """Per-source memory of what was already said, so each drift, conflict or error is reported once."""

    def __init__(
        self,
        *,
        events: EventRecorder,
        metrics: Metrics,
        queue: KeyQueue,
        field_manager: str,
        forcing: bool,
        live: Callable[[ObjectKey], Manifest | None],
    ) -> None:
        self.events = events
        self.metrics = metrics
        self.queue = queue
        self.field_manager = field_manager
        self.forcing = forcing
        self.live = live
        self.reported: dict[ObjectKey, tuple[Any, ...]] = {}
        self.converged: dict[ObjectKey, str] = {}  # key -> digest it was last seen in sync at
        self.deleted: set[ObjectKey] = set()  # desired objects someone deleted (seen through the watch)
        self.added: set[ObjectKey] = set()  # desired objects the latest revision added (not in the one before)
        self.foreign_seen: dict[ObjectKey, tuple[tuple[str, str], ...]] = {}  # foreign fields last said

    def forget(self, keys: set[ObjectKey]) -> None:
        """These objects left Git: nothing about them is news any more."""
        for key in keys:
            self.reported.pop(key, None)
            self.converged.pop(key, None)
            self.deleted.discard(key)
            self.foreign_seen.pop(key, None)

    def report(self, digest: str, revision: str, e: Entry, *, applied: bool, retry: bool = True) -> None:
        key = e.key
        if e.action is Action.UNCHANGED:
            self.reported.pop(key, None)
            self.converged[key] = digest
            self.deleted.discard(key)
            self.queue.forget(key)
            return
        if e.action is Action.PRUNE:
            if applied:
                log.info("pruned", object=str(key), message=e.message)
            elif self.reported.get(key) != ("prune",):  # detect-only: say it once, not every full pass
                self.reported[key] = ("prune",)
                log.warning("would prune", object=str(key), message=e.message)
            return
        if e.action is Action.TERMINATING:  # held by finalizers: said once, until what holds it changes
            held = e.terminating.finalizers if e.terminating else []
            if self.reported.get(key) != ("terminating", *held):
                self.reported[key] = ("terminating", *held)
                log.warning("deletion pending", object=str(key), finalizers=held, message=e.message)
                self.event(e, "DeletionPending", WARNING, e.message)
            return
        fields = list({c.path: c for c in e.drift + e.conflicts}.values())  # a conflict is also a drift
        sig = (
            e.action.value,
            e.message if e.action is Action.ERROR else "",
            tuple(sorted((c.path, json.dumps(c.live, default=str), c.manager) for c in fields)),
        )
        if e.action is Action.ERROR:
            if retry:
                self.queue.add_rate_limited(key)
            if sig != self.reported.get(key):
                self.reported[key] = sig
                self.metrics.errors.inc()
                log.error("object failed", object=str(key), error=e.message)
                self.event(e, "SyncFailed", WARNING, e.message)
            return
        self.queue.forget(key)
        deleted = key in self.deleted
        foreign = any(c.manager and c.manager != self.field_manager for c in fields)
        # Git moved on rather than the cluster: the object was in sync at an earlier revision (or is new in
        # this one) and nobody else owns what differs. Not drift, also in --detect-only.
        new_revision = (
            not deleted
            and not foreign
            and (
                (key in self.converged and self.converged[key] != digest)
                or (e.action is Action.CREATE and key in self.added)
            )
        )
        out_of_band = deleted or self.converged.get(key) == digest or foreign or (not applied and not new_revision)
        if applied:
            self.converged[key] = digest
            self.deleted.discard(key)
        if sig == self.reported.get(key):
            return  # the same drift as already reported (detect-only, or a conflict left in place)
        self.reported[key] = sig
        detail = describe(key, fields)
        log_fields = [field_log(key, c) for c in fields]
        conflict = e.action is Action.CONFLICT or bool(e.conflicts)
        rev = short_revision(revision) or "(plain directory)"
        if e.action is Action.UPDATE and not fields:
            # Only our bookkeeping (membership label, intent hash) differed: not a field anyone drifted.
            log.info(
                "ownership recorded" if applied else "ownership record would be restored (detect-only)",
                object=str(key),
                revision=revision,
            )
        elif conflict and not (self.forcing and not applied):
            self.metrics.conflicts.inc()
            log.warning("conflict", object=str(key), message=e.message, fields=log_fields)
            self.event(e, "Conflict", WARNING, f"{e.message}: {detail}")
        elif out_of_band:
            what = (
                "deleted out of band; recreated"
                if deleted and applied
                else ("deleted out of band" if deleted else detail)
            )
            if applied:
                self.metrics.drift.labels("corrected").inc()
                log.warning("drift corrected", object=str(key), fields=log_fields, deleted=deleted)
                self.event(e, "DriftCorrected", NORMAL, f"drift corrected to Git {rev}: {what}")
            else:
                self.metrics.drift.labels("detected").inc()
                log.warning("drift detected", object=str(key), fields=log_fields, missing=e.action is Action.CREATE)
                if e.action is Action.CREATE:
                    what = "missing from the cluster" if not deleted else what
                self.event(e, "DriftDetected", WARNING, f"differs from Git {rev} (not corrected: detect-only): {what}")
        elif not applied:
            log.info(
                "new revision not applied (detect-only)",
                object=str(key),
                revision=revision,
                missing=e.action is Action.CREATE,
                fields=log_fields,
            )
        else:
            log.info(
                "applied" if e.action is not Action.CREATE else "created",
                object=str(key),
                revision=revision,
                fields=log_fields,
            )
        if applied and not conflict:
            self.reported.pop(key, None)  # corrected: the next drift of the same field is news again

    def event(self, e: Entry, reason: str, etype: str, message: str) -> None:
        series = ",".join(sorted(c.path for c in e.drift + e.conflicts))
        self._record(EventSpec(e.key, e.api_version, reason, message, etype, series), self.live(e.key))

    def _record(self, spec: EventSpec, live: Manifest | None) -> None:
        """`spec` as an Event tied to the `live` object's uid and resourceVersion (where it exists)."""
        meta = (live or {}).get("metadata") or {}
        self.events.record(replace(spec, uid=str(meta.get("uid") or ""), resource_version=resource_version(live)))

    def fight(self, fight: Fight, live: Manifest) -> None:
        self.metrics.fights.inc()
        log.warning(
            "field fight",
            object=str(fight.key),
            field=fight.path,
            managers=fight.managers,
            changes=fight.changes,
            values=[{"manager": r.manager, "value": r.value, "time": r.time} for r in fight.records[-10:]],
        )
        api_version = str(live.get("apiVersion", ""))
        self._record(EventSpec(fight.key, api_version, "FieldFight", fight.message(), WARNING, fight.path), live)

    def foreign(self, e: Entry) -> None:
        """Fields others added that Git does not declare: said once per new set (log line and Normal Event)."""
        sig = tuple(sorted((f.path, f.manager) for f in e.foreign))
        if self.foreign_seen.get(e.key, ()) == sig:
            return
        self.foreign_seen[e.key] = sig
        if not sig:
            return
        log.info(
            "fields added by other managers (not in Git)",
            object=str(e.key),
            fields=[
                {
                    "path": f.path,
                    "manager": f.manager,
                    "operation": f.operation,
                    "subresource": f.subresource,
                    "time": f.time,
                }
                for f in e.foreign
            ],
        )
        text = "; ".join(f"{f.path} by {f.manager} at {f.time}" for f in e.foreign[:5])
        more = f" and {len(e.foreign) - 5} more" if len(e.foreign) > 5 else ""
        message = f"fields not in Git, added by other managers: {text}{more}"
        self._record(EventSpec(e.key, e.api_version, "ForeignFields", message, NORMAL, "foreign"), self.live(e.key))

    def yielded(self, y: Yield, live: Manifest) -> None:
        """A field left to another manager: said once, in the log and as a Warning Event."""
        self.metrics.yields.inc()
        log.warning(
            "yielding field",
            object=str(y.key),
            field=y.path,
            reason=y.reason,
            manager=y.manager,
            operation=y.operation,
            subresource=y.subresource,
            autoscaler=y.autoscaler.to_dict() if y.autoscaler else None,
            **({} if is_secret(y.key) else {"desired": y.desired, "live": y.live}),
            advice=y.advice(),
        )
        api_version = str(live.get("apiVersion", ""))
        self._record(EventSpec(y.key, api_version, "FieldYielded", y.message(), WARNING, y.path), live)

    def resumed(self, y: Yield, why: str, api_version: str, active: bool) -> None:
        """A yielded field is Git's again: look at the object now; the Event only where passes run."""
        log.info("resuming field", object=str(y.key), field=y.path, reason=y.reason, manager=y.manager, why=why)
        self.queue.add(y.key)
        if not active:
            return
        message = f"correcting {y.path} again (was left to {y.actor}): {why}"
        self._record(EventSpec(y.key, api_version, "FieldResumed", message, NORMAL, y.path), self.live(y.key))


def masked(exc: BaseException, redact: Redactor) -> str:
    """An error fit for /status, the log and Events, masked as the CLI masks its one-line error: known
    Secret values and URL credentials always; for a crash (not a message we wrote) every quoted literal
    too, and it says where it happened instead of a traceback."""
    text = mask_url(redact(str(exc)))
    if isinstance(exc, GitOpsError):
        return text
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"internal error: {describe_crash(exc)}" + (f": {mask_literals(first)}" if first else "")


def fingerprint(obj: Manifest | None) -> str:
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
        return MASK
    return truncate(json.dumps(value, default=str), 60)


def describe(key: ObjectKey, fields: list[FieldChange], limit: int = 5) -> str:
    """`.spec.replicas: 10 (kubectl, Update/scale) -> 3 [live-changed, Git web.yaml:8:13]`; Secret values never
    included."""
    parts = []
    for c in fields[:limit]:
        owner = f" ({c.manager}, {c.operation}{'/' + c.subresource if c.subresource else ''})" if c.manager else ""
        why = f" [{c.reason}{', Git ' + c.source if c.source else ''}]" if c.reason else ""
        if is_secret(key):
            parts.append(f"{c.path}{owner}{why}")
        else:
            parts.append(f"{c.path}: {_value(key, c.live)}{owner} -> {_value(key, c.desired)}{why}")
    if len(fields) > limit:
        parts.append(f"and {len(fields) - limit} more")
    return "; ".join(parts) or "no field differences"


def field_log(key: ObjectKey, c: FieldChange) -> dict[str, Any]:
    out: dict[str, Any] = {"path": c.path, "manager": c.manager, "operation": c.operation, "subresource": c.subresource}
    if not is_secret(key):
        out["live"], out["desired"] = c.live, c.desired
    for name in ("reason", "since", "source"):  # why it differs and where Git says it
        if getattr(c, name):
            out[name] = getattr(c, name)
    return out


__all__ = ["FULL", "SOURCE", "KeyQueue", "QueueKey", "Reporter", "describe", "field_log", "fingerprint", "masked"]
