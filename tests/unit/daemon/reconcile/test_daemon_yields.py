"""Yielding a fought-over field: when, what the apply body becomes, and when correcting resumes."""

from __future__ import annotations

from typing import Any

from gitops_sync.cluster.discovery import ResourceInfo
from gitops_sync.daemon.reconcile.history import OwnershipHistory
from gitops_sync.daemon.reconcile.yields import AUTOSCALER, FIGHT, Yield, Yields, takes
from gitops_sync.plan.autoscaler import Autoscaler, find_autoscaler, scaled_by_controller_manager
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import FakeClock

KEY = ObjectKey("apps", "Deployment", "ns", "web")
REPLICAS = {"f:spec": {"f:replicas": {}}}
REST = {"f:spec": {"f:selector": {}}}
PATHS = [".spec.replicas"]


def mf(manager: str, fields: dict[str, Any], *, op: str = "Update", sub: str = "") -> dict[str, Any]:
    entry = {"manager": manager, "operation": op, "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": fields}
    if sub:
        entry["subresource"] = sub
    return entry


def live(replicas: int, owner: dict[str, Any], rv: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "ns",
            "resourceVersion": str(rv),
            "managedFields": [mf("gitops-sync", REST, op="Apply"), owner],
        },
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
    }


def target(replicas: int) -> Target:
    info = ResourceInfo(group="apps", version="v1", kind="Deployment", plural="deployments", namespaced=True)
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
    }
    return Target(key=KEY, info=info, manifest=manifest, origin="web.yaml")


OURS = mf("gitops-sync", REPLICAS, op="Apply")
ROGUE = mf("kubectl", REPLICAS, sub="scale")


def flip(history: OwnershipHistory, yields: Yields, clock: FakeClock, times: int) -> list[Any]:
    """ours(2), rogue(5), ours(2), ...: `times` takes by the rogue; what `after_fight` returned each time."""
    got = []
    rv = 1
    history.observe(KEY, PATHS, live(2, OURS, rv))
    for _ in range(times):
        clock.advance(1)
        rv += 1
        for fight in history.observe(KEY, PATHS, live(5, ROGUE, rv)):
            got.append(yields.after_fight(fight, target(2)))
        clock.advance(1)
        rv += 1
        history.observe(KEY, PATHS, live(2, OURS, rv))
    return got


def test_takes_counts_runs_not_records() -> None:
    h = OwnershipHistory()
    h.observe(KEY, PATHS, live(2, OURS, 1))
    records = h.fields(KEY)[".spec.replicas"]
    assert takes(records, "gitops-sync") == 1 and takes(records, "kubectl") == 0


def test_third_take_within_the_window_yields_the_field_to_the_other_manager() -> None:
    clock = FakeClock()
    history = OwnershipHistory(clock=clock.wall)
    yields = Yields(threshold=3, window=600, field_manager="gitops-sync", clock=clock.wall)
    got = flip(history, yields, clock, 3)
    assert got[0] is None, "the second take is a fight, not yet a yield"
    y = got[-1]
    assert (
        y is not None
        and y.reason == FIGHT
        and (y.path, y.manager, y.subresource) == (".spec.replicas", "kubectl", "scale")
    )
    assert (y.desired, y.live) == (2, 5)
    assert "remove it from Git or add an ignore rule" in y.advice()
    assert "took the field 3 times" in y.message() and "Git says 2, live 5" in y.message()
    # the apply body leaves the field out while the other manager owns it: our ownership goes, its value stays
    body = yields.body(target(2), live(5, ROGUE, 99))
    assert "replicas" not in body.manifest["spec"] and body.manifest["spec"]["selector"]
    # ... but keeps it while we own it (leaving it out would delete it, not hand it over)
    assert yields.body(target(2), live(2, OURS, 100)).manifest["spec"]["replicas"] == 2


def test_takes_spread_beyond_the_window_do_not_yield() -> None:
    clock = FakeClock()
    history = OwnershipHistory(clock=clock.wall)
    yields = Yields(threshold=3, window=3, field_manager="gitops-sync", clock=clock.wall)
    assert [y for y in flip(history, yields, clock, 4) if y is not None] == []


def test_expiry_and_git_change_resume_correcting() -> None:
    clock = FakeClock()
    history = OwnershipHistory(clock=clock.wall)
    yields = Yields(threshold=3, window=60, field_manager="gitops-sync", clock=clock.wall)
    flip(history, yields, clock, 3)
    assert len(yields.all()) == 1
    assert yields.resume_changed({KEY: target(2)}) == [], "Git's value unchanged: still yielded"
    clock.advance(30)
    assert yields.expired() == [] and 25 < (yields.next_expiry() or 0) <= 30
    clock.advance(31)
    assert [y.path for y in yields.expired()] == [".spec.replicas"] and yields.all() == []

    flip(history, yields, clock, 3)
    assert len(yields.all()) == 1
    assert [y.path for y in yields.resume_changed({KEY: target(4)})] == [".spec.replicas"]
    assert yields.all() == []


def hpa_doc(name: str, target_name: str, kind: str = "Deployment", api: str = "apps/v1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "scaleTargetRef": {"apiVersion": api, "kind": kind, "name": target_name},
            "minReplicas": 2,
            "maxReplicas": 4,
        },
    }


def test_find_autoscaler_matches_group_kind_and_name() -> None:
    hpas = [hpa_doc("other", "api"), hpa_doc("wrong-kind", "web", kind="StatefulSet"), hpa_doc("web-hpa", "web")]
    found = find_autoscaler(KEY, hpas)
    assert found == Autoscaler("ns", "web-hpa", 2, 4)
    assert found.describe() == "HorizontalPodAutoscaler ns/web-hpa (min 2, max 4)"
    assert find_autoscaler(KEY, [hpa_doc("x", "web", api="extensions/v1beta1")]) is None


def test_autoscaler_owned_replicas_are_yielded_at_once_unless_git_wins() -> None:
    hpa_owner = mf("kube-controller-manager", REPLICAS, sub="scale")
    scaled = live(2, hpa_owner, 5)
    assert scaled_by_controller_manager(scaled) and not scaled_by_controller_manager(live(2, ROGUE, 5))
    hpa = Autoscaler("ns", "web", 2, 4)
    yields = Yields(field_manager="gitops-sync")
    got = yields.for_autoscaler(target(1), scaled, hpa)
    assert [(y.path, y.reason, y.desired, y.live) for y in got] == [(".spec.replicas", AUTOSCALER, 1, 2)]
    assert got[0].advice() == "remove spec.replicas from Git or add an ignore rule"
    assert yields.for_autoscaler(target(1), scaled, hpa) == [], "reported once"
    assert Yields(field_manager="gitops-sync", autoscaler_wins=False).for_autoscaler(target(1), scaled, hpa) == []

    # Git changes the value: resumed, and not yielded again until our apply of the new value has landed
    assert len(yields.resume_changed({KEY: target(3)})) == 1
    assert yields.for_autoscaler(target(3), scaled, hpa) == []
    yields.settle(KEY, live(3, OURS, 6))
    assert len(yields.for_autoscaler(target(3), live(4, hpa_owner, 7), hpa)) == 1


def test_secret_values_never_leave_a_yield() -> None:
    key = ObjectKey("", "Secret", "ns", "db")
    y = Yield(
        key=key,
        path=".data.password",
        reason=FIGHT,
        desired="c2VjcmV0",
        live="b3RoZXI=",
        manager="kubectl-edit",
        operation="Update",
        subresource="",
        since=0.0,
        last_write=0.0,
    )
    text = str(y.to_dict()) + y.message()
    assert "c2VjcmV0" not in text and "b3RoZXI=" not in text and "***" in text


def _named(name: str, replicas: int) -> tuple[Target, dict[str, Any]]:
    """Deployment `name` wanting `replicas`, and its live state scaled by the HPA controller."""
    t = target(replicas)
    key = ObjectKey("apps", "Deployment", "ns", name)
    manifest = {**t.manifest, "metadata": {"name": name, "namespace": "ns"}}
    scaled = live(3, mf("kube-controller-manager", REPLICAS, sub="scale"), 5)
    scaled["metadata"]["name"] = name
    return Target(key=key, info=t.info, manifest=manifest, origin=t.origin), scaled


def test_per_object_lookups_follow_every_way_in_and_out() -> None:
    """`has`, `of`, `suppressed` answer per object (an index, not a scan): each way out forgets only its own."""
    clock = FakeClock()
    yields = Yields(threshold=3, window=60, field_manager="gitops-sync", clock=clock.wall)
    pairs = {name: _named(name, 1) for name in ("a", "b", "c", "d")}
    for name, (t, scaled) in pairs.items():
        assert len(yields.for_autoscaler(t, scaled, Autoscaler("ns", name, 2, 4))) == 1
    history = OwnershipHistory(clock=clock.wall)
    flip(history, yields, clock, 3)  # KEY (ns/web) yields its replicas to a fight
    keys = {name: t.key for name, (t, _) in pairs.items()}
    assert all(yields.has(k) for k in [*keys.values(), KEY])
    assert [y.path for y in yields.of(keys["a"])] == [".spec.replicas"] and yields.of(ObjectKey("", "x", "", "y")) == []

    assert [y.key for y in yields.autoscaler_gone(keys["a"])] == [keys["a"]]
    assert yields.autoscaler_gone(KEY) == [], "a fight is not an autoscaler's yield"
    yields.forget([keys["b"]])
    resumed = yields.resume_changed({t.key: t for name, (t, _) in pairs.items() if name != "d"} | {KEY: target(2)})
    assert [y.key for y in resumed] == []  # d left Git (dropped, not resumed); c's value is unchanged
    assert not yields.has(keys["d"]) and yields.has(keys["c"])
    assert [y.key for y in yields.resume_changed({keys["c"]: _named("c", 7)[0], KEY: target(2)})] == [keys["c"]]
    assert yields.suppressed(keys["c"]) and not yields.suppressed(keys["a"])
    clock.advance(61)
    assert [y.key for y in yields.expired()] == [KEY]
    assert [k for k in [*keys.values(), KEY] if yields.has(k) or yields.of(k)] == []
    assert yields.all() == []

    yields.settle(keys["c"], live(7, OURS, 8))  # our apply of Git's new value landed: may yield again
    assert not yields.suppressed(keys["c"])
    yields.forget([keys["c"]])
    assert not yields.suppressed(keys["c"])


HPA_SCALE = mf("kube-controller-manager", REPLICAS, sub="scale")


class Watch:
    """The watch as the reconciler handles it (`on_watch`): each change observed a second after the last,
    a yielded object's records noted, every fight the history reports (ours included) to `after_fight`."""

    def __init__(self, yields: Yields, clock: FakeClock) -> None:
        self.yields, self.clock = yields, clock
        self.history = OwnershipHistory(clock=clock.wall)
        self.rv = 0

    def __call__(self, *changes: tuple[int, dict[str, Any]]) -> list[tuple[str, Yield | None]]:
        """What `after_fight` returned for each fight, with the manager whose change it was."""
        got = []
        for replicas, owner in changes:
            self.clock.advance(1)
            self.rv += 1
            fights = self.history.observe(KEY, PATHS, live(replicas, owner, self.rv))
            if self.yields.has(KEY):
                self.yields.noted_write(KEY, self.history.fields(KEY))
            got += [(owner["manager"], self.yields.after_fight(f, target(2))) for f in fights]
        return got


def test_a_fight_yields_only_on_the_other_managers_take_never_to_ourselves() -> None:
    """Our own third take back is a fight too: yielding then would hand the field to gitops-sync itself."""
    clock = FakeClock()
    yields = Yields(threshold=3, window=600, field_manager="gitops-sync", clock=clock.wall)
    got = Watch(yields, clock)((2, OURS), (5, ROGUE), (2, OURS), (5, ROGUE), (2, OURS), (5, ROGUE))
    assert [(who, y is not None) for who, y in got] == [
        ("kubectl", False),  # two takes each: a fight, not yet a yield
        ("gitops-sync", False),  # our third take: never a yield
        ("kubectl", True),  # its third take
    ]
    (y,) = yields.all()
    assert (y.manager, y.live, y.desired) == ("kubectl", 5, 2)


def test_with_git_winning_over_autoscalers_an_hpa_is_fought_and_never_yielded_to() -> None:
    for autoscaler_wins, yielded in ((False, []), (True, ["kube-controller-manager"])):
        clock = FakeClock()
        yields = Yields(
            threshold=3, window=600, field_manager="gitops-sync", autoscaler_wins=autoscaler_wins, clock=clock.wall
        )
        watch = Watch(yields, clock)
        watch(*[(2, OURS), (3, HPA_SCALE)] * 4)
        assert [y.manager for y in yields.all()] == yielded, autoscaler_wins
        assert [f.path for f in watch.history.fights()] == [".spec.replicas"], "the fight is still reported"


def test_a_yield_lasts_a_window_from_the_other_managers_last_write_not_from_when_it_began() -> None:
    """The other manager writing the yielded field again means it is still at work: the field stays yielded
    until that manager has left it alone for a whole window."""
    clock = FakeClock()
    yields = Yields(threshold=3, window=60, field_manager="gitops-sync", clock=clock.wall)
    watch = Watch(yields, clock)
    assert watch(*[(2, OURS), (5, ROGUE)] * 3)[-1][1] is not None
    clock.advance(49)
    assert [y for _, y in watch((7, ROGUE))] == [None]  # kubectl scales again 50 s into the yield
    assert [y.live for y in yields.of(KEY)] == [7]
    clock.advance(20)  # 70 s after the yield began, 20 s after that write
    assert yields.expired() == [] and 39 < (yields.next_expiry() or 0) <= 40
    # our apply landed just before the yield took effect, and kubectl took the field back: a write again
    clock.advance(29)
    assert [y for _, y in watch((2, OURS), (5, ROGUE))] == [None, None], "the same yield, not reported again"
    assert len(yields.all()) == 1
    clock.advance(59)
    assert yields.expired() == []
    clock.advance(2)
    assert [y.path for y in yields.expired()] == [".spec.replicas"] and not yields.has(KEY)
