"""The fleet controller's decisions on injected fakes with one fake clock: a status written only when it
changed, a source held back by dependsOn not running, slow passes not holding the worker slots, the field
history of an object several sources want (daemon/fleet/).

A real `Fleet` is built against a fake API server (tests/unit/fakes.py: nothing leaves the process); its
sources' reconcilers are fakes that count their handlings and answer a snapshot."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.controller import Fleet
from gitops_sync.daemon.fleet.crd import CRD_NAME, CRD_PATH
from gitops_sync.daemon.fleet.poller import Poller
from gitops_sync.daemon.fleet.registry import Registry
from gitops_sync.daemon.fleet.scheduler import SLOW_PASS, Scheduler
from gitops_sync.daemon.fleet.sources import Source, first_poll
from gitops_sync.daemon.fleet.watch import GitSyncWatch
from gitops_sync.daemon.process.controller import DaemonOptions
from gitops_sync.daemon.reconcile.history import OwnershipHistory
from gitops_sync.daemon.reconcile.outcome import Outcome, SourceSnapshot
from gitops_sync.daemon.reconcile.reporter import FULL, SOURCE, QueueKey
from gitops_sync.engine import SourceOptions
from gitops_sync.plan.changeset import Action, Entry
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import _KUBECONFIG, FakeApi, FakeClock

CM = ResourceInfo("", "v1", "ConfigMap", "configmaps", True)

MINE = ObjectKey("", "ConfigMap", "team-a", "mine")
CRD = Path(__file__).resolve().parents[4] / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"


class FakeReconciler:
    """Counts its handlings; its snapshot is whatever the test sets."""

    def __init__(self) -> None:
        self.handled: list[set[QueueKey]] = []
        self.snap = SourceSnapshot(
            entries=(Entry(MINE, "v1", Action.UNCHANGED),),
            desired=frozenset({MINE}),
            first_sync=True,
            applied=("r1", ""),
            inventory_name="gitsync-app",
            inventory_namespace="team-a",
        )
        self.history = OwnershipHistory()
        self.current: Any = None

    def handle(self, keys: set[QueueKey]) -> Outcome:
        self.handled.append(set(keys))
        return Outcome(ran="full", result="success")

    def snapshot(self) -> SourceSnapshot:
        return self.snap


def gitsync_obj(name: str, *, depends_on: str = "", ready: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"repository": "https://git.example/r.git"}
    if depends_on:
        spec["dependsOn"] = [{"name": depends_on}]
    obj: dict[str, Any] = {
        "apiVersion": gitsync.API_VERSION,
        "kind": gitsync.KIND,
        "metadata": {"name": name, "namespace": "team-a", "generation": 1, "uid": name, "resourceVersion": "5"},
        "spec": spec,
    }
    if ready:
        obj["status"] = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    return obj


@pytest.fixture
def api() -> FakeApi:
    return FakeApi(default={})


@pytest.fixture
def fleet(tmp_path: Path, api: FakeApi) -> Iterator[Fleet]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_KUBECONFIG)
    f = Fleet(DaemonOptions(source=SourceOptions(repo=""), kubeconfig=kubeconfig, http_addr="127.0.0.1:0"))
    f.client._conn.pool = api  # type: ignore[assignment]
    yield f
    f.http.stop()
    f.scheduler.shutdown()


def add(fleet: Fleet, obj: dict[str, Any]) -> tuple[str, FakeReconciler]:
    """A GitSync the registry knows, run by a fake reconciler."""
    gs = gitsync.parse(obj)
    r = FakeReconciler()
    fleet.registry.seen(gs.ref, obj)
    fleet.registry.put(gs.ref, Source(gs=gs, shard=0, reconciler=r, client=None))  # type: ignore[arg-type]
    return gs.ref, r


def status_writes(api: FakeApi) -> list[Any]:
    return [c for c in api.sent("PATCH") if c.path.endswith("/status")]


def test_status_is_written_only_when_it_changed(fleet: Fleet, api: FakeApi) -> None:
    ref, r = add(fleet, gitsync_obj("app"))
    assert fleet.writer.write(ref, passed=True)
    assert not fleet.writer.write(ref, passed=True), "the same status again: nothing sent"
    assert len(status_writes(api)) == 1
    r.snap = dataclasses.replace(r.snap, applied=("r2", ""))
    assert fleet.writer.write(ref, passed=True)
    (first, second) = status_writes(api)
    assert second.body["status"]["lastAppliedRevision"] == "r2"
    assert first.query == {"fieldManager": "gitops-sync", "force": "true"}, "server-side apply, forced"


def test_a_source_whose_dependency_is_not_ready_does_not_run(fleet: Fleet, api: FakeApi) -> None:
    ref, r = add(fleet, gitsync_obj("app", depends_on="base"))
    asked = fleet._turn(ref, {SOURCE, FULL})
    assert r.handled == [], "no pass at all while base is not Ready"
    assert [(a.op.value, a.key, a.delay) for a in asked] == [("after", FULL, 5.0)], "looked at again in 5 s"
    (written,) = status_writes(api)
    ready = next(c for c in written.body["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "DependencyNotReady" and "team-a/base" in ready["message"]
    add(fleet, gitsync_obj("base", ready=True))
    fleet._turn(ref, {MINE})
    assert r.handled == [{MINE, SOURCE, FULL}], "once base is Ready: what was put off runs at once"


def test_slow_passes_stop_counting_against_the_workers() -> None:
    clock = FakeClock()
    started: list[str] = []
    scheduler = Scheduler(1, lambda ref, keys: None, clock=clock, submit=lambda run, ref, keys: started.append(ref))
    scheduler.offer([("a/hung", FULL), ("a/next", FULL)])
    scheduler.start_waiting()
    assert started == ["a/hung"], "one worker: the second source waits"
    clock.advance(SLOW_PASS - 1)
    scheduler.start_waiting()
    assert started == ["a/hung"]
    clock.advance(2)
    scheduler.start_waiting()
    assert started == ["a/hung", "a/next"], "the first pass is slow now: another source may start"
    scheduler.offer([("a/hung", SOURCE)])
    scheduler.start_waiting()
    assert scheduler.finish("a/hung") == {SOURCE}, "keys of a running source wait for its pass to end"


def test_a_source_asked_by_an_event_starts_before_those_only_polled() -> None:
    """A drift (an object's key) does not wait behind a minute's Git polls and whole passes."""
    started: list[tuple[str, set[QueueKey]]] = []
    scheduler = Scheduler(1, lambda ref, keys: None, submit=lambda run, ref, keys: started.append((ref, keys)))
    drifted = ObjectKey("", "ConfigMap", "team-a", "cm")
    scheduler.offer([("a/busy", SOURCE)])
    scheduler.start_waiting()
    assert started == [("a/busy", {SOURCE})]
    scheduler.offer([("a/p1", SOURCE), ("a/p2", FULL), ("a/drift", SOURCE), ("a/drift", drifted)])
    scheduler.offer([("a/busy", drifted), ("a/other", MINE)])
    scheduler.start_waiting()
    assert len(started) == 1, "one worker: the others wait"
    for _ in range(5):
        scheduler.finish(started[-1][0])  # the one worker's pass ends: the next starts
        scheduler.start_waiting()
    order = [ref for ref, _ in started]
    assert order == ["a/busy", "a/drift", "a/busy", "a/other", "a/p1", "a/p2"], "events first, each in order"
    assert started[1] == ("a/drift", {SOURCE, drifted}), "its poll goes along with its event"


def test_sources_loaded_together_poll_spread_over_the_interval() -> None:
    firsts = sorted(first_poll(f"team-a/app-{i}", 60.0) for i in range(1000))
    assert firsts[0] >= 0 and firsts[-1] < 60, "never later than one interval after the load"
    per_second = [sum(1 for t in firsts if s <= t < s + 1) for s in range(60)]
    assert max(per_second) < 40, f"no second holds a burst (1,000 over 60 s: ~17 a second), got {max(per_second)}"
    assert first_poll("team-a/app-1", 60.0) == first_poll("team-a/app-1", 60.0), "a source keeps its own point"


def test_the_poller_queues_each_source_at_its_own_interval() -> None:
    clock = FakeClock()
    registry = Registry()
    queued: list[tuple[str, QueueKey]] = []
    gs = gitsync.parse({**gitsync_obj("app"), "spec": {"repository": "r", "interval": "30s"}})
    registry.put(gs.ref, Source(gs=gs, shard=0, reconciler=FakeReconciler(), client=None, next_poll=clock() + 30))  # type: ignore[arg-type]
    poller = Poller(registry, queued.append, lambda ref: None, resync=600, clock=clock)
    poller.tick()
    assert queued == []
    clock.advance(30)
    poller.tick()
    poller.tick()
    assert queued == [(gs.ref, SOURCE)], "once per interval"
    clock.advance(600)
    poller.tick()
    assert queued[1:] == [(gs.ref, SOURCE), (gs.ref, FULL)], "and the full resync"


def test_the_field_history_of_an_object_two_sources_want_is_both_sources(fleet: Fleet) -> None:
    key = ObjectKey("", "ConfigMap", "team-a", "shared")
    live = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "shared", "namespace": "team-a", "resourceVersion": "7", "managedFields": []},
        "data": {"a": "1", "b": "2"},
    }
    for name, path in (("one", ".data.a"), ("two", ".data.b")):
        ref, r = add(fleet, gitsync_obj(name))
        r.history.observe(key, [path], live)
        fleet.registry._wanted.setdefault(("", key), {})[ref] = Target(key, CM, {}, "test")
    fields = fleet.documents.field_history("", "ConfigMap", "team-a", "shared")
    assert set(fields) == {".data.a", ".data.b"}, fields
    assert [rec["value"] for rec in fields[".data.b"]] == ["2"]


def test_a_relist_reports_the_gitsyncs_gone_meanwhile_as_deleted(fleet: Fleet, api: FakeApi) -> None:
    """The GitSync watch runs on the runtime's list/watch loop; a list replaces what the fleet knew."""
    events: list[tuple[str, str]] = []
    listed: list[bool] = []
    watch = GitSyncWatch(
        fleet.client,
        fleet.client,
        gitsync.collection_path(),
        on_event=lambda etype, obj: events.append((etype, obj["metadata"]["name"])),
        known=lambda: ["team-a/kept", "team-a/gone"],
        on_listed=lambda: listed.append(True),
    )
    api.on("GET", gitsync.collection_path(), {"metadata": {"resourceVersion": "9"}, "items": [gitsync_obj("kept")]})
    api.on("GET", CRD_PATH, yaml.safe_load(CRD.read_text()))
    watch.loop._list()
    assert events == [("ADDED", "kept"), ("DELETED", "gone")] and listed == [True]
    assert watch.loop.resource_version == "9", "the watch goes on from the list's version"


def test_an_outdated_crd_stops_the_watch_before_a_gitsync_is_handled(fleet: Fleet, api: FakeApi) -> None:
    """A CRD without spec.kubeConfig (at a list, or when the watch begins again): no GitSync handled, the loop
    ends and the controller is told why (`gitops-sync run` exits 2 with it)."""
    events: list[str] = []
    fatal: list[str] = []
    watch = GitSyncWatch(
        fleet.client,
        fleet.client,
        gitsync.collection_path(),
        on_event=lambda etype, obj: events.append(etype),
        known=lambda: ["team-a/gone"],
        on_listed=lambda: events.append("listed"),
        on_fatal=fatal.append,
    )
    old = yaml.safe_load(CRD.read_text())
    del old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["kubeConfig"]
    api.on("GET", gitsync.collection_path(), {"metadata": {"resourceVersion": "9"}, "items": [gitsync_obj("kept")]})
    api.on("GET", CRD_PATH, yaml.safe_load(CRD.read_text()), old)
    watch._restarted("closed")  # the CRD as shipped: nothing to say
    watch.loop.run()  # the list finds the old CRD: the loop ends at once
    assert events == [] and len(fatal) == 1
    assert "spec.kubeConfig" in fatal[0] and CRD_NAME in fatal[0] and "kubectl apply -f deploy/kubernetes/" in fatal[0]
