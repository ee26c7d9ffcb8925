"""A member kept by `gitops-sync.io/prune: disabled` stays recorded in its inventory, so it is never forgotten.

Through the real CLI on the shared cluster: the parent's contains-group-kinds must keep the kept member's
kind after the prune that kept it, so the next pass still finds (and reports) it, and a prune after the
annotation is removed by hand deletes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops_sync.apply.inventory import applyset_id
from gitops_sync.conventions import PART_OF, SOURCE, SOURCE_IDENTITY
from gitops_sync.source.identity import legacy_inventory_name
from tests.conftest import KubeCluster
from tests.integration.test_sync import by_name, deployment, get, gs, report, write

pytestmark = pytest.mark.cluster

KEEP = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: keep
  annotations: {gitops-sync.io/prune: disabled}
data: {a: "1"}
"""


def test_a_member_kept_by_prune_disabled_stays_in_the_inventory(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    repo = write(tmp_path / "repo", {"keep.yaml": KEEP, "web.yaml": deployment("web", 1)})
    sync = ["sync", "--repo", str(repo), "-n", namespace, "--prune", "-o", "json"]
    assert gs(kube, *sync).returncode == 0
    (repo / "keep.yaml").unlink()

    for attempt in (1, 2):  # the pass that keeps it, and the next one: both still see it
        r = gs(kube, *sync)
        assert r.returncode == 0, r.stdout + r.stderr
        kept = by_name(report(r)).get("ConfigMap/keep")
        assert kept is not None and "prune: disabled" in kept["message"], f"pass {attempt}: {r.stdout}"
    parent = report(r)["inventory"]["name"]
    kinds = get(kube, f"configmap/{parent}", namespace)["metadata"]["annotations"][
        "applyset.kubernetes.io/contains-group-kinds"
    ]
    assert "ConfigMap" in kinds.split(","), kinds

    kube.kubectl("annotate", "configmap/keep", "gitops-sync.io/prune-", "-n", namespace)
    r = gs(kube, *sync)
    assert r.returncode == 0 and by_name(report(r))["ConfigMap/keep"]["action"] == "prune", r.stdout
    assert kube.find("configmap/keep", namespace=namespace) is None


def test_a_kept_member_of_an_old_inventory_moves_into_the_new_one(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """Taking over an inventory of the old naming with --prune deletes the old parent: a member that
    `prune: disabled` keeps must move into the new inventory first, or nothing would record it any more."""
    repo = write(tmp_path / "repo", {"apps/keep.yaml": KEEP, "apps/web.yaml": deployment("web", 1)})
    legacy = _old_inventory(kube, repo, namespace)
    (repo / "apps" / "keep.yaml").unlink()
    r = gs(kube, "sync", "--repo", str(repo), "--path", "apps", "-n", namespace, "--prune", "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "prune: disabled" in by_name(report(r))["ConfigMap/keep"]["message"]
    name = report(r)["inventory"]["name"]
    assert name != legacy and kube.find(f"configmap/{legacy}", namespace=namespace) is None
    labels = get(kube, "configmap/keep", namespace)["metadata"]["labels"]
    assert labels[PART_OF] == applyset_id(name, namespace), "moved into the new inventory"


def test_a_create_only_member_of_an_old_inventory_moves_into_the_new_one(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    """An existing create-only object is never applied again, so the apply does not move it: the takeover
    must, or it keeps the old id after the old parent is deleted and no prune ever finds it."""
    once = KEEP.replace("gitops-sync.io/prune: disabled", "gitops-sync.io/apply: create-only")
    repo = write(tmp_path / "repo", {"apps/once.yaml": once, "apps/web.yaml": deployment("web", 1)})
    legacy = _old_inventory(kube, repo, namespace)
    r = gs(kube, "sync", "--repo", str(repo), "--path", "apps", "-n", namespace, "--prune", "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    name = report(r)["inventory"]["name"]
    assert kube.find(f"configmap/{legacy}", namespace=namespace) is None, "old parent retired"
    assert get(kube, "configmap/keep", namespace)["metadata"]["labels"][PART_OF] == applyset_id(name, namespace)

    (repo / "apps" / "once.yaml").unlink()
    r = gs(kube, "sync", "--repo", str(repo), "--path", "apps", "-n", namespace, "--prune", "-o", "json")
    assert r.returncode == 0 and by_name(report(r))["ConfigMap/keep"]["action"] == "prune", r.stdout


def _old_inventory(kube: KubeCluster, repo: Path, namespace: str) -> str:
    """Sync `repo//apps` as versions before source identities did: the old name, no identity recorded."""
    legacy = legacy_inventory_name(str(repo), "apps")
    old = ["sync", "--repo", str(repo), "--path", "apps", "-n", namespace, "--name", legacy, "--prune"]
    assert gs(kube, *old).returncode == 0
    ann = [f"{SOURCE_IDENTITY}-", f"{SOURCE}={repo}//apps", "--overwrite"]
    kube.kubectl("annotate", f"configmap/{legacy}", "-n", namespace, *ann)
    return legacy
