"""The result of a pass: one entry per object with an explicit action, and field-level detail.

This is the schema of `diff -o json`, `sync -o json` and the daemon's `/status`.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gitops_sync.errors import ApiError
from gitops_sync.resource import ObjectKey


class Action(enum.StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    PRUNE = "prune"
    # Being deleted (a deletionTimestamp), held by finalizers: it will vanish, whether Git wants it or not.
    TERMINATING = "terminating"
    CONFLICT = "conflict"
    ERROR = "error"

    @property
    def is_change(self) -> bool:
        return self in (Action.CREATE, Action.UPDATE, Action.PRUNE, Action.TERMINATING, Action.CONFLICT)


_ABSENT: Any = None
# The HTTP statuses of a write the API server refused as a whole: nothing of that request was stored.
REFUSED_STATUSES = frozenset({400, 403, 404, 422})
NOT_SENT = "NotSent"  # the reason of an error entry no request was sent for (API server down, --deadline)
PRUNE_REFUSED = "PruneRefused"  # the reason of a deletion the cascade guard refused
GIT_CHANGED = "git-changed"
LIVE_CHANGED = "live-changed"
SERVER_CHANGED = "server-changed"


@dataclass
class FieldChange:
    """A field whose live value is not the desired one, and the manager that owns the live value.

    `manager` is the manager owning the field live: another manager for drift or a conflict, our own
    name when the difference comes from a new Git revision, "" when nobody owns it (the field is absent).
    """

    path: str
    desired: Any = _ABSENT
    live: Any = _ABSENT
    manager: str = ""
    operation: str = ""
    subresource: str = ""
    actor: str = ""  # the manager in words: "kubectl scale", "HorizontalPodAutoscaler (...)", "Helm"
    # Why it differs: git-changed (Git differs from what we applied last), live-changed (another manager
    # wrote it; `since` is when, from managedFields), server-changed (defaulting or mutating admission).
    reason: str = ""
    since: str = ""
    source: str = ""  # where Git says it: `apps/web.yaml:7:13`, or the file a tool rendered it from

    def to_dict(self) -> dict[str, Any]:
        out = {
            "path": self.path,
            "desired": self.desired,
            "live": self.live,
            "manager": self.manager,
            "operation": self.operation,
            "subresource": self.subresource,
            "actor": self.actor,
        }
        for name in ("reason", "since", "source"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out

    def why(self) -> str:
        """`live-changed by kubectl (Update/scale) at 2026-…`: the reason in one phrase, for tables and logs."""
        return why_text(self.reason, self.manager, self.operation, self.subresource, self.since)


def why_text(reason: str, manager: str, operation: str = "", subresource: str = "", since: str = "") -> str:
    """A field's reason in one phrase; from a `FieldChange` or its JSON (the web page and `diff -o html`)."""
    if reason == LIVE_CHANGED:
        how = "/".join(p for p in (operation, subresource) if p)
        return f"{reason} by {manager}" + (f" ({how})" if how else "") + (f" at {since}" if since else "")
    return reason


# What a report calls a field and an object. Drift is the cluster moving away from Git (`live-changed`);
# what Git itself changes (`git-changed`, and `server-changed`: Git's new value as the server stores it) is
# *planned* in a dry run (`diff`, a pull request) and *applied* by a sync. One vocabulary for the table,
# markdown and `-o html`.
DRIFT = "drift"
PLANNED = "planned"
APPLIED = "applied"
CHANGE_WORDS = {Action.CREATE: "create", Action.UPDATE: "change", Action.PRUNE: "delete"}


def field_kind(group: str, reason: str, *, shared: bool = False, dry_run: bool = True) -> str:
    """`conflict`/`shared` (group `conflicts`), `ignored`, `drift` (live-changed) or `planned`/`applied`."""
    if group in ("conflict", "conflicts"):
        return "shared" if shared else "conflict"
    if group == "ignored":
        return "ignored"
    if reason == LIVE_CHANGED:
        return DRIFT
    return PLANNED if dry_run else APPLIED


def change_of(action: str, reasons: list[str], *, dry_run: bool = True) -> str:
    """An object's change in words: `planned create|change|delete` (a dry run; `create|change|delete` after a
    sync), `drift` for an update whose every field another manager wrote, `planned change, drift` for both;
    else the action (`unchanged`, `conflict`, `error`)."""
    try:
        act = Action(action)
    except ValueError:
        return action
    if act not in CHANGE_WORDS:
        return act.value
    words = CHANGE_WORDS[act]
    planned = f"{PLANNED} {words}" if dry_run else words
    if act is not Action.UPDATE:
        return planned
    drift = LIVE_CHANGED in reasons
    if drift and all(r == LIVE_CHANGED for r in reasons):
        return DRIFT
    return f"{planned}, {DRIFT}" if drift else planned


@dataclass
class CoOwner:
    """Another manager that owns fields we set (shared ownership: same value, no conflict today)."""

    manager: str
    operation: str
    subresource: str
    fields: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "manager": self.manager,
            "operation": self.operation,
            "subresource": self.subresource,
            "fields": self.fields,
        }


@dataclass
class SharedWith:
    """The other ApplySet an object already belongs to (its part-of label), and who that is.

    `parent` and `source` are empty when the parent could not be found (e.g. no permission to list
    it, or a tool that keeps its parent elsewhere): the id alone still names it.
    """

    applyset_id: str
    parent: str = ""  # e.g. "ConfigMap team-a/gitops-sync-deploy-apps" or "Secret ns/name"
    source: str = ""  # the parent's gitops-sync.io/source (repo//path@ref) or tooling annotation
    tooling: str = ""  # applyset.kubernetes.io/tooling, e.g. "kubectl/v1.33.0"
    identity: str = ""  # the parent's gitops-sync.io/source-identity (`repo//path`), when gitops-sync made it

    def describe(self) -> str:
        """`ApplySet ConfigMap team-a/x (source /repos/deploy//apps)`, or the bare id."""
        if not self.parent:
            return f"ApplySet {self.applyset_id} (parent not found)"
        extra = ", ".join(p for p in (f"source {self.source}" if self.source else "", self.tooling) if p)
        return f"ApplySet {self.parent}" + (f" ({extra})" if extra else "")

    def same_source(self, identity: str) -> bool:
        """The other parent records a source that looks like this one (`repo//path` identities): the same,
        or the same repository name and sub-directory spelled another way (a work tree without a remote and
        its URL, a mirror). Then the object is most likely ours under another inventory name."""
        if not self.identity or not identity:
            return False
        if self.identity == identity:
            return True
        (theirs, _, their_path), (ours, _, our_path) = self.identity.partition("//"), identity.partition("//")
        return their_path == our_path and _repo_name(theirs) == _repo_name(ours) != ""

    def to_dict(self) -> dict[str, Any]:
        return {"applySet": self.applyset_id, "parent": self.parent, "source": self.source, "tooling": self.tooling}


def _repo_name(repo: str) -> str:
    last = repo.rstrip("/").rsplit("/", 1)[-1]
    return last[:-4] if last.endswith(".git") else last


def finalizers_text(names: list[str]) -> str:
    """`finalizer a` or `finalizers a, b`."""
    return ("finalizer " if len(names) == 1 else "finalizers ") + ", ".join(names)


@dataclass
class Terminating:
    """An object with a deletionTimestamp: what still holds it, and whether Git wants it.

    `finalizers` are `metadata.finalizers` (and a Namespace's `spec.finalizers`); `note` is what the object
    says of its own deletion (a Namespace's conditions: "Some content in the namespace has finalizers
    remaining: …"). A member that left Git is not deleted again; a desired one is re-created once gone.
    """

    since: str  # the deletionTimestamp
    finalizers: list[str] = field(default_factory=list)
    in_git: bool = False
    note: str = ""
    graceful: bool = False  # no finalizer: a grace period (a Pod) runs out first

    def describe(self) -> str:
        """`deletion pending: finalizer example.com/hold`, as every report and the page say it."""
        if self.finalizers:
            what = finalizers_text(self.finalizers)
        else:
            what = "graceful termination" if self.graceful else "the API server"
        return f"deletion pending: {what}" + (f" ({self.note})" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since, "finalizers": list(self.finalizers), "inGit": self.in_git, "note": self.note}


@dataclass
class Yielded(FieldChange):
    """A field Git sets that the daemon stopped correcting: another manager keeps it (see daemon/yields.py).

    `reason` is `autoscaler` (an HPA owns it through the scale subresource) or `fight` (it changed hands
    too often); `changes` are the fight's values, oldest first.
    """

    reason: str = ""
    since: str = ""
    advice: str = ""
    autoscaler: dict[str, Any] | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            **super().to_dict(),
            "reason": self.reason,
            "since": self.since,
            "advice": self.advice,
            "autoscaler": self.autoscaler,
            "changes": self.changes,
        }


@dataclass
class Ignored(FieldChange):
    """A field Git sets that an ignore rule leaves to the cluster (plan/ignore.py): never drift."""

    mode: str = ""  # if-owned-by-others | always
    rule: str = ""  # where the rule came from: --ignore or the rules file

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "mode": self.mode, "rule": self.rule}


@dataclass
class Foreign:
    """A field Git does not declare that another manager added to a managed object after our apply
    (a label, an env var, a ConfigMap key, a changed default): informational, never drift."""

    path: str
    value: Any
    manager: str
    operation: str
    subresource: str
    time: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "value": self.value,
            "manager": self.manager,
            "operation": self.operation,
            "subresource": self.subresource,
            "time": self.time,
        }


@dataclass(slots=True)
class Entry:
    key: ObjectKey
    api_version: str
    action: Action
    drift: list[FieldChange] = field(default_factory=list)
    conflicts: list[FieldChange] = field(default_factory=list)
    co_owners: list[CoOwner] = field(default_factory=list)
    message: str = ""
    origin: str = ""
    health: str = ""
    shared: SharedWith | None = None  # a `shared` conflict: already a member of another ApplySet
    yielded: list[Yielded] = field(default_factory=list)  # fields left to another manager (daemon)
    ignored: list[Ignored] = field(default_factory=list)  # fields ignore rules left to the cluster
    foreign: list[Foreign] = field(default_factory=list)  # fields others added that Git does not declare
    terminating: Terminating | None = None  # being deleted: what holds it (action `terminating`)
    # An error's cause, for scripts: the API server's HTTP status (0: no answer, or not the API server's) and
    # reason (`Forbidden`, `Invalid`, ...), or ours (NOT_SENT, PRUNE_REFUSED).
    status: int = 0
    reason: str = ""

    @property
    def left_git(self) -> bool:
        """A member that left Git (pruned, or its deletion pending): not one of the desired objects."""
        return self.action is Action.PRUNE or (self.terminating is not None and not self.terminating.in_git)

    def change(self, *, dry_run: bool = True) -> str:
        """`planned change`, `drift`, …: see `change_of`."""
        return change_of(self.action.value, [c.reason for c in self.drift], dry_run=dry_run)

    def caused_by(self, exc: BaseException) -> Entry:
        """Record the API server's status and reason of `exc` (when it is its answer) as this error's cause."""
        if isinstance(exc, ApiError):
            self.status, self.reason = exc.status, exc.reason
        return self

    @property
    def wrote_nothing(self) -> bool:
        """An error after which provably nothing of this request was stored: the API server refused it as a
        whole (400, 403, 404, 422), or it was never sent. A timeout or a 5xx may have landed: not this."""
        return self.action is Action.ERROR and (self.status in REFUSED_STATUSES or self.reason == NOT_SENT)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.key.kind,
            "namespace": self.key.namespace,
            "name": self.key.name,
            "action": self.action.value,
            "drift": [d.to_dict() for d in self.drift],
            "conflicts": [c.to_dict() for c in self.conflicts],
            "coOwners": [c.to_dict() for c in self.co_owners],
            "message": self.message,
            "origin": self.origin,
        }
        if self.health:
            out["health"] = self.health
        if self.shared is not None:
            out["shared"] = self.shared.to_dict()
        if self.yielded:
            out["yielded"] = [y.to_dict() for y in self.yielded]
        if self.ignored:
            out["ignored"] = [i.to_dict() for i in self.ignored]
        if self.foreign:
            out["foreign"] = [f.to_dict() for f in self.foreign]
        if self.terminating is not None:
            out["terminating"] = self.terminating.to_dict()
        if self.status:
            out["status"] = self.status
        if self.reason:
            out["reason"] = self.reason
        return out


class Consequence(str):
    """A pass error that only follows from errors already reported (prune skipped because objects failed,
    a pass stopped early): listed with the others, never counted again, never "the" error of the pass."""

    __slots__ = ()


@dataclass
class ChangeSet:
    revision: str = ""
    signer: str = ""  # who signed the revision (and its tag), when --verify-commits / --verify-tag checked
    source: str = ""
    entries: list[Entry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # pass-level errors (render, source, wait)
    dry_run: bool = False
    inventory: str = ""  # the ApplySet parent's name chosen for this source (--name or derived)
    inventory_namespace: str = ""
    source_identity: str = ""  # the normalised source the inventory belongs to
    # Members that left Git and were not deleted (the cascade guard refused, a delete failed). Their entries
    # are errors; the report says it up top too (`report_errors`), but it is no pass error: the daemon does
    # not back off for what waits on someone else.
    prune_left: list[ObjectKey] = field(default_factory=list)
    # Charts the source pulled from repositories ({repository, chart, version, digest} each; Checkout.charts).
    charts: list[dict[str, str]] = field(default_factory=list)
    # Helm hooks this pass ran ({event, object, weight, result, ok} each, in order; engine/hooks.py).
    hooks: list[dict[str, str]] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        counts = Counter(e.action for e in self.entries)
        out = {a.value: counts.get(a, 0) for a in Action}
        out["error"] += sum(1 for e in self.errors if not isinstance(e, Consequence))
        return out

    def report_errors(self) -> list[str]:
        """`errors` as a report shows them: the pass's own, and one line for a prune that left members behind
        (an exit 2 whose `errors` was [] named its cause only in an entry)."""
        if not self.prune_left:
            return list(self.errors)
        names = ", ".join(str(k) for k in self.prune_left[:5])
        more = f" and {len(self.prune_left) - 5} more" if len(self.prune_left) > 5 else ""
        verb = "would not delete" if self.dry_run else "did not delete"
        left = f"{len(self.prune_left)} object(s) that left Git: {names}{more}"
        return [*self.errors, f"prune incomplete: {verb} {left} (see their entries)"]

    @property
    def has_changes(self) -> bool:
        return any(e.action.is_change for e in self.entries)

    @property
    def has_conflicts(self) -> bool:
        return any(e.action is Action.CONFLICT or e.conflicts for e in self.entries)

    @property
    def has_pending(self) -> bool:
        """An object is being deleted (held by finalizers): the cluster is not what Git says yet."""
        return any(e.action is Action.TERMINATING for e in self.entries)

    @property
    def has_errors(self) -> bool:
        return bool(self.errors) or any(e.action is Action.ERROR for e in self.entries)

    def sorted_entries(self) -> list[Entry]:
        return sorted(self.entries, key=lambda e: (e.key.namespace, e.key.group, e.key.kind, e.key.name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            **({"signedBy": self.signer} if self.signer else {}),
            "source": self.source,
            "inventory": {
                "name": self.inventory,
                "namespace": self.inventory_namespace,
                "sourceIdentity": self.source_identity,
            },
            "dryRun": self.dry_run,
            "charts": list(self.charts),
            "hooks": list(self.hooks),
            "summary": self.summary(),
            "objects": [e.to_dict() for e in self.sorted_entries()],
            "errors": self.report_errors(),
        }
