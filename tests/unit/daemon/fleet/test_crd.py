"""The installed CRD against the fields the model reads (pure functions of daemon/fleet/crd.py and the field
record of gitsync.parse). The controller's refusal on a real API server: tests/integration/test_fleet_crd.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops_sync.daemon.fleet import gitsync
from gitops_sync.daemon.fleet.crd import CRD_NAME, FieldsPruned, admit, outdated_message, pruned_fields
from gitops_sync.daemon.fleet.gitsync import parse, spec_fields

CRD = Path(__file__).resolve().parents[4] / "deploy" / "kubernetes" / "crd" / "gitsyncs.gitops-sync.io.yaml"
FULL = {
    "repository": "https://git.example/a.git",
    "kubeConfig": {"secretRef": {"name": "target", "key": "config"}},
    "secretRef": {"name": "git"},
    "dependsOn": [{"name": "base", "namespace": "infra"}],
    "serviceAccountName": "tenant",
}


def shipped() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return doc


def spec_props(crd: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return props


def gitsync_obj(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "team-a", "name": "app"}, "spec": spec}


def test_the_fields_are_recorded_from_parse_itself() -> None:
    fields = spec_fields()
    assert {"repository", "kubeConfig", "secretRef", "serviceAccountName", "prune", "dependsOn"} <= fields
    # read only when the parent is set, per object
    assert "kubeConfig.secretRef.name" not in fields
    gs = parse(gitsync_obj(FULL))
    assert {"kubeConfig.secretRef.name", "kubeConfig.secretRef.key", "secretRef.name"} <= gs.fields
    assert {"dependsOn[].name", "dependsOn[].namespace"} <= gs.fields
    assert gs.kube_config == gitsync.KubeConfigRef("target", "config")  # the recording changes nothing read
    assert gs.spec_doc == FULL and type(gs.spec_doc["kubeConfig"]) is dict


def test_a_field_the_model_starts_to_read_is_checked_without_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a new field would be (`spec.notifications`, which no CRD declares yet): read in parse (here
    through a helper parse calls), checked at once."""
    real = gitsync._secret_ref

    def reading_more(spec: dict[str, Any], ns: str, where: str) -> str:
        spec.get("notifications")
        return real(spec, ns, where)

    monkeypatch.setattr(gitsync, "_secret_ref", reading_more)
    assert "notifications" in spec_fields()
    assert pruned_fields(shipped(), spec_fields()) == ["spec.notifications"]


def test_the_shipped_crd_declares_every_field_the_model_reads() -> None:
    crd = shipped()
    assert pruned_fields(crd, spec_fields()) == []
    assert pruned_fields(crd, parse(gitsync_obj(FULL)).fields) == []
    assert crd["metadata"]["name"] == CRD_NAME


def test_a_crd_from_before_kubeconfig_prunes_it() -> None:
    old = shipped()
    del spec_props(old)["kubeConfig"]
    assert pruned_fields(old, spec_fields()) == ["spec.kubeConfig"]
    del spec_props(old)["secretRef"]
    assert pruned_fields(old, spec_fields()) == ["spec.kubeConfig", "spec.secretRef"]
    msg = outdated_message(["spec.kubeConfig"])
    assert CRD_NAME in msg and "spec.kubeConfig" in msg and "kubectl apply -f deploy/kubernetes/crd/" in msg


def test_a_nested_field_missing_refuses_the_gitsync_that_reads_it() -> None:
    old = shipped()
    del spec_props(old)["kubeConfig"]["properties"]["secretRef"]["properties"]["key"]
    assert pruned_fields(old, spec_fields()) == []  # the controller starts: top-level fields are all there
    admit(old, parse(gitsync_obj({"repository": "r"})))  # no kubeConfig: nothing read inside it
    with pytest.raises(FieldsPruned, match=r"GitSync team-a/app: .*spec\.kubeConfig\.secretRef\.key") as exc:
        admit(old, parse(gitsync_obj(FULL)))
    assert exc.value.reason == "CRDOutdated"


def test_preserve_unknown_fields_and_maps_keep_everything_below() -> None:
    crd = shipped()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    open_spec = copy.deepcopy(crd)
    spec_of_open = open_spec["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_of_open["properties"] = {"repository": {"type": "string"}}
    spec_of_open["x-kubernetes-preserve-unknown-fields"] = True
    assert pruned_fields(open_spec, [*spec_fields(), "kubeConfig.secretRef.key", "dependsOn[].name"]) == []
    spec["properties"]["kubeConfig"] = {"type": "object", "additionalProperties": {"type": "object"}}
    assert pruned_fields(crd, ["kubeConfig.secretRef"]) == []
    assert pruned_fields(crd, ["kubeConfig.secretRef.name"]) == ["spec.kubeConfig.secretRef.name"]


def test_a_crd_not_serving_the_version_prunes_every_field() -> None:
    crd = shipped()
    crd["spec"]["versions"][0]["name"] = "v1beta9"
    assert pruned_fields(crd, ["repository", "kubeConfig"]) == ["spec.kubeConfig", "spec.repository"]
    crd["spec"]["versions"][0]["name"] = gitsync.VERSION
    crd["spec"]["versions"][0]["served"] = False
    assert pruned_fields(crd, ["repository"]) == ["spec.repository"]
