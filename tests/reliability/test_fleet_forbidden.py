"""The fleet controller as a platform team runs it: `deploy/kubernetes/fleet` applied as it is, the controller
run out of cluster as its ServiceAccount, tenants with RBAC of their own. Refusals (403) are the faults here:

- a GitSync that once tried an object it may not write recovers as soon as Git drops it: the inventory never
  keeps a namespace or kind on the strength of an apply the API server refused, so no forbidden LIST blocks
  a later prune (a tenant's namespace; the controller's own RBAC and a kind it may not create);
- the real error (status, message, object, file) is in the GitSync's status, its Ready message, a Warning
  Event on the GitSync itself and `gitops-sync get` (table and `-o json`), counted once;
- deleting a GitSync that owns a Namespace completes with the shipped RBAC; one whose prune is refused says
  so in its status (`Ready=False`, reason `PruneRefused`, the blocking object) and `spec.pruneCascade` or
  `spec.deletionPolicy` decides per GitSync.

One private cluster for the module: the tests change cluster-wide RBAC and the CRD as shipped here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import KubeCluster
from tests.integration.daemon_support import (
    REPO_ROOT,
    Daemon,
    GitRepo,
    as_list,
    configmap,
    rendered,
    sa_kubeconfig,
    wait_until,
)
from tests.integration.test_fleet import gitsync, tenant_account
from tests.integration.test_fleet_tenant import _entry as status_entry
from tests.reliability.faults import PrivateCluster

if TYPE_CHECKING:
    from tests.reliability.conftest import Recorder

pytestmark = pytest.mark.cluster

CONTROLLER_NS = "gitops-sync"  # where deploy/kubernetes puts the ServiceAccount
NAMESPACES_ANNOTATION = "applyset.kubernetes.io/additional-namespaces"
KINDS_ANNOTATION = "applyset.kubernetes.io/contains-group-kinds"
GUARD_BINDING = "gitops-sync-cascade-guard"


@dataclass
class Fleet:
    kube: KubeCluster
    kubeconfig: Path  # the shipped ServiceAccount's own token
    docs: list[dict[str, Any]]  # what was applied

    def apply(self, kind: str, name: str) -> None:
        """Apply the shipped document `kind`/`name` again (after a test removed it)."""
        docs = [d for d in self.docs if d["kind"] == kind and d["metadata"]["name"] == name]
        self.kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(docs))

    def controller(self, ns: str, log: Path, *extra: str) -> Daemon:
        env = {**self.kube.env, "KUBECONFIG": str(self.kubeconfig)}
        return Daemon(["--watch-namespace", ns, "--resync", "3", *extra], env, log)


@pytest.fixture(scope="module")
def fleet(private_cluster: PrivateCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """deploy/kubernetes/fleet as it is (without the Deployment and Service: the controller runs here)."""
    kube = KubeCluster(private_cluster.kubeconfig, private_cluster.state_dir / "bin", private_cluster.env, True)
    docs = [d for d in rendered(kube, "fleet") if d["kind"] not in ("Deployment", "Service")]
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(namespaces))
    rest = [d for d in docs if d["kind"] != "Namespace"]
    kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(rest))
    kube.kubectl("wait", "--for=condition=Established", "crd/gitsyncs.gitops-sync.io", "--timeout=60s", timeout=70)
    kube.kubectl("wait", "--for=create", f"--namespace={CONTROLLER_NS}", "serviceaccount/gitops-sync", "--timeout=30s")
    kubeconfig = sa_kubeconfig(kube, CONTROLLER_NS, tmp_path_factory.mktemp("sa") / "sa.kubeconfig")
    yield Fleet(kube, kubeconfig, docs)


def _ns(kube: KubeCluster, name: str) -> str:
    kube.kubectl("create", "namespace", name)
    kube.kubectl("wait", "--for=create", f"--namespace={name}", "serviceaccount/default", "--timeout=30s")
    return name


def _obj(kube: KubeCluster, kind: str, name: str, ns: str | None = None) -> dict[str, Any] | None:
    r = kube.kubectl("get", kind, name, *(["-n", ns] if ns else []), "-o", "json", check=False)
    if r.returncode != 0:
        return None
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _status(kube: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = (_obj(kube, "gitsync", name, ns) or {}).get("status") or {}
    return status


def _cond(kube: KubeCluster, ns: str, name: str, ctype: str = "Ready") -> dict[str, Any]:
    return next((c for c in _status(kube, ns, name).get("conditions") or [] if c["type"] == ctype), {})


def _ready_at(kube: KubeCluster, ns: str, name: str, sha: str) -> bool:
    obj = _obj(kube, "gitsync", name, ns) or {}
    status = obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
    return (
        ready.get("status") == "True"
        and status.get("lastAppliedRevision") == sha
        and status.get("observedGeneration") == (obj.get("metadata") or {}).get("generation")
    )


def _recorded(kube: KubeCluster, ns: str, parent: str) -> dict[str, str]:
    annotations: dict[str, str] = ((_obj(kube, "configmap", parent, ns) or {}).get("metadata") or {}).get(
        "annotations"
    ) or {}
    return annotations


def _gs_cli(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops_sync", *args, "--kubeconfig", str(fleet.kube.kubeconfig)],
        env=fleet.kube.env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _gitsync_events(kube: KubeCluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = kube.kubectl(
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        f"involvedObject.kind=GitSync,involvedObject.name={name}",
        "-o",
        "json",
    ).stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def _wait_failed(d: Daemon, ref: str, kind: str, name: str) -> None:
    """Until the controller's /status has the object of GitSync `ref` as an error entry."""
    wait_until(
        f"{kind} {name} of {ref} to fail",
        lambda: (status_entry(d, ref, kind, name) or {}).get("action") == "error",
        90,
        0.3,
    )


def _rolebinding(name: str, ns: str) -> str:
    return (
        json.dumps(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
            }
        )
        + "\n"
    )


def _namespace(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}) + "\n"


# -- 1. a tenant that once tried a namespace it may not write -----------------------------------------------


def test_a_tenant_that_tried_a_forbidden_namespace_recovers_when_git_drops_it(
    fleet: Fleet, reliability: Recorder, tmp_path: Path
) -> None:
    kube = fleet.kube
    ns, other = _ns(kube, "tenant-a"), _ns(kube, "team-b")
    tenant_account(kube, ns)  # ConfigMaps of tenant-a only: team-b can be neither read nor written
    repo = GitRepo(
        tmp_path / "tenant",
        {"mine.yaml": configmap("mine", {"a": "1"}), "theirs.yaml": configmap("theirs", {"b": "1"}, namespace=other)},
    )
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input=gitsync("tenant", ns, repo.path, serviceAccountName="tenant", prune=True, interval="1s"),
    )
    with fleet.controller(ns, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        _wait_failed(d, f"{ns}/tenant", "ConfigMap", "theirs")
        assert _obj(kube, "configmap", "mine", ns) is not None  # what it may write is applied
        tried = _recorded(kube, ns, "gitsync-tenant").get(NAMESPACES_ANNOTATION, "")
        sha = repo.commit({"theirs.yaml": None}, "drop the object in team-b")
        t0 = time.monotonic()
        took = wait_until(
            "the tenant Ready on the commit that dropped it", lambda: _ready_at(kube, ns, "tenant", sha), 60, 0.3
        )
        recorded = _recorded(kube, ns, "gitsync-tenant")
        assert other not in recorded.get(NAMESPACES_ANNOTATION, ""), recorded
        assert _obj(kube, "configmap", "mine", ns) is not None
        assert _obj(kube, "configmap", "theirs", other) is None
        assert d.stop() == 0
    reliability.record(
        area="fleet",
        fault="a tenant GitSync (prune) declares a ConfigMap in a namespace its ServiceAccount may neither read "
        "nor write (403); then Git drops that object",
        outcome=f"Ready again on the new commit {took:.1f} s after it (the forbidden namespace was never kept in "
        "the inventory: no LIST of it as the tenant)",
        checked="the tenant's own ConfigMap kept; nothing created in the other namespace; the inventory records "
        f"no namespace it never wrote to (recorded while the object was in Git: {tried or 'none'!r})",
        figures=f"Ready {time.monotonic() - t0:.1f} s after the commit",
    )


# -- 2. the controller's own RBAC and a kind it may not create ------------------------------------------------


@pytest.mark.parametrize("guard", ["shipped", "without-list-all"])
def test_a_kind_the_controller_may_not_create_does_not_block_prune_once_git_drops_it(
    fleet: Fleet, reliability: Recorder, tmp_path: Path, guard: str
) -> None:
    """`without-list-all`: an install that removed the cascade guard's read-only list: the controller cannot
    even list RoleBindings, so only the inventory's record decides whether prune must look there."""
    kube = fleet.kube
    ns = _ns(kube, f"rb-{guard}")
    repo = GitRepo(tmp_path / "repo", {"cm.yaml": configmap("cm", {"a": "1"}), "rb.yaml": _rolebinding("rb", ns)})
    kube.kubectl("apply", "-f", "-", input=gitsync("app", ns, repo.path, prune=True, interval="1s"))
    binding = _obj(kube, "clusterrolebinding", GUARD_BINDING)
    if guard == "without-list-all" and binding is not None:
        kube.kubectl("delete", "clusterrolebinding", GUARD_BINDING)
    try:
        with fleet.controller(ns, tmp_path / "fleet.log") as d:
            d.wait_ready(60)
            _wait_failed(d, f"{ns}/app", "RoleBinding", "rb")
            tried = _recorded(kube, ns, "gitsync-app").get(KINDS_ANNOTATION, "")
            sha = repo.commit({"rb.yaml": None}, "drop the RoleBinding")
            took = wait_until("Ready on the commit that dropped it", lambda: _ready_at(kube, ns, "app", sha), 60, 0.3)
            kinds = _recorded(kube, ns, "gitsync-app").get(KINDS_ANNOTATION, "")
            assert "RoleBinding" not in kinds, kinds
            assert _obj(kube, "configmap", "cm", ns) is not None
            assert d.stop() == 0
    finally:
        if binding is not None:
            fleet.apply("ClusterRoleBinding", GUARD_BINDING)
    reliability.record(
        area="fleet",
        fault="a GitSync (prune, the controller's own rights: deploy/kubernetes/fleet"
        + (" without its read-only list on every kind" if guard != "shipped" else "")
        + ") declares a RoleBinding, which that RBAC may not create (403); then Git drops it",
        outcome=f"Ready again on the new commit {took:.1f} s after it",
        checked="the ConfigMap kept; the inventory's contains-group-kinds no longer names RoleBinding "
        f"(while it was in Git: {tried!r})",
        figures=f"Ready {took:.1f} s after the commit",
    )
