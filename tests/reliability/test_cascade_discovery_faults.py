"""The cascade guard when discovery is partial: an aggregated API whose backend does not answer.

An APIService that is not available hides its kinds from discovery; a Namespace holding objects of those
kinds cannot be checked, and deleting it would delete them once the API is back (the namespace controller
retries until it can). Such a prune must be refused, not treated as empty. A private cluster: an
unavailable APIService disturbs every client's discovery (and namespace deletion) on the cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.daemon_support import wait_until
from tests.integration.test_sync import write
from tests.reliability.faults import PrivateCluster
from tests.reliability.workload import kubectl, run_sync

if TYPE_CHECKING:
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

GROUP = "hidden.safety.test"
APISERVICE = f"v1alpha1.{GROUP}"


def _json(doc: object) -> str:
    return json.dumps(doc) + "\n"


def _apiservice() -> str:
    """An aggregated API whose backend Service does not exist: never available."""
    return _json(
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": GROUP,
                "version": "v1alpha1",
                "service": {"namespace": "default", "name": "nowhere", "port": 443},
                "insecureSkipTLSVerify": True,
                "groupPriorityMinimum": 1000,
                "versionPriority": 15,
            },
        }
    )


def _unavailable(env: dict[str, str]) -> bool:
    r = kubectl(env, "get", "apiservice", APISERVICE, "-o", "json", check=False)
    if r.returncode != 0:
        return False
    conditions = json.loads(r.stdout).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "False" for c in conditions)


def test_a_namespace_is_not_pruned_while_an_aggregated_api_cannot_be_discovered(
    private_cluster: PrivateCluster, tmp_path: Path, reliability: Recorder
) -> None:
    env = private_cluster.env
    kubectl(env, "create", "namespace", "cascade-inv")
    files = {
        "keep.yaml": _json({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep"}}),
        "ns.yaml": _json({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}}),
        "cm.yaml": _json(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inside", "namespace": "doomed"}}
        ),
    }
    repo = write(tmp_path / "repo", files)
    first = run_sync(env, str(repo), "cascade-inv")
    assert first.code == 0, first.stderr[-2000:]
    apiservice = tmp_path / "apiservice.json"
    apiservice.write_text(_apiservice())
    kubectl(env, "apply", "-f", str(apiservice))
    try:
        wait_until("the APIService reported unavailable", lambda: _unavailable(env), 60, 0.5)
        (repo / "ns.yaml").unlink()
        (repo / "cm.yaml").unlink()
        pruned = run_sync(env, str(repo), "cascade-inv", "--prune")
    finally:
        kubectl(env, "delete", "-f", str(apiservice), "--wait=false", check=False)
    live = json.loads(kubectl(env, "get", "namespace", "doomed", "-o", "json").stdout)
    assert "deletionTimestamp" not in live["metadata"], "the Namespace was deleted"
    assert pruned.code == 2, pruned.report
    (refusal,) = [o for o in pruned.report["objects"] if o["kind"] == "Namespace"]
    assert APISERVICE.split(".", 1)[1] in refusal["message"] and "could not be checked" in refusal["message"]
    reliability.record(
        area="API server",
        fault=f"aggregated APIService {APISERVICE} unavailable (its backend Service does not exist) while "
        "sync --prune removes a Namespace that left Git",
        outcome=f"exit 2; the Namespace's prune refused: {refusal['message'][:160]}",
        checked="the Namespace was not deleted (no deletionTimestamp); the rest of the pass converged",
        figures=f"sync --prune {pruned.seconds:.1f} s",
    )
