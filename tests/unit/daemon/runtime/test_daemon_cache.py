"""The list+watch loop against a scripted API: resume from resourceVersion, bookmarks, 410 and broken connections.

The real watch protocol is exercised against the local cluster in tests/integration/test_daemon.py.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from gitops_sync.cluster.client import Client
from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.runtime.cache import EventType, WatchCache
from gitops_sync.errors import ClusterError, ForbiddenError
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey

CM = ResourceInfo("", "v1", "ConfigMap", "configmaps", True, frozenset({"list", "watch"}))


def cm(name: str, rv: int, ns: str = "ns", value: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv)}, "data": {"v": value}}


def line(etype: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": etype, "object": obj}).encode()


class ScriptedApi(Client):
    """LIST answers from `lists` (by path), watches from `watches` (one script per watch call).

    A Client with no connection: `request` and `stream_lines` are scripted, the rest (`list_collection`)
    is the real code running on top of them.
    """

    def __init__(self) -> None:  # no super().__init__: nothing to connect to
        self.lists: dict[str, list[Any]] = {}
        self.watches: queue.Queue[list[Any]] = queue.Queue()
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.closed = threading.Event()

    def request(self, method: str, path: str, *, query: Any = None, timeout: float | None = None, **_: Any) -> Any:
        self.calls.append(("LIST", path, dict(query or {})))
        answers = self.lists[path]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def stream_lines(self, path: str, *, query: Any = None, timeout: float | None = None) -> Iterator[bytes]:
        self.calls.append(("WATCH", path, dict(query or {})))
        try:
            script = self.watches.get(timeout=5)
        except queue.Empty:
            self.closed.wait(5)
            return
        for item in script:
            if isinstance(item, Exception):
                raise item
            if item == "hang":
                self.closed.wait(5)
                return
            yield item


def target(name: str, ns: str = "ns") -> Target:
    return Target(ObjectKey("", "ConfigMap", ns, name), CM, {"metadata": {"name": name}}, "test")


def until(cond: Any, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def make(api: ScriptedApi) -> tuple[WatchCache, list[tuple[EventType, ObjectKey | None, Any]], list[str]]:
    events: list[tuple[EventType, ObjectKey | None, Any]] = []
    restarts: list[str] = []
    cache = WatchCache(
        api,
        on_event=lambda t, k, o: events.append((t, k, o)),  # type: ignore[arg-type]
        on_restart=lambda r, why: restarts.append(why),
        backoff_base=0.01,
        backoff_cap=0.05,
        forbidden_retry=0.05,
        watch_timeout=(1, 1),
    )
    return cache, events, restarts


def watch_queries(api: ScriptedApi) -> list[dict[str, Any]]:
    return [q for kind, _, q in api.calls if kind == "WATCH"]


def test_list_then_watch_from_the_list_version_with_bookmarks_and_resume_after_a_clean_close() -> None:
    api = ScriptedApi()
    api.lists["/api/v1/configmaps"] = [{"metadata": {"resourceVersion": "10"}, "items": [cm("a", 5), cm("other", 6)]}]
    bookmark = {"metadata": {"resourceVersion": "15"}}
    api.watches.put([line("MODIFIED", cm("a", 11, value="2")), line("BOOKMARK", bookmark)])
    api.watches.put(["hang"])
    cache, events, restarts = make(api)
    try:
        cache.set_interest([target("a")])
        assert cache.wait_synced(3)
        until(lambda: len(watch_queries(api)) >= 2)
        first, second = watch_queries(api)[:2]
        assert first["resourceVersion"] == "10" and first["allowWatchBookmarks"] is True and first["watch"] is True
        assert second["resourceVersion"] == "15", "resumed from the bookmark, not relisted"
        assert [c for c in api.calls if c[0] == "LIST"].__len__() == 1
        assert restarts == ["closed"]
        kinds = [(t, k.name if k else None) for t, k, _ in events]
        assert kinds == [(EventType.LISTED, "a"), (EventType.MODIFIED, "a")], "only wanted objects are reported"
        known, obj = cache.get(ObjectKey("", "ConfigMap", "ns", "a"))
        assert known and obj is not None and obj["data"] == {"v": "2"} and obj["kind"] == "ConfigMap"
        # an object nobody wants is known to exist but not kept: the planner must read it
        assert cache.get(ObjectKey("", "ConfigMap", "ns", "other")) == (False, None)
        assert cache.get(ObjectKey("", "ConfigMap", "ns", "absent")) == (True, None)
    finally:
        api.closed.set()
        cache.stop()


def test_410_gone_relists_and_reports_what_changed_meanwhile() -> None:
    api = ScriptedApi()
    api.lists["/api/v1/configmaps"] = [
        {"metadata": {"resourceVersion": "10"}, "items": [cm("a", 5), cm("b", 6)]},
        {"metadata": {"resourceVersion": "30"}, "items": [cm("a", 25, value="9")]},
    ]
    api.watches.put([line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})])
    api.watches.put(["hang"])
    cache, events, restarts = make(api)
    try:
        cache.set_interest([target("a"), target("b")])
        until(lambda: len(watch_queries(api)) >= 2)
        assert watch_queries(api)[1]["resourceVersion"] == "30"
        assert "gone" in restarts
        after = [(t, k.name if k else None) for t, k, _ in events[2:]]
        assert (EventType.MODIFIED, "a") in after and (EventType.DELETED, "b") in after
        assert (EventType.RECOVERED, None) in after
    finally:
        api.closed.set()
        cache.stop()


def test_broken_connection_backs_off_and_relists_and_live_of_falls_back_while_unsynced() -> None:
    api = ScriptedApi()
    api.lists["/api/v1/configmaps"] = [
        {"metadata": {"resourceVersion": "10"}, "items": [cm("a", 5)]},
        ClusterError("API server unreachable"),
        {"metadata": {"resourceVersion": "40"}, "items": [cm("a", 5)]},
    ]
    api.watches.put([ClusterError("watch broken")])
    api.watches.put(["hang"])
    cache, _events, restarts = make(api)
    try:
        cache.set_interest([target("a")])
        until(lambda: len(watch_queries(api)) >= 2)
        assert restarts.count("error") == 2, restarts  # the broken watch, then the failed list
        assert watch_queries(api)[1]["resourceVersion"] == "40"
        assert cache.is_synced()
        fallback_calls: list[list[str]] = []

        def fallback(ts: Any) -> dict[ObjectKey, Any]:
            fallback_calls.append([t.key.name for t in ts])
            return {t.key: None for t in ts}

        live = cache.live_of([target("a"), target("zz", ns="elsewhere")], fallback)
        assert live[ObjectKey("", "ConfigMap", "ns", "a")]["metadata"]["resourceVersion"] == "5"
        assert fallback_calls == [], "a synced cluster-wide loop knows 'zz' does not exist"
    finally:
        api.closed.set()
        cache.stop()


def test_forbidden_cluster_wide_falls_back_to_one_loop_per_namespace() -> None:
    api = ScriptedApi()
    api.lists["/api/v1/configmaps"] = [ForbiddenError(403, "Forbidden", "cannot list configmaps at the cluster scope")]
    api.lists["/api/v1/namespaces/ns/configmaps"] = [{"metadata": {"resourceVersion": "7"}, "items": [cm("a", 5)]}]
    api.lists["/api/v1/namespaces/other/configmaps"] = [ForbiddenError(403, "Forbidden", "no access to other")]
    api.watches.put(["hang"])
    cache, _events, _restarts = make(api)
    try:
        cache.set_interest([target("a"), target("b", ns="other")])
        until(lambda: any(s["resource"] == "ConfigMap in ns" and s["state"] == "synced" for s in cache.status()))
        until(lambda: any(s["state"] == "forbidden" for s in cache.status()))
        states = {s["resource"]: s["state"] for s in cache.status()}
        assert states == {"ConfigMap in ns": "synced", "ConfigMap in other": "forbidden"}
        assert cache.is_synced(), "a forbidden namespace does not block readiness"
        assert cache.get(ObjectKey("", "ConfigMap", "ns", "a"))[0]
        unknown = cache.get(ObjectKey("", "ConfigMap", "other", "b"))
        assert unknown == (False, None), "unknown: read it (and fail clearly)"
    finally:
        api.closed.set()
        cache.stop()


def test_synced_only_once_the_first_list_is_handed_on_while_reads_are_served_at_once() -> None:
    """Readiness waits for the first list's objects to reach on_event (the history's baseline: seconds at
    20,000 objects, and a watch event waits behind it); reads from the cache do not."""
    api = ScriptedApi()
    api.lists["/api/v1/configmaps"] = [{"metadata": {"resourceVersion": "10"}, "items": [cm("a", 5)]}]
    api.watches.put(["hang"])
    handing, release = threading.Event(), threading.Event()

    def on_event(etype: EventType, key: ObjectKey | None, obj: Any) -> None:
        handing.set()
        release.wait(5)

    cache = WatchCache(api, on_event=on_event, backoff_base=0.01, backoff_cap=0.05, watch_timeout=(1, 1))
    try:
        cache.set_interest([target("a")])
        assert handing.wait(3)
        known, obj = cache.get(ObjectKey("", "ConfigMap", "ns", "a"))
        assert known and obj is not None, "the listed object is served while it is being handed on"
        assert not cache.is_synced() and not cache.wait_synced(0.1)
        release.set()
        assert cache.wait_synced(3)
    finally:
        release.set()
        api.closed.set()
        cache.stop()


def test_collection_size_counts_each_namespace_from_the_list_and_the_events_and_is_unknown_until_synced() -> None:
    api = ScriptedApi()
    listed = [cm("a", 5), cm("b", 6), cm("x", 7, ns="other")]
    api.lists["/api/v1/configmaps"] = [{"metadata": {"resourceVersion": "10"}, "items": listed}]
    api.watches.put(["hang"])
    cache, _events, _restarts = make(api)
    try:
        assert cache.collection_size(target("a")) is None, "no loop covers ConfigMaps yet"
        cache.set_interest([target("a")])
        assert cache.wait_synced(3)
        assert cache.collection_size(target("a")) == 2, "objects nobody wants count too: a LIST would read them"
        assert cache.collection_size(target("x", ns="other")) == 1
        assert cache.collection_size(target("n", ns="empty")) == 0
        unit = next(iter(cache._units.values()))
        cache.apply_event(unit, EventType.ADDED, ObjectKey("", "ConfigMap", "ns", "c"), cm("c", 11))
        cache.apply_event(unit, EventType.MODIFIED, ObjectKey("", "ConfigMap", "ns", "c"), cm("c", 12))
        cache.apply_event(unit, EventType.DELETED, ObjectKey("", "ConfigMap", "other", "x"), None)
        cache.apply_event(unit, EventType.DELETED, ObjectKey("", "ConfigMap", "other", "x"), None)
        assert cache.collection_size(target("a")) == 3, "an ADDED counts once, a MODIFIED not again"
        assert cache.collection_size(target("x", ns="other")) == 0, "a DELETED seen twice counts once"
    finally:
        api.closed.set()
        cache.stop()


def test_interest_given_again_starts_and_stops_only_the_loops_whose_targets_came_or_went() -> None:
    dep_v1 = ResourceInfo("apps", "v1", "Deployment", "deployments", True, frozenset({"list", "watch"}))
    dep_v2 = ResourceInfo("apps", "v2", "Deployment", "deployments", True, frozenset({"list", "watch"}))
    api = ScriptedApi()
    empty = {"metadata": {"resourceVersion": "1"}, "items": []}
    for path in ("/api/v1/configmaps", "/apis/apps/v1/deployments", "/apis/apps/v2/deployments"):
        api.lists[path] = [empty]
    cache, _events, _restarts = make(api)

    def dep(name: str, info: ResourceInfo = dep_v1) -> Target:
        return Target(ObjectKey("apps", "Deployment", "ns", name), info, {}, "test")

    def loops() -> dict[str, str]:
        return {s["resource"]: s["apiVersion"] for s in cache.status()}

    try:
        a, b, d = target("a"), target("b"), dep("d")
        cache.set_interest({a.key: a, d.key: d})
        assert loops() == {"ConfigMap": "v1", "Deployment.apps": "apps/v1"}
        cm_unit = cache._units[next(u for u in cache._units if u.kind == "ConfigMap")]
        cache.set_interest({a.key: a, b.key: b, d.key: d})
        cache.set_interest({b.key: b, d.key: d})
        assert cache._units[next(u for u in cache._units if u.kind == "ConfigMap")] is cm_unit, "kept, not restarted"
        cache.set_interest({b.key: b, d.key: dep("d", dep_v2)})
        assert loops() == {"ConfigMap": "v1", "Deployment.apps": "apps/v2"}, "the only Deployment moved to v2"
        cache.set_interest([b, dep("d", dep_v2), dep("e")])
        assert loops()["Deployment.apps"] == "apps/v2", "a loop keeps its version while a target wants it"
        cache.set_interest([d])
        assert loops() == {"Deployment.apps": "apps/v1"} and cm_unit.stopping, "nobody wants ConfigMaps"
        cache.set_interest([])
        assert loops() == {}
    finally:
        api.closed.set()
        cache.stop()


def test_a_change_of_interest_touches_only_its_keys() -> None:
    api = ScriptedApi()
    api.lists["/api/v1/configmaps"] = [{"metadata": {"resourceVersion": "1"}, "items": [cm("a", 5)]}]
    cache, _events, _restarts = make(api)
    try:
        a, b = target("a"), target("b")
        cache.change_interest({a.key: a, b.key: b}, ())
        assert cache.wait_synced(3)
        unit = next(iter(cache._units.values()))
        assert cache.get(a.key)[0] and cache._interest == {a.key: a, b.key: b}
        cache.change_interest({}, [a.key, ObjectKey("", "ConfigMap", "ns", "never-wanted")])
        assert cache._interest == {b.key: b} and cache._units.get(unit.id) is unit, "b still needs the loop"
        cache.change_interest({}, [b.key])
        assert cache._units == {} and unit.stopping
    finally:
        api.closed.set()
        cache.stop()


def test_kept_bodies_share_their_short_strings_and_markers_are_left_alone() -> None:
    api = ScriptedApi()
    listed = [cm("a", 5, value="shared-value"), cm("b", 6, value="shared-value"), cm("other", 7, value="shared-value")]
    api.lists["/api/v1/configmaps"] = [{"metadata": {"resourceVersion": "10"}, "items": json.loads(json.dumps(listed))}]
    api.watches.put(["hang"])
    cache, _events, _restarts = make(api)
    try:
        cache.set_interest([target("a"), target("b")])
        assert cache.wait_synced(3)
        a, b = (cache.get(ObjectKey("", "ConfigMap", "ns", n))[1] for n in ("a", "b"))
        assert a is not None and b is not None and a["data"]["v"] is b["data"]["v"] == "shared-value"
    finally:
        api.closed.set()
        cache.stop()
