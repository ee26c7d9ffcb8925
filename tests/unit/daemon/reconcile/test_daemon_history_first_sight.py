"""The first sight of an object is read when needed (`paths_of`): the records are those read at once would be."""

from __future__ import annotations

from typing import Any

from gitops_sync.daemon.reconcile.history import OwnershipHistory
from gitops_sync.resource import ObjectKey
from tests.unit.daemon.reconcile.test_daemon_history import IMAGE, KEY, PATHS, REPLICAS, deployment, mf
from tests.unit.fakes import FakeClock

BOTH = {"f:spec": {"f:replicas": {}, "f:template": IMAGE["f:spec"]["f:template"]}}
SCALED = [mf("helm", IMAGE), mf("kubectl", REPLICAS, sub="scale", at="2024-01-01T00:00:10Z")]
HELM_AGAIN = [mf("helm", BOTH, at="2024-01-01T00:00:20Z")]


class _Paths:
    """`paths_of`, counting the keys it was asked about."""

    def __init__(self) -> None:
        self.asked: list[ObjectKey] = []

    def __call__(self, key: ObjectKey) -> list[str]:
        self.asked.append(key)
        return PATHS


def _events() -> list[dict[str, Any]]:
    return [
        deployment(3, [mf("helm", BOTH)], 1),
        deployment(10, SCALED, 2),
        deployment(3, HELM_AGAIN, 3),
        deployment(10, SCALED, 4),
    ]


def _play(h: OwnershipHistory, clock: FakeClock, paths: list[str] | None) -> list[list[str]]:
    fights = []
    for obj in _events():
        fights.append([f.message() for f in h.observe(KEY, paths, obj)])
        clock.advance(10)
    return fights


def test_a_first_sight_is_not_read_until_a_later_event_and_then_records_what_reading_it_at_once_would() -> None:
    eager_clock, lazy_clock = FakeClock(), FakeClock()
    eager = OwnershipHistory(clock=eager_clock.wall)
    paths = _Paths()
    lazy = OwnershipHistory(clock=lazy_clock.wall, paths_of=paths)
    assert lazy.observe(KEY, None, _events()[0]) == []
    assert paths.asked == [], "the first sight alone reads nothing: no paths worked out"
    lazy = OwnershipHistory(clock=lazy_clock.wall, paths_of=paths)
    assert _play(lazy, lazy_clock, None) == _play(eager, eager_clock, PATHS)
    assert lazy.fields(KEY) == eager.fields(KEY)
    assert [r.observed for r in lazy.fields(KEY)[".spec.replicas"]] == [
        eager_clock.wall() - 40 + 10 * n for n in range(4)
    ], "each record keeps the time its event was seen, the first sight's too"
    assert lazy.to_dict(changed_only=False) == eager.to_dict(changed_only=False)
    assert [f.to_dict() for f in lazy.fights()] == [f.to_dict() for f in eager.fights()]


def test_readers_read_a_first_sight_the_status_summary_of_changed_fields_skips_it_unread() -> None:
    clock = FakeClock()
    paths = _Paths()
    h = OwnershipHistory(clock=clock.wall, paths_of=paths)
    other = ObjectKey("apps", "Deployment", "ns", "other")
    h.observe(KEY, None, deployment(3, [mf("helm", BOTH)], 1))
    h.observe(other, None, deployment(4, [mf("helm", BOTH)], 2))
    assert h.to_dict() == [] and paths.asked == [], "fields seen once are not in the default history"
    (record,) = h.fields(KEY)[".spec.replicas"]
    assert (record.value, record.manager, record.resource_version) == (3, "helm", "1")
    assert paths.asked == [KEY]
    everything = h.to_dict(changed_only=False)
    assert [o["name"] for o in everything] == ["other", "web"] and paths.asked == [KEY, other]
    assert everything[0]["fields"][".spec.replicas"][0]["value"] == 4


def test_given_paths_are_used_for_the_first_sight_too_and_forget_drops_an_unread_one() -> None:
    clock = FakeClock()
    paths = _Paths()
    h = OwnershipHistory(clock=clock.wall, paths_of=paths)
    h.observe(KEY, None, deployment(3, [mf("helm", BOTH)], 1))
    clock.advance(5)
    h.observe(KEY, PATHS[:1], deployment(5, SCALED, 2))
    assert paths.asked == [] and [r.value for r in h.fields(KEY)[".spec.replicas"]] == [3, 5]
    assert list(h.fields(KEY)) == [".spec.replicas"], "the paths given at the later event, for both sights"
    h.observe(ObjectKey("", "ConfigMap", "ns", "c"), None, {"metadata": {"name": "c"}})
    h.forget([ObjectKey("", "ConfigMap", "ns", "c")])
    assert h.to_dict(changed_only=False)[0]["name"] == "web" and len(h.to_dict(changed_only=False)) == 1
