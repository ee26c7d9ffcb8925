"""engine/delete_hooks.py's pure parts: which release an object belongs to, the record's encoding (and a broken one
read as none), which recorded releases have left Git, and what a pass records (a union before the applies and
with prune off; what is rendered after a clean pass that pruned). Running the hooks against the real API server
(kube-controller-manager's Jobs, kwok's Pods) is tests/integration/charts/test_chart_delete_hooks.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gitops_sync.apply.inventory import Inventory
from gitops_sync.conventions import DELETE_HOOKS
from gitops_sync.engine import delete_hooks
from gitops_sync.engine.delete_hooks import decode, encode, release_of
from gitops_sync.engine.options import PassOptions
from gitops_sync.engine.state import PassState
from gitops_sync.plan import planner
from gitops_sync.resource import DesiredObject
from gitops_sync.source import Checkout
from tests.unit.fakes import StaticDiscovery, cm, objs


def test_a_release_is_the_directory_that_rendered_it() -> None:
    assert release_of("apps/db (helm)#3") == "apps/db"
    assert release_of("apps/web (chart hello 0.1.0 from https://h/x, sha256:ab)#1") == "apps/web"
    assert release_of("base (kustomize)#2") == "base"
    assert release_of("apps/hooks/job.yaml#1") == "apps/hooks"
    assert release_of("job.yaml") == "."


def test_the_record_round_trips_and_a_broken_one_is_none() -> None:
    record = {"apps/db": [{"kind": "Job", "metadata": {"name": "drop", "namespace": "team"}}]}
    text = encode(record)
    assert decode(text) == record and encode({}) == ""
    assert decode("") == {} and decode("not base64 gzip!") == {} and decode(encode({"x": "y"})) == {}  # type: ignore[dict-item]


class _Engine:
    discovery = StaticDiscovery()


def _hook(name: str, origin: str, events: str = "pre-delete") -> DesiredObject:
    meta: dict[str, Any] = {"name": name, "annotations": {"helm.sh/hook": events}}
    return DesiredObject({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}, origin)


def _state(tmp_path: Path, hooks: list[DesiredObject], recorded: dict[str, Any], **opts: Any) -> PassState:
    targets = planner.resolve(objs(cm("a")), StaticDiscovery(), "team")
    for t in targets:
        object.__setattr__(t, "origin", "apps/web (helm)#1")
    checkout = Checkout(root=tmp_path, revision="r2", repo="https://g.invalid/x.git", ref="", hooks=tuple(hooks))
    s = PassState.begin(checkout, targets, PassOptions(namespace="team", **opts), apply=True, live_of=lambda _t: {})
    s.inventory = Inventory("inv", "team", recorded={DELETE_HOOKS: encode(recorded)} if recorded else {})
    return s


def test_a_release_left_git_when_nothing_of_the_render_comes_from_it(tmp_path: Path) -> None:
    old = {"apps/web": [{"kind": "ConfigMap"}], "apps/db": [{"kind": "ConfigMap"}], "apps/hooks": [{"kind": "X"}]}
    s = _state(tmp_path, [_hook("only-a-hook", "apps/hooks/h.yaml#1", "post-install")], old)
    assert set(delete_hooks.leaving(s)) == {"apps/db"}  # web has objects, hooks still has a hook


def test_what_a_pass_records(tmp_path: Path) -> None:
    old = {"apps/db": [{"kind": "ConfigMap", "metadata": {"name": "old"}}]}
    hooks = [_hook("drop", "apps/web (helm)#9"), _hook("install", "apps/web (helm)#8", "pre-install")]
    s = _state(tmp_path, hooks, old, prune=True)
    engine: Any = _Engine()
    before = decode(delete_hooks.to_record(engine, s, applied=False) or "")
    assert set(before) == {"apps/db", "apps/web"}  # the union, before anything is applied
    assert [m["metadata"]["name"] for m in before["apps/web"]] == ["drop"]  # only delete hooks, resolved:
    assert before["apps/web"][0]["metadata"]["namespace"] == "team"
    after = decode(delete_hooks.to_record(engine, s, applied=True) or "")
    assert set(after) == {"apps/web"}  # a clean pass that pruned: db's hooks ran, its record goes
    kept = _state(tmp_path, hooks, old)  # prune off: db stays recorded, to run when a prune removes it
    assert set(decode(delete_hooks.to_record(engine, kept, applied=True) or "")) == {"apps/db", "apps/web"}
    assert delete_hooks.to_record(engine, _state(tmp_path, [], {}), applied=True) is None  # nothing: no write


def test_a_secret_delete_hook_is_never_recorded(tmp_path: Path) -> None:
    secret = DesiredObject(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s", "annotations": {"helm.sh/hook": "pre-delete"}},
        },
        "apps/web (helm)#2",
    )
    s = _state(tmp_path, [secret], {})
    assert delete_hooks.to_record(_Engine(), s, applied=True) == ""  # type: ignore[arg-type]
