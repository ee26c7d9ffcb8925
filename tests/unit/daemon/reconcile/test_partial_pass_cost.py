"""A partial pass costs its own objects, not the whole source: its targets are looked up and the objects
gauge is moved for its objects only; both give what a walk and a recount of everything gave."""

from __future__ import annotations

import random

from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.reconcile.desired import DesiredState, TrackedPaths
from gitops_sync.daemon.reconcile.passes import PassRunner
from gitops_sync.daemon.runtime.metrics import OBJECT_STATES, Metrics
from gitops_sync.plan.changeset import LIVE_CHANGED, Action, Entry, FieldChange
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey
from gitops_sync.source import Checkout


def _desired(n: int) -> DesiredState:
    info = ResourceInfo("", "v1", "ConfigMap", "configmaps", True)
    keys = [ObjectKey("", "ConfigMap", f"ns-{i % 3}", f"cm-{n - i:05d}") for i in range(n)]
    targets = [
        Target(k, info, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": k.name}}, "") for k in keys
    ]
    by_key = {t.key: t for t in targets}
    return DesiredState(
        checkout=Checkout.__new__(Checkout), targets=targets, digest="d", by_key=by_key, paths=TrackedPaths(by_key)
    )


def test_the_scope_of_a_few_objects_is_looked_up_in_key_order_of_many_found_in_desired_order() -> None:
    src = _desired(100)
    assert src.scope(None) is src.targets
    few = {src.targets[i].key for i in (70, 3, 41)} | {ObjectKey("", "ConfigMap", "ns-0", "not-desired")}
    assert [t.key for t in src.scope(few)] == sorted(k for k in few if k in src.by_key)
    many = {t.key for t in src.targets[::2]}
    assert [t.key for t in src.scope(many)] == [t.key for t in src.targets[::2]]
    assert src.scope(set()) == []


class _Runner(PassRunner):
    @property
    def forcing(self) -> bool:
        return False


def _entry(i: int, action: Action) -> Entry:
    drift = [FieldChange(".data.a", "1", "2", reason=LIVE_CHANGED)] if action is Action.UPDATE else []
    return Entry(ObjectKey("", "ConfigMap", "ns", f"cm-{i}"), "v1", action, drift=drift)


def _gauge(m: Metrics) -> dict[str, str]:
    lines = m.exposition().decode().splitlines()
    return {
        s: next(line for line in lines if line.startswith(f'gitops_sync_objects{{state="{s}"}}')) for s in OBJECT_STATES
    }


def test_the_objects_gauge_moved_by_partial_passes_equals_a_recount_of_every_entry() -> None:
    rng = random.Random(7)
    actions = [Action.UNCHANGED, Action.CREATE, Action.UPDATE, Action.ERROR, Action.CONFLICT, Action.PRUNE]
    for applied in (True, False):
        runner = _Runner()
        runner.metrics = Metrics()
        runner.init_pass_state()
        held = {e.key: e for e in (_entry(i, rng.choice(actions)) for i in range(40))}
        runner._count_states(dict(held), {}, True, applied=applied)
        for _ in range(30):
            new = {
                e.key: e for e in (_entry(rng.randrange(45), rng.choice(actions)) for _ in range(rng.randrange(1, 6)))
            }
            replaced = {k: held.get(k) for k in new}
            held.update(new)
            runner._count_states(new, replaced, False, applied=applied)
            oracle = Metrics()
            oracle.set_objects(list(held.values()), applied=applied, forcing=False)
            assert _gauge(runner.metrics) == _gauge(oracle)


def test_a_partial_pass_of_another_kind_than_the_last_count_recounts_every_entry() -> None:
    """Counted while applying, then a dry-run partial pass (a held write): an entry counted `synced` is not
    taken off `drifted`, where the dry-run pass would put it."""
    runner = _Runner()
    runner.metrics = Metrics()
    runner.init_pass_state()
    held = {e.key: e for e in (_entry(i, Action.UPDATE) for i in range(5))}
    runner.entries = dict(held)
    runner._count_states(dict(held), {}, True, applied=True)
    new = {e.key: e for e in [_entry(0, Action.UNCHANGED)]}
    replaced = {k: held.get(k) for k in new}
    held.update(new)
    runner.entries.update(new)
    runner._count_states(new, replaced, False, applied=False)
    oracle = Metrics()
    oracle.set_objects(list(held.values()), applied=False, forcing=False)
    assert _gauge(runner.metrics) == _gauge(oracle)
