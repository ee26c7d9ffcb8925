"""diff_intent's combined walk of desired and live (`_holds_all`): it may only say "in sync" when the
leaf-by-leaf look-ups find nothing, and it must say so for the objects a no-op sync sees (else it saves
nothing). Each case compares both answers."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gitops_sync.plan import diff as diff_module
from gitops_sync.plan.diff import diff_intent
from gitops_sync.plan.normalize import copy_json, prepare_desired, strip_server_fields
from tests.unit.plan.test_diff import deployment, live_of


def _leaf_by_leaf(desired: dict[str, Any], live: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    with monkeypatch.context() as m:
        m.setattr(diff_module, "_holds_all", lambda want, live: False)
        return diff_intent(desired, live)


def _service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "finalizers": ["a", "b"]},
        "spec": {"clusterIP": "None", "ports": [{"port": 80, "targetPort": "http"}], "selector": {"app": "x"}},
    }


def _mutations() -> list[tuple[str, Any]]:
    c = ("spec", "template", "spec", "containers", 0)
    return [
        ("in sync", lambda d: None),
        ("image", lambda d: _at(d, c)["__setitem__"]("image", "api:2")),
        ("env value", lambda d: _at(d, (*c, "env", 0))["__setitem__"]("value", "9")),
        ("env item gone", lambda d: _at(d, (*c, "env"))["pop"]()),
        ("env reordered", lambda d: _at(d, (*c, "env"))["reverse"]()),
        ("cpu quantity equal", lambda d: _at(d, (*c, "resources", "limits"))["__setitem__"]("cpu", 0.5)),
        ("cpu quantity differs", lambda d: _at(d, (*c, "resources", "limits"))["__setitem__"]("cpu", "1")),
        ("replicas float", lambda d: _at(d, ("spec",))["__setitem__"]("replicas", 3.0)),
        ("replicas string", lambda d: _at(d, ("spec",))["__setitem__"]("replicas", "3")),
        ("args atomic", lambda d: _at(d, c)["__setitem__"]("args", ["--port"])),
        ("label gone", lambda d: _at(d, ("metadata", "labels"))["pop"]("app")),
        ("labels gone", lambda d: _at(d, ("metadata",))["pop"]("labels")),
        ("port protocol", lambda d: _at(d, (*c, "ports", 0))["__setitem__"]("protocol", "UDP")),
        ("spec not a map", lambda d: d.__setitem__("spec", [])),
    ]


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return {name: getattr(obj, name) for name in ("__setitem__", "pop", "reverse") if hasattr(obj, name)}


@pytest.mark.parametrize(("name", "mutate"), _mutations(), ids=[n for n, _ in _mutations()])
def test_the_walk_agrees_with_the_look_ups(name: str, mutate: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    desired = deployment()
    live = live_of(desired)
    mutate(live)
    assert diff_intent(desired, live) == _leaf_by_leaf(desired, live, monkeypatch)


def test_the_walk_answers_in_sync_objects_itself() -> None:
    """Server defaults, other managers' fields, quantities spelled differently: still one walk, True."""
    desired = deployment()
    live = live_of(desired)
    live["metadata"]["labels"]["helm.sh/chart"] = "x"
    assert diff_module._holds_all(strip_server_fields(prepare_desired(desired)), live)
    service = _service()
    live_service = copy.deepcopy(service)
    live_service["spec"]["ports"][0]["protocol"] = "TCP"
    live_service["metadata"]["finalizers"] = ["b", "a", "c"]
    assert diff_module._holds_all(strip_server_fields(prepare_desired(service)), live_service)


@pytest.mark.parametrize(
    "live_change",
    [
        lambda s: s["metadata"].__setitem__("finalizers", ["a"]),
        lambda s: s["spec"]["ports"][0].__setitem__("port", 81),
        lambda s: s["spec"].pop("selector"),
        lambda s: s["spec"]["selector"].__setitem__("app", "y"),
    ],
)
def test_service_sets_and_keyed_ports_agree(live_change: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    desired = _service()
    live = copy.deepcopy(desired)
    live_change(live)
    found = diff_intent(desired, live)
    assert found and found == _leaf_by_leaf(desired, live, monkeypatch)


def test_copy_json_is_a_deep_copy() -> None:
    original = deployment()
    copied = copy_json(original)
    assert copied == original
    copied["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "changed"
    assert original["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "1"
