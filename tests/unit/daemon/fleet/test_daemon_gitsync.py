"""GitSync spec parsing, shard mapping and status documents (pure functions of daemon/gitsync.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.conventions import ConflictPolicy
from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.gitsync import InvalidSpec, parse, shard_of, with_transition_times
from gitops_sync.daemon.fleet.status import status_of
from gitops_sync.engine import SourceOptions

CRD = Path(__file__).resolve().parents[4] / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"


def obj(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": gitsync.API_VERSION,
        "kind": "GitSync",
        "metadata": {"name": "app", "namespace": "team-a", "generation": 3, "uid": "u1", **meta},
        "spec": spec,
    }


def test_parse_fills_defaults_from_the_object() -> None:
    gs = parse(obj({"repository": "https://git.example/a.git"}))
    assert (gs.interval, gs.prune, gs.self_heal, gs.policy) == (60.0, False, True, ConflictPolicy.FORCE)
    assert gs.target_namespace == "team-a" and gs.impersonate == "" and gs.generation == 3
    spec = gs.source_spec(SourceOptions(repo=""), debounce=0.2)
    assert spec.pass_opts.name == "gitsync-app" and spec.pass_opts.inventory_namespace == "team-a"


def test_parse_reads_every_field() -> None:
    gs = parse(
        obj(
            {
                "repository": "r",
                "revision": "v1",
                "path": "apps/web",
                "interval": "1h30m",
                "prune": True,
                "mode": "detect-only",
                "conflictPolicy": "report",
                "targetNamespace": "web",
                "serviceAccountName": "deployer",
                "suspend": True,
                "dependsOn": [{"name": "base"}, {"name": "crds", "namespace": "infra"}],
                "wait": True,
                "timeout": "90s",
                "secretRef": {"name": "git-creds"},
                "decryption": {"provider": "sops", "secretRef": {"name": "sops-keys"}},
            },
            annotations={gitsync.RECONCILE_ANNOTATION: "now"},
        )
    )
    assert gs.interval == 5400 and not gs.self_heal and gs.policy is ConflictPolicy.REPORT
    assert gs.impersonate == "system:serviceaccount:team-a:deployer"
    assert gs.depends_on == (("team-a", "base"), ("infra", "crds"))
    assert gs.suspend and gs.wait and gs.timeout == 90 and gs.reconcile_requested == "now"
    assert gs.secret_ref == "git-creds" and gs.decryption == "sops-keys"
    assert parse(obj({"repository": "r"})).decryption is None  # no spec.decryption: nothing is decrypted
    assert parse(obj({"repository": "r", "decryption": {"provider": "sops"}})).decryption == ""  # no keys given


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({}, "spec.repository is required"),
        ({"repository": "r", "mode": "maybe"}, "spec.mode"),
        ({"repository": "r", "conflictPolicy": "win"}, "spec.conflictPolicy"),
        ({"repository": "r", "path": "../x"}, "spec.path"),
        ({"repository": "r", "interval": "soon"}, "spec.interval"),
        ({"repository": "r", "dependsOn": [{}]}, "spec.dependsOn[0]"),
        ({"repository": "r", "secretRef": "creds"}, "spec.secretRef"),
        ({"repository": "r", "secretRef": {"name": 7}}, "spec.secretRef"),
        ({"repository": "r", "decryption": {"provider": "vault"}}, "spec.decryption.provider must be sops"),
        ({"repository": "r", "decryption": "sops"}, "spec.decryption.provider"),
        ({"repository": "r", "decryption": {"provider": "sops", "secretRef": "k"}}, "spec.decryption.secretRef"),
    ],
)
def test_parse_names_the_object_and_the_field(spec: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        parse(obj(spec))
    assert "GitSync team-a/app" in str(err.value) and problem in str(err.value)


def test_shards_are_stable_and_spread() -> None:
    assert shard_of("team-a", "app", 4) == shard_of("team-a", "app", 4)
    assert shard_of("team-a", "app", 4) == 0  # pinned: every replica and every release agrees
    counts = [0] * 4
    for i in range(400):
        counts[shard_of("ns", f"s{i}", 4)] += 1
    assert min(counts) > 60, counts


def test_status_of_an_invalid_spec_is_stalled() -> None:
    gs = parse(obj({"repository": "r"}))
    doc = status_of(gs, None, invalid="GitSync team-a/app: spec.mode bad")
    conds = {c["type"]: c for c in doc["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Stalled"]["status"] == "True"
    assert doc["observedGeneration"] == 3 and doc["lastError"].startswith("GitSync team-a/app")


def test_status_of_a_refused_repository_names_it_with_a_reason_scripts_match() -> None:
    gs = parse(obj({"repository": "/var/cache/gitops-sync/repos/0123/repo.git"}))
    why = "repository /var/cache/gitops-sync/repos/0123/repo.git is not allowed: it overlaps the clone cache"
    doc = status_of(gs, None, invalid=why, invalid_reason="RepositoryNotAllowed")
    conds = {c["type"]: c for c in doc["conditions"]}
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "RepositoryNotAllowed")
    assert conds["Stalled"]["status"] == "True" and conds["Ready"]["message"] == why == doc["lastError"]
    assert {c["reason"] for c in status_of(gs, None, invalid="bad")["conditions"]} == {"InvalidSpec"}


def test_transition_times_change_only_with_the_status() -> None:
    gs = parse(obj({"repository": "r"}))
    first = status_of(gs, None)
    with_transition_times(first, [], now=0)
    second = status_of(gs, None)
    with_transition_times(second, first["conditions"], now=100)
    assert [c["lastTransitionTime"] for c in second["conditions"]] == ["1970-01-01T00:00:00Z"] * 3
    third = status_of(gs, None, invalid="bad")
    with_transition_times(third, second["conditions"], now=100)
    assert {c["type"]: c["lastTransitionTime"] for c in third["conditions"]}["Ready"] == "1970-01-01T00:01:40Z"


def test_is_ready_needs_the_current_generation() -> None:
    ready = {"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "True"}]}
    assert gitsync.is_ready({**obj({}), "status": ready})
    assert not gitsync.is_ready({**obj({}, generation=4), "status": ready})


def test_the_crd_declares_the_status_subresource_and_printer_columns() -> None:
    crd = yaml.safe_load(CRD.read_text())
    version = crd["spec"]["versions"][0]
    assert crd["metadata"]["name"] == f"{gitsync.PLURAL}.{gitsync.GROUP}" and version["name"] == gitsync.VERSION
    assert version["subresources"] == {"status": {}}
    shown = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == ["Ready", "Revision", "Drift", "Conflicts", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {
        "repository",
        "revision",
        "path",
        "interval",
        "prune",
        "mode",
        "conflictPolicy",
        "targetNamespace",
        "serviceAccountName",
        "suspend",
        "dependsOn",
        "wait",
        "timeout",
    } <= set(spec)


def test_the_finalizer_patch_keeps_other_finalizers_and_is_guarded_by_resource_version() -> None:
    obj = {"metadata": {"name": "web", "resourceVersion": "7", "finalizers": ["other.io/keep"]}}
    assert gitsync.finalizer_patch(obj, present=True) == {
        "metadata": {"finalizers": ["other.io/keep", gitsync.FINALIZER], "resourceVersion": "7"}
    }
    assert gitsync.finalizer_patch(obj, present=False) is None  # not there: nothing to remove
    obj["metadata"]["finalizers"] = [gitsync.FINALIZER, "other.io/keep"]
    assert gitsync.finalizer_patch(obj, present=False) == {
        "metadata": {"finalizers": ["other.io/keep"], "resourceVersion": "7"}
    }
    assert gitsync.is_deleting({"metadata": {"deletionTimestamp": "2026-12-01T00:00:00Z"}})


def test_only_a_pruning_self_healing_source_wants_the_finalizer() -> None:
    base = {"apiVersion": gitsync.API_VERSION, "kind": "GitSync", "metadata": {"name": "a", "namespace": "n"}}
    spec = {"repository": "/r"}
    assert not gitsync.parse({**base, "spec": spec}).wants_finalizer
    assert gitsync.parse({**base, "spec": {**spec, "prune": True}}).wants_finalizer
    assert not gitsync.parse({**base, "spec": {**spec, "prune": True, "mode": "detect-only"}}).wants_finalizer


def test_suspending_changes_no_spec_doc_so_the_reconciler_and_its_status_are_kept() -> None:
    running = parse(obj({"repository": "r", "suspend": False}))
    suspended = parse(obj({"repository": "r", "suspend": True}))
    assert running.spec_doc == suspended.spec_doc and suspended.suspend
    assert parse(obj({"repository": "r", "prune": True})).spec_doc != running.spec_doc


def test_a_suspended_gitsync_keeps_its_last_status_and_adds_suspended_true() -> None:
    gs = parse(obj({"repository": "r", "suspend": True}))
    last = {
        "observedGeneration": 2,
        "lastAppliedRevision": "abc",
        "counts": {"drifted": 1},
        "inventory": {"name": "gitsync-app", "namespace": "team-a", "objects": 4},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "observedGeneration": 2},
            {"type": "Suspended", "status": "False", "reason": "NotSuspended", "observedGeneration": 2},
        ],
    }
    doc = status_of(gs, None, last=last, handled="2026-12-01T22:00:14.193720385Z")
    assert doc["lastAppliedRevision"] == "abc" and doc["counts"] == {"drifted": 1} and doc["inventory"]["objects"] == 4
    assert doc["observedGeneration"] == 3 and doc["lastHandledReconcileAt"] == "2026-12-01T22:00:14.193720385Z"
    conds = {c["type"]: c for c in doc["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["observedGeneration"] == 3
    assert conds["Suspended"]["status"] == "True" and [c["type"] for c in doc["conditions"]].count("Suspended") == 1
    # Still Ready for dependsOn (kubectl wait) while suspended; never reconciled: Unknown, not Ready.
    assert gitsync.is_ready({"metadata": {"generation": 3}, "status": doc})
    fresh = {c["type"]: c for c in status_of(gs, None, last={})["conditions"]}
    assert fresh["Ready"]["status"] == "Unknown" and fresh["Suspended"]["status"] == "True"


def test_reconcile_request_stamps_are_rfc3339_with_nanoseconds() -> None:
    from datetime import datetime

    from gitops_sync.daemon.fleetctl import request_stamp

    stamp = request_stamp(1_796_162_414_193_720_385)
    assert stamp == "2026-12-01T22:00:14.193720385Z"
    assert datetime.fromisoformat(stamp[:26] + "+00:00").microsecond == 193720


def _undescribed(prop: dict[str, Any], path: str) -> Iterator[str]:
    """Every field under `prop` (nested objects and array items too) without a description."""
    if not prop.get("description"):
        yield path
    for name, sub in (prop.get("properties") or {}).items():
        yield from _undescribed(sub, f"{path}.{name}")
    for name, sub in ((prop.get("items") or {}).get("properties") or {}).items():
        yield from _undescribed(sub, f"{path}[].{name}")


def test_every_spec_field_of_the_crd_is_described_for_kubectl_explain() -> None:
    doc = yaml.safe_load(CRD.read_text())
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    undescribed = list(_undescribed(spec, "spec"))
    assert not undescribed, f"kubectl explain gitsync.spec says <no description> for {undescribed}"
    assert "secretRef" in spec["properties"] and "name" in spec["properties"]["secretRef"]["properties"]
    decryption = spec["properties"]["decryption"]
    assert decryption["properties"]["provider"]["enum"] == ["sops"] and decryption["required"] == ["provider"]
    assert "name" in decryption["properties"]["secretRef"]["properties"]


def test_detect_only_status_counts_gits_changes_as_planned_and_only_live_changes_as_drift() -> None:
    """Issue 22: a Git change a detect-only pass left is planned, not drift; Ready's message names both."""
    from gitops_sync.daemon.reconcile.outcome import SourceSnapshot
    from gitops_sync.plan.changeset import GIT_CHANGED, LIVE_CHANGED, Action, Entry, FieldChange
    from gitops_sync.resource import ObjectKey

    def update(name: str, reason: str) -> Entry:
        key = ObjectKey("", "ConfigMap", "team-a", name)
        return Entry(key, "v1", Action.UPDATE, drift=[FieldChange(".data.v", "1", "2", reason=reason)])

    gs = parse(obj({"repository": "r", "mode": "detect-only"}))
    entries = (update("git", GIT_CHANGED), update("git2", GIT_CHANGED), update("live", LIVE_CHANGED))
    snap = SourceSnapshot(entries=entries, first_sync=True, self_heal=False, loaded=True)
    doc = status_of(gs, snap)
    assert doc["counts"]["planned"] == 2 and doc["counts"]["drifted"] == 1
    conds = {c["type"]: c for c in doc["conditions"]}
    assert conds["Drifted"]["status"] == "True" and conds["Drifted"]["message"].startswith("1 object(s)")
    assert conds["Ready"]["message"].endswith("(detect-only: 1 drifted, 2 planned)")
    only_git = status_of(gs, SourceSnapshot(entries=entries[:2], first_sync=True, self_heal=False, loaded=True))
    ready = {c["type"]: c for c in only_git["conditions"]}["Ready"]
    assert ready["message"].endswith("(detect-only: 0 drifted, 2 planned)")


def test_the_status_names_the_helm_hooks_the_last_pass_ran_the_first_20() -> None:
    """status.lastHooks (the CRD declares it): what /status has as daemon.lastHooks, its hooks cut at 20."""
    from gitops_sync.daemon.reconcile.outcome import SourceSnapshot

    gs = parse(obj({"repository": "r"}))
    hook = {
        "event": "pre-delete",
        "object": "Job/team-a/cleanup",
        "weight": "1",
        "result": "Job completed",
        "ok": "true",
    }
    last = {"revision": "abc", "finished": "2026-12-05T10:00:00Z", "hooks": [hook] * 25}
    doc = status_of(gs, SourceSnapshot(loaded=True, last_hooks=last))
    assert doc["lastHooks"]["revision"] == "abc" and doc["lastHooks"]["hooks"] == [hook] * 20
    assert "lastHooks" not in status_of(gs, SourceSnapshot(loaded=True))  # no pass ran any
