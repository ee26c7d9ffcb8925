"""What a source says about each entry of a pass, decided on plain values (`decide`), and how `Reporter`
emits a decision (counter, log line, Event, queue) on fakes. The cluster tests show the same words in
real Events; these pin the rules: news once, drift versus a new revision, detect-only, conflicts, retries."""

from __future__ import annotations

from typing import Any

from gitops_sync.daemon.reconcile.reporter import (
    FORGET,
    RETRY,
    Memory,
    Notice,
    Policy,
    Reporter,
    decide,
    decide_foreign,
)
from gitops_sync.daemon.runtime.events import EventSpec
from gitops_sync.daemon.runtime.metrics import Metrics
from gitops_sync.plan.changeset import GIT_CHANGED, LIVE_CHANGED, Action, Entry, FieldChange, Foreign, Terminating
from gitops_sync.resource import ObjectKey

KEY = ObjectKey("apps", "Deployment", "ns", "web")
OURS = Policy(field_manager="gitops-sync", forcing=True)
ASKING = Policy(field_manager="gitops-sync", forcing=False)


def entry(
    action: Action, *changes: FieldChange, conflicts: list[FieldChange] | None = None, message: str = ""
) -> Entry:
    return Entry(KEY, "apps/v1", action, drift=list(changes), conflicts=conflicts or [], message=message)


def kubectl(live: int = 5) -> FieldChange:
    return FieldChange(".spec.replicas", 2, live, manager="kubectl-edit", operation="Update", reason=LIVE_CHANGED)


def git(desired: int = 3) -> FieldChange:
    return FieldChange(".spec.replicas", desired, 2, manager="gitops-sync", operation="Apply", reason=GIT_CHANGED)


def said(d: Any) -> tuple[str, str, str] | None:
    """(log message, Event reason, counter) of a decision, or None when nothing is said."""
    n: Notice | None = d.notice
    if n is None:
        return None
    return n.message, n.event[0] if n.event else "", ":".join(n.counter) if n.counter else ""


def converged(memory: Memory, digest: str = "d1") -> None:
    decide(memory, OURS, digest, "rev1", entry(Action.UNCHANGED), applied=True)


def test_an_object_in_sync_is_settled_and_remembered_at_its_digest() -> None:
    memory = Memory()
    memory.reported[KEY] = ("old",)
    d = decide(memory, OURS, "d1", "rev1", entry(Action.UNCHANGED), applied=True)
    assert d.notice is None and d.queue == FORGET
    assert memory.converged[KEY] == "d1" and KEY not in memory.reported


def test_a_live_edit_corrected_is_drift_corrected_and_the_next_one_is_news_again() -> None:
    memory = Memory()
    converged(memory)
    first = decide(memory, OURS, "d1", "rev1", entry(Action.UPDATE, kubectl()), applied=True)
    assert said(first) == ("drift corrected", "DriftCorrected", "drift:corrected") and first.queue == FORGET
    again = decide(memory, OURS, "d1", "rev1", entry(Action.UPDATE, kubectl()), applied=True)
    assert said(again) == ("drift corrected", "DriftCorrected", "drift:corrected"), "corrected: news again"


def test_detect_only_says_a_drift_once_while_it_stays() -> None:
    memory = Memory()
    converged(memory)
    first = decide(memory, OURS, "d1", "rev1", entry(Action.UPDATE, kubectl()), applied=False)
    assert said(first) == ("drift detected", "DriftDetected", "drift:detected")
    assert first.notice is not None and first.notice.event is not None
    assert "not corrected: detect-only" in first.notice.event[2] and ".spec.replicas: 5" in first.notice.event[2]
    assert decide(memory, OURS, "d1", "rev1", entry(Action.UPDATE, kubectl()), applied=False).notice is None
    other = decide(memory, OURS, "d1", "rev1", entry(Action.UPDATE, kubectl(live=7)), applied=False)
    assert said(other) == ("drift detected", "DriftDetected", "drift:detected"), "another value is news"


def test_a_new_commit_is_not_drift_applied_or_in_detect_only() -> None:
    memory = Memory()
    converged(memory, "d1")
    applied = decide(memory, OURS, "d2", "rev2", entry(Action.UPDATE, git()), applied=True)
    assert said(applied) == ("applied", "", "")
    memory = Memory()
    converged(memory, "d1")
    held = decide(memory, OURS, "d2", "rev2", entry(Action.UPDATE, git()), applied=False)
    assert said(held) == ("new revision not applied (detect-only)", "", "")


def test_an_object_the_revision_adds_is_created_and_one_deleted_by_hand_is_drift() -> None:
    memory = Memory(added={KEY})
    assert said(decide(memory, OURS, "d2", "rev2", entry(Action.CREATE), applied=True)) == ("created", "", "")
    memory = Memory(deleted={KEY})
    d = decide(memory, OURS, "d1", "rev1", entry(Action.CREATE), applied=True)
    assert said(d) == ("drift corrected", "DriftCorrected", "drift:corrected")
    assert d.notice is not None and d.notice.event is not None and "deleted out of band; recreated" in d.notice.event[2]
    assert KEY not in memory.deleted, "recreated: no longer deleted"
    memory = Memory()
    missing = decide(memory, OURS, "d1", "rev1", entry(Action.CREATE), applied=False)
    assert missing.notice is not None and missing.notice.event is not None
    assert "missing from the cluster" in missing.notice.event[2]


def test_a_conflict_is_said_once_unless_forced_where_it_is_drift() -> None:
    memory = Memory()
    conflict = entry(Action.CONFLICT, conflicts=[kubectl()], message="1 field owned by kubectl-edit")
    first = decide(memory, ASKING, "d1", "rev1", conflict, applied=False)
    assert said(first) == ("conflict", "Conflict", "conflicts:")
    assert decide(memory, ASKING, "d1", "rev1", conflict, applied=False).notice is None
    forced = decide(Memory(), OURS, "d1", "rev1", conflict, applied=False)
    assert said(forced) == ("drift detected", "DriftDetected", "drift:detected")


def test_an_error_is_retried_every_time_and_said_once_per_message() -> None:
    memory = Memory()
    first = decide(memory, OURS, "d1", "rev1", entry(Action.ERROR, message="403 Forbidden"), applied=True)
    assert said(first) == ("object failed", "SyncFailed", "errors:") and first.queue == RETRY
    again = decide(memory, OURS, "d1", "rev1", entry(Action.ERROR, message="403 Forbidden"), applied=True)
    assert again.notice is None and again.queue == RETRY
    other = decide(memory, OURS, "d1", "rev1", entry(Action.ERROR, message="422 Invalid"), applied=True)
    assert said(other) == ("object failed", "SyncFailed", "errors:")
    assert decide(memory, OURS, "d1", "rev1", entry(Action.ERROR, message="x"), applied=True, retry=False).queue == ""


def test_a_prune_in_detect_only_is_said_once_and_a_pending_deletion_until_its_finalizers_change() -> None:
    memory = Memory()
    assert said(decide(memory, OURS, "d1", "r", entry(Action.PRUNE), applied=False)) == ("would prune", "", "")
    assert decide(memory, OURS, "d1", "r", entry(Action.PRUNE), applied=False).notice is None
    held = Entry(KEY, "apps/v1", Action.TERMINATING, terminating=Terminating("t", finalizers=["a"]))
    assert said(decide(memory, OURS, "d1", "r", held, applied=True)) == ("deletion pending", "DeletionPending", "")
    assert decide(memory, OURS, "d1", "r", held, applied=True).notice is None
    held2 = Entry(KEY, "apps/v1", Action.TERMINATING, terminating=Terminating("t", finalizers=["b"]))
    assert said(decide(memory, OURS, "d1", "r", held2, applied=True)) == ("deletion pending", "DeletionPending", "")


def test_foreign_fields_are_said_once_per_new_set() -> None:
    memory = Memory()
    e = Entry(
        KEY, "apps/v1", Action.UNCHANGED, foreign=[Foreign(".metadata.labels.x", "1", "kubectl", "Update", "", "t")]
    )
    first = decide_foreign(memory, e)
    assert first is not None and first.event is not None and first.event[0] == "ForeignFields"
    assert decide_foreign(memory, e) is None


class Events:
    def __init__(self) -> None:
        self.specs: list[EventSpec] = []

    def record(self, spec: EventSpec) -> None:
        self.specs.append(spec)


class Queue:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def add(self, key: Any) -> None:
        self.calls.append(("add", key))

    def add_after(self, key: Any, delay: float) -> None:
        self.calls.append(("add_after", key))

    def add_rate_limited(self, key: Any) -> float:
        self.calls.append(("add_rate_limited", key))
        return 0.0

    def forget(self, key: Any) -> None:
        self.calls.append(("forget", key))

    def failures(self, key: Any) -> int:
        return 0


def test_the_reporter_emits_a_decision_as_counter_event_and_queue_call() -> None:
    events, queue, metrics = Events(), Queue(), Metrics()
    live = {"metadata": {"uid": "u1", "resourceVersion": "7"}}
    reporter = Reporter(
        events=events,  # type: ignore[arg-type]
        metrics=metrics,
        queue=queue,
        field_manager="gitops-sync",
        forcing=True,
        live=lambda key: live,
    )
    reporter.report("d1", "rev1", entry(Action.ERROR, message="403 Forbidden"), applied=True)
    reporter.deleted.add(KEY)
    reporter.report("d1", "rev1", entry(Action.CREATE), applied=False)
    assert queue.calls == [("add_rate_limited", KEY), ("forget", KEY)]
    assert [(s.reason, s.type, s.uid, s.resource_version) for s in events.specs] == [
        ("SyncFailed", "Warning", "u1", "7"),
        ("DriftDetected", "Warning", "u1", "7"),
    ]
    text = metrics.exposition().decode()
    assert 'gitops_sync_drift_total{outcome="detected"} 1.0' in text
    assert "gitops_sync_object_errors_total 1.0" in text
