"""What one source tells people: the log, Kubernetes Events and metrics for each object a pass looked at.

Decide apart from emit. `decide` (pure but for the source's `Memory` of what it said) finds whether an
entry is news (drift out of band, a conflict, a new revision, an error) or the same thing again (said
once), and returns a `Decision`: a `Notice` and what the work queue does with the key. `Reporter` (which a
`SourceReconciler` hands every entry of a pass) emits it: the counter to the process's `Metrics`, the log
line, the Event to its `EventRecorder`; and it settles or retries the key in the queue.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gitops_sync import jsoncodec
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


FORGET = "forget"  # the object is settled: its failures so far no longer count toward its backoff
RETRY = "retry"  # the object failed: look at it again after its backoff
Counter = tuple[str, str]  # (Metrics attribute, label or "")


@dataclass(frozen=True)
class Notice:
    """One thing to tell people about an object: a log line, and maybe an Event and a counter."""

    level: str  # the log level: info | warning | error
    message: str
    fields: dict[str, Any]  # the log line's keys and values
    event: tuple[str, str, str] | None = None  # (reason, Normal|Warning, message) on the object
    counter: Counter | None = None  # ("drift", "corrected"), ("errors", ""), ...


@dataclass(frozen=True)
class Decision:
    """What a pass's entry calls for: a notice (None: nothing new to say) and what the queue does with the key."""

    notice: Notice | None = None
    queue: str = ""  # FORGET | RETRY | "" (nothing)


@dataclass
class Memory:
    """What one source already said and saw, so each drift, conflict or error is news once."""

    reported: dict[ObjectKey, tuple[Any, ...]] = field(default_factory=dict)
    converged: dict[ObjectKey, str] = field(default_factory=dict)  # key -> digest it was last seen in sync at
    deleted: set[ObjectKey] = field(default_factory=set)  # desired objects someone deleted (seen by the watch)
    added: set[ObjectKey] = field(default_factory=set)  # desired objects the latest revision added
    foreign_seen: dict[ObjectKey, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # foreign fields said

    def forget(self, keys: set[ObjectKey]) -> None:
        """These objects left Git: nothing about them is news any more."""
        for key in keys:
            self.reported.pop(key, None)
            self.converged.pop(key, None)
            self.deleted.discard(key)
            self.foreign_seen.pop(key, None)


@dataclass(frozen=True)
class Policy:
    """What a decision depends on besides memory: our field manager, whether conflicts are forced."""

    field_manager: str
    forcing: bool


def decide(
    memory: Memory, policy: Policy, digest: str, revision: str, e: Entry, *, applied: bool, retry: bool = True
) -> Decision:
    """What to say about `e` after a pass at `digest` (`applied`: the pass wrote), remembering it in `memory`."""
    key = e.key
    if e.action is Action.UNCHANGED:
        memory.reported.pop(key, None)
        memory.converged[key] = digest
        memory.deleted.discard(key)
        return Decision(queue=FORGET)
    if e.action is Action.PRUNE:
        return Decision(_prune_notice(memory, e, applied))
    if e.action is Action.TERMINATING:
        return Decision(_terminating_notice(memory, e))
    fields = list({c.path: c for c in e.drift + e.conflicts}.values())  # a conflict is also a drift
    sig = (
        e.action.value,
        e.message if e.action is Action.ERROR else "",
        tuple(sorted((c.path, json.dumps(c.live, default=str), c.manager) for c in fields)),
    )
    if e.action is Action.ERROR:
        notice = None
        if sig != memory.reported.get(key):
            memory.reported[key] = sig
            event = ("SyncFailed", WARNING, e.message)
            notice = Notice("error", "object failed", {"object": str(key), "error": e.message}, event, ("errors", ""))
        return Decision(notice, RETRY if retry else "")
    return Decision(_change_notice(memory, policy, digest, revision, e, fields, sig, applied), FORGET)


def _prune_notice(memory: Memory, e: Entry, applied: bool) -> Notice | None:
    if applied:
        return Notice("info", "pruned", {"object": str(e.key), "message": e.message})
    if memory.reported.get(e.key) == ("prune",):  # detect-only: said once, not every full pass
        return None
    memory.reported[e.key] = ("prune",)
    return Notice("warning", "would prune", {"object": str(e.key), "message": e.message})


def _terminating_notice(memory: Memory, e: Entry) -> Notice | None:
    """Held by finalizers: said once, until what holds it changes."""
    held = e.terminating.finalizers if e.terminating else []
    if memory.reported.get(e.key) == ("terminating", *held):
        return None
    memory.reported[e.key] = ("terminating", *held)
    fields = {"object": str(e.key), "finalizers": held, "message": e.message}
    return Notice("warning", "deletion pending", fields, ("DeletionPending", WARNING, e.message))


def _change_notice(
    memory: Memory,
    policy: Policy,
    digest: str,
    revision: str,
    e: Entry,
    fields: list[FieldChange],
    sig: tuple[Any, ...],
    applied: bool,
) -> Notice | None:
    """An object that differed from Git: drift (the cluster moved), a new revision (Git moved), a conflict,
    or our bookkeeping; None when it is the same as already said."""
    key = e.key
    deleted = key in memory.deleted
    foreign = any(c.manager and c.manager != policy.field_manager for c in fields)
    # Git moved on rather than the cluster: the object was in sync at an earlier revision (or is new in
    # this one) and nobody else owns what differs. Not drift, also in --detect-only.
    new_revision = (
        not deleted
        and not foreign
        and (
            (key in memory.converged and memory.converged[key] != digest)
            or (e.action is Action.CREATE and key in memory.added)
        )
    )
    out_of_band = deleted or memory.converged.get(key) == digest or foreign or (not applied and not new_revision)
    if applied:
        memory.converged[key] = digest
        memory.deleted.discard(key)
    if sig == memory.reported.get(key):
        return None  # the same drift as already reported (detect-only, or a conflict left in place)
    conflict = e.action is Action.CONFLICT or bool(e.conflicts)
    if applied and not conflict:
        memory.reported.pop(key, None)  # corrected: the next drift of the same field is news again
    else:
        memory.reported[key] = sig
    said = _Said(e, fields, revision, applied, deleted)
    if e.action is Action.UPDATE and not fields:
        return said.bookkeeping()
    if conflict and not (policy.forcing and not applied):
        return said.conflict()
    if out_of_band:
        return said.drift()
    return said.new_revision()


@dataclass(frozen=True)
class _Said:
    """The words for one changed object, by what the change was."""

    e: Entry
    fields: list[FieldChange]
    revision: str
    applied: bool
    deleted: bool

    def _log(self, **more: Any) -> dict[str, Any]:
        return {"object": str(self.e.key), **more}

    def _fields(self) -> list[dict[str, Any]]:
        return [field_log(self.e.key, c) for c in self.fields]

    def bookkeeping(self) -> Notice:
        """Only our bookkeeping (membership label, intent hash) differed: not a field anyone drifted."""
        message = "ownership recorded" if self.applied else "ownership record would be restored (detect-only)"
        return Notice("info", message, self._log(revision=self.revision))

    def conflict(self) -> Notice:
        event = ("Conflict", WARNING, f"{self.e.message}: {describe(self.e.key, self.fields)}")
        log_fields = self._log(message=self.e.message, fields=self._fields())
        return Notice("warning", "conflict", log_fields, event, ("conflicts", ""))

    def drift(self) -> Notice:
        rev = short_revision(self.revision) or "(plain directory)"
        missing = self.e.action is Action.CREATE
        if self.applied:
            what = "deleted out of band; recreated" if self.deleted else describe(self.e.key, self.fields)
            event = ("DriftCorrected", NORMAL, f"drift corrected to Git {rev}: {what}")
            log_fields = self._log(fields=self._fields(), deleted=self.deleted)
            return Notice("warning", "drift corrected", log_fields, event, ("drift", "corrected"))
        what = "deleted out of band" if self.deleted else describe(self.e.key, self.fields)
        if missing and not self.deleted:
            what = "missing from the cluster"
        event = ("DriftDetected", WARNING, f"differs from Git {rev} (not corrected: detect-only): {what}")
        log_fields = self._log(fields=self._fields(), missing=missing)
        return Notice("warning", "drift detected", log_fields, event, ("drift", "detected"))

    def new_revision(self) -> Notice:
        if not self.applied:
            missing = self.e.action is Action.CREATE
            log_fields = self._log(revision=self.revision, missing=missing, fields=self._fields())
            return Notice("info", "new revision not applied (detect-only)", log_fields)
        message = "applied" if self.e.action is not Action.CREATE else "created"
        return Notice("info", message, self._log(revision=self.revision, fields=self._fields()))


def decide_foreign(memory: Memory, e: Entry) -> Notice | None:
    """Fields others added that Git does not declare: said once per new set (log line and Normal Event)."""
    sig = tuple(sorted((f.path, f.manager) for f in e.foreign))
    if memory.foreign_seen.get(e.key, ()) == sig:
        return None
    memory.foreign_seen[e.key] = sig
    if not sig:
        return None
    fields = [
        {"path": f.path, "manager": f.manager, "operation": f.operation, "subresource": f.subresource, "time": f.time}
        for f in e.foreign
    ]
    text = "; ".join(f"{f.path} by {f.manager} at {f.time}" for f in e.foreign[:5])
    more = f" and {len(e.foreign) - 5} more" if len(e.foreign) > 5 else ""
    event = ("ForeignFields", NORMAL, f"fields not in Git, added by other managers: {text}{more}")
    return Notice(
        "info", "fields added by other managers (not in Git)", {"object": str(e.key), "fields": fields}, event
    )


class Reporter:
    """Says what `decide` finds news: log lines, Events on the objects, counters; and settles or retries keys."""

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
        self.policy = Policy(field_manager, forcing)
        self.live = live
        self.memory = Memory()

    @property
    def added(self) -> set[ObjectKey]:
        return self.memory.added

    @added.setter
    def added(self, keys: set[ObjectKey]) -> None:
        self.memory.added = keys

    @property
    def deleted(self) -> set[ObjectKey]:
        return self.memory.deleted

    def forget(self, keys: set[ObjectKey]) -> None:
        self.memory.forget(keys)

    def report(self, digest: str, revision: str, e: Entry, *, applied: bool, retry: bool = True) -> None:
        decision = decide(self.memory, self.policy, digest, revision, e, applied=applied, retry=retry)
        if decision.queue == RETRY:
            self.queue.add_rate_limited(e.key)
        elif decision.queue == FORGET:
            self.queue.forget(e.key)
        if decision.notice is not None:
            self.emit(e, decision.notice)

    def foreign(self, e: Entry) -> None:
        notice = decide_foreign(self.memory, e)
        if notice is not None:
            self.emit(e, notice, series="foreign")

    def emit(self, e: Entry, notice: Notice, *, series: str | None = None) -> None:
        """The counter, the log line, then the Event (its series: the paths that differ, unless given)."""
        if notice.counter is not None:
            name, label = notice.counter
            counter = getattr(self.metrics, name)
            (counter.labels(label) if label else counter).inc()
        getattr(log, notice.level)(notice.message, **notice.fields)
        if notice.event is not None:
            reason, etype, message = notice.event
            paths = series if series is not None else ",".join(sorted(c.path for c in e.drift + e.conflicts))
            self._record(EventSpec(e.key, e.api_version, reason, message, etype, paths), self.live(e.key))

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
    return hashlib.sha256(jsoncodec.dumps(body, sort_keys=True, default=str)).hexdigest()


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


__all__ = [
    "FULL",
    "SOURCE",
    "Decision",
    "KeyQueue",
    "Memory",
    "Notice",
    "Policy",
    "QueueKey",
    "Reporter",
    "decide",
    "decide_foreign",
    "describe",
    "field_log",
    "fingerprint",
    "masked",
]
