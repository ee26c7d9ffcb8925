"""The decisions of one source's reconciler, on injected fakes with one fake clock: when it prunes, when it
queues, when its backoff grows and resets (daemon/reconcile/reconciler.py, passes.py, runtime/manager.py).

The engine, the watch cache, the Event recorder and the probe are fakes; the work queue is the real one on
the test's clock, settled by the real reconcile handler, so what is checked is what the queue holds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gitops_sync.apply.manager import LiveMap
from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.reconcile import views
from gitops_sync.daemon.reconcile.desired import SourceSpec
from gitops_sync.daemon.reconcile.outcome import Outcome
from gitops_sync.daemon.reconcile.reconciler import Shared, SourceReconciler
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, QueueKey
from gitops_sync.daemon.runtime.cache import EventType
from gitops_sync.daemon.runtime.manager import Op, reconcile_handler
from gitops_sync.daemon.runtime.metrics import Metrics
from gitops_sync.daemon.runtime.queue import Backoff, WorkQueue
from gitops_sync.engine import PassOptions, SourceOptions
from gitops_sync.errors import ApiError
from gitops_sync.plan.changeset import Action, ChangeSet, Entry
from gitops_sync.plan.planner import Target
from gitops_sync.resource import DesiredObject, ObjectKey
from gitops_sync.source import Checkout
from tests.unit.fakes import FakeClock, cm

CM = ResourceInfo("", "v1", "ConfigMap", "configmaps", True)
BASE, CAP = 0.05, 300.0


def target(name: str) -> Target:
    return Target(ObjectKey("", "ConfigMap", "ns", name), CM, cm(name, "ns", k="v"), f"{name}.yaml#0")


class FakeEngine:
    """Resolves what it is given into ConfigMap targets (or raises `resolve_error`); a pass answers
    `errors` and records the prune setting it was run with."""

    def __init__(self) -> None:
        self.client: Any = None
        self.discovery = self
        self.manager = self
        self.resolve_error: Exception | None = None
        self.errors: list[str] = []
        self.pruned: list[bool] = []

    def refresh(self) -> None:
        pass

    def resolve(self, objects: list[DesiredObject], opts: PassOptions) -> list[Target]:
        if self.resolve_error is not None:
            raise self.resolve_error
        return [target(str(o.manifest["metadata"]["name"])) for o in objects]

    def fetch_live(self, targets: Sequence[Target]) -> LiveMap:
        return {}

    def run(self, checkout: Checkout, targets: list[Target], opts: PassOptions, **_: Any) -> ChangeSet:
        self.pruned.append(opts.prune)
        entries = [Entry(t.key, "v1", Action.UNCHANGED) for t in targets]
        return ChangeSet(revision=checkout.revision, entries=entries, errors=list(self.errors))


class FakeCache:
    def __init__(self) -> None:
        self.interest: list[Target] = []

    def live_of(self, targets: Sequence[Target], fallback: Callable[[Sequence[Target]], LiveMap]) -> LiveMap:
        return {t.key: {"metadata": {"name": t.key.name}} for t in targets}

    def wait_synced(self, timeout: float) -> bool:
        return True

    def set_interest(self, targets: Sequence[Target]) -> None:
        self.interest = list(targets)

    def get(self, key: ObjectKey) -> tuple[bool, Any]:
        return True, None

    def objects(self) -> int:
        return 0


class Nothing:
    """An Event recorder and a probe that do nothing (what they are asked is not the point here)."""

    def record(self, spec: Any) -> None:
        pass

    def poke(self) -> None:
        pass


class Source:
    """A reconciler wired to fakes, a real queue on `clock`, and Git at `revision` with `names`."""

    def __init__(self, clock: FakeClock, tmp_path: Path) -> None:
        self.clock = clock
        self.queue: WorkQueue[QueueKey] = WorkQueue(backoff_base=BASE, backoff_cap=CAP, clock=clock)
        self.engine = FakeEngine()
        self.cache = FakeCache()
        shared = Shared(
            cache=self.cache,  # type: ignore[arg-type]
            events=Nothing(),  # type: ignore[arg-type]
            metrics=Metrics(),
            probe=Nothing(),  # type: ignore[arg-type]
            stopping=lambda: False,
            delay_for=Backoff(BASE, CAP).delay_for,
        )
        spec = SourceSpec(SourceOptions(repo="https://git.example/r.git"), PassOptions(namespace="ns", prune=True))
        self.r = SourceReconciler(
            spec,
            engine=self.engine,  # type: ignore[arg-type]
            queue=self.queue,
            shared=shared,
            active=lambda: True,
            may_write=lambda: True,
            field_manager="gitops-sync",
        )
        self.root = tmp_path
        self.git("a" * 40, "a")

    def git(self, revision: str, *names: str) -> None:
        """What a fetch and render of the repository gives from now on."""
        checkout = Checkout(root=self.root, revision=revision, repo="https://git.example/r.git", ref="")
        objects = [DesiredObject(cm(n, "ns", k="v"), origin=f"{n}.yaml#0") for n in names]
        self.r.desired.render = lambda _held: (checkout, objects)  # type: ignore[method-assign]

    def handle(self, *keys: QueueKey) -> Outcome:
        """One handling, settled on the queue by the reconcile handler (as a controller's worker does)."""
        outcome: list[Outcome] = []

        def run() -> Any:
            outcome.append(self.r.handle(set(keys)))
            return outcome[0].requests

        assert reconcile_handler(self.queue, keys, run)
        return outcome[0]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def source(clock: FakeClock, tmp_path: Path) -> Source:
    return Source(clock, tmp_path)


def test_prune_is_held_while_a_new_revision_cannot_be_resolved(source: Source) -> None:
    source.handle(SOURCE)
    assert source.engine.pruned == [True], "revision A loaded: its full pass prunes"
    source.git("b" * 40, "a", "b")
    source.engine.resolve_error = ApiError(503, "ServiceUnavailable", "discovery down", method="GET", path="/apis")
    held = source.handle(SOURCE, FULL)
    assert source.engine.pruned[-1] is False and held.ran == "full"
    assert "not resolved" in held.prune_held and "bbbbbbb" in held.prune_held
    assert source.r.snapshot().revision == "a" * 40, "the last good state is kept"
    assert SOURCE in held.asked(Op.RATE_LIMITED), "Git is looked at again with backoff"
    source.engine.resolve_error = None
    resolved = source.handle(SOURCE)
    assert resolved.loaded and resolved.prune_held == "" and source.engine.pruned[-1] is True


def test_a_clean_full_pass_resets_the_backoff_a_failing_one_grew(source: Source, clock: FakeClock) -> None:
    source.handle(SOURCE)
    source.engine.errors = ["cannot record the inventory: 500"]
    delays = []
    for _ in range(3):
        outcome = source.handle(FULL)
        assert outcome.result == "error" and FULL in outcome.asked(Op.RATE_LIMITED)
        delays.append(next(r.delay for r in outcome.requests if r.op is Op.RATE_LIMITED and r.key == FULL))
    assert source.queue.failures(FULL) == 3 and delays == [BASE, 2 * BASE, 4 * BASE]
    clock.advance(10)
    assert FULL in source.queue.get_batch(timeout=0), "the retry came due on the test's clock"
    source.queue.done([FULL])
    source.engine.errors = []
    clean = source.handle(FULL)
    assert clean.result == "success" and FULL in clean.asked(Op.FORGET)
    assert source.queue.failures(FULL) == 0, "the next failure starts from the base delay again"


def test_watch_events_requeue_only_objects_whose_content_changed(source: Source) -> None:
    source.handle(SOURCE)
    key = ObjectKey("", "ConfigMap", "ns", "a")
    live = {**cm("a", "ns", k="v"), "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}
    source.r.on_watch(EventType.LISTED, key, live)
    assert key not in source.queue.pending(), "the first list is the baseline: nothing to look at"
    source.r.on_watch(EventType.MODIFIED, key, {**live, "metadata": {**live["metadata"], "resourceVersion": "2"}})
    assert key not in source.queue.pending(), "only bookkeeping changed"
    source.r.on_watch(EventType.MODIFIED, key, {**live, "data": {"k": "changed"}})
    assert key in source.queue.pending(), "a change of content is looked at"
    other = ObjectKey("", "ConfigMap", "ns", "not-ours")
    source.r.on_watch(EventType.MODIFIED, other, cm("not-ours", "ns", k="x"))
    assert other not in source.queue.pending(), "an object the source does not want is not queued"


def test_a_handling_that_raises_retries_every_key_with_backoff(source: Source) -> None:
    def boom() -> Any:
        raise RuntimeError("a bug")

    assert not reconcile_handler(source.queue, [SOURCE, FULL], boom)
    assert source.queue.failures(SOURCE) == 1 and source.queue.failures(FULL) == 1


def test_a_snapshot_without_objects_says_all_that_readiness_reads(source: Source) -> None:
    for step in ((), (SOURCE,)):
        if step:
            source.handle(*step)
        full, brief = source.r.snapshot(), source.r.snapshot(objects=False)
        assert brief.entries == () and brief.desired == frozenset()
        assert replace(full, entries=(), desired=frozenset()) == brief
        assert source.r.problems() == views.problems(full)
    assert full.entries and full.desired and full.first_sync, "a full pass ran: the full snapshot has its objects"


def test_the_targets_held_share_their_identical_parts_and_keep_their_own_metadata(source: Source) -> None:
    source.git("b" * 40, "a", "b")
    source.handle(SOURCE)
    state = source.r.current
    assert state is not None
    a, b = (t.manifest for t in state.targets)
    assert a["data"] is b["data"]  # both {"k": "v"}: one dict held for both (runtime/kept.py compact_desired)
    assert a["metadata"] is not b["metadata"] and a["metadata"]["name"] == "a" and b["metadata"]["name"] == "b"
