"""The cascade guard sees kinds installed after the engine's discovery snapshot.

The daemon keeps one discovery snapshot per revision (refreshed only when the source changes). A CRD
installed later, with custom resources inside a Namespace that leaves Git (or whose prune was refused
before and is retried at the same revision), must still block that Namespace's prune: deleting it would
delete those resources. Real control plane: an in-process Engine whose discovery predates the CRD.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitops_sync.cluster.client import Client
from gitops_sync.engine import Engine, PassOptions, SourceOptions, load
from gitops_sync.plan.changeset import Action
from tests.conftest import CRDS, KubeCluster
from tests.integration.daemon_support import wait_established
from tests.integration.test_safety import crd
from tests.integration.test_sync import write

pytestmark = [pytest.mark.cluster, CRDS]


def test_a_namespace_holding_a_kind_newer_than_discovery_is_not_pruned(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    team = f"{namespace}-ns"[:63]
    group = f"{namespace}.example.com"
    ns_doc = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}}) + "\n"
    keep = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep"}, "data": {"v": "1"}})
    repo = write(tmp_path / "repo", {"ns.yaml": ns_doc, "keep.yaml": keep + "\n"})
    opts = PassOptions(namespace=namespace, name=f"fresh-{namespace}", prune=True)
    try:
        with Client(kube.kubeconfig) as client:
            engine = Engine(client)
            checkout, objects = load(SourceOptions(repo=str(repo)))
            cs = engine.run(checkout, engine.resolve(objects, opts), opts, apply=True)
            assert not cs.has_errors, cs.to_dict()

            # another team installs a CRD after the snapshot and puts a custom resource in our namespace
            kube.kubectl("apply", "-f", "-", input=crd(group, "Gadget"))
            wait_established(kube.env, f"gadgets.{group}", 60)
            gadget = f"apiVersion: {group}/v1\nkind: Gadget\nmetadata: {{name: theirs, namespace: {team}}}\n"
            kube.kubectl("apply", "-f", "-", input=gadget)

            (repo / "ns.yaml").unlink()
            checkout, objects = load(SourceOptions(repo=str(repo)))
            cs = engine.run(checkout, engine.resolve(objects, opts), opts, apply=True)
            entries = {e.key.name: e for e in cs.entries}
            assert entries[team].action is Action.ERROR, cs.to_dict()
            assert f"Gadget.{group}/{team}/theirs" in entries[team].message, entries[team].message
        ns = kube.get("namespace", team)
        assert not ns["metadata"].get("deletionTimestamp"), "the namespace (and their Gadget) must be kept"
        assert kube.find(f"gadgets.{group}/theirs", namespace=team) is not None
    finally:
        kube.kubectl("delete", "namespace", team, "--wait=false", "--ignore-not-found", check=False)
        kube.kubectl("delete", "crd", f"gadgets.{group}", "--wait=false", "--ignore-not-found", check=False)
