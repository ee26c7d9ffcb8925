"""What the daemon calls an object it does not apply (detect-only): `planned` when Git changed it, `drifted`
when the cluster did — the words of the report and the page, in /status and in the objects gauge."""

from __future__ import annotations

from gitops_sync.daemon.runtime.metrics import OBJECT_STATES, Metrics, object_state
from gitops_sync.plan.changeset import GIT_CHANGED, LIVE_CHANGED, SERVER_CHANGED, Action, Entry, FieldChange
from gitops_sync.resource import ObjectKey

KEY = ObjectKey("apps", "Deployment", "ns", "web")


def update(*reasons: str) -> Entry:
    return Entry(
        KEY, "apps/v1", Action.UPDATE, drift=[FieldChange(f".f{i}", 1, 2, reason=r) for i, r in enumerate(reasons)]
    )


def test_a_git_change_not_applied_is_planned() -> None:
    assert object_state(update(GIT_CHANGED), applied=False, forcing=True) == "planned"
    assert object_state(update(GIT_CHANGED, SERVER_CHANGED), applied=False, forcing=False) == "planned"


def test_a_live_change_not_applied_is_drifted_also_beside_a_git_change() -> None:
    assert object_state(update(LIVE_CHANGED), applied=False, forcing=True) == "drifted"
    assert object_state(update(GIT_CHANGED, LIVE_CHANGED), applied=False, forcing=True) == "drifted"


def test_applied_both_are_synced() -> None:
    assert object_state(update(GIT_CHANGED), applied=True, forcing=True) == "synced"
    assert object_state(update(LIVE_CHANGED), applied=True, forcing=True) == "synced"


def test_the_objects_gauge_counts_planned_apart_from_drifted() -> None:
    m = Metrics()
    m.set_objects([update(GIT_CHANGED), update(GIT_CHANGED), update(LIVE_CHANGED)], applied=False, forcing=True)
    text = m.exposition().decode()
    assert 'gitops_sync_objects{state="planned"} 2.0' in text
    assert 'gitops_sync_objects{state="drifted"} 1.0' in text
    assert "planned" in OBJECT_STATES
