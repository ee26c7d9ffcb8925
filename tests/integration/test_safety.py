"""Objects another source owns are never taken silently; kinds the server stops serving are not forgotten.

Real CLI in a subprocess against the real local control plane, as in test_sync.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CRDS, KubeCluster
from tests.integration.daemon_support import Daemon, wait_established, wait_until
from tests.integration.test_sync import by_name, get, gs, report, write

pytestmark = pytest.mark.cluster

PART_OF = "applyset.kubernetes.io/part-of"
ADOPTED = "gitops-sync.io/adopted"


def cm(name: str, value: str, annotations: dict[str, str] | None = None) -> str:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"owner": value}}) + "\n"


def sync(kube: KubeCluster, repo: Path, ns: str, name: str, *extra: str) -> Any:
    return gs(kube, "sync", "--repo", str(repo), "-n", ns, "--name", name, *extra)


def test_an_object_of_another_applyset_is_reported_as_shared_and_left_alone(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    team_a = write(tmp_path / "team-a" / "deploy", {"cm.yaml": cm("settings", "a"), "own.yaml": cm("a-only", "a")})
    team_b = write(
        tmp_path / "team-b" / "deploy",
        {
            "cm.yaml": cm("settings", "b"),
            "own.yaml": cm("b-only", "b"),
            # Git opts this one object in: it is taken over without the flag
            "ann.yaml": cm("a-only", "b", {"gitops-sync.io/adopt": "true"}),
        },
    )
    r = sync(kube, team_a, namespace, "team-a", "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    before = get(kube, "configmap/settings", namespace)
    a_id = before["metadata"]["labels"][PART_OF]

    # plan (diff) and sync of team B: a `shared` conflict naming team A's parent and source; nothing changes
    d = gs(kube, "diff", "--repo", str(team_b), "-n", namespace, "--name", "team-b", "-o", "json")
    assert d.returncode == 1, d.stdout + d.stderr
    r = sync(kube, team_b, namespace, "team-b", "-o", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    for rep in (report(d), report(r)):
        entry = by_name(rep)["ConfigMap/settings"]
        assert entry["action"] == "conflict", entry
        assert entry["shared"]["applySet"] == a_id
        assert entry["shared"]["parent"] == f"ConfigMap {namespace}/team-a"
        assert str(team_a) in entry["shared"]["source"]
        assert f"ConfigMap {namespace}/team-a" in entry["message"]
        assert entry["conflicts"][0]["path"] == f".metadata.labels.{PART_OF}"
        assert entry["conflicts"][0]["live"] == a_id
    after = get(kube, "configmap/settings", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], "no label, no field change"
    assert after["data"] == {"owner": "a"}
    # everything else of team B applied; the annotated object was taken over (and marked adopted)
    assert get(kube, "configmap/b-only", namespace)["data"] == {"owner": "b"}
    taken = get(kube, "configmap/a-only", namespace)
    assert taken["metadata"]["labels"][PART_OF] != a_id and taken["metadata"]["annotations"][ADOPTED] == "true"
    assert "took it over from ApplySet" in by_name(report(r))["ConfigMap/a-only"]["message"]

    # the other formats say it too
    for fmt, needle in (("table", "shared"), ("markdown", "| shared |")):
        out = sync(kube, team_b, namespace, "team-b", "--dry-run", "-o", fmt)
        assert out.returncode == 1 and needle in out.stdout and f"{namespace}/team-a" in out.stdout, out.stdout

    # --on-conflict force does not take it either: only the explicit opt-in does
    r = sync(kube, team_b, namespace, "team-b", "--on-conflict", "force", "-o", "json")
    assert r.returncode == 1 and by_name(report(r))["ConfigMap/settings"]["shared"], r.stdout
    assert get(kube, "configmap/settings", namespace)["metadata"]["labels"][PART_OF] == a_id

    r = sync(kube, team_b, namespace, "team-b", "--adopt-shared", "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    live = get(kube, "configmap/settings", namespace)
    b_id = live["metadata"]["labels"][PART_OF]
    assert b_id != a_id and live["data"] == {"owner": "b"}
    assert live["metadata"]["annotations"][ADOPTED] == "true", "taken over: prune releases it, never deletes"

    # and team A does not silently take it back: now A sees B as the owner
    r = sync(kube, team_a, namespace, "team-a", "-o", "json")
    assert r.returncode == 1
    assert by_name(report(r))["ConfigMap/settings"]["shared"]["parent"] == f"ConfigMap {namespace}/team-b"
    assert get(kube, "configmap/settings", namespace)["metadata"]["labels"][PART_OF] == b_id


def test_the_daemon_reports_a_shared_object_and_leaves_it_alone(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    team_a = write(tmp_path / "team-a", {"cm.yaml": cm("settings", "a")})
    assert sync(kube, team_a, namespace, "team-a").returncode == 0
    rv = get(kube, "configmap/settings", namespace)["metadata"]["resourceVersion"]
    team_b = write(tmp_path / "team-b", {"cm.yaml": cm("settings", "b"), "own.yaml": cm("b-only", "b")})
    # the daemon's default --on-conflict is force: a shared object is still not taken
    with Daemon(
        ["--repo", str(team_b), "-n", namespace, "--name", "team-b", "--prune"], kube.env, tmp_path / "daemon.log"
    ) as d:
        d.wait_ready()
        wait_until("the shared conflict on /status", lambda: (d.entry("ConfigMap", "settings") or {}).get("shared"), 5)
        entry = d.entry("ConfigMap", "settings")
        assert entry is not None and entry["shared"]["parent"] == f"ConfigMap {namespace}/team-a"
        assert any(e.get("object", "").endswith("/settings") for e in d.logged("conflict")), d.log_tail()
        time.sleep(1)
        live = get(kube, "configmap/settings", namespace)
        assert live["metadata"]["resourceVersion"] == rv and live["data"] == {"owner": "a"}
        assert get(kube, "configmap/b-only", namespace)["data"] == {"owner": "b"}
        assert d.stop() == 0


def crd(group: str, kind: str, *, served: bool = True) -> str:
    """A namespaced CRD with one version and a free-form spec (also used by the reliability suite)."""
    plural = kind.lower() + "s"
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    return (
        json.dumps(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {
                    "group": group,
                    "scope": "Namespaced",
                    "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                    "versions": [
                        {"name": "v1", "served": served, "storage": True, "schema": {"openAPIV3Schema": schema}}
                    ],
                },
            }
        )
        + "\n"
    )


def _served(kube: KubeCluster, group: str, namespace: str) -> bool:
    """What `kubectl get gadgets.<group> -n <namespace>` needs: the kind in discovery, and its list answering."""
    resources = (kube.api.get_or_none(f"/apis/{group}/v1") or {}).get("resources") or []
    listed = any(r["name"] == "gadgets" for r in resources)
    return listed and kube.api.get_or_none(f"/apis/{group}/v1/namespaces/{namespace}/gadgets") is not None


def _recorded_kinds(kube: KubeCluster, namespace: str, name: str) -> set[str]:
    parent = get(kube, f"configmap/{name}", namespace)
    return set(parent["metadata"]["annotations"]["applyset.kubernetes.io/contains-group-kinds"].split(","))


@CRDS
def test_a_kind_the_server_stops_serving_stays_recorded_until_its_members_are_pruned(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    group = f"{namespace}.example.com"
    kube.kubectl("apply", "-f", "-", input=crd(group, "Gadget"))
    try:
        wait_established(kube.env, f"gadgets.{group}", 30)
        wait_until(
            "Gadget served",
            lambda: _served(kube, group, namespace),
            20,
            interval=0.2,
        )
        gadget = f"apiVersion: {group}/v1\nkind: Gadget\nmetadata: {{name: g1}}\nspec: {{size: 1}}\n"
        repo = write(tmp_path / "repo", {"cm.yaml": cm("keep", "x"), "g.yaml": gadget})
        r = sync(kube, repo, namespace, "unserved", "--prune", "-o", "json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"Gadget.{group}" in _recorded_kinds(kube, namespace, "unserved")

        # the CRD stops serving its only version: the Gadget stays in etcd but cannot be listed
        kube.kubectl("apply", "-f", "-", input=crd(group, "Gadget", served=False))
        wait_until(
            "Gadget no longer served",
            lambda: not _served(kube, group, namespace),
            20,
            interval=0.2,
        )
        (repo / "g.yaml").unlink()
        r = sync(kube, repo, namespace, "unserved", "--prune", "-o", "json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"Gadget.{group}" in _recorded_kinds(kube, namespace, "unserved"), "an unserved kind is kept"

        # served again: the Gadget is back, still ours, and the next prune removes it
        kube.kubectl("apply", "-f", "-", input=crd(group, "Gadget"))
        wait_until(
            "Gadget served again",
            lambda: kube.find(f"gadgets.{group}", "g1", namespace) is not None,
            20,
            interval=0.2,
        )
        r = sync(kube, repo, namespace, "unserved", "--prune", "-o", "json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert by_name(report(r))["Gadget/g1"]["action"] == "prune"
        wait_until(
            "g1 deleted",
            lambda: kube.find(f"gadgets.{group}", "g1", namespace) is None,
            20,
            interval=0.2,
        )
        assert f"Gadget.{group}" not in _recorded_kinds(kube, namespace, "unserved"), "dropped once really gone"
    finally:
        kube.kubectl("delete", "crd", f"gadgets.{group}", "--wait=false", check=False)
