"""The no-request fast path stays exact after the performance work (bench/).

- intent hashes are unchanged (a different hash would make every object in every cluster "changed" once);
- objects settled by the fast path and objects sent to the server come back in stage order, and only the
  latter cause requests;
- the shallow copies do not leak: inputs are never mutated.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from gitops_sync.apply.manager import ResourceManager
from gitops_sync.conventions import INTENT_HASH
from gitops_sync.plan import bookkeeping, planner
from gitops_sync.plan.changeset import Action
from gitops_sync.plan.diff import diff_intent
from gitops_sync.resource import DesiredObject
from tests.unit.fakes import Call, FakeApi, StaticDiscovery, cm, fake_client


def _reference_hash(manifest: dict[str, Any]) -> str:
    """The original implementation (deep copy, drop the annotation, canonical JSON)."""
    body = copy.deepcopy(manifest)
    ((body.get("metadata") or {}).get("annotations") or {}).pop(INTENT_HASH, None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def test_intent_hash_is_the_same_as_before_and_ignores_its_own_annotation() -> None:
    plain = cm("a", LEVEL="info")
    with_hash = copy.deepcopy(plain)
    with_hash["metadata"]["annotations"] = {INTENT_HASH: "old", "team": "x"}
    only_hash = copy.deepcopy(plain)
    only_hash["metadata"]["annotations"] = {INTENT_HASH: "old"}
    for m in (plain, with_hash, only_hash, {"kind": "X"}, {"metadata": None}, {"metadata": {"annotations": None}}):
        before = copy.deepcopy(m)
        assert bookkeeping.intent_hash(m) == _reference_hash(m)
        assert m == before
    assert bookkeeping.intent_hash(plain) == "b5e1a849a86f725da19c8de4f824d7de"


def _applied(call: Call) -> tuple[int, Any]:
    """A server-side apply's answer: the body plus server bookkeeping, as if it created its object."""
    body = call.body
    body["metadata"]["resourceVersion"] = "2"
    return 201, body


def _targets(*manifests: dict[str, Any]) -> list[planner.Target]:
    targets = planner.resolve([DesiredObject(m, origin="x.yaml") for m in manifests], StaticDiscovery(), "ns")
    for t in targets:
        bookkeeping.finalize(t, None, "applyset-x-v1")
    return targets


def _live(t: planner.Target) -> dict[str, Any]:
    live = copy.deepcopy(t.manifest)
    live["metadata"].update(resourceVersion="1", uid="u", managedFields=[])
    return live


def test_apply_all_keeps_stage_order_and_sends_only_what_the_fast_path_cannot_settle() -> None:
    targets = _targets(cm("a", K="1"), cm("b", K="2"), cm("c", K="3"), cm("d", K="4"))
    live = {t.key: _live(t) for t in targets}
    live[targets[1].key]["data"]["K"] = "drifted"  # b drifted
    live[targets[3].key] = None  # d is missing
    snapshot = copy.deepcopy(live)
    api = FakeApi(default=_applied)
    seen: list[str] = []
    rm = ResourceManager(fake_client(api), StaticDiscovery(), concurrency=4)
    entries = rm.apply_all(targets, live, on_entry=lambda e: seen.append(e.key.name))
    assert [e.key.name for e in entries] == ["a", "b", "c", "d"]
    assert [e.action for e in entries] == [Action.UNCHANGED, Action.UPDATE, Action.UNCHANGED, Action.CREATE]
    assert sorted(c.path.rsplit("/", 1)[1] for c in api.sent()) == ["b", "d"]
    assert sorted(seen) == ["a", "b", "c", "d"]
    assert live == snapshot  # planning never edits the live objects it was given


def test_diff_intent_of_a_prepared_target_equals_the_general_path() -> None:
    (t,) = _targets(cm("a", K="1"))
    live = _live(t)
    live["data"]["K"] = "2"
    assert diff_intent(t.manifest, live, prepared=True) == diff_intent(t.manifest, live)
    assert [d.path for d in diff_intent(t.manifest, live, prepared=True)] == [".data.K"]
