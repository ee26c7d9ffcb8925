"""The daemon's live reads (reconcile/live.py: `LiveReads`): what it takes from the watch cache, and how it
reads again from the API what the cache cannot vouch for.

The cache is a fake with the real `WatchCache`'s answers (known or not, absent or not, how many objects a
namespace holds); the API server is a script at the HTTP seam. The real watch cache and API server:
tests/integration/test_fleet_live_reads.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gitops_sync.apply.manager import LiveMap
from gitops_sync.daemon.reconcile.live import LiveReads
from gitops_sync.engine import Engine
from gitops_sync.plan import planner
from gitops_sync.plan.planner import Target
from gitops_sync.resource import ObjectKey
from tests.unit.fakes import FakeApi, StaticDiscovery, cm, fake_client, objs

BASE = "/api/v1/namespaces/ns/configmaps"


class FakeCache:
    """A synced watch cache: `known` objects (None: known absent); others are not covered (read them)."""

    def __init__(self, known: dict[str, Any], size: int | None) -> None:
        self.known = known
        self.size = size

    def live_of(self, targets: Sequence[Target], fallback: Callable[[Sequence[Target]], LiveMap]) -> LiveMap:
        live: LiveMap = {t.key: self.known[t.key.name] for t in targets if t.key.name in self.known}
        missing = [t for t in targets if t.key.name not in self.known]
        if missing:
            live.update(fallback(missing))
        return live

    def collection_size(self, target: Target) -> int | None:
        return self.size


class Reads(LiveReads):
    def __init__(self, engine: Engine, cache: FakeCache) -> None:
        self.engine = engine
        self.cache = cache


def setup(known: dict[str, Any], size: int | None, api: FakeApi) -> tuple[Reads, list[Target]]:
    engine = Engine(fake_client(api), discovery=StaticDiscovery())
    targets = planner.resolve(objs(*(cm(f"c{i}") for i in range(6))), StaticDiscovery(), "ns")
    return Reads(engine, FakeCache(known, size)), targets


def live_cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}}


def test_absent_in_a_crowded_namespace_is_read_again_with_one_get_each_never_a_list() -> None:
    # A cold start in a namespace shared by 1,000 sources: the cache knows none of the 6, counts 4,000 there.
    # c5 exists (created by someone else a moment ago, the watch has not said so): the GET finds it.
    api = FakeApi().on("GET", f"{BASE}/c5", live_cm("c5"))
    reads, targets = setup({f"c{i}": None for i in range(6)}, 4000, api)
    live = reads._live_of(targets)
    assert sorted(c.path for c in api.sent()) == [f"{BASE}/c{i}" for i in range(6)]
    assert {k.name for k, v in live.items() if v is not None} == {"c5"}, "the lagging cache hid nothing"


def test_what_the_cache_holds_is_not_read_and_an_uncounted_namespace_is_listed_once() -> None:
    listed = {"metadata": {"resourceVersion": "9"}, "items": [live_cm("c4"), live_cm("c5"), live_cm("other")]}
    api = FakeApi().on("GET", BASE, listed)
    known = {"c0": live_cm("c0"), "c1": live_cm("c1")}  # c2..c5: not covered (e.g. kept as markers only)
    reads, targets = setup(known, None, api)
    live = reads._live_of(targets)
    assert [c.path for c in api.sent()] == [BASE], "size unknown: one LIST for the four it could not answer"
    assert {k.name for k, v in live.items() if v is not None} == {"c0", "c1", "c4", "c5"}
    assert live[ObjectKey("", "ConfigMap", "ns", "c2")] is None


def test_a_namespace_the_source_has_to_itself_is_listed_once_for_its_absent_objects() -> None:
    api = FakeApi().on("GET", BASE, {"metadata": {"resourceVersion": "9"}, "items": []})
    reads, targets = setup({f"c{i}": None for i in range(6)}, 6, api)
    reads._live_of(targets)
    assert [c.path for c in api.sent()] == [BASE]
