"""Helm hooks (gitops_sync/engine/hooks.py): which objects are hooks, their order and delete policies, and
install vs upgrade as decided from the inventory (phases.decide_release). Running them is tested on the real
control plane (tests/integration/charts/test_chart_hooks.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gitops_sync import conventions
from gitops_sync.apply.inventory import Inventory
from gitops_sync.engine import PassOptions, hooks
from gitops_sync.engine.phases import decide_release, due, runs_hooks
from gitops_sync.engine.state import PassState
from gitops_sync.plan import planner
from gitops_sync.source import Checkout
from tests.unit.fakes import StaticDiscovery, cm, objs


def hook(name: str, event: str, weight: str | None = None, policy: str | None = None) -> dict[str, Any]:
    m = cm(name)
    ann = {hooks.HOOK: event}
    if weight is not None:
        ann[hooks.WEIGHT] = weight
    if policy is not None:
        ann[hooks.DELETE_POLICY] = policy
    m["metadata"]["annotations"] = ann
    return m


def test_split_takes_out_every_object_annotated_as_a_hook() -> None:
    plain, found = hooks.split(objs(cm("a"), hook("h", "pre-install"), hook("empty", " ")))
    assert [o.manifest["metadata"]["name"] for o in plain] == ["a", "empty"]  # an empty annotation is no hook
    assert [o.manifest["metadata"]["name"] for o in found] == ["h"]


def _state(tmp_path: Path, revision: str, inv: Inventory, *hook_manifests: dict[str, Any], **kw: Any) -> PassState:
    checkout = Checkout(root=tmp_path, revision=revision, repo="https://git.example.invalid/a.git", ref="")
    checkout = replace(checkout, hooks=tuple(objs(*hook_manifests)))
    s = PassState.begin(checkout, [], PassOptions(namespace="team"), apply=True, live_of=lambda _t: {}, **kw)
    s.inventory = inv
    return s


@pytest.mark.parametrize(
    ("revision", "exists", "applied", "release"),
    [
        ("r1", False, "", "install"),  # never applied: install
        ("r1", True, "", "install"),  # an install that did not complete is run again
        ("r2", True, "r1", "upgrade"),  # a new revision after one was applied
        ("r1", True, "r1", ""),  # the applied revision again: nothing to run
        ("", False, "", "install"),  # a plain directory: install when its inventory is new
        ("", True, "", ""),  # ... and never an upgrade (no revisions)
    ],
)
def test_install_or_upgrade_comes_from_the_inventory(
    tmp_path: Path, revision: str, exists: bool, applied: str, release: str
) -> None:
    inv = Inventory(name="inv", namespace="team", exists=exists)
    if applied:
        inv.recorded[conventions.APPLIED_REVISION] = applied
    s = _state(tmp_path, revision, inv)
    decide_release(None, s)  # type: ignore[arg-type]
    assert s.release == release


def test_hooks_run_in_weight_then_kind_then_name_order_with_the_default_policy(tmp_path: Path) -> None:
    s = _state(
        tmp_path,
        "r1",
        Inventory(name="inv", namespace="team"),
        hook("b", "pre-install", "5"),
        hook("a", "pre-install,pre-upgrade", "5", "hook-succeeded,hook-failed"),
        hook("z", "pre-install", "-1"),
        hook("post", "post-install"),
        hook("bad-weight", "pre-install", "heavy"),
    )

    class Engine:
        discovery = StaticDiscovery()

    found = hooks.due(Engine(), s, "pre-install")  # type: ignore[arg-type]
    assert [(h.target.key.name, h.weight) for h in found] == [("z", -1), ("bad-weight", 0), ("a", 5), ("b", 5)]
    assert found[1].policies == {hooks.BEFORE_CREATION}  # Helm's default
    assert found[2].policies == {hooks.SUCCEEDED, hooks.FAILED}
    assert [h.target.key.name for h in hooks.due(Engine(), s, "pre-upgrade")] == ["a"]  # type: ignore[arg-type]


def test_dry_runs_and_partial_passes_run_no_hook(tmp_path: Path) -> None:
    targets = planner.resolve(objs(cm("a")), StaticDiscovery(), "team")
    checkout = Checkout(root=tmp_path, revision="r1", repo="https://git.example.invalid/a.git", ref="")
    for kw in ({"apply": False}, {"apply": True, "only": {targets[0].key}}):
        s = PassState.begin(checkout, targets, PassOptions(namespace="team"), live_of=lambda _t: {}, **kw)  # type: ignore[arg-type]
        assert not runs_hooks(s)
        assert "run pre-install/pre-upgrade hooks" not in due(s)


def test_generate_name_is_accepted_on_hooks_only() -> None:
    from gitops_sync.errors import RenderError
    from gitops_sync.render._objects import validate

    generated = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "migrate-"}}
    with pytest.raises(RenderError, match="generateName is not supported"):
        validate(generated, "x.yaml")
    generated["metadata"]["annotations"] = {hooks.HOOK: "pre-upgrade"}
    assert validate(generated, "x.yaml") is generated
