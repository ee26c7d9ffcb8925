"""The fleet's remote-cluster pieces that need no cluster: spec.kubeConfig parsing, the status of a GitSync
whose cluster does not answer, `get`'s target column, and every CRD spec field described for `kubectl explain`.
(Reading the Secret as the ServiceAccount, the untrusted refusal and the hung cluster run on real control
planes: tests/integration/test_fleet_clusters.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.daemon.fleet import gitsync, status
from gitops_sync.daemon.fleet.scheduler import SLOW_PASS, Scheduler
from gitops_sync.daemon.fleetctl import target_of
from gitops_sync.daemon.reconcile.reporter import SOURCE
from gitops_sync.web.view import source_of

CRD = Path(__file__).resolve().parents[4] / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"


def _obj(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "team-a", "name": "app"}, "spec": {"repository": "r", **spec}}


def test_kube_config_secret_ref_is_parsed_with_flux_default_keys() -> None:
    assert gitsync.parse(_obj()).kube_config is None
    ref = gitsync.parse(_obj(kubeConfig={"secretRef": {"name": "prod"}})).kube_config
    assert ref is not None and ref.secret == "prod" and ref.keys == ("value", "value.yaml")
    keyed = gitsync.parse(_obj(kubeConfig={"secretRef": {"name": "prod", "key": "config"}})).kube_config
    assert keyed is not None and keyed.keys == ("config",)
    with pytest.raises(gitsync.InvalidSpec, match=r"spec\.kubeConfig\.secretRef\.name"):
        gitsync.parse(_obj(kubeConfig={"secretRef": {}}))


def test_a_changed_kube_config_rebuilds_the_source() -> None:
    a = gitsync.parse(_obj(kubeConfig={"secretRef": {"name": "one"}}))
    b = gitsync.parse(_obj(kubeConfig={"secretRef": {"name": "two"}}))
    assert a.spec_doc != b.spec_doc


def test_an_unreachable_cluster_sets_ready_false_naming_it_and_keeps_the_rest() -> None:
    gs = gitsync.parse(_obj(kubeConfig={"secretRef": {"name": "prod"}}))
    doc = status.status_of(gs, None)
    out = status.with_cluster(dict(doc), "https://10.0.0.1:6443#6b1f", "cluster https://10.0.0.1:6443 is unreachable")
    ready = next(c for c in out["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ClusterUnreachable")
    assert "https://10.0.0.1:6443" in ready["message"] and out["cluster"] == "https://10.0.0.1:6443#6b1f"
    stalled = next(c for c in out["conditions"] if c["type"] == "Stalled")
    assert stalled == next(c for c in doc["conditions"] if c["type"] == "Stalled")
    # Reachable: only the cluster is added.
    again = status.with_cluster(status.status_of(gs, None), "https://10.0.0.1:6443#6b1f", "")
    assert next(c for c in again["conditions"] if c["type"] == "Ready")["reason"] == "Progressing"


def test_get_shows_the_target_cluster() -> None:
    assert target_of({}, {}) == "in-cluster"
    assert target_of({"kubeConfig": {"secretRef": {"name": "prod"}}}, {}) == "secret/prod"
    assert target_of({"kubeConfig": {"secretRef": {"name": "prod"}}}, {"cluster": "https://a#u"}) == "https://a#u"


def _undescribed(schema: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, prop in (schema.get("properties") or {}).items():
        where = f"{path}.{name}"
        if not prop.get("description"):
            missing.append(where)
        missing += _undescribed(prop, where)
        if isinstance(prop.get("items"), dict):
            missing += _undescribed(prop["items"], f"{where}[]")
    return missing


def test_every_spec_field_of_the_crd_is_described_for_kubectl_explain() -> None:
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "kubeConfig" in spec["properties"]
    assert _undescribed(spec, "spec") == []


def test_a_hung_clusters_passes_never_take_every_slot() -> None:
    """Four workers; every source of cluster `hung` waits on it (slow, then slower): they hold at most half the
    slots, and the controller's own sources still start at once, slow passes or not."""
    clock = [0.0]
    started: list[str] = []
    groups = {f"a/hung-{i}": "hung" for i in range(10)}
    scheduler = Scheduler(
        4,
        lambda ref, keys: None,
        clock=lambda: clock[0],
        submit=lambda run, ref, keys: started.append(ref),
        group=lambda ref: groups.get(ref, ""),
    )
    scheduler.offer([(ref, SOURCE) for ref in groups])
    scheduler.start_waiting()
    assert started == ["a/hung-0", "a/hung-1"]
    clock[0] += SLOW_PASS + 1  # they hang: slow passes no longer count against the workers
    scheduler.start_waiting()
    assert len(started) == 2, "the hung cluster holds its share, slow or not"
    scheduler.offer([(f"a/local-{i}", SOURCE) for i in range(4)])
    scheduler.start_waiting()
    assert started[2:] == [f"a/local-{i}" for i in range(4)], "the controller's own sources run at once"
    scheduler.finish("a/hung-0")
    scheduler.start_waiting()
    assert started[-1] == "a/local-3", "every worker busy with the controller's own sources"
    scheduler.finish("a/local-0")
    scheduler.start_waiting()
    assert started[-1] == "a/hung-2", "a slot of the hung cluster freed: its next source"


def test_the_page_shows_a_gitsyncs_target_cluster() -> None:
    doc = {"daemon": {"gitsync": {"name": "team-a/app", "cluster": "https://10.0.0.1:6443#6b1f"}}}
    assert source_of(doc).cluster == "https://10.0.0.1:6443#6b1f"
    assert source_of({"daemon": {"gitsync": {"name": "team-a/local"}}}).cluster == ""
