"""deploy/local-cluster/kwok-stages.yaml: a Job's Pod completes, or fails when it asks to (Helm hook Jobs in tests).

kwok picks one of the stages whose selector matches; the two Job Pod stages must never both match one Pod, or a
Pod asked to fail could complete instead. (The running local cluster loads the file at start: cluster.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

STAGES = Path(__file__).resolve().parents[2] / "deploy" / "local-cluster" / "kwok-stages.yaml"
FAIL = '.metadata.annotations["local-cluster.gitops-sync.io/fail"]'


def _stage(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(STAGES.read_text()) if d]
    return next(d for d in docs if d["metadata"]["name"] == name)


def _expressions(name: str) -> dict[str, dict[str, Any]]:
    return {e["key"]: e for e in _stage(name)["spec"]["selector"]["matchExpressions"]}


def test_a_job_pod_succeeds_unless_annotated_to_fail() -> None:
    ok, failed = _expressions("pod-succeeded"), _expressions("pod-failed")
    assert ok[FAIL]["operator"] == "DoesNotExist"
    assert failed[FAIL]["operator"] == "In" and failed[FAIL]["values"] == ["true"]
    for key in (".status.phase", ".metadata.ownerReferences.[].kind", ".metadata.deletionTimestamp"):
        assert ok[key] == failed[key]  # the same Pods otherwise: Running, owned by a Job, not being deleted
    assert "phase: Failed" in _stage("pod-failed")["spec"]["next"]["statusTemplate"]
    assert "exitCode: 1" in _stage("pod-failed")["spec"]["next"]["statusTemplate"]
