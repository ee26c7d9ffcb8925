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

import contextlib
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
    wait_established,
    wait_until,
)
from tests.integration.test_fleet import fleet_args, gitsync, tenant_account
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
        """The fleet of `ns`; its GitSyncs' local repositories lie beside `log` (the test's tmp_path)."""
        env = {**self.kube.env, "KUBECONFIG": str(self.kubeconfig)}
        return Daemon(fleet_args(ns, log.parent, "--resync", "3", *extra), env, log)


@pytest.fixture(scope="module")
def fleet(private_cluster: PrivateCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """deploy/kubernetes/fleet as it is (without the Deployment and Service: the controller runs here)."""
    kube = KubeCluster(private_cluster.kubeconfig, private_cluster.state_dir / "bin", private_cluster.env, True)
    docs = [d for d in rendered(kube, "fleet") if d["kind"] not in ("Deployment", "Service")]
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(namespaces))
    rest = [d for d in docs if d["kind"] != "Namespace"]
    kube.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=as_list(rest))
    wait_established(kube.env, "gitsyncs.gitops-sync.io")
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


def _tenant_repo(kube: KubeCluster, ns: str, other: str, tmp_path: Path) -> GitRepo:
    """GitSync `tenant` (ServiceAccount tenant, prune) declaring ConfigMap mine in `ns` and theirs in `other`."""
    repo = GitRepo(
        tmp_path / "tenant",
        {"mine.yaml": configmap("mine", {"a": "1"}), "theirs.yaml": configmap("theirs", {"b": "1"}, namespace=other)},
    )
    spec = {"serviceAccountName": "tenant", "prune": True, "interval": "1s"}
    kube.kubectl("apply", "-f", "-", input=gitsync("tenant", ns, repo.path, **spec))
    return repo


def test_a_tenant_that_tried_a_forbidden_namespace_recovers_when_git_drops_it(
    fleet: Fleet, reliability: Recorder, tmp_path: Path
) -> None:
    kube = fleet.kube
    ns, other = _ns(kube, "tenant-a"), _ns(kube, "team-b")
    tenant_account(kube, ns)  # ConfigMaps of tenant-a only: team-b can be neither read nor written
    repo = _tenant_repo(kube, ns, other, tmp_path)
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


# -- 3. the real error, where the tenant can read it ---------------------------------------------------------


def test_the_first_real_error_is_in_the_status_the_cli_and_an_event_on_the_gitsync(
    fleet: Fleet, reliability: Recorder, tmp_path: Path
) -> None:
    kube = fleet.kube
    ns, other = _ns(kube, "tenant-err"), _ns(kube, "team-err")
    tenant_account(kube, ns)
    # The tenant may read team-err (so the apply is sent) but not write there: the API server answers 403.
    kube.kubectl("create", "role", "read", "-n", other, "--verb=get,list,watch", "--resource=configmaps")
    kube.kubectl("create", "rolebinding", "read", "-n", other, "--role=read", f"--serviceaccount={ns}:tenant")
    repo = _tenant_repo(kube, ns, other, tmp_path)
    with fleet.controller(ns, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        _wait_failed(d, f"{ns}/tenant", "ConfigMap", "theirs")
        wait_until("the 403 in the status", lambda: "403" in _status(kube, ns, "tenant").get("lastError", ""), 30, 0.3)
        status = _status(kube, ns, "tenant")
        want = f"ConfigMap/{other}/theirs (theirs.yaml#1): 403 Forbidden: "
        assert status["lastError"].startswith(want), status["lastError"]
        assert f'User "system:serviceaccount:{ns}:tenant" cannot' in status["lastError"]
        assert status["counts"]["error"] == 1, status["counts"]  # one failed object, counted once
        (error,) = status["errors"]
        assert error | {"message": ""} == {
            "object": f"ConfigMap/{other}/theirs",
            "file": "theirs.yaml#1",
            "status": 403,
            "reason": "Forbidden",
            "message": "",
        }
        ready, stalled = _cond(kube, ns, "tenant"), _cond(kube, ns, "tenant", "Stalled")
        assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed") and want in ready["message"], ready
        assert (stalled["status"], stalled["reason"]) == ("True", "ApplyFailed"), stalled  # a retry cannot fix a 403

        # A Warning Event on the GitSync itself, one Event whose count grows with the failed passes (resync 3 s).
        def warning() -> dict[str, Any]:
            found = [e for e in _gitsync_events(kube, ns, "tenant") if e["type"] == "Warning"]
            return found[0] if len(found) == 1 and found[0].get("count", 0) >= 2 else {}

        wait_until("a repeated Warning Event on the GitSync", warning, 60, 0.5)
        event = warning()
        assert event["reason"] == "ApplyFailed" and want in event["message"], event
        described = kube.kubectl("describe", "gitsync", "tenant", "-n", ns).stdout
        assert "ApplyFailed" in described and "403 Forbidden" in described, described[-2000:]
        # gitops-sync get: the table's message and -o json's errors.
        table = _gs_cli(fleet, "get", "tenant", "-n", ns)
        assert table.returncode == 0 and want in table.stdout and "False" in table.stdout, table.stdout + table.stderr
        listed = json.loads(_gs_cli(fleet, "get", "-n", ns, "-o", "json").stdout)
        (row,) = listed
        assert row["reason"] == "ApplyFailed" and row["lastError"].startswith(want), row
        assert [e["object"] for e in row["errors"]] == [f"ConfigMap/{other}/theirs"], row
        # Fixed in Git: Ready again, and a Normal Event says so.
        sha = repo.commit({"theirs.yaml": None})
        took = wait_until("Ready again", lambda: _ready_at(kube, ns, "tenant", sha), 60, 0.3)
        status = _status(kube, ns, "tenant")
        assert status["lastError"] == "" and status["errors"] == [] and status["counts"]["error"] == 0, status
        wait_until(
            "the recovery Event",
            lambda: any(e["reason"] == "ReconciliationSucceeded" for e in _gitsync_events(kube, ns, "tenant")),
            30,
            0.5,
        )
        assert d.stop() == 0
    reliability.record(
        area="fleet",
        fault="a tenant GitSync applies a ConfigMap its ServiceAccount may read but not write in another namespace "
        "(the API server answers 403), pass after pass",
        outcome="status.lastError, the Ready message (reason ApplyFailed, Stalled=True), status.errors, "
        "`gitops-sync get` (table and -o json) and one Warning Event on the GitSync (its count growing) name the "
        "object, its file and the 403; fixed in Git: Ready again and a Normal Event",
        checked="counts.error is 1 for the one failed object; its own ConfigMap applied",
        figures=f"Ready {took:.1f} s after the fixing commit; the Event counted {event.get('count')} passes",
    )


# -- 4. deletion with the shipped RBAC ------------------------------------------------------------------------


@contextlib.contextmanager
def _namespace_owner(fleet: Fleet, ns: str, owned: str, tmp_path: Path) -> Iterator[Daemon]:
    """GitSync `owner` (prune) in `ns` declaring Namespace `owned` and a ConfigMap in it, applied and Ready,
    with its finalizer; the controller runs for the block."""
    kube = fleet.kube
    repo = GitRepo(
        tmp_path / "repo",
        {"ns.yaml": _namespace(owned), "cm.yaml": configmap("inside", {"a": "1"}, namespace=owned)},
    )
    kube.kubectl("apply", "-f", "-", input=gitsync("owner", ns, repo.path, prune=True))
    with fleet.controller(ns, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        kube.kubectl("wait", "--for=condition=Ready", "gitsync/owner", "-n", ns, "--timeout=90s", timeout=100)
        wait_until(
            "the finalizer", lambda: (_obj(kube, "gitsync", "owner", ns) or {})["metadata"].get("finalizers"), 30
        )
        yield d


def test_deleting_a_gitsync_that_owns_a_namespace_completes_with_the_shipped_rbac(
    fleet: Fleet, reliability: Recorder, tmp_path: Path
) -> None:
    kube = fleet.kube
    ns, owned = _ns(kube, "owner"), "owned-by-gitsync"
    with _namespace_owner(fleet, ns, owned, tmp_path) as d:
        t0 = time.monotonic()
        kube.kubectl("delete", "gitsync", "owner", "-n", ns, "--wait=false")
        took = wait_until("the GitSync gone", lambda: _obj(kube, "gitsync", "owner", ns) is None, 60, 0.3)
        gone = _obj(kube, "namespace", owned)
        assert gone is None or gone["metadata"].get("deletionTimestamp"), gone  # deleted with what it held
        assert _obj(kube, "configmap", "gitsync-owner", ns) is None  # its inventory too
        assert d.logged("GitSync deleted: its objects were pruned")
        assert d.stop() == 0
    reliability.record(
        area="fleet",
        fault="deleting a GitSync (prune) that owns a Namespace, the controller running as the ServiceAccount of "
        "deploy/kubernetes/fleet as shipped (the cascade guard must list every kind in it)",
        outcome=f"the GitSync was gone {took:.1f} s after `kubectl delete`; its Namespace deleted",
        checked="the guard listed the Namespace's contents (nothing foreign) before deleting it; the inventory "
        "parent deleted last",
        figures=f"{took:.1f} s from delete to gone ({time.monotonic() - t0:.1f} s)",
    )


def test_a_refused_deletion_says_so_and_the_gitsync_decides_with_prune_cascade(
    fleet: Fleet, reliability: Recorder, tmp_path: Path
) -> None:
    kube = fleet.kube
    ns, owned = _ns(kube, "refused"), "owned-with-foreign"
    with _namespace_owner(fleet, ns, owned, tmp_path) as d:
        kube.kubectl("create", "configmap", "by-hand", "-n", owned, "--from-literal=k=v")  # not the GitSync's
        kube.kubectl("delete", "gitsync", "owner", "-n", ns, "--wait=false")
        took = wait_until(
            "the refusal in the status", lambda: _cond(kube, ns, "owner").get("reason") == "PruneRefused", 60, 0.3
        )
        ready = _cond(kube, ns, "owner")
        obj = _obj(kube, "gitsync", "owner", ns) or {}
        assert ready["status"] == "False" and f"ConfigMap/{owned}/by-hand" in ready["message"], ready
        assert f"set spec.pruneCascade: true on GitSync {ns}/owner" in ready["message"], ready
        assert "--prune-cascade" not in ready["message"], ready
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"], obj["status"]
        assert _cond(kube, ns, "owner", "Stalled")["status"] == "True"
        (row,) = json.loads(_gs_cli(fleet, "get", "-n", ns, "-o", "json").stdout)
        assert row["ready"] == "False" and "by-hand" in row["message"], row
        assert "waiting for the controller" not in row["message"], row
        assert _obj(kube, "namespace", owned) is not None and _obj(kube, "configmap", "by-hand", owned) is not None
        # The GitSync decides: delete the Namespace with what it holds.
        kube.kubectl("patch", "gitsync", "owner", "-n", ns, "--type=merge", "-p", '{"spec":{"pruneCascade":true}}')
        let_go = wait_until("the GitSync gone", lambda: _obj(kube, "gitsync", "owner", ns) is None, 90, 0.3)
        gone = _obj(kube, "namespace", owned)
        assert gone is None or gone["metadata"].get("deletionTimestamp"), gone
        assert d.stop() == 0
    reliability.record(
        area="fleet",
        fault="deleting a GitSync (prune) whose Namespace holds a ConfigMap made by hand",
        outcome="the deletion waits: Ready=False reason PruneRefused (Stalled) naming the ConfigMap and "
        "`spec.pruneCascade`, observedGeneration current, `gitops-sync get` says the same; spec.pruneCascade: "
        "true set on the Terminating GitSync lets it go",
        checked="nothing deleted until the GitSync said so: the Namespace and the foreign ConfigMap stayed",
        figures=f"refusal in the status {took:.1f} s after the delete; gone {let_go:.1f} s after pruneCascade",
    )


def test_deletion_policy_orphan_keeps_and_wait_for_termination_waits_for_finalizers(
    fleet: Fleet, reliability: Recorder, tmp_path: Path
) -> None:
    kube = fleet.kube
    ns = _ns(kube, "policies")
    held = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
            "data": {"a": "1"},
        }
    )
    orphan = GitRepo(tmp_path / "orphan", {"o.yaml": configmap("orphaned", {"a": "1"})})
    waiting = GitRepo(tmp_path / "wait", {"h.yaml": held + "\n"})
    kube.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(
            [
                gitsync("orphan", ns, orphan.path, prune=True, deletionPolicy="Orphan"),
                gitsync("waits", ns, waiting.path, deletionPolicy="WaitForTermination"),  # prune: false
            ]
        ),
    )
    with fleet.controller(ns, tmp_path / "fleet.log") as d:
        d.wait_ready(60)
        for name in ("orphan", "waits"):
            kube.kubectl("wait", "--for=condition=Ready", f"gitsync/{name}", "-n", ns, "--timeout=90s", timeout=100)
        wait_until(
            "the finalizer", lambda: (_obj(kube, "gitsync", "waits", ns) or {})["metadata"].get("finalizers"), 30
        )
        assert not (_obj(kube, "gitsync", "orphan", ns) or {})["metadata"].get("finalizers")  # Orphan: none
        kube.kubectl("delete", "gitsync", "orphan", "-n", ns, "--timeout=60s", timeout=70)
        assert _obj(kube, "configmap", "orphaned", ns) is not None
        kube.kubectl("delete", "gitsync", "waits", "-n", ns, "--wait=false")
        wait_until(
            "the GitSync waiting for its object",
            lambda: _cond(kube, ns, "waits").get("reason") == "WaitingForTermination",
            60,
            0.3,
        )
        assert f"ConfigMap/{ns}/held" in _cond(kube, ns, "waits")["message"]
        assert (_obj(kube, "configmap", "held", ns) or {})["metadata"].get("deletionTimestamp")  # deleted, held
        time.sleep(3)
        assert _obj(kube, "gitsync", "waits", ns) is not None, "let go while its object is still there"
        kube.kubectl("patch", "configmap", "held", "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
        took = wait_until("the GitSync gone", lambda: _obj(kube, "gitsync", "waits", ns) is None, 60, 0.3)
        assert _obj(kube, "configmap", "gitsync-waits", ns) is None  # its parent deleted once the member went
        assert d.stop() == 0
    reliability.record(
        area="fleet",
        fault="deleting GitSyncs with deletionPolicy Orphan (prune: true) and WaitForTermination (prune: false; its "
        "ConfigMap held by a finalizer)",
        outcome="Orphan: no finalizer, the object stays; WaitForTermination: the object deleted, the GitSync kept "
        "with Ready reason WaitingForTermination naming it until its finalizer was removed",
        checked="the orphaned ConfigMap kept; the waiting GitSync's inventory kept until its member was gone",
        figures=f"the GitSync gone {took:.1f} s after the finalizer was removed",
    )
