"""Per-GitSync metrics: one revision series per source, and nothing left of a source once forgotten."""

from __future__ import annotations

from gitops_sync.daemon.runtime.metrics import OBJECT_STATES, Metrics, object_state
from gitops_sync.plan.changeset import Action, Entry, Terminating
from gitops_sync.resource import ObjectKey


def _series(m: Metrics, source: str) -> list[str]:
    return [line for line in m.exposition().decode().splitlines() if f'source="{source}"' in line]


def test_a_source_has_one_revision_series_and_none_once_forgotten() -> None:
    m = Metrics()
    entries = [
        Entry(ObjectKey("", "ConfigMap", "a", "x"), "v1", Action.UNCHANGED),
        Entry(ObjectKey("", "ConfigMap", "a", "y"), "v1", Action.ERROR, message="403 Forbidden"),
    ]
    m.set_source("a/web", entries, applied=True, forcing=True, revision="r1", healthy=True, ready=False)
    m.set_source("a/web", entries, applied=True, forcing=True, revision="r2", healthy=True, ready=False)
    m.set_source("b/db", [], applied=True, forcing=True, revision="", healthy=False, ready=False)
    web = _series(m, "a/web")
    assert len(web) == len(OBJECT_STATES) + 3, web  # each state, revision, healthy, ready
    assert [s for s in web if "revision=" in s] == [
        'gitops_sync_gitsync_last_applied_revision_info{revision="r2",source="a/web"} 1.0'
    ]
    assert 'gitops_sync_gitsync_objects{source="a/web",state="error"} 1.0' in web
    assert 'gitops_sync_gitsync_objects{source="a/web",state="synced"} 1.0' in web
    m.forget_source("a/web")
    m.forget_source("a/web")  # twice, or a source never exported: no error
    m.forget_source("c/never")
    assert _series(m, "a/web") == []
    assert len(_series(m, "b/db")) == len(OBJECT_STATES) + 2  # no revision applied yet: no revision series


def test_terminating_objects_are_their_own_state_and_a_pending_prune_is_not_a_desired_object() -> None:
    wanted = Entry(
        ObjectKey("", "ConfigMap", "a", "w"), "v1", Action.TERMINATING, terminating=Terminating("t", in_git=True)
    )
    pruned = Entry(ObjectKey("", "ConfigMap", "a", "p"), "v1", Action.TERMINATING, terminating=Terminating("t"))
    assert object_state(wanted, applied=True, forcing=True) == "terminating"
    assert object_state(pruned, applied=True, forcing=True) == "terminating"
    m = Metrics()
    m.set_source("a/web", [wanted, pruned], applied=True, forcing=True, revision="r1", healthy=True, ready=True)
    assert 'gitops_sync_gitsync_objects{source="a/web",state="terminating"} 1.0' in _series(m, "a/web")
