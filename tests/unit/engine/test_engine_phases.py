"""The phases of `Engine.run` (gitops_sync/engine/phases.py) and what was cut out of it, one at a time.

Which phases run is decided from the pass's state alone (`phases.due`): tested here without any API
server. The phases that talk to the cluster (prune, legacy inventories) run against the scripted API
server of tests/unit/fakes.py, and `sync` against a loopback server that counts what reaches it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gitops_sync.apply.inventory import Inventory, applyset_id
from gitops_sync.cli import main
from gitops_sync.conventions import DELETE_HOOKS, ID_LABEL, PART_OF, PRUNE, PRUNE_DISABLED, SOURCE
from gitops_sync.engine import Engine, PassOptions
from gitops_sync.engine import legacy as legacy_inventory
from gitops_sync.engine.phases import PHASES, due
from gitops_sync.engine.prune import Prune, blocked_by_failure
from gitops_sync.engine.state import PassState
from gitops_sync.plan import planner
from gitops_sync.plan.changeset import Action, ChangeSet, Entry
from gitops_sync.resource import ObjectKey
from gitops_sync.source import Checkout, identify
from gitops_sync.source.identity import legacy_inventory_name
from tests.unit.fakes import FakeApi, StaticDiscovery, cm, fake_client, loopback_kubeconfig, objs

REPO = "https://git.example.invalid/org/apps.git"  # a remote spelling: its identity needs no git command
WRITES = {"record intent", "forget refused kinds", "record applied"}
WAITS = {"start the wait clock", "wait for deletions", "wait until healthy"}


def state(tmp_path: Path, *manifests: dict[str, Any], apply: bool = True, **opts: Any) -> PassState:
    """A pass's state before any phase ran (no request: `begin` reads nothing)."""
    only = opts.pop("only", None)
    options = PassOptions(namespace="team", **opts)
    targets = planner.resolve(objs(*manifests), StaticDiscovery(), "team")
    checkout = Checkout(root=tmp_path, revision="r2", repo=REPO, ref="")
    return PassState.begin(checkout, targets, options, apply=apply, live_of=lambda _t: {}, only=only)


# -- which phases run: decided from the state alone ------------------------------------------------------


def test_a_sync_runs_every_phase_it_was_asked_for(tmp_path: Path) -> None:
    """The counterpart of the tests below: with every option on, every phase is due."""
    s = state(tmp_path, cm("a"), prune=True, wait=True, refuse_older=True)
    s.inventory = Inventory("inv", "team", recorded={DELETE_HOOKS: "recorded"})  # Helm delete hooks recorded
    assert due(s) == [p.name for p in PHASES]


def test_delete_hooks_run_only_on_a_pass_that_prunes_with_nothing_failed_and_hooks_recorded(tmp_path: Path) -> None:
    """pre-delete/post-delete hooks of releases that left Git (engine/delete_hooks.py): never without prune,
    on a dry run, with nothing recorded, or after a failure; post-delete only after a complete prune."""
    hooks = {"run pre-delete hooks of releases that left Git", "run post-delete hooks of releases that left Git"}
    s = state(tmp_path, cm("a"), prune=True)
    s.inventory = Inventory("inv", "team", recorded={DELETE_HOOKS: "recorded"})
    assert hooks <= set(due(s))
    s.pruned_all = False
    assert "run post-delete hooks of releases that left Git" not in due(s)
    s.pruned_all = True
    s.cs.errors.append("an object failed")
    assert not hooks & set(due(s))
    for off in (state(tmp_path, cm("a")), state(tmp_path, cm("a"), prune=True, dry_run=True)):
        off.inventory = Inventory("inv", "team", recorded={DELETE_HOOKS: "recorded"})
        assert not hooks & set(due(off))
    nothing = state(tmp_path, cm("a"), prune=True)
    nothing.inventory = Inventory("inv", "team")
    assert not hooks & set(due(nothing))


@pytest.mark.parametrize(("apply", "dry_run"), [(False, False), (True, True)], ids=["diff", "sync --dry-run"])
def test_a_dry_run_never_writes_the_inventory_never_refuses_and_never_waits(
    tmp_path: Path, apply: bool, dry_run: bool
) -> None:
    s = state(tmp_path, cm("a"), apply=apply, dry_run=dry_run, prune=True, wait=True, refuse_older=True)
    names = due(s)
    assert not (WRITES | WAITS | {"refuse an older commit"}) & set(names), names
    assert "prune" in names and "apply" in names, "a diff still lists what prune and apply would do"


def test_a_partial_pass_neither_prunes_nor_writes_the_inventory(tmp_path: Path) -> None:
    s = state(tmp_path, cm("a"), cm("b"), prune=True, wait=True, only={ObjectKey("", "ConfigMap", "team", "a")})
    names = due(s)
    assert not (WRITES | {"prune", "wait for deletions"}) & set(names), names
    assert [t.key.name for t in s.targets] == ["a"] and "apply" in names


def test_a_source_that_renders_nothing_writes_no_inventory(tmp_path: Path) -> None:
    assert not WRITES & set(due(state(tmp_path, prune=True, allow_empty=True)))


def test_an_inventory_named_by_hand_looks_for_no_inventory_of_the_old_naming(tmp_path: Path) -> None:
    assert "find a legacy inventory" in due(state(tmp_path, cm("a")))
    assert "find a legacy inventory" not in due(state(tmp_path, cm("a"), name="inv"))


def _failed(cs: ChangeSet) -> None:
    cs.entries.append(Entry(ObjectKey("", "ConfigMap", "team", "a"), "v1", Action.ERROR, message="422"))


def _pending(cs: ChangeSet) -> None:
    cs.entries.append(Entry(ObjectKey("", "ConfigMap", "team", "old"), "v1", Action.TERMINATING))


@pytest.mark.parametrize(
    "spoil",
    [_failed, lambda cs: cs.errors.append("not ready"), _pending],
    ids=["an object failed", "a pass error", "a deletion pending"],
)
def test_the_revision_is_recorded_as_applied_only_after_a_clean_pass(tmp_path: Path, spoil: Any) -> None:
    s = state(tmp_path, cm("a"), prune=True)
    assert "record applied" in due(s)
    spoil(s.cs)
    assert "record applied" not in due(s)


def test_a_prune_that_left_a_member_keeps_the_revision_unapplied(tmp_path: Path) -> None:
    s = state(tmp_path, cm("a"), prune=True)
    s.pruned_all = False
    assert "record applied" not in due(s)


def test_the_phases_read_before_they_write_and_prune_only_after_applying() -> None:
    at = {p.name: i for i, p in enumerate(PHASES)}
    assert at["read the inventory"] == 0
    assert at["refuse an older commit"] < at["record intent"], "an older commit is refused before any write"
    assert at["find a legacy inventory"] < at["read live objects"] < at["add bookkeeping"] < at["record intent"]
    assert at["record intent"] < at["apply"] < at["prune"] < at["record applied"]
    assert at["start the wait clock"] < at["prune"], "held deletions and health share one --timeout"
    assert PHASES[-1].name == "wait until healthy"


# -- prune: never on a failed pass -------------------------------------------------------------------------


def test_a_failed_object_blocks_the_prune_and_says_so_for_sync_and_diff() -> None:
    cs = ChangeSet()
    assert blocked_by_failure(cs, dry_run=False) is None
    _failed(cs)
    assert "prune skipped: some objects failed to apply" in str(blocked_by_failure(cs, dry_run=False))
    assert "prune not evaluated: some objects could not be planned" in str(blocked_by_failure(cs, dry_run=True))


OURS = Inventory(name="inv", namespace="gitops", group_kinds={"ConfigMap"}, exists=True)
MEMBERS = "/api/v1/configmaps"


def member(name: str, **annotations: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "team", "uid": f"u-{name}", "labels": {PART_OF: OURS.id}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta | {"annotations": annotations}}


def prune(api: FakeApi, cs: ChangeSet, kept: set[ObjectKey] | None = None) -> bool:
    engine = Engine(fake_client(api), discovery=StaticDiscovery(), concurrency=1)
    opts = PassOptions(prune=True, allow_empty=True, prune_cascade=True)  # the cascade guard: tests/unit/apply
    return Prune(engine, cs, [OURS], opts, dry_run=True, kept=kept).run([])


def test_a_prune_on_a_failed_pass_sends_no_request_at_all() -> None:
    api = FakeApi().on("GET", MEMBERS, {"metadata": {}, "items": [member("old")]})
    cs = ChangeSet()
    assert prune(api, cs) and [e.key.name for e in cs.entries] == ["old"], "the counterpart: a member to prune"
    api, cs = FakeApi().on("GET", MEMBERS, {"metadata": {}, "items": [member("old")]}), ChangeSet()
    _failed(cs)
    assert not prune(api, cs)
    assert api.sent() == [], "not even the members are listed"


def test_a_member_with_prune_disabled_is_kept_and_still_recorded() -> None:
    listed = [member("old"), member("keep", **{PRUNE: PRUNE_DISABLED})]
    api = FakeApi().on("GET", MEMBERS, {"metadata": {}, "items": listed})
    cs, kept = ChangeSet(), set[ObjectKey]()
    assert prune(api, cs, kept)
    actions = {e.key.name: e.action for e in cs.entries}
    assert actions == {"old": Action.PRUNE, "keep": Action.UNCHANGED}
    assert kept == {ObjectKey("", "ConfigMap", "team", "keep")}


# -- legacy inventories: taken over only when provably this source's ---------------------------------------

LEGACY = legacy_inventory_name(REPO, None)
LEGACY_PATH = f"/api/v1/namespaces/gitops/configmaps/{LEGACY}"


def legacy_parent(recorded_source: str) -> dict[str, Any]:
    """A parent written before source identities: the old name, the recorded source label, no identity."""
    meta = {
        "name": LEGACY,
        "namespace": "gitops",
        "uid": "u-legacy",
        "labels": {ID_LABEL: applyset_id(LEGACY, "gitops")},
        "annotations": {SOURCE: recorded_source, "applyset.kubernetes.io/contains-group-kinds": "ConfigMap"},
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def find_legacy(api: FakeApi, tmp_path: Path, ours: str = "gitops-sync-apps-1234") -> Inventory | None:
    engine = Engine(fake_client(api), discovery=StaticDiscovery(), concurrency=1)
    checkout = Checkout(root=tmp_path, revision="r2", repo=REPO, ref="")
    inv = Inventory(name=ours, namespace="gitops")
    return legacy_inventory.find(engine, inv, checkout, identify(REPO, None), REPO)


def test_an_inventory_of_the_old_naming_recording_this_source_is_taken_over(tmp_path: Path) -> None:
    found = find_legacy(FakeApi().on("GET", LEGACY_PATH, legacy_parent(REPO)), tmp_path)
    assert found is not None and found.name == LEGACY and found.group_kinds == {"ConfigMap"}


def test_an_inventory_of_the_old_naming_recording_another_source_is_left_alone(tmp_path: Path) -> None:
    """Another team's repository also called `apps`: the old name is the same, the source is not."""
    other = "https://git.example.invalid/other-team/apps.git"
    assert find_legacy(FakeApi().on("GET", LEGACY_PATH, legacy_parent(other)), tmp_path) is None


def test_an_inventory_already_named_the_old_way_looks_for_nothing(tmp_path: Path) -> None:
    api = FakeApi().on("GET", LEGACY_PATH, legacy_parent(REPO))
    assert find_legacy(api, tmp_path, ours=LEGACY) is None
    assert api.sent() == []


@pytest.mark.parametrize(("kinds", "deleted"), [({"ConfigMap"}, True), ({"Widget.example.com"}, False)])
def test_the_old_parent_is_retired_only_while_it_records_no_unserved_kind(kinds: set[str], deleted: bool) -> None:
    api = FakeApi(default=(200, {"kind": "Status", "status": "Success"}))
    engine = Engine(fake_client(api), discovery=StaticDiscovery(), concurrency=1)
    old = Inventory(name=LEGACY, namespace="gitops", group_kinds=kinds, exists=True, uid="u-legacy")
    legacy_inventory.retire(engine, old, "inv")
    assert [c.path for c in api.sent("DELETE")] == ([LEGACY_PATH] if deleted else [])


# -- a source that does not render never reaches the cluster ----------------------------------------------


class _Counting(BaseHTTPRequestHandler):
    """Answers every request 404 and counts it (the test only asks whether any arrived)."""

    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_PATCH = do_POST = do_DELETE = do_GET

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def counting_server() -> Iterator[tuple[int, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Counting,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("command", ["sync", "diff"])
def test_a_render_error_stops_the_command_before_any_request(
    tmp_path: Path, counting_server: tuple[int, list[str]], command: str
) -> None:
    port, seen = counting_server
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "ok.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n")
    kubeconfig = str(loopback_kubeconfig(tmp_path, port))
    args = [command, "--repo", str(repo), "--kubeconfig", kubeconfig, "--cache-dir", str(tmp_path / "cache")]
    CliRunner().invoke(main, args)
    assert seen, "the counterpart: a source that renders does reach the loopback server"
    seen.clear()
    (repo / "bad.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n  x: [\n")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "bad.yaml" in result.output, result.output
    assert seen == []
